"""The marts a ``--target spark`` build wrote, read back and compared with DuckDB's.

The spark target (``profiles.yml``) writes every table as Parquet under
``<spark dir>/warehouse/<schema>.db/<table>/`` (the spark dir is
``$TRACEHOUSE_SPARK_DIR``, else ``<warehouse>/spark``). Those files are
plain Parquet, so DuckDB reads them without Spark: :func:`compare_marts`
checks, mart by mart, that the Spark build and the DuckDB build of one lake
hold the same rows (a multiset: each row as often on both sides), which is
what the equality test and ``benchmarks/spark.py`` rely on.

Why compare by value, not by type: Spark writes ``int`` where DuckDB keeps
``bigint`` (e.g. ``posexplode``'s position), and a double computed by the
same formula may differ in its last bit when the two engines sum in a
different order; columns are compared as text after rounding doubles to
``DOUBLE_DIGITS`` significant digits.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tracehouse.core.warehouse import Warehouse

#: Environment variable naming the spark target's folder (profiles.yml reads it too).
SPARK_DIR_ENV_VAR = "TRACEHOUSE_SPARK_DIR"
#: Significant digits to which doubles are compared (a last-bit difference is not a difference).
DOUBLE_DIGITS = 12
#: Per mart, the columns the what-if replay decides on DuckDB, which Spark does not
#: build (dbt_project.yml): fct_findings' pricing (priced_by, the time at stake and
#: what follows from it). They are left out of the comparison; the rules' figures and
#: evidence are compared, and tests/test_spark.py compares the rows DuckDB priced
#: directly in full.
PRICED_BY_REPLAY = {
    "fct_findings": frozenset({"priced_by", "time_at_stake_ns", "share_of_step", "severity",
                               "finding_rank", "status", "reason"}),
}


@dataclass(frozen=True)
class MartDifference:
    """One mart whose rows differ between the two engines."""

    mart: str
    duckdb_rows: int
    spark_rows: int
    only_in_duckdb: list[tuple]
    only_in_spark: list[tuple]

    def line(self) -> str:
        sample = (self.only_in_duckdb or self.only_in_spark)[:1]
        return (f"{self.mart}: duckdb {self.duckdb_rows} rows, spark {self.spark_rows} rows; "
                f"{len(self.only_in_duckdb)} only in duckdb, {len(self.only_in_spark)} only "
                f"in spark (first: {sample})")


def spark_dir(warehouse: Path | str) -> Path:
    """Folder of the spark target's tables and metastore for ``warehouse``."""
    explicit = os.environ.get(SPARK_DIR_ENV_VAR)
    return Path(explicit) if explicit else Warehouse(Path(warehouse)).root / "spark"


def spark_table_dir(warehouse: Path | str, table: str, schema: str = "main") -> Path:
    """Folder of the Parquet files of one table the spark target built."""
    return spark_dir(warehouse) / "warehouse" / f"{schema}.db" / table


def spark_marts(warehouse: Path | str) -> list[str]:
    """Names of the marts (``fct_*``, ``dim_*``) the spark target built."""
    folder = spark_dir(warehouse) / "warehouse" / "main.db"
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir()
                  if p.is_dir() and p.name.startswith(("fct_", "dim_")))


def compare_marts(warehouse: Path | str, marts: list[str] | None = None,
                  sample: int = 5) -> list[MartDifference]:
    """Compare each mart of the DuckDB build with the Spark build; return the differences.

    ``marts`` defaults to every mart the DuckDB database holds. A mart the
    Spark build lacks counts as a difference with 0 Spark rows.
    """
    import duckdb

    root = Warehouse(Path(warehouse)).root
    con = duckdb.connect(str(Warehouse(root).database), read_only=True)
    try:
        if marts is None:
            marts = [name for (name,) in con.execute(
                "select table_name from information_schema.tables "
                "where table_schema = 'main' and table_type in ('BASE TABLE', 'VIEW') "
                "and (table_name like 'fct\\_%' escape '\\' "
                "or table_name like 'dim\\_%' escape '\\') order by 1").fetchall()]
        # The what-if marts build on DuckDB only (dbt_project.yml: Python models).
        whatif = Path(__file__).resolve().parents[1] / "models" / "marts" / "whatif"
        duckdb_only = {path.stem for path in whatif.glob("*.sql")}
        marts = [mart for mart in marts if mart not in duckdb_only]
        differences = []
        for mart in marts:
            difference = _compare_one(con, root, mart, sample)
            if difference is not None:
                differences.append(difference)
        return differences
    finally:
        con.close()


def _compare_one(con: object, root: Path, mart: str, sample: int) -> MartDifference | None:
    columns = [(name, kind) for name, kind in con.execute(  # type: ignore[attr-defined]
        "select column_name, data_type from information_schema.columns "
        "where table_schema = 'main' and table_name = ? order by ordinal_position",
        [mart]).fetchall() if name not in PRICED_BY_REPLAY.get(mart, ())]
    files = sorted(str(p) for p in spark_table_dir(root, mart).glob("*.parquet"))
    duck_rows = con.execute(f'select count(*) from main."{mart}"').fetchone()[0]  # type: ignore[attr-defined]
    if not files:
        if duck_rows == 0 and spark_table_dir(root, mart).is_dir():
            return None
        return MartDifference(mart, duck_rows, 0, [], [])
    spark_names = {name for (name,) in con.execute(  # type: ignore[attr-defined]
        "select name from parquet_schema(?) where name != 'spark_schema'", [files[0]]
    ).fetchall()}
    missing = [name for name, _ in columns if name not in spark_names]
    if missing:
        return MartDifference(mart, duck_rows, -1, [("missing columns in spark",
                                                     tuple(missing))], [])
    select = ", ".join(_normalised(name, kind) for name, kind in columns)
    duck = f'select {select} from main."{mart}"'
    spark = f"select {select} from read_parquet({files!r})"
    spark_rows = con.execute(f"select count(*) from read_parquet({files!r})").fetchone()[0]  # type: ignore[attr-defined]
    only_duck = con.execute(f"{duck} except all {spark} limit {sample}").fetchall()  # type: ignore[attr-defined]
    only_spark = con.execute(f"{spark} except all {duck} limit {sample}").fetchall()  # type: ignore[attr-defined]
    if duck_rows == spark_rows and not only_duck and not only_spark:
        return None
    return MartDifference(mart, duck_rows, spark_rows, only_duck, only_spark)


def _normalised(name: str, kind: str) -> str:
    """A column as comparable text: doubles rounded, lists and times spelled one way."""
    column = f'"{name}"'
    upper = kind.upper()
    if upper in ("DOUBLE", "FLOAT", "REAL") or upper.startswith("DECIMAL"):
        value = f"cast({column} as double)"
        return (f"case when {value} = 0 or {value} is null or isnan({value}) "
                f"then cast({value} as varchar) else "
                f"cast(round({value} / pow(10, floor(log10(abs({value})))), {DOUBLE_DIGITS - 1})"
                f" as varchar) || 'e' || cast(floor(log10(abs({value}))) as bigint) end")
    if upper.startswith("TIMESTAMP"):
        return f"cast(epoch_us({column}) as varchar)"
    return f"cast({column} as varchar)"
