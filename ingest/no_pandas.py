"""Keep pandas out of processes that only ingest, and give their Arrow the C allocator.

This module imports nothing heavy on purpose: it must run before pyarrow
is first used, which happens as soon as the parser modules are imported.
"""

from __future__ import annotations

import importlib.abc
import os
import sys


class _NoPandas(importlib.abc.MetaPathFinder):
    """A finder that answers ``import pandas`` with ModuleNotFoundError."""

    def find_spec(self, fullname, path=None, target=None):  # noqa: ANN001 (importlib API)
        if fullname == "pandas" or fullname.startswith("pandas."):
            raise ModuleNotFoundError(f"{fullname} is kept out of this ingest process",
                                      name=fullname)
        return None


def keep_pandas_out() -> None:
    """Make ``import pandas`` fail in this process, unless pandas is already loaded.

    pyarrow imports pandas on the first ``pa.array`` call, only to check
    whether its input is a pandas object: +37 MB of RSS and +0.36 s per
    process, for nothing, since ingest never converts to or from pandas. Only
    processes that do nothing but ingest call this (pool workers and the
    ``tracehouse ingest`` console command); pyarrow remembers the answer, so
    a process that may later want pandas (tests, the demo) must not.
    """
    if "pandas" not in sys.modules and not any(isinstance(f, _NoPandas)
                                               for f in sys.meta_path):
        sys.meta_path.insert(0, _NoPandas())
    prefer_system_allocator()  # the same processes, the same "before pyarrow" moment


#: Arrow reads it once, when its default memory pool is first asked for.
ARROW_POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"


def prefer_system_allocator() -> None:
    """Make ``malloc`` Arrow's default pool in this process, unless the user chose one.

    Why: ingest.memory.system_arrow_pool explains the measured gain; setting the
    pool only around each file (that context manager) still lets the wheels'
    mimalloc start up at import, and its arenas stay: a dlrm_8rank worker peaked
    at 79-82 MiB that way, 64 MiB with the pool chosen before pyarrow's first
    allocation. Effective only before pyarrow is first used, hence here.
    """
    os.environ.setdefault(ARROW_POOL_ENV, "system")
