"""Sharded ingest: N uncoordinated ingests fill one lake exactly as one ingest does."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import SHARED_DATA
from tracehouse.cli import main
from tracehouse.core.warehouse import Warehouse
from tracehouse.ingest import lake
from tracehouse.ingest.discover import discover
from tracehouse.ingest.runner import ingest_paths
from tracehouse.ingest.shard import STALE_AFTER_S, Shard, shard_of

pytestmark = pytest.mark.slow  # ingests or builds (README: the fast set is -m "not slow")

DLRM = SHARED_DATA / "kineto" / "dlrm_8rank"


def _lake_files(warehouse: Path) -> list[str]:
    """Every committed data file of the lake, relative (the lake's content by name)."""
    root = warehouse / "lake"
    return sorted(str(p.relative_to(root)) for p in root.rglob("run=*/*.parquet"))


@pytest.mark.parametrize("text", ["1/0", "3/3", "-1/2", "a/b", "2", "1/2/3"])
def test_bad_shard_is_a_usage_error(text: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--shard"):
        Shard.parse(text)
    assert main(["ingest", str(DLRM), "--warehouse", str(tmp_path), "--shard", text]) == 2


def test_every_file_is_in_exactly_one_shard() -> None:
    found = discover([DLRM])
    for count in (1, 2, 3, 8):
        owners = [[i for i in range(count) if Shard(i, count).owns(t.run_id, t.path)]
                  for t in found.traces]
        assert all(len(owner) == 1 for owner in owners)
    # Deterministic: the same answer from a fresh computation (as on another host).
    assert [shard_of(t.run_id, t.path, 8) for t in found.traces] == [
        shard_of(t.run_id, Path(str(t.path)), 8) for t in found.traces]


def test_concurrent_shards_fill_the_lake_like_one_ingest(tmp_path: Path) -> None:
    """Three shard processes at once into one warehouse == one plain ingest."""
    plain = tmp_path / "plain"
    assert not ingest_paths([DLRM], warehouse=plain, progress=False).failed
    sharded = tmp_path / "sharded"
    env = {**os.environ, "PYTHONSAFEPATH": "1"}
    children = [subprocess.Popen([sys.executable, "-m", "tracehouse.cli", "ingest", str(DLRM),
                                  "--warehouse", str(sharded), "--shard", f"{i}/3", "-q"],
                                 env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
                for i in range(3)]
    for child in children:
        _, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
    assert _lake_files(sharded) == _lake_files(plain)
    # Nothing left behind: no temporaries, no orphans.
    assert not list((sharded / "lake").rglob(f"*{lake.TMP_SUFFIX}"))
    # A plain re-ingest finds everything loaded.
    again = ingest_paths([DLRM], warehouse=sharded, progress=False)
    assert not again.loaded and not again.failed


def _run_splitting(paths: list[Path], shard: Shard) -> str:
    """A run name under which ``shard`` owns some of ``paths`` but not all.

    A file's shard hashes its run and resolved path, so which files a shard
    owns depends on where the repository and ../shared sit (a fixed run name
    left shard 1/3 with none of the 8 DLRM files in some clones). The run
    name is ours to choose; the first that splits the files is taken.
    """
    for index in range(10_000):
        run = f"sharded_{index}"
        owned = sum(shard.owns(run, path) for path in paths)
        if 0 < owned < len(paths):
            return run
    raise AssertionError("no run name splits the files")  # each fails with p < 0.04


def test_a_shard_loads_only_its_files(tmp_path: Path) -> None:
    shard = Shard(1, 3)
    paths = [t.path for t in discover([DLRM]).traces]
    run = _run_splitting(paths, shard)
    result = ingest_paths([DLRM], warehouse=tmp_path, run=run, progress=False, shard=shard)
    expected = sorted(str(path) for path in paths if shard_of(run, path, 3) == 1)
    assert sorted(x.path for x in result.loaded) == expected
    assert 0 < len(expected) < len(paths) == 8
    assert not result.failed


def test_shard_recovery_spares_young_leftovers(tmp_path: Path) -> None:
    """Another writer's in-flight files are young: a shard leaves them; old ones go."""
    ingest_paths([DLRM], warehouse=tmp_path, progress=False, shard=Shard(0, 2))
    wh = Warehouse(tmp_path)
    folder = wh.partition_dir("slices", "dlrm_8rank")
    folder.mkdir(parents=True, exist_ok=True)  # shard 0/2 may own none of the files here
    young_tmp = folder / ".x.parquet.othertoken.tmp"
    young_orphan = folder / "0123456789abcdef.parquet"
    old_orphan = folder / "fedcba9876543210.parquet"
    for path in (young_tmp, young_orphan, old_orphan):
        path.write_bytes(b"in flight")
    past = time.time() - STALE_AFTER_S - 60
    os.utime(old_orphan, (past, past))
    ingest_paths([DLRM], warehouse=tmp_path, progress=False, shard=Shard(1, 2))
    assert young_tmp.exists() and young_orphan.exists()
    assert not old_orphan.exists()
    # A plain ingest (the one writer) removes every leftover.
    ingest_paths([DLRM], warehouse=tmp_path, progress=False)
    assert not young_tmp.exists() and not young_orphan.exists()


def test_schema_summary_file_is_written_and_refreshed(tmp_path: Path) -> None:
    """``_common_metadata`` (what Spark reads a table's schema from) follows schema.py."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tracehouse.ingest.schema import LAKE_TABLES

    wh = Warehouse(tmp_path)
    lake.init_lake(wh)
    summary = wh.table_dir("slices") / lake.SCHEMA_FILE
    assert pq.read_schema(summary).remove_metadata().equals(LAKE_TABLES["slices"])
    pq.write_metadata(pa.schema([("stale", pa.int64())]), summary)
    lake.init_lake(wh)
    assert pq.read_schema(summary).remove_metadata().equals(LAKE_TABLES["slices"])


def test_a_shard_that_owns_no_file_succeeds_and_loads_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With N shards over few files the hash may give a shard none (8 files over 3
    shards: about one path in nine). That shard's job is done, not an error: exit 0,
    nothing loaded, and no "nothing to ingest" (which means no file at all)."""
    single = tmp_path / "one"
    single.mkdir()
    trace = next(DLRM.glob("*.json.gz"))
    (single / trace.name).symlink_to(trace)
    path = discover([single]).traces[0].path
    owner = shard_of("job", path, 2)
    idle = Shard(1 - owner, 2)
    warehouse = tmp_path / "wh"
    assert main(["ingest", str(single), "--warehouse", str(warehouse), "--run", "job",
                 "--shard", f"{idle.index}/2", "-q"]) == 0
    err = capsys.readouterr().err
    assert "nothing to ingest" not in err and "no trace, topology" not in err, err
    assert not _lake_files(warehouse)
    assert main(["ingest", str(single), "--warehouse", str(warehouse), "--run", "job",
                 "--shard", f"{owner}/2", "-q"]) == 0
    assert _lake_files(warehouse)
