"""What must hold before dbt starts on a warehouse, each as one line that names the fix.

Checked by :func:`~tracehouse.build.dbt.run_dbt` so that a typo in a
resource variable, an empty lake or a lake written by an older ingest reads
as one ``error:`` line instead of a failure deep in dbt's log.
"""

from __future__ import annotations

import os
from pathlib import Path

from tracehouse.core.warehouse import LAKE_FORMAT, Warehouse


def has_loaded_traces(warehouse: Path) -> bool:
    """Tell whether the lake of ``warehouse`` holds at least one committed trace.

    A trace is committed once its ``lake/traces/run=<run>/<trace>.parquet``
    file exists (ingest renames it into place last); ``_empty.parquet`` only
    carries the schema.
    """
    traces = Warehouse(warehouse).table_dir("traces")
    if not traces.is_dir():
        return False
    return any(path.name != "_empty.parquet" for path in traces.rglob("*.parquet"))



def lake_problem(root: Path) -> str | None:
    """Why the lake of the warehouse at ``root`` cannot be built yet, or None.

    Empty (no committed trace), or written by an ingest older than
    :data:`~tracehouse.core.warehouse.LAKE_FORMAT`.
    """
    if not has_loaded_traces(root):
        return (f"warehouse {root} has no loaded traces "
                f"({Warehouse(root).table_dir('traces')} holds none), so there is "
                f"nothing to build. Load traces first: tracehouse ingest PATH "
                f"--warehouse {root}")
    if (Warehouse(root).lake_format() or 0) < LAKE_FORMAT:
        return (f"the lake of warehouse {root} was written by an older tracehouse "
                f"ingest (lake format {Warehouse(root).lake_format() or 1}; this version "
                f"reads {LAKE_FORMAT}: each slice carries its own context since 2, its "
                f"annotation range since 3, its role and the ranges' paths since 4, "
                f"each trace whether its ops have shapes since 5). Load its "
                f"traces again: tracehouse ingest PATH... --warehouse {root} parses every "
                "trace of an older format again, keeping its id")
    return None


def resource_settings_problem() -> str | None:
    """What is wrong with the resource variables profiles.yml reads, or None.

    Checked before dbt starts, so a typo reads as one line naming the
    variable instead of a DuckDB parser error deep in dbt's log.
    """
    import duckdb

    limit = os.environ.get("TRACEHOUSE_MEMORY_LIMIT")
    if limit is not None:
        con = duckdb.connect()
        try:
            con.execute(f"set memory_limit = '{limit.replace(chr(39), chr(39) * 2)}'")
        except duckdb.Error as exc:
            return (f"TRACEHOUSE_MEMORY_LIMIT={limit!r} is not a DuckDB memory limit "
                    f"({str(exc).splitlines()[0]}); write it like 8GB or 60%")
        finally:
            con.close()
    threads = os.environ.get("TRACEHOUSE_DBT_THREADS")
    if threads is not None and not (threads.strip().isdigit() and int(threads) > 0):
        return f"TRACEHOUSE_DBT_THREADS={threads!r} is not a positive whole number"
    return None



def spark_installed() -> bool:
    """Whether the ``spark`` extra (pyspark, dbt-spark) is installed, for ``--target spark``."""
    import importlib.util

    return all(importlib.util.find_spec(name) is not None
               for name in ("pyspark", "dbt.adapters.spark"))

