"""Import dbt without the 1.1 s that an unrelated optional package adds.

dbt imports ``jsonschema``. When ``rfc3987-syntax`` is installed (Jupyter
brings it: ``jupyter-events`` asks for ``jsonschema[format-nongpl]``, and
HTA's extra installs Jupyter), ``jsonschema._format`` imports it at import
time, and that compiles 38 Lark grammars: measured on this project's 2-core
machine, ``import dbt.cli.main`` takes 2.5 s with them and 1.4 s without,
paid by every ``tracehouse build``.
The grammars only serve jsonschema's ``iri`` format checker, and dbt
validates with no format checker at all.

:func:`import_dbt` imports ``jsonschema`` once with ``rfc3987_syntax``
hidden, then unhides it, so the package still imports normally for anyone
else in the process; jsonschema alone lacks its optional ``iri`` check.
"""

from __future__ import annotations

import sys

_HIDDEN = "rfc3987_syntax"


def import_dbt() -> None:
    """Import dbt's CLI (and jsonschema first, without the IRI grammars).

    A no-op when jsonschema or the grammars are already imported: then the
    cost is paid or the caller wants them.
    """
    if "jsonschema" not in sys.modules and _HIDDEN not in sys.modules:
        sys.modules[_HIDDEN] = None  # type: ignore[assignment]  # import fails fast
        try:
            import jsonschema._format  # noqa: F401
        finally:
            del sys.modules[_HIDDEN]
    import dbt.cli.main  # noqa: F401
