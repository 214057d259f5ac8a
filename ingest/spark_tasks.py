"""``tracehouse ingest --engine spark``: parse trace files in Spark tasks.

The same worker body as local ingest (``runner._load_one``: read, hash,
parse with tracehouse's own parser, write the trace's tables as hidden
temporaries in the lake) runs as one Spark task per file; the driver then
decides and commits exactly as a local ingest does, in file order. Only
small outcomes (paths of temporaries, counts) travel back to the driver,
so its memory does not grow with the traces.

What a cluster needs: tracehouse installed on every executor (the same
Python environment: ``PYSPARK_PYTHON`` and ``spark.pyspark.python`` are
set to this interpreter unless the environment names another), and the traces and the warehouse
on a filesystem every executor sees at the same path (the temporaries are
renamed into place by the driver). ``TRACEHOUSE_SPARK_MASTER`` picks the
master (default ``local[2]``); any other setting comes from Spark's own
configuration (``spark-defaults.conf``, ``PYSPARK_SUBMIT_ARGS``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TextIO, TypeVar

from .trace_types import TraceError

Task = TypeVar("Task")
Outcome = TypeVar("Outcome")

#: Environment variable naming the Spark master (profiles.yml's spark target reads it too).
MASTER_ENV_VAR = "TRACEHOUSE_SPARK_MASTER"


def spark_session(app_name: str = "tracehouse-ingest") -> object:
    """A Spark session on ``$TRACEHOUSE_SPARK_MASTER`` (default local[2]).

    Raises:
        TraceError: pyspark is not installed (the ``spark`` extra).
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise TraceError("no_spark", "--engine spark needs pyspark, which is not installed",
                         "pip install -e '.[spark]' (and Java 17)") from exc
    # Workers run this interpreter (hence this environment, tracehouse included),
    # unless the environment names another; local mode reads only the variable.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (SparkSession.builder.master(os.environ.get(MASTER_ENV_VAR, "local[2]"))
               .appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
               # Python workers start in the driver's folder with it first on
               # sys.path; from the repository root its `tracehouse/` folder
               # would shadow the installed package (whose `ingest` lives
               # elsewhere). Python >= 3.11 then leaves the folder out.
               .config("spark.executorEnv.PYTHONSAFEPATH", "1"))
    return builder.getOrCreate()


def run_tasks_in_spark(body: Callable[[Task], Outcome], tasks: Sequence[Task],
                       stream: TextIO) -> Iterator[Outcome]:
    """Outcomes of ``body`` over ``tasks``, one Spark task per file, in the order of ``tasks``.

    ``body`` must never raise (the ingest worker turns every failure into
    an outcome). ``toLocalIterator`` hands partitions back one by one, in
    order, so the driver commits while later files are still parsed.
    """
    if not tasks:
        return iter(())
    session = spark_session()
    print(f"parsing {len(tasks)} file(s) in Spark tasks on "
          f"{session.sparkContext.master}", file=stream, flush=True)  # type: ignore[attr-defined]
    rdd = session.sparkContext.parallelize(list(tasks), numSlices=len(tasks))  # type: ignore[attr-defined]
    return rdd.map(body).toLocalIterator()
