"""The DuckDB bodies of macros/portable.sql's dispatched macros, run on DuckDB.

Rendered from the macro file itself with Jinja (the DuckDB implementation is
the `default__` one), so a change to the macro is what gets tested.
"""

from __future__ import annotations

import random

import duckdb
import jinja2

from conftest import REPO_ROOT


def _portable_macros() -> object:
    source = (REPO_ROOT / "macros" / "portable.sql").read_text()
    environment = jinja2.Environment(extensions=["jinja2.ext.do"])
    return environment.from_string(source).module


def _means_over_orders(expression_sql: str, orders: int = 6) -> set[float]:
    """The aggregate over the same 2,000 doubles loaded in ``orders`` row orders."""
    rng = random.Random(7)
    values = [rng.random() * rng.choice([1.0, 1e-3, 1e5]) for _ in range(2000)]
    con = duckdb.connect()
    con.execute("set threads = 1")  # rows reach the aggregate in table order
    means = set()
    for _ in range(orders):
        rng.shuffle(values)
        con.execute("create or replace table sample as select unnest(?) as x", [values])
        means.add(con.execute(f"select {expression_sql} from sample").fetchone()[0])
    return means


def test_mean_in_value_order_does_not_depend_on_row_order() -> None:
    # A plain avg of doubles changes in its last digits with the order rows
    # arrive in (an incremental build and a full refresh store rows in
    # different orders); the macro adds them up in value order.
    mean = str(_portable_macros().default__mean_in_value_order("x")).strip()
    assert len(_means_over_orders("avg(x)")) > 1, "the sample no longer shows the problem"
    assert len(_means_over_orders(mean)) == 1, mean
