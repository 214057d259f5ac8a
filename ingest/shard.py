"""Sharded ingest: which files one of N uncoordinated ingests loads.

``tracehouse ingest --shard I/N`` (0 <= I < N) loads only the files whose
shard is I, so N processes (a Slurm array: ``--shard
$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT``, or any scheduler) spread
one ingest over machines that write one shared lake without talking to
each other. The shard of a file is a hash of its run and its resolved
path, so every process agrees on it without coordination and a file lands
in the same shard on every run (re-runs stay incremental).

What this assumes of the shared filesystem (NFS, Lustre, GPFS, CephFS; not
an object store):

- every host sees the traces and the warehouse at the same absolute path
  (the path is part of the hash and of the manifest);
- a rename within one directory is atomic: the lake's commit protocol
  (:mod:`ingest.lake`) renames each table's file into place, ``traces``
  last, and a reader sees a trace exactly when its ``traces`` file exists;
- nothing about locks: flock and fcntl locks are not relied upon across
  hosts. Shards never write the same file (each trace's files are named by
  its content-derived trace id, each error record by its path, and each
  path belongs to one shard), temporaries carry a random token, and the
  schema files are written the same by every writer.

What a shard gives up against one ingest of everything:

- crash recovery removes only leftovers older than ``STALE_AFTER_S``
  (another shard's temporaries and half-committed traces are young), so a
  crashed shard's debris waits an hour, or for a plain ingest;
- the duplicate checks (the same rank twice in an iteration, mixed world
  sizes) see every trace committed before the shard started and the
  shard's own, not those other shards commit meanwhile. Load one job per
  run (the default: the run is the job's folder) and the checks that
  matter hold; re-running any shard afterwards checks against everything.

Do not run a plain (unsharded) ingest into the lake while shards write to
it: its recovery would take their in-flight files for crash debris.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

#: Leftovers (temporaries, data files without a commit marker) younger than
#: this belong to a writer still at work as far as a shard can tell.
STALE_AFTER_S = 3600.0

_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (0-based)."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        """Read ``I/N``; raise ValueError with the reason for anything else."""
        match = _SHARD.match(text)
        if match is None:
            raise ValueError(f"--shard {text!r} is not I/N (e.g. 0/8: the first of 8 shards)")
        index, count = int(match.group(1)), int(match.group(2))
        if count < 1:
            raise ValueError(f"--shard {text!r}: N must be at least 1")
        if not 0 <= index < count:
            raise ValueError(f"--shard {text!r}: I must be between 0 and N-1 = {count - 1} "
                             "(for a 1-based array index, pass I-1)")
        return cls(index, count)

    def owns(self, run_id: str, path: Path) -> bool:
        """Whether this shard loads the file ``path`` of run ``run_id``."""
        return shard_of(run_id, path, self.count) == self.index

    def lock_name(self) -> str:
        """Lock file of this shard: the same shard run twice on one host waits for itself."""
        return f".ingest-shard-{self.index}-of-{self.count}.lock"

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def shard_of(run_id: str, path: Path, count: int) -> int:
    """The shard (0..count-1) of one file: a stable hash of its run and resolved path."""
    key = f"{run_id}\0{Path(path).resolve()}".encode("utf-8", "surrogateescape")
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") % count
