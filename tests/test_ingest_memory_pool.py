"""Ingest's Arrow allocations come from ``malloc`` (ingest.memory, ingest.no_pandas).

Why tested: the lower peaks of issue 30 rest on it, and both ways of choosing
the pool have a catch: the environment variable only works before pyarrow's
first allocation (so ingest-only processes set it in ``keep_pandas_out``,
and a user's own choice wins), and the context manager must hand the
caller's pool back.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa

from tracehouse.ingest.memory import system_arrow_pool
from tracehouse.ingest.no_pandas import ARROW_POOL_ENV

_CHILD = ("from tracehouse.ingest.no_pandas import keep_pandas_out; keep_pandas_out(); "
          "import pyarrow as pa; print(pa.default_memory_pool().backend_name)")


def _child_pool(env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != ARROW_POOL_ENV}
    if env_value is not None:
        env[ARROW_POOL_ENV] = env_value
    done = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                          env=env, timeout=60, check=True)
    return done.stdout.strip()


def test_an_ingest_only_process_allocates_with_malloc_unless_told_otherwise() -> None:
    assert _child_pool(None) == "system"
    assert _child_pool("mimalloc") == "mimalloc"


def test_the_pool_is_set_inside_and_given_back() -> None:
    before = pa.default_memory_pool().backend_name
    with system_arrow_pool():
        assert pa.default_memory_pool().backend_name == "system"
        made = pa.array(list(range(1000)))
    assert pa.default_memory_pool().backend_name == before
    assert made.sum().as_py() == 499500  # made inside, read and freed outside
    del made
