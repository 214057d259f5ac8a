"""The streaming Nsight loader gives the same lake whatever its batch size (ingest/nsys/write.py).

Why it matters: a GPU's slices are read, nested, contextualized and written a
batch at a time, carrying the open slices of every track, the CUDA calls that
launch the GPU's work (with the NVTX range around each) and the lake's row
order across batch boundaries. A batch of 97 rows cuts every NVTX tree, every
stack and every launch-to-kernel pair of the real exports many times over; if
anything carried were lost, a parent, depth, launch, range lineage or flow
would differ from the lake of one batch holding the whole GPU (the rules as
they were before streaming). Row groups are shrunk to 5,000 rows in both, so
that groups fill, and the ``has_role`` part ends, inside batches too.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import SHARED_DATA
from tracehouse.ingest.nsys import groups, write
from tracehouse.ingest.runner import ingest_paths

NSYS = SHARED_DATA / "nsys"
EXPORTS = sorted(NSYS.glob("*.sqlite")) if NSYS.is_dir() else []

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not EXPORTS, reason=f"shared data missing: {NSYS}"),
]


def _lake_files(export: Path, root: Path, batch_rows: int,
                monkeypatch: pytest.MonkeyPatch) -> dict[str, pq.ParquetFile]:
    monkeypatch.setattr(write, "BATCH_ROWS", batch_rows)
    monkeypatch.setattr(groups, "ROW_GROUP_ROWS", 5000)
    result = ingest_paths([export], warehouse=root, run="stream", jobs=1, progress=False)
    assert not result.failed
    files = {str(p.relative_to(root / "lake")): pq.ParquetFile(p)
             for p in sorted((root / "lake").glob("*/run=*/*.parquet"))}
    assert files
    return files


@pytest.mark.parametrize("export", EXPORTS, ids=lambda p: p.stem)
def test_tiny_batches_give_the_lake_of_one_batch(export: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    whole = _lake_files(export, tmp_path / "whole", 10**9, monkeypatch)
    tiny = _lake_files(export, tmp_path / "tiny", 97, monkeypatch)
    assert whole.keys() == tiny.keys()
    cut = 0
    for name, expected in whole.items():
        got = tiny[name]
        groups_expected = [expected.metadata.row_group(i).num_rows
                           for i in range(expected.num_row_groups)]
        assert [got.metadata.row_group(i).num_rows for i in range(got.num_row_groups)] \
            == groups_expected, name
        cut += len(groups_expected) > 1
        want, have = expected.read(), got.read()
        assert have.schema == want.schema, name
        for column in want.column_names:
            if column != "ingested_at":
                assert have[column].equals(want[column]), (name, column)
    assert cut >= 2, "the slices of each GPU span several row groups"
