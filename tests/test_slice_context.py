"""The slice context ingest adds to the lake's ``slices`` (ingest/slice_context.py).

Hand-made traces pin each rule (launch by flow, by correlation, mis-bound
flows, CUDA graphs, no launch; frame parts; track kind); real traces check
the whole of it against the SQL the models used to compute it with, so
moving the rules from the build into ingest changed no answer.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import SHARED_DATA, build_lake
from tracehouse.build.dbt import DBT_ARTIFACTS_DIR, EXIT_FAILED, EXIT_OK, run_dbt
from tracehouse.core.warehouse import Warehouse
from tracehouse.ingest.runner import ingest_paths
from tracehouse.ingest.schema import LAKE_FORMAT, LAKE_TABLES, PARSED_SLICES, SLICES
from tracehouse.ingest.slice_context import CONTEXT_FIELDS, with_context

pytestmark = pytest.mark.slow  # ingests or builds (README: the fast set is -m "not slow")

CPU, GPU = 1, 2


def _slice(slice_id: int, track: int, name: str | None, correlation: int | None = None,
           ts: int = 0, dur: int = 1) -> dict[str, Any]:
    return {"run_id": "r", "rank": 0, "trace_id": "t", "slice_id": slice_id, "track_id": track,
            "name": name, "correlation": correlation, "ts": ts, "dur": dur, "phase": "X"}


def _context(slices: list[dict], flows: list[tuple[str, int, int]] = (),
             threads: tuple[tuple[int, bool], ...] = ((CPU, False), (GPU, True))) -> dict:
    """with_context on the given rows; returns {slice_id: row of the context columns}."""
    table = with_context(
        pa.Table.from_pylist(slices, schema=PARSED_SLICES),
        pa.Table.from_pylist([{"category": c, "slice_out": o, "slice_in": i} for c, o, i in flows],
                             schema=LAKE_TABLES["flows"]),
        pa.Table.from_pylist([{"track_id": t, "is_gpu": g} for t, g in threads],
                             schema=LAKE_TABLES["threads"]),
    )
    assert table.schema == SLICES
    assert table.num_rows == len(slices)
    assert table.column("slice_id").to_pylist() == [s["slice_id"] for s in slices]  # order kept
    names = [name for name, _ in CONTEXT_FIELDS]
    return {row["slice_id"]: {k: row[k] for k in names} for row in table.to_pylist()}


def _launch(row: dict) -> tuple:
    return (row["launch_slice_id"], row["launch_source"], row["launch_name"],
            row["launch_track_id"], row["launch_ts"], row["launch_dur"])


def _launch_case(ids: list[int]) -> dict:
    """One trace with every launch rule, its slice ids renumbered through ``ids``."""
    i = dict(zip(range(1, 31), ids))
    slices = [
        _slice(i[1], CPU, "cudaLaunchKernel", 7, ts=10, dur=5),
        _slice(i[2], GPU, "gemm", 7, ts=20),
        # A CUDA graph: one correlation id, two kernels, ac2g flows to each.
        _slice(i[3], CPU, "cudaGraphLaunch", 9, ts=30, dur=4),
        _slice(i[4], GPU, "k1", 9), _slice(i[5], GPU, "k2", 9),
        # A mis-bound flow (dlrm_8rank): it starts at a neighbouring call whose
        # correlation id differs from the one the memset shares with its call.
        _slice(i[6], CPU, "cudaPeekAtLastError", 21, ts=40),
        _slice(i[7], CPU, "cudaMemsetAsync", 22, ts=41, dur=2),
        _slice(i[8], GPU, "memset", 22),
        # A flow from a source without correlation id: the flow.
        _slice(i[9], CPU, "launcher", None, ts=50, dur=3),
        _slice(i[10], GPU, "k3", 77),
        # No CPU slice with its correlation id, no flow: no launch.
        _slice(i[11], GPU, "orphan", 99),
        # Flows from GPU work, from no slice, or of another category: no launch.
        _slice(i[12], GPU, "copy_engine", None), _slice(i[13], GPU, "k4", None),
        _slice(i[14], GPU, "k5", None), _slice(i[15], GPU, "k6", None),
        # Two CPU slices with one correlation id: the smaller slice id.
        _slice(i[16], CPU, "first", 55, ts=60), _slice(i[17], CPU, "second", 55, ts=61),
        _slice(i[18], GPU, "k7", 55),
        # A flow into a CPU slice launches nothing; a slice on a track without
        # thread row is a CPU slice.
        _slice(i[19], CPU, "aten::mm", None), _slice(i[20], 3, "unknown track", None),
    ]
    flows = [("ac2g", i[3], i[4]), ("ac2g", i[3], i[5]), ("ac2g", i[6], i[8]),
             ("ac2g", i[9], i[10]), ("ac2g", i[12], i[13]), ("ac2g", 10_000, i[14]),
             ("fwdbwd", i[1], i[15]), ("ac2g", i[1], i[19])]
    return {"rows": _context(slices, flows), "i": i}


@pytest.mark.parametrize("ids", [list(range(30)), [1000 - 7 * k for k in range(30)]],
                         ids=["dense ids", "sparse unsorted ids"])
def test_launch_rules(ids: list[int]) -> None:
    case = _launch_case(ids)
    rows, i = case["rows"], case["i"]

    def launch(k: int) -> tuple:
        return _launch(rows[i[k]])

    none = (None,) * 6
    assert launch(2) == (i[1], "correlation", "cudaLaunchKernel", CPU, 10, 5)
    assert launch(4) == launch(5) == (i[3], "flow", "cudaGraphLaunch", CPU, 30, 4)
    assert launch(8) == (i[7], "correlation", "cudaMemsetAsync", CPU, 41, 2)
    assert launch(10) == (i[9], "flow", "launcher", CPU, 50, 3)
    assert launch(11) == none
    assert launch(13) == launch(14) == launch(15) == none
    smaller = min((i[16], "first", 60), (i[17], "second", 61))
    assert launch(18) == (smaller[0], "correlation", smaller[1], CPU, smaller[2], 1)
    assert launch(19) == launch(1) == launch(20) == none  # CPU slices have none
    gpu = {k for k in range(1, 21) if rows[i[k]]["is_gpu"]}
    assert gpu == {2, 4, 5, 8, 10, 11, 12, 13, 14, 15, 18}


def test_frames() -> None:
    names = ["megatron/core/schedules.py(311): forward_step", "a): b", "x.py(1): f(): g",
             "é/ü.py(2): ß", "nn.Module: GPTModel_1", "nn.Module: a.py(1): b", None,
             "aten::mm", "ProfilerStep#3"]
    rows = _context([_slice(k, CPU, name) for k, name in enumerate(names)])
    got = [(r["frame_kind"], r["frame_file"], r["frame_function"]) for r in rows.values()]
    assert got == [
        ("python", "megatron/core/schedules.py", "forward_step"),
        ("python", "", "b"),  # no "(": an empty file part, as SQL's substring gives
        ("python", "x.py", "f(): g"),
        ("python", "é/ü.py", "ß"),
        ("module", None, None),
        ("python", "nn.Module: a.py", "b"),  # a python frame first
        (None, None, None), (None, None, None), (None, None, None),
    ]


def test_empty_trace() -> None:
    assert _context([]) == {}


# ------------------------------------------------------------------ real traces

#: The rules as the models computed them in SQL before ingest did (the
#: int_slices_contextualized of d636135), over one warehouse's lake.
_REFERENCE_SQL = """
with slices as (select * from read_parquet('{lake}/slices/**/*.parquet', union_by_name = true)),
threads as (select * from read_parquet('{lake}/threads/**/*.parquet', union_by_name = true)),
flows as (
    select trace_id, slice_out, slice_in
    from read_parquet('{lake}/flows/**/*.parquet', union_by_name = true)
    where category = 'ac2g'
),
typed as (
    select s.*, coalesce(t.is_gpu, false) as gpu
    from slices s left join threads t on s.trace_id = t.trace_id and s.track_id = t.track_id
),
cpu as (
    select * from typed
    where not gpu and (correlation is not null or (trace_id, slice_id) in
        (select (trace_id, slice_out) from flows))
),
by_flow as (
    select f.trace_id, f.slice_in as slice_id, min(f.slice_out) as launch,
           min(cpu.correlation) as corr
    from flows f left join cpu on f.trace_id = cpu.trace_id and f.slice_out = cpu.slice_id
    group by 1, 2
),
by_corr as (
    select g.trace_id, g.slice_id, min(cpu.slice_id) as launch, min(g.correlation) as corr
    from typed g join cpu on g.trace_id = cpu.trace_id and g.correlation = cpu.correlation
    where g.gpu group by 1, 2
),
chosen as (
    select coalesce(f.trace_id, c.trace_id) as trace_id,
        coalesce(f.slice_id, c.slice_id) as slice_id,
        case when f.launch is not null and (c.launch is null or f.corr is null or f.corr = c.corr)
             then f.launch else c.launch end as launch,
        case when f.launch is not null and (c.launch is null or f.corr is null or f.corr = c.corr)
             then 'flow' else 'correlation' end as source
    from by_flow f full join by_corr c on f.trace_id = c.trace_id and f.slice_id = c.slice_id
),
launches as (
    select chosen.*, cpu.name, cpu.track_id, cpu.ts, cpu.dur
    from chosen join cpu on chosen.trace_id = cpu.trace_id and chosen.launch = cpu.slice_id
)
select typed.trace_id, typed.slice_id, typed.gpu,
    case when typed.name like '%): %' then 'python'
         when typed.name like 'nn.Module: %' then 'module' end,
    case when typed.name like '%): %' then substring(typed.name, 1, instr(typed.name, '(') - 1) end,
    case when typed.name like '%): %' then substring(typed.name, instr(typed.name, '): ') + 3) end,
    l.launch, l.source, l.name, l.track_id, l.ts, l.dur
from typed left join launches l
    on typed.gpu and typed.trace_id = l.trace_id and typed.slice_id = l.slice_id
"""

_LAKE_SQL = """
select trace_id, slice_id, is_gpu, frame_kind, frame_file, frame_function, launch_slice_id,
    launch_source, launch_name, launch_track_id, launch_ts, launch_dur
from read_parquet('{lake}/slices/**/*.parquet', union_by_name = true)
"""

_REAL_TRACES = {
    # Mis-bound ac2g flows, gloo and NCCL, eight ranks.
    "dlrm_8rank": SHARED_DATA / "kineto" / "dlrm_8rank",
    # with_stack frames, CUDA graphs' shared correlation ids, NCCL args.
    "a100": SHARED_DATA / "kineto" / "single_rank" / "a100_nccl_pg_args.json.gz",
    # Nsight: correlation ids and the loader's own ac2g flows, sparse slice ids.
    "nsys": SHARED_DATA / "nsys" / "h100_2gpu_1s.sqlite",
}


@pytest.mark.parametrize("name", sorted(_REAL_TRACES))
def test_real_traces_match_the_sql_rules(name: str, tmp_path: Path) -> None:
    source = _REAL_TRACES[name]
    if not source.exists():
        pytest.skip(f"{source} is not here (../shared/data holds the real traces)")
    result = ingest_paths([source], warehouse=tmp_path / "wh", run=name, jobs=1, progress=False)
    assert result.loaded and not result.failed, result.failed
    lake = str(Warehouse(tmp_path / "wh").lake).replace("'", "''")
    con = duckdb.connect()
    ingested = _LAKE_SQL.format(lake=lake)
    reference = _REFERENCE_SQL.format(lake=lake)
    count = con.execute(f"select count(*) from ({ingested})").fetchone()[0]
    assert count > 1_000
    for a, b in ((ingested, reference), (reference, ingested)):
        differing = con.execute(f"select * from (({a}) except all ({b})) limit 5").fetchall()
        assert differing == []
    launched = con.execute(f"select launch_source, count(*) from ({ingested}) "
                           "where is_gpu group by 1 order by 1").fetchall()
    assert dict(launched).get("flow", 0) + dict(launched).get("correlation", 0) > 0


# ------------------------------------------------------------------ lake format

def test_traces_of_an_older_lake_format_are_parsed_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trace written before the slice context (no lake_format) is re-parsed, once."""
    source = SHARED_DATA / "kineto" / "single_rank" / "sampled_128rank_job_rank-0.json.gz"
    if not source.exists():
        pytest.skip(f"{source} is not here (../shared/data holds the real traces)")
    trace = tmp_path / "traces" / source.name
    trace.parent.mkdir()
    shutil.copy(source, trace)
    warehouse = Warehouse(tmp_path / "wh")

    def ingest():
        return ingest_paths([trace.parent], warehouse=warehouse.root, run="r", jobs=1,
                            progress=False)

    assert len(ingest().loaded) == 1
    assert warehouse.lake_format() == LAKE_FORMAT
    # Make it look written by an older ingest: no lake_format, no context
    # columns, in the trace's files and in the lake's schema files.
    (marker,) = warehouse.table_dir("traces").glob("run=r/*.parquet")
    pq.write_table(pq.read_table(marker).drop_columns(["lake_format"]), marker)
    (data,) = warehouse.table_dir("slices").glob("run=r/*.parquet")
    pq.write_table(pq.read_table(data).select(PARSED_SLICES.names), data)
    empty = warehouse.table_dir("slices") / "_empty.parquet"
    pq.write_table(PARSED_SLICES.empty_table(), empty)
    warehouse.lake_format_file.unlink()

    # A build refuses the lake, saying what to do, before dbt starts.
    assert run_dbt(["build"], warehouse.root) == EXIT_FAILED
    assert "older tracehouse ingest" in capsys.readouterr().err

    again = ingest()
    assert len(again.loaded) == 1 and not again.skipped
    assert pq.read_table(marker).column("lake_format").to_pylist() == [LAKE_FORMAT]
    assert "is_gpu" in pq.read_schema(data).names
    # A model with no pending trace reads only _empty.parquet: it has every column again.
    assert pq.read_schema(empty).names == SLICES.names
    assert warehouse.lake_format() == LAKE_FORMAT
    assert list(warehouse.table_dir("traces").glob("run=r/*.parquet")) == [marker]  # same id
    assert not ingest().loaded  # current now: skipped


def test_a_build_warns_naming_traces_of_an_older_format(tmp_path: Path) -> None:
    """A lake an ingest touched, holding a trace it did not parse again: a warning names it."""
    lake = build_lake(tmp_path / "wh", ranks=2)
    old = lake.trace_ids[0]
    (marker,) = Warehouse(lake.warehouse).table_dir("traces").glob(f"run=*/{old}.parquet")
    pq.write_table(pq.read_table(marker).drop_columns(["lake_format"]), marker)
    test = "traces_written_by_current_ingest"
    assert run_dbt(["build", "--select", "stg_lake__traces", test], lake.warehouse) == EXIT_OK
    results = json.loads((Warehouse(lake.warehouse).root / DBT_ARTIFACTS_DIR / "target"
                          / "run_results.json").read_text())["results"]
    (warned,) = [r for r in results if r["unique_id"].endswith(test)]
    assert (warned["status"], warned["failures"]) == ("warn", 1)
