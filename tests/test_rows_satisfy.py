"""The rows_satisfy generic test (macros/generic_tests/rows_satisfy.sql), run on DuckDB.

Rendered from the macro file itself with Jinja (its `{% test %}` block read
as the macro dbt makes of it), so a change to the macro is what gets tested:
each kind of check fails on the rows that break it, names itself and counts
them, and a model that keeps every rule returns nothing.
"""

from __future__ import annotations

import duckdb
import jinja2
import pytest

from conftest import REPO_ROOT


def _rows_satisfy(**arguments: object) -> str:
    source = (REPO_ROOT / "macros" / "generic_tests" / "rows_satisfy.sql").read_text()
    source = source.replace("{% test rows_satisfy(", "{% macro test_rows_satisfy(")
    source = source.replace("{% endtest %}", "{% endmacro %}")
    environment = jinja2.Environment(extensions=["jinja2.ext.do"])

    class _Exceptions:
        @staticmethod
        def raise_compiler_error(message: str) -> None:
            raise ValueError(message)

    module = environment.from_string(source).make_module({"exceptions": _Exceptions})
    return str(module.test_rows_satisfy(model="checked", **arguments))


def _failures(rows: str, **arguments: object) -> dict[str, int]:
    con = duckdb.connect()
    con.execute(f"create table checked as select * from (values {rows}) as t(id, kind, ns)")
    return dict(con.execute(_rows_satisfy(**arguments)).fetchall())


CHECKS = {
    "not_null": ["id", "kind"],
    "accepted_values": {"kind": ["gpu", "it's"]},
    "expressions": [
        "ns >= 0",
        {"name": "small_when_gpu", "expression": "ns < 10", "where": "kind = 'gpu'"},
    ],
}


def test_every_kind_of_check_names_its_failing_rows() -> None:
    rows = ("(1, 'gpu', 5), (null, 'gpu', 50), (3, 'cpu', -1), (4, null, null),"
            " (5, 'it''s', 7)")
    assert _failures(rows, **CHECKS) == {
        "id is not null": 1,
        "kind is not null": 1,
        # cpu fails; NULL passes, as in dbt's accepted_values; a quote in a
        # label becomes " (portable string literals)
        'kind in (gpu, it"s)': 1,
        "ns >= 0": 2,  # -1, and NULL (an expression that is not true fails)
        "small_when_gpu": 1,  # 50 on gpu; 7 is not gpu
    }


def test_rows_that_keep_every_rule_pass() -> None:
    assert _failures("(1, 'gpu', 5), (2, 'it''s', 70)", **CHECKS) == {}


def test_an_empty_model_passes() -> None:
    con = duckdb.connect()
    con.execute("create table checked (id bigint, kind varchar, ns bigint)")
    assert con.execute(_rows_satisfy(**CHECKS)).fetchall() == []


def test_no_checks_is_an_error() -> None:
    with pytest.raises(ValueError, match="no checks"):
        _rows_satisfy()


def test_unique_counts_the_keys_that_repeat() -> None:
    rows = "(1, 'gpu', 5), (1, 'gpu', 6), (1, 'cpu', 7), (2, 'gpu', 8), (2, 'gpu', 9), (3, null, 1)"
    assert _failures(rows, unique=["id", "kind"]) == {"unique (id, kind)": 2}
    # With row checks in the same test: one scan for those, one group by for the key.
    assert _failures(rows, unique=["id"], not_null=["kind"]) == {
        "unique (id)": 2, "kind is not null": 1,
    }
    assert _failures("(1, 'gpu', 5), (2, 'gpu', 5)", unique=["id"]) == {}


def test_unique_treats_nulls_as_one_key() -> None:
    # As in a GROUP BY (and dbt_utils' unique_combination_of_columns): two rows
    # with the same NULL key repeat it.
    assert _failures("(null, 'gpu', 5), (null, 'gpu', 6)", unique=["id", "kind"]) == {
        "unique (id, kind)": 1,
    }
