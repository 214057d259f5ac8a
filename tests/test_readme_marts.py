"""The README's question table names every mart, and only marts that exist.

A user finds the mart for a question in that table; a mart it does not
name is a question nobody can find, and a name without a mart is a broken
promise.
"""

from __future__ import annotations

import re

from conftest import REPO_ROOT


def _table_marts() -> list[str]:
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme.split("## Questions and where they are answered", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    assert lines[0].startswith("| question | mart |") and set(lines[1]) <= set("|-")
    rows = lines[2:]
    return [name for row in rows for name in re.findall(r"`((?:fct|dim)_[a-z0-9_]+)`",
                                                       row.split(" | ")[1])]


def _model_marts() -> set[str]:
    return {path.stem for path in (REPO_ROOT / "models" / "marts").rglob("*.sql")}


def test_the_question_table_names_every_mart_once() -> None:
    named = _table_marts()
    assert len(named) == len(set(named)), "a mart answers two rows of the table"
    assert set(named) == _model_marts()


def test_a_missing_or_extra_mart_would_fail() -> None:
    """The check reads what it claims to: one mart column per row, real file names."""
    named = set(_table_marts())
    assert {"fct_rank_iterations", "fct_stragglers", "dim_ranks"} <= named
    assert "fct_rank_steps" not in _model_marts() | named
