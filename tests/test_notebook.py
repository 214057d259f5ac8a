"""``tracehouse.notebook``: marts as relations and DataFrames, charts drawn inline.

Runs on the shared synthetic lake (conftest) after a real dbt run. Charts go
through the real registry and :func:`tracehouse.reports.base.save_figure`:
a small chart family written for the test is registered next to the real
ones, and every real family that imports is drawn too.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from conftest import Lake
from tracehouse.notebook import NotebookError, chart_families, open_warehouse
from tracehouse.reports import registry

pytestmark = pytest.mark.slow

#: A chart family as a report engineer would write one: reads a mart, saves PNG + SVG.
TEST_FAMILY = '''
from __future__ import annotations

import matplotlib.pyplot as plt

from tracehouse.reports.base import ChartContext, RenderedChart, save_figure


class KernelsPerRank:
    name = "nb_kernels"
    title = "Kernels per rank"
    marts = ("fct_kernels",)

    def render(self, ctx: ChartContext) -> list[RenderedChart]:
        frame = ctx.df("select rank, count(*) as n from fct_kernels where run_id = ? "
                       "group by rank order by rank", [ctx.run_id])
        if frame.empty:
            return []
        fig, ax = plt.subplots(figsize=(4, 3))
        ax.bar(frame["rank"].astype(str), frame["n"])
        ax.set_xlabel("rank")
        ax.set_ylabel("kernels")
        return [save_figure(fig, ctx, "nb_kernels_per_rank", "Kernels per rank")]


FAMILY = KernelsPerRank()
'''


@pytest.fixture
def built(built_warehouse: Lake) -> Lake:
    """The session's synthetic warehouse (conftest), built once with every model; read-only."""
    return built_warehouse


@pytest.fixture
def test_family(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Register the test's family module (``nb_kernels``) after the real ones."""
    (tmp_path / "nb_kernels.py").write_text(TEST_FAMILY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "FAMILY_MODULES", (*registry.FAMILY_MODULES, "nb_kernels"))
    yield "nb_kernels"
    sys.modules.pop("nb_kernels", None)


def test_marts_tables_and_dataframes(built: Lake) -> None:
    with open_warehouse(built.warehouse) as wh:
        marts = wh.marts()
        assert {"fct_kernels", "fct_rank_iterations", "dim_ranks"} <= set(marts)
        assert all(name.startswith(("fct_", "dim_")) for name in marts)
        assert "stg_lake__slices" in wh.tables() and "stg_lake__slices" not in marts
        [(total,)] = wh.sql("select count(*) from fct_kernels").fetchall()
        frame = wh.df("fct_kernels", run_id=built.run_id)
        assert len(frame) == total > 0 and set(frame["run_id"]) == {built.run_id}
        relation = wh.table("fct_kernels", run_id=built.run_id)
        assert isinstance(relation, duckdb.DuckDBPyRelation)
        assert relation.filter("kind = 'communication'").aggregate("count(*)").fetchall() \
            == wh.sql("select count(*) from fct_kernels where kind = ?",
                      ["communication"]).fetchall()
        assert wh.table("fct_kernels", run_id="x' or 1=1 --").aggregate("count(*)").fetchall() \
            == [(0,)]
        assert wh.runs() == [built.run_id]


def test_dataframes_keep_integer_columns(built: Lake) -> None:
    """``kernel_count`` reads 273, not 273.0; NULLs stay missing, not NaN floats."""
    with open_warehouse(built.warehouse) as wh:
        summary = wh.df("fct_kernel_summary", run_id=built.run_id)
        assert str(summary["kernel_count"].dtype) in ("Int64", "int64")
        kernels = wh.df("fct_kernels", run_id=built.run_id)
        assert str(kernels["microbatch"].dtype) == "Int64"  # NULL for kernels outside any
        assert kernels["microbatch"].isna().any()
        assert str(kernels["ts_ns"].dtype) == "Int64"
        [(exact,)] = wh.sql("select max(ts_ns) from fct_kernels").fetchall()
        assert int(kernels["ts_ns"].max()) == exact  # > 2**53: floats would round it


def test_raw_lake_tables_under_their_own_names(built: Lake) -> None:
    with open_warehouse(built.warehouse) as wh:
        assert {"slices", "traces", "ingest_errors"} <= set(wh.tables())
        slices = wh.df("slices", run_id=built.run_id)
        assert {"ts", "dur"} <= set(slices.columns) and len(slices) == built.row_count("slices")


def test_unknown_names_and_read_only(built: Lake) -> None:
    with open_warehouse(built.warehouse) as wh:
        with pytest.raises(NotebookError, match="no table"):
            wh.table("fct_kernels; drop table dim_ranks")
        with pytest.raises(NotebookError, match="no run_id column"):
            wh.table("kernel_kind_patterns", run_id="run_a")
        with pytest.raises(duckdb.Error, match="read-only"):
            wh.sql("create table scratch as select 1")
        with pytest.raises(NotebookError, match="no chart family 'nope'"):
            wh.chart("nope")


def test_chart_renders_through_the_registry(built: Lake, test_family: str) -> None:
    wh = open_warehouse(built.warehouse)
    rendered = wh.chart(test_family)  # one run: no run_id needed
    assert test_family in chart_families()
    [chart] = rendered
    assert chart.png.is_file() and chart.png.stat().st_size > 2_000
    assert chart.png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert chart.svg.is_file()
    folder = chart.png.parent
    wh.close()
    assert not folder.exists()  # the temporary chart folder goes with the notebook


def test_chart_is_displayed_inside_ipython(built: Lake, test_family: str, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    ipython = pytest.importorskip("IPython")
    import IPython.display

    shown: list[Any] = []
    monkeypatch.setattr(ipython, "get_ipython", lambda: object())
    monkeypatch.setattr(IPython.display, "display", shown.append)
    with open_warehouse(built.warehouse) as wh:
        rendered = wh.chart(test_family, run_id=built.run_id, out_dir=tmp_path / "charts")
    assert len(shown) == len(rendered) == 1
    assert shown[0].data == rendered[0].png.read_bytes()
    assert rendered[0].png.parent == tmp_path / "charts"  # kept: the caller's folder


def test_every_real_family_that_imports_draws(built: Lake, tmp_path: Path) -> None:
    drawn = 0
    for module in registry.FAMILY_MODULES:
        try:
            importlib.import_module(module)
        except ImportError:
            continue  # not written yet: the report's own tests cover the families
        name = module.rsplit(".", 1)[-1]
        if name == "compare":
            continue  # needs a second run
        with open_warehouse(built.warehouse) as wh:
            for chart in wh.chart(name, run_id=built.run_id, out_dir=tmp_path / name):
                assert chart.png.is_file() and chart.png.stat().st_size > 1_000
                drawn += 1
    if drawn == 0:
        pytest.skip("no registered chart family is importable yet")


def test_every_marts_integer_columns_are_bigint_and_do_arithmetic(built: Lake) -> None:
    """Sums stay BIGINT in every mart (DuckDB's sum() of BIGINT is HUGEINT, which pandas
    gets as decimal.Decimal: ``df.compute_ns / 1e6`` would raise TypeError)."""
    with open_warehouse(built.warehouse) as wh:
        wide = wh.sql("""
            select table_name, column_name, data_type from information_schema.columns
            where table_schema = 'main' and (table_name like 'fct\\_%' escape '\\'
                                             or table_name like 'dim\\_%' escape '\\')
              and (data_type like 'HUGEINT%' or data_type like 'DECIMAL%'
                   or data_type like 'UHUGEINT%')""").fetchall()
        assert wide == []
        frame = wh.df("fct_rank_iterations", run_id=built.run_id)
        for column in ("compute_ns", "step_ns", "step_idle_ns", "kernel_count"):
            assert str(frame[column].dtype) in ("Int64", "int64"), column
        assert (frame["compute_ns"] / 1e6).notna().any()
        assert ((frame["step_ns"] - frame["step_idle_ns"]) >= 0).all()
        phases = wh.df("fct_microbatch_phases", run_id=built.run_id)
        assert str(phases["busy_ns"].dtype) in ("Int64", "int64")
        assert float((phases["busy_ns"] / 1e6).sum()) > 0
