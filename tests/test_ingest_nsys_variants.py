"""Nsight exports as they vary in the wild: each ingests what it has, and builds.

`nsys profile -t ...` decides which tables an export holds (no NVTX without
`-t nvtx`, no runtime without `-t cuda`'s API trace, no copies in a
kernel-only capture, no OS runtime, sometimes no TARGET_INFO_* tables);
versions rename columns (`text` vs `textId`) and tables (`_V2`, `_V3`); a
file may hold several processes per GPU. Each variant here is a copy of a
real shared export (../shared/data/nsys) changed with sqlite3, ingested as
its own run into one warehouse, which `tracehouse build` then builds once.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from conftest import SHARED_DATA
from tracehouse.cli import main
from tracehouse.ingest.runner import ingest_paths

NSYS = SHARED_DATA / "nsys"
SOURCE = NSYS / "h100_2gpu_1s.sqlite"

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not SOURCE.is_file(), reason=f"shared data missing: {SOURCE}")]


def _drop(*tables: str) -> Callable[[sqlite3.Connection], None]:
    def change(con: sqlite3.Connection) -> None:
        for table in tables:
            con.execute(f'drop table if exists "{table}"')
    return change


def _target_info(con: sqlite3.Connection) -> list[str]:
    return [name for (name,) in con.execute(
        "select name from sqlite_master where type = 'table' and (name like 'TARGET_INFO_%' "
        "or name like 'META_DATA_%' or name in ('PROCESSES', 'ThreadNames'))")]


def _no_target_info(con: sqlite3.Connection) -> None:
    """No TARGET_INFO_*, META_DATA_*, process or thread names, sync or OS runtime tables."""
    _drop(*_target_info(con), "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "OSRT_API")(con)


def _kernels_only(con: sqlite3.Connection) -> None:
    """Only what a kernel-only capture must hold: StringIds and the kernels."""
    keep = {"StringIds", "CUPTI_ACTIVITY_KIND_KERNEL"}
    _drop(*[name for (name,) in con.execute(
        "select name from sqlite_master where type = 'table'") if name not in keep])(con)


def _nvtx_text_ids(con: sqlite3.Connection) -> None:
    """NVTX text in StringIds by `textId`; the `text` column kept but all NULL."""
    con.execute("insert into StringIds (id, value) select 1000000 + row_number() over (), t "
                "from (select distinct text as t from NVTX_EVENTS where text is not null)")
    con.execute("update NVTX_EVENTS set textId = (select id from StringIds "
                "where value = NVTX_EVENTS.text and id >= 1000000), text = null "
                "where text is not null")


def _nvtx_without_text_column(con: sqlite3.Connection) -> None:
    """Older exports: no `text` column at all, only `textId`."""
    _nvtx_text_ids(con)
    con.execute("alter table NVTX_EVENTS drop column text")


def _old_columns(con: sqlite3.Connection) -> None:
    """Columns an older nsys does not write (the reader fills them with NULL)."""
    for table, columns in (
            ("CUPTI_ACTIVITY_KIND_KERNEL", ("shortName", "graphId", "graphNodeId", "launchType",
                                            "gridZ", "blockZ")),
            ("CUPTI_ACTIVITY_KIND_MEMCPY", ("srcKind", "dstKind", "graphNodeId")),
            ("CUPTI_ACTIVITY_KIND_MEMSET", ("memKind", "graphNodeId")),
            ("CUPTI_ACTIVITY_KIND_RUNTIME", ("returnValue",)),
            ("NVTX_EVENTS", ("domainId", "endGlobalTid", "jsonText", "rangeId", "category",
                             "uint64Value", "doubleValue"))):
        for column in columns:
            con.execute(f'alter table "{table}" drop column "{column}"')


def _versioned_tables(con: sqlite3.Connection) -> None:
    """Nsight 2025's `_V2`/`_V3` table names."""
    for old, new in (("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_KERNEL_V3"),
                     ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_RUNTIME_V2"),
                     ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMCPY_V2"),
                     ("NVTX_EVENTS", "NVTX_EVENTS_V2")):
        con.execute(f'alter table "{old}" rename to "{new}"')


def _several_processes(con: sqlite3.Connection) -> None:
    """Two processes launch on GPU 0 (half its kernels from a second process, with their
    runtime calls), beside the file's own two processes, one per GPU."""
    (pid,), = con.execute("select max(globalPid) from CUPTI_ACTIVITY_KIND_KERNEL "
                          "where deviceId = 0").fetchall()
    other = pid + (5000 << 24)  # another pid on the same host
    con.execute("insert into PROCESSES (globalPid, pid, name) values (?, ?, 'second worker')",
                [other, (other >> 24) & 0xFFFFFF])
    con.execute("create temp table moved as select correlationId from "
                "CUPTI_ACTIVITY_KIND_KERNEL where deviceId = 0 and correlationId % 2 = 1")
    con.execute("update CUPTI_ACTIVITY_KIND_KERNEL set globalPid = ? "
                "where deviceId = 0 and correlationId in (select * from moved)", [other])
    con.execute("update CUPTI_ACTIVITY_KIND_RUNTIME set globalTid = ? + (globalTid & 16777215) "
                "where correlationId in (select * from moved) and globalTid >> 24 = ?",
                [other, pid >> 24])


VARIANTS: dict[str, Callable[[sqlite3.Connection], None]] = {
    "no_nvtx": _drop("NVTX_EVENTS", "NVTX_PAYLOAD_SCHEMAS", "NVTX_PAYLOAD_SCHEMA_ENTRIES"),
    "no_runtime": _drop("CUPTI_ACTIVITY_KIND_RUNTIME"),
    "no_memcpy_memset": _drop("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"),
    "no_sync_osrt_target_info": _no_target_info,
    "kernels_only": _kernels_only,
    "nvtx_text_ids": _nvtx_text_ids,
    "nvtx_without_text_column": _nvtx_without_text_column,
    "old_columns": _old_columns,
    "versioned_tables": _versioned_tables,
    "several_processes": _several_processes,
}


def _variant(folder: Path, name: str) -> Path:
    path = folder / f"{name}.sqlite"
    shutil.copyfile(SOURCE, path)
    path.chmod(0o644)
    with sqlite3.connect(path) as con:
        VARIANTS[name](con)
    return path


def _count(path: Path, base: str, where: str = "") -> int:
    with sqlite3.connect(path) as con:
        tables = [name for (name,) in con.execute(
            "select name from sqlite_master where type = 'table' and (name = ? or name like ?)",
            [base, f"{base}_V%"])]
        return sum(con.execute(f'select count(*) from "{t}" {where}').fetchone()[0]
                   for t in tables)


@pytest.fixture(scope="module")
def variants(tmp_path_factory: pytest.TempPathFactory
             ) -> tuple[Path, dict[str, Path], dict[str, list], int | None]:
    """Every variant ingested as its own run, then `tracehouse build` once: (warehouse,
    files, build exit code). Ingest failures are asserted per variant below."""
    folder = tmp_path_factory.mktemp("nsys_variants")
    root = folder / "wh"
    files = {name: _variant(folder, name) for name in VARIANTS}
    failed = {}
    for name, path in files.items():
        result = ingest_paths([path], warehouse=root, run=name, jobs=1, progress=False)
        failed[name] = [(f.kind, f.message) for f in result.failed]
    code = main(["build", "--warehouse", str(root)]) if any(
        not errors for errors in failed.values()) else None
    return root, files, failed, code


def _lake_counts(root: Path, run: str) -> dict[str, int]:
    glob = str(root / "lake" / "slices" / f"run={run}" / "*.parquet")
    with duckdb.connect() as con:
        return dict(con.execute(
            "select category, count(*) from read_parquet(?) group by 1", [glob]).fetchall())


@pytest.mark.parametrize("name", list(VARIANTS))
def test_each_variant_ingests_what_it_has_and_builds(variants, name: str) -> None:
    root, files, failed, code = variants
    assert failed[name] == [], f"{name} did not ingest: {failed[name]}"
    path = files[name]
    counts = _lake_counts(root, name)
    assert counts.get("kernel", 0) == _count(path, "CUPTI_ACTIVITY_KIND_KERNEL")
    assert counts.get("gpu_memcpy", 0) == _count(path, "CUPTI_ACTIVITY_KIND_MEMCPY")
    assert counts.get("gpu_memset", 0) == _count(path, "CUPTI_ACTIVITY_KIND_MEMSET")
    assert counts.get("cuda_runtime", 0) == _count(path, "CUPTI_ACTIVITY_KIND_RUNTIME")
    assert counts.get("nvtx", 0) == _count(path, "NVTX_EVENTS", "where eventType in (59, 60)")
    assert code == 0, "tracehouse build failed on the variants; see its output"
    with duckdb.connect(str(root / "tracehouse.duckdb"), read_only=True) as con:
        gpus = con.execute("select device, count(*) from fct_kernels where run_id = ? "
                           "and category = 'kernel' group by device order by device",
                           [name]).fetchall()
        gpu_work = con.execute("select count(*) from fct_kernels where run_id = ? "
                               "and name is not null", [name]).fetchone()[0]
    assert [device for device, _ in gpus] == [0, 1]
    assert sum(n for _, n in gpus) == counts["kernel"]
    assert gpu_work == sum(counts.get(c, 0) for c in ("kernel", "gpu_memcpy", "gpu_memset"))


def test_nvtx_text_from_string_ids(variants) -> None:
    """Ranges named through `textId` keep their names, with or without a `text` column."""
    root = variants[0]
    with duckdb.connect() as con:
        def names(run: str) -> list[tuple]:
            glob = str(root / "lake" / "slices" / f"run={run}" / "*.parquet")
            return con.execute("select name, count(*) from read_parquet(?) "
                               "where category = 'nvtx' group by 1 order by 1", [glob]).fetchall()
        original = names("no_runtime")
        assert original and all(name for name, _ in original)
        assert names("nvtx_text_ids") == names("nvtx_without_text_column") == original


def test_second_process_on_a_gpu_lands_on_its_rank(variants) -> None:
    root = variants[0]
    glob = str(root / "lake" / "processes" / "run=several_processes" / "*.parquet")
    with duckdb.connect() as con:
        ranks = con.execute("select rank, count(*) from read_parquet(?) "
                            "where process_name = 'second worker' group by 1", [glob]).fetchall()
    assert ranks == [(0, 1)]
