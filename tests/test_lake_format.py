"""The lake format number written in SQL agrees with the one ingest writes.

tracehouse.core.warehouse.LAKE_FORMAT is bumped whenever ingest adds derived
columns; the data test that warns about older traces compares with it in
SQL, where Python's constant cannot be imported, so a bump that forgot it
would silently stop warning.
"""

from __future__ import annotations

import re
from pathlib import Path

from tracehouse.core.warehouse import LAKE_FORMAT

ROOT = Path(__file__).resolve().parents[1]


def test_the_older_format_warning_compares_with_the_current_format() -> None:
    sql = (ROOT / "tests" / "dbt" / "lake" / "traces_written_by_current_ingest.sql").read_text()
    assert re.findall(r"coalesce\(lake_format, 0\) < (\d+)", sql) == [str(LAKE_FORMAT)]
    assert f"current format {LAKE_FORMAT}" in sql
