"""What the commands that read the last build say when the lake is newer.

``tracehouse sql``, ``compare``, ``report`` and ``export`` read the last
completed build, while ``tracehouse ingest`` writes only the lake; each
calls :func:`lake_is_built` first so that a user who ingested without
building reads why the figures are old, or why a run is not there
(:mod:`tracehouse.build.freshness` does the looking).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["lake_is_built"]


def lake_is_built(warehouse: str | None, runs: Sequence[str | None] = ()) -> bool:
    """Say on stderr when the lake holds traces the last build has not seen
    (:mod:`tracehouse.build.freshness`); False, after an error line, when one of ``runs``
    (named on the command line) is only in the lake: not unknown, just not built."""
    from tracehouse.build.freshness import unbuilt_traces
    from tracehouse.core.warehouse import Warehouse

    unbuilt = unbuilt_traces(Warehouse.at(warehouse))
    if unbuilt is None:
        return True
    for run_id in runs:
        if unbuilt.only_in_lake(run_id):
            print(f"error: {unbuilt.unbuilt_run(str(run_id))}", file=sys.stderr)
            return False
    print(unbuilt.note(), file=sys.stderr)
    return True
