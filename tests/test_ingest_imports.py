"""An ingest process imports only what Kineto ingest needs.

Why: every ingest process (the coordinator and each forked pool worker)
carries what its modules import; DuckDB, imported at the top of the
Nsight reader, was +24 MiB of RSS in each of them on Kineto-only runs, the
largest part of the coordinator's peak on small trace sets
(benchmarks/README.md). The Nsight reader is imported when an Nsight
export is loaded (tests/test_ingest_nsys.py loads them). Likewise
``pyarrow.parquet`` (its ``pyarrow.fs`` brings the S3/GCS/Azure/HDFS bindings
and ``ssl``: ~8 MiB; ingest/parquet_writer.py writes without it), the
Perfetto engine (for ``--engine perfetto`` only) and the process pool
(for several files and jobs only).
"""

from __future__ import annotations

import subprocess
import sys

_CHILD = """
import sys
from tracehouse.ingest.no_pandas import keep_pandas_out
keep_pandas_out()
import tracehouse.ingest.runner
kept_out = ("duckdb", "pandas", "pyarrow.parquet", "pyarrow.fs", "ssl",
            "tracehouse.ingest.kineto.perfetto", "concurrent.futures.process")
print(" ".join(sorted(name for name in kept_out if name in sys.modules)))
"""


def test_importing_the_runner_leaves_what_a_kineto_ingest_never_uses_out() -> None:
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == []
