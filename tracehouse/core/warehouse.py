"""Where a warehouse lives on disk and how its parts are named.

A warehouse folder holds ``lake/<table>/…/*.parquet`` (one Parquet dataset
per raw table), ``tracehouse.duckdb`` (the dbt target) and ``reports/``.
Every command resolves it the same way: ``--warehouse DIR``, else
``$TRACEHOUSE_WAREHOUSE``, else ``./warehouse``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ENV_VAR = "TRACEHOUSE_WAREHOUSE"
DEFAULT_DIR = "warehouse"
DATABASE_FILE = "tracehouse.duckdb"

#: The version of what ingest writes into a lake. Bump it when trace files
#: gain derived columns that older files lack: every trace records it
#: (``traces.lake_format``) and the next ingest parses a trace of an older
#: format again; the lake records it too (``lake/_lake_format``, written by
#: every ingest), so a build can refuse a lake no ingest of this version
#: touched without opening a Parquet file. 2: ``slices`` carries the slice
#: context (ingest/slice_context.py); 3: and the annotation range around
#: each slice (ingest/annotation_context.py); 4: ``has_role`` on slices
#: (those rows first, in their own row group) and ``annotation_path`` on
#: annotation ranges; 5: ``traces.has_op_shapes`` (whether its CPU ops
#: carry shapes, which the FLOP model reads) and the ``model_configs``
#: table (ingest/model_config.py).
LAKE_FORMAT = 5
LAKE_FORMAT_FILE = "_lake_format"


def resolve_warehouse(explicit: str | os.PathLike[str] | None = None) -> Path:
    """Return the absolute warehouse folder from the flag, the environment or the default."""
    chosen = explicit or os.environ.get(ENV_VAR) or DEFAULT_DIR
    return Path(chosen).expanduser().resolve()


@dataclass(frozen=True)
class Warehouse:
    """Paths inside one warehouse folder."""

    root: Path

    @classmethod
    def at(cls, explicit: str | os.PathLike[str] | None = None) -> Warehouse:
        return cls(resolve_warehouse(explicit))

    @property
    def lake(self) -> Path:
        return self.root / "lake"

    @property
    def database(self) -> Path:
        return self.root / DATABASE_FILE

    @property
    def lake_format_file(self) -> Path:
        return self.lake / LAKE_FORMAT_FILE

    def lake_format(self) -> int | None:
        """The format the lake's last ingest wrote (None: none of version 2 or later)."""
        try:
            return int(self.lake_format_file.read_text().strip())
        except (OSError, ValueError):
            return None

    @property
    def reports(self) -> Path:
        return self.root / "reports"

    @property
    def lock_file(self) -> Path:
        return self.root / ".ingest.lock"

    def table_dir(self, table: str) -> Path:
        return self.lake / table

    def partition_dir(self, table: str, run_id: str) -> Path:
        return self.lake / table / f"run={run_id}"
