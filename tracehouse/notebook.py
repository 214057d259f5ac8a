"""A small entry point for notebooks: open a warehouse, get marts, draw charts inline.

Why: the marts are plain DuckDB tables, but a notebook user should not need
to know where the database file lives, how to open it without locking out
a running ``tracehouse build``, or how a chart family is called. ::

    from tracehouse.notebook import open_warehouse

    wh = open_warehouse("warehouse")          # read-only
    wh.marts()                                # ['dim_process_groups', ..., 'fct_rank_iterations']
    wh.df("fct_rank_iterations", run_id="demo")
    wh.table("fct_kernels").filter("kind = 'communication'").aggregate("count(*)")
    wh.sql("select rank, sum(idle_ns) from fct_rank_iterations where run_id = ? group by 1",
           ["demo"]).df()
    wh.chart("heatmaps", run_id="demo")       # shows the PNGs inline

The connection is read-only (:func:`tracehouse.query.lake_connection.connect`: the built
database, else an in-memory one), so a notebook can never change the
warehouse; the raw lake tables (``slices``, ``traces``, ``ingest_errors``,
…) are views of the same names and columns before and after a build, as in
``tracehouse sql``. Table names are checked against ``information_schema``
before they reach SQL text; ``run_id`` and query parameters are bound.
DataFrames keep integer columns as integers (pandas' nullable ``Int64``
where needed), so ``kernel_count`` reads ``273``, not ``273.0``.
"""

from __future__ import annotations

import importlib
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import duckdb

from tracehouse.core.warehouse import Warehouse
from tracehouse.query.catalog import resolve_table, table_names
from tracehouse.query.lake_connection import (
    add_lake_views,
    connect,
    lake_tables,
    referenced_lake_tables,
)

if TYPE_CHECKING:
    import pandas as pd

    from tracehouse.reports.base import ChartFamily, RenderedChart

#: Prefixes of the tables people read (ARCHITECTURE.md, "Models").
MART_PREFIXES = ("fct_", "dim_")


class NotebookError(Exception):
    """Unknown table, chart family or run; the message lists what exists."""


def open_warehouse(path: str | Path | None = None) -> Notebook:
    """Open the warehouse at ``path`` (else ``$TRACEHOUSE_WAREHOUSE``, else ``./warehouse``)."""
    return Notebook(Warehouse.at(path))


class Notebook:
    """A read-only handle on one warehouse for interactive use."""

    def __init__(self, warehouse: Warehouse) -> None:
        self.warehouse = warehouse
        # Lake views are made when first named (each reads every footer of its table).
        self.con: duckdb.DuckDBPyConnection = connect(warehouse, lake_views=())
        self._chart_dir: Path | None = None

    # ----------------------------------------------------------------- tables

    def tables(self) -> list[str]:
        """Every table and view (marts, models, staging views, seeds, raw lake tables)."""
        return sorted(set(table_names(self.con)) | set(lake_tables(self.warehouse)))

    def marts(self) -> list[str]:
        """Names of the marts (``fct_*`` and ``dim_*``), sorted."""
        return [name for name in self.tables() if name.startswith(MART_PREFIXES)]

    def table(self, name: str, run_id: str | None = None) -> duckdb.DuckDBPyRelation:
        """The table ``name`` as a lazy DuckDB relation, optionally only ``run_id``'s rows."""
        add_lake_views(self.con, self.warehouse, [name])
        found = resolve_table(self.con, name)
        if found is None:
            raise NotebookError(f"no table {name!r} in {self.warehouse.root}; marts: "
                                f"{', '.join(self.marts()) or 'none (run `tracehouse build`)'}")
        relation = self.con.sql(f"select * from {found[1]}")  # noqa: S608 - a catalog name
        if run_id is not None:
            if "run_id" not in relation.columns:
                raise NotebookError(f"table {name!r} has no run_id column")
            relation = relation.filter(
                duckdb.ColumnExpression("run_id") == duckdb.ConstantExpression(run_id))
        return relation

    def df(self, name: str, run_id: str | None = None) -> pd.DataFrame:
        """The table ``name`` (optionally one run's rows) as a pandas DataFrame.

        Integer columns stay integers: DuckDB's own ``.df()`` turns an
        integer column holding NULL into floats (``273.0``, and int64
        nanoseconds beyond 2**53 lose digits), so the frame goes through
        Arrow with pandas' nullable integer and boolean dtypes.
        """
        return to_frame(self.table(name, run_id))

    def sql(self, query: str, params: Sequence[Any] | None = None) -> duckdb.DuckDBPyRelation:
        """Run ``query`` with bound ``params``; a relation (``.df()``, ``.fetchall()``, ...)."""
        add_lake_views(self.con, self.warehouse, referenced_lake_tables(query))
        return self.con.sql(query, params=list(params) if params is not None else None)

    def runs(self) -> list[str]:
        """Runs in the warehouse (from ``dim_ranks``)."""
        if "dim_ranks" not in self.tables():
            return []
        return [row[0] for row in self.con.execute(
            "select distinct run_id from dim_ranks order by run_id").fetchall()]

    # ----------------------------------------------------------------- charts

    def chart(self, family_name: str, run_id: str | None = None,
              out_dir: str | Path | None = None,
              compare_run_id: str | None = None) -> list[RenderedChart]:
        """Draw the registered chart family ``family_name`` for ``run_id``.

        The PNG and SVG files go to ``out_dir`` (default: a temporary folder
        removed by :meth:`close`). Inside IPython/Jupyter each PNG is shown
        inline; the rendered charts are returned either way. ``run_id`` may
        be left out when the warehouse holds one run.
        """
        from tracehouse.reports.base import ChartContext

        family = _family(family_name)
        run = run_id if run_id is not None else self._only_run()
        target = Path(out_dir) if out_dir is not None else self._temp_dir() / family.name
        target.mkdir(parents=True, exist_ok=True)
        ctx = ChartContext(con=self.con, run_id=run, out_dir=target,
                           compare_run_id=compare_run_id)
        from tracehouse.reports.base import NothingToShow

        try:
            rendered = family.render(ctx)
        except NothingToShow as verdict:
            print(f"{family.name}: nothing to show: {verdict.reason}")
            return []
        _display(rendered)
        return rendered

    def _only_run(self) -> str:
        runs = self.runs()
        if len(runs) != 1:
            raise NotebookError(f"pass run_id: the warehouse holds {len(runs)} runs "
                                f"({', '.join(runs) or 'none'})")
        return runs[0]

    def _temp_dir(self) -> Path:
        if self._chart_dir is None:
            self._chart_dir = Path(tempfile.mkdtemp(prefix="tracehouse-charts-"))
        return self._chart_dir

    # ----------------------------------------------------------------- lifetime

    def close(self) -> None:
        """Close the connection and remove the temporary chart folder."""
        self.con.close()
        if self._chart_dir is not None:
            shutil.rmtree(self._chart_dir, ignore_errors=True)
            self._chart_dir = None

    def __enter__(self) -> Notebook:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<tracehouse warehouse {self.warehouse.root}: {len(self.marts())} marts>"


def to_frame(relation: duckdb.DuckDBPyRelation) -> pd.DataFrame:
    """``relation`` as a DataFrame whose integer and boolean columns keep nullable dtypes."""
    import pandas as pd
    import pyarrow as pa

    nullable = {
        pa.int8(): pd.Int8Dtype(), pa.int16(): pd.Int16Dtype(),
        pa.int32(): pd.Int32Dtype(), pa.int64(): pd.Int64Dtype(),
        pa.uint8(): pd.UInt8Dtype(), pa.uint16(): pd.UInt16Dtype(),
        pa.uint32(): pd.UInt32Dtype(), pa.uint64(): pd.UInt64Dtype(),
        pa.bool_(): pd.BooleanDtype(),
    }
    return relation.to_arrow_table().to_pandas(types_mapper=nullable.get)


def chart_families() -> list[str]:
    """Names of the registered chart families (module names in the registry)."""
    from tracehouse.reports.registry import FAMILY_MODULES

    return [module.rsplit(".", 1)[-1] for module in FAMILY_MODULES]


def _family(name: str) -> ChartFamily:
    """Import only the family asked for: one unfinished family must not break the others."""
    from tracehouse.reports.registry import FAMILY_MODULES

    for module in FAMILY_MODULES:
        if module.rsplit(".", 1)[-1] == name:
            try:
                return importlib.import_module(module).FAMILY
            except ImportError as exc:
                raise NotebookError(f"chart family {name!r} ({module}) cannot be "
                                    f"imported: {exc}") from exc
    for module in FAMILY_MODULES:  # a family whose FAMILY.name differs from its module
        try:
            family = importlib.import_module(module).FAMILY
        except (ImportError, AttributeError):
            continue
        if family.name == name:
            return family
    raise NotebookError(f"no chart family {name!r}; families: {', '.join(chart_families())}")


def _display(rendered: list[RenderedChart]) -> None:
    """Show each PNG inline when running under IPython; do nothing elsewhere."""
    try:
        from IPython import get_ipython
        from IPython.display import Image, display
    except ImportError:
        return
    if get_ipython() is None:
        return
    for chart in rendered:
        display(Image(filename=str(chart.png)))
