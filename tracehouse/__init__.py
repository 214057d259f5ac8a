"""tracehouse."""
