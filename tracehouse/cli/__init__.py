"""The ``tracehouse`` command: thin argument parsing over the library packages.

:mod:`.main` holds the parser and the commands; :mod:`.nsys`,
:mod:`.commtrace` and :mod:`.demo` are the larger subcommands. Nothing below
this package imports it.
"""

from __future__ import annotations

from .main import console_main, main

__all__ = ["console_main", "main"]
