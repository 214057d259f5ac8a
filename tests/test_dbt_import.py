"""tracehouse.build.dbt_import: dbt imports without rfc3987-syntax's grammars, which
stay importable for everyone else."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # ingests or builds (README: the fast set is -m "not slow")

pytest.importorskip("rfc3987_syntax", reason="rfc3987-syntax is not installed here, so "
                    "there is nothing for import_dbt to skip")

_PROBE = """
import sys
from tracehouse.build.dbt_import import import_dbt
import_dbt()
import dbt.cli.main, jsonschema
print("grammars imported by dbt:", "rfc3987_syntax" in sys.modules)
import rfc3987_syntax
print("importable after:", rfc3987_syntax.is_valid_syntax("iri", "https://example.org/a"))
"""


def test_dbt_imports_without_the_iri_grammars_and_they_still_import_after() -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                         check=True).stdout
    assert "grammars imported by dbt: False" in out
    assert "importable after: True" in out


def test_plain_dbt_import_does_load_them_here() -> None:
    """The control: without import_dbt, importing dbt pulls the grammars in."""
    out = subprocess.run(
        [sys.executable, "-c",
         "import sys, dbt.cli.main; print('rfc3987_syntax' in sys.modules)"],
        capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"
