"""``export_perfetto``: one merged multi-rank timeline, read back and checked.

One warehouse per module holds two runs, built by one real ``dbt build``:
a simulated TP2 x PP2 x DP2 Megatron run (ingested from its Kineto traces,
one kernel renamed to a hostile name with quotes, a newline and
``<script>``) and the real ``dlrm_8rank`` traces. Each export is read
back with the perfetto package's protobuf definitions (or ``json``) and
compared with the marts; when a trace processor is available (the same one
``test_perfetto_engine.py`` finds, down to the wasm stand-in under Node) the
file is also loaded into it and its ``slice``/``process`` tables counted.
"""

from __future__ import annotations

import collections
import gzip
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pytest
from test_perfetto_engine import trace_processor  # noqa: F401 - the fixture, reused

from conftest import NASTY_NAME, SHARED_DATA, query_warehouse
from tracehouse.build.dbt import EXIT_OK, run_dbt
from tracehouse.core.warehouse import Warehouse
from tracehouse.ingest.kineto import perfetto as perfetto_engine
from tracehouse.ingest.runner import ingest_paths
from tracehouse.ingest.trace_types import TraceFile
from tracehouse.reports.kernel_names import short_kernel_name
from tracehouse.reports.perfetto import ExportError, export_perfetto, proto_writer, queries, slices
from tracehouse.simulate import SimConfig, simulate_run, trace_path

pytestmark = pytest.mark.slow

SIM = "sim_tp2_pp2_dp2"
DLRM = "dlrm_8rank"
DLRM_DIR = SHARED_DATA / "kineto" / DLRM


# --------------------------------------------------------------------------- the warehouse


def _rename_one_kernel(path: Path, new_name: bytes) -> str:
    """Rename the first GPU kernel of a gzip'd Kineto trace; return its old name."""
    trace = json.loads(gzip.decompress(path.read_bytes()))
    kernel = next(event for event in trace["traceEvents"]
                  if event.get("cat") == "kernel" and event.get("ph") == "X")
    old = kernel["name"]
    placeholder = "@@HOSTILE@@"
    kernel["name"] = placeholder
    text = json.dumps(trace).encode()
    escaped = json.dumps(NASTY_NAME)[1:-1].encode()
    path.write_bytes(gzip.compress(text.replace(placeholder.encode(), escaped + new_name)))
    return old


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("perfetto_export")
    config = SimConfig(
        layers=4, hidden=256, heads=8, seq_length=256, vocab=1024,
        tp=2, pp=2, dp=2, microbatches=4, iterations=1, first_iteration=3, gpus_per_node=4,
    )  # fmt: skip
    run = simulate_run(config, root / "sim", jobs=1)
    _rename_one_kernel(trace_path(run.out_dir, 0, 3), b" tail")
    wh = root / "warehouse"
    result = ingest_paths([run.out_dir], warehouse=wh, run=SIM, progress=False)
    assert not result.failed, result.failed
    if DLRM_DIR.is_dir():
        result = ingest_paths([DLRM_DIR], warehouse=wh, run=DLRM, progress=False)
        assert not result.failed, result.failed
    # Seeds and models only: the models' own tests run in test_models_*.py.
    assert run_dbt(["build", "--exclude-resource-type", "test", "unit_test", "--quiet"],
                   wh) == EXIT_OK
    yield wh


def _expected_names(warehouse: Path, run_id: str) -> dict[int, str]:
    """Process names as the issue spells them: ``rank 5 · pp1 tp1 dp0``."""
    names = {}
    for rank, pp, tp, dp in query_warehouse(
        warehouse, "select rank, pp_rank, tp_rank, dp_rank from "
        "dim_ranks where run_id = ?", [run_id]):
        coords = " ".join(f"{kind}{value}" for kind, value in
                          (("pp", pp), ("tp", tp), ("dp", dp)) if value is not None)
        names[rank] = f"rank {rank}" + (f" · {coords}" if coords else "")
    return names


def _kernel_counts(warehouse: Path, run_id: str) -> dict[int, int]:
    return dict(query_warehouse(
        warehouse, "select rank, count(*) from fct_kernels where run_id = ? "
        "group by rank", [run_id]))


def _cpu_counts(warehouse: Path, run_id: str) -> dict[int, int]:
    return dict(query_warehouse(warehouse, "select rank, count(*) from fct_cpu_steps "
                                "where run_id = ? group by rank", [run_id]))


def _collective_counts(warehouse: Path, run_id: str) -> dict[int, int]:
    """CPU collective calls (c10d, gloo waits) per rank: written on their own tracks."""
    return dict(query_warehouse(warehouse, "select rank, count(*) from fct_cpu_collectives "
                                "where run_id = ? group by rank", [run_id]))


# --------------------------------------------------------------------------- reading back


@dataclass
class Slice:
    pid: int
    track: int
    ts: int
    name: str
    categories: list[str]
    args: dict[str, Any]
    end: int | None = None


@dataclass
class Timeline:
    """A written trace, decoded independently of the writer's code."""

    processes: dict[int, str] = field(default_factory=dict)
    threads: dict[int, tuple[int, str]] = field(default_factory=dict)
    slices: list[Slice] = field(default_factory=list)

    def per_process(self, category: str | None = None) -> dict[str, int]:
        counts: collections.Counter[str] = collections.Counter()
        for item in self.slices:
            if category is None or category in item.categories:
                counts[self.processes[item.pid]] += 1
        return dict(counts)


def read_proto(path: Path) -> Timeline:
    """Decode a Perfetto protobuf trace: descriptors, slices, interned names (with resets)."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    trace = pb.Trace()
    trace.ParseFromString(path.read_bytes())
    timeline = Timeline()
    names: dict[int, str] = {}
    arg_names: dict[int, str] = {}
    strings: dict[int, str] = {}
    open_slices: dict[int, list[Slice]] = collections.defaultdict(list)
    for packet in trace.packet:
        if packet.HasField("track_descriptor"):
            track = packet.track_descriptor
            if track.HasField("process"):
                timeline.processes[track.process.pid] = track.process.process_name
            if track.HasField("thread"):
                assert track.uuid not in timeline.threads
                timeline.threads[track.uuid] = (track.thread.pid, track.thread.thread_name)
            continue
        if packet.sequence_flags & 1:  # SEQ_INCREMENTAL_STATE_CLEARED
            names.clear()
            arg_names.clear()
            strings.clear()
        interned = packet.interned_data
        names.update({entry.iid: entry.name for entry in interned.event_names})
        arg_names.update({entry.iid: entry.name for entry in interned.debug_annotation_names})
        strings.update({entry.iid: entry.str.decode()
                        for entry in interned.debug_annotation_string_values})
        if not packet.HasField("track_event"):
            continue
        event = packet.track_event
        if event.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            args = {}
            for annotation in event.debug_annotations:
                key = arg_names[annotation.name_iid]
                kind = annotation.WhichOneof("value")
                args[key] = (strings[annotation.string_value_iid]
                             if kind == "string_value_iid" else getattr(annotation, kind))
            item = Slice(pid=timeline.threads[event.track_uuid][0], track=event.track_uuid,
                         ts=packet.timestamp, name=names[event.name_iid],
                         categories=list(event.categories), args=args)
            timeline.slices.append(item)
            open_slices[event.track_uuid].append(item)
        elif event.type == pb.TrackEvent.TYPE_SLICE_END:
            item = open_slices[event.track_uuid].pop()
            assert packet.timestamp >= item.ts
            item.end = packet.timestamp
    assert not any(open_slices.values()), "slices left open"
    return timeline


def read_json(path: Path) -> Timeline:
    data = json.loads(path.read_bytes())
    timeline = Timeline()
    for event in data["traceEvents"]:
        if event["ph"] == "M" and event["name"] == "process_name":
            timeline.processes[event["pid"]] = event["args"]["name"]
        elif event["ph"] == "M" and event["name"] == "thread_name":
            timeline.threads[event["tid"]] = (event["pid"], event["args"]["name"])
        elif event["ph"] == "X":
            args = event["args"]
            timeline.slices.append(Slice(
                pid=event["pid"], track=event["tid"], ts=args["start_ns"], name=event["name"],
                categories=[event["cat"]], args=args, end=args["start_ns"] + args["dur_ns"]))
    return timeline


def _assert_nested(timeline: Timeline) -> None:
    """Slices of each track nest (Perfetto drops or truncates partial overlaps)."""
    by_track: dict[int, list[Slice]] = collections.defaultdict(list)
    for item in timeline.slices:
        by_track[item.track].append(item)
    for track, items in by_track.items():
        stack: list[int] = []
        for item in sorted(items, key=lambda s: (s.ts, -(s.end or 0))):
            while stack and stack[-1] <= item.ts:
                stack.pop()
            assert not stack or item.end <= stack[-1], (timeline.threads[track], item)
            stack.append(item.end)


def _copy_database(warehouse: Path, folder: Path) -> Path:
    """A writable copy of the built database in a new warehouse folder."""
    folder.mkdir()
    shutil.copy(Warehouse(warehouse).database, Warehouse(folder).database)
    return folder


def _by_key(timeline: Timeline) -> dict[tuple[str, int], Slice]:
    return {(item.args["trace_id"], item.args["slice_id"]): item for item in timeline.slices}


def test_text_that_protobuf_would_reject_is_replaced() -> None:
    """Ingest refuses invalid UTF-8, but Python text can still hold lone surrogates and NUL."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    text = slices.clean_text("a\udcffb\x00c<d>")
    assert text == "a\ufffdb\ufffdc<d>"
    pb.EventName(iid=1, name=text).SerializeToString()  # would raise on a surrogate
    # Short names are the charts' (one helper, tracehouse.reports.kernel_names).
    assert queries.kernel_names(
        "void at::native::vectorized_elementwise_kernel<4, at::native::Foo>(int, float*)"
    )[1] == "vectorized_elementwise_kernel<Foo…>"
    assert queries.kernel_names("ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)")[1] == (
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL")


# --------------------------------------------------------------------------- the simulated run


@pytest.fixture(scope="module")
def sim_proto(warehouse: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    out = tmp_path_factory.mktemp("exports") / "sim.pftrace"
    return out, export_perfetto(warehouse, SIM, out)


def test_every_rank_is_a_named_process_with_all_its_slices(warehouse: Path,
                                                           sim_proto: tuple[Path, Any]) -> None:
    out, result = sim_proto
    timeline = read_proto(out)
    names = _expected_names(warehouse, SIM)
    assert len(names) == 8 and names[5] == "rank 5 · pp1 tp1 dp0"
    assert sorted(timeline.processes.values()) == sorted(names.values())
    kernels, cpu = _kernel_counts(warehouse, SIM), _cpu_counts(warehouse, SIM)
    calls = _collective_counts(warehouse, SIM)
    assert sum(cpu.values()) > 0
    assert timeline.per_process("cpu_step") == {names[r]: n for r, n in cpu.items()}
    gpu = {name: count for name, count in timeline.per_process().items()}
    assert gpu == {names[r]: kernels[r] + cpu.get(r, 0) + calls.get(r, 0) for r in kernels}
    assert len(timeline.slices) == result.slices == (
        sum(kernels.values()) + sum(cpu.values()) + sum(calls.values()))
    assert result.cpu_collective_slices == sum(calls.values())
    assert result.kernel_slices == sum(kernels.values())
    assert all(item.end is not None for item in timeline.slices)
    _assert_nested(timeline)


def test_kernel_slices_carry_phase_microbatch_group_and_exact_times(
        warehouse: Path, sim_proto: tuple[Path, Any]) -> None:
    out, _ = sim_proto
    written = _by_key(read_proto(out))
    # Times on the reference clock: the rank's dim_rank_clock_offsets offset added.
    rows = query_warehouse(
        warehouse, "select trace_id, slice_id, name, kind, phase, microbatch, "
        "comm_group_kind, ts_ns + offset_ns, end_ns + offset_ns from fct_kernels "
        "inner join dim_rank_clock_offsets using (run_id, rank) where run_id = ?", [SIM])
    with_microbatch = 0
    for trace_id, slice_id, name, kind, phase, microbatch, group, ts, end in rows:
        item = written[(trace_id, slice_id)]
        assert item.args["kernel"] == name
        assert (item.ts, item.end) == (ts, end)
        assert item.name.startswith(phase)
        if microbatch is not None:
            with_microbatch += 1
            assert item.name.startswith(f"{phase} mb{microbatch} · ")
        if kind == "communication" and group:
            assert f"comm {group}" in item.name
        assert item.args["kind"] == kind
    assert with_microbatch > len(rows) / 2
    phases = {item.name.split(" ")[0] for item in written.values()}
    assert {"forward", "backward"} <= phases


def test_hostile_kernel_name_round_trips(warehouse: Path, sim_proto: tuple[Path, Any],
                                         tmp_path: Path) -> None:
    [(stored, phase, microbatch)] = query_warehouse(
        warehouse, "select name, phase, microbatch from fct_kernels where run_id = ? and "
        "name like '%<script>%'", [SIM])
    assert stored == NASTY_NAME + " tail"
    proto = read_proto(sim_proto[0])
    json_out = tmp_path / "sim.json"
    export_perfetto(warehouse, SIM, json_out, ranks=[0], fmt="json")
    assert "<script>" in json_out.read_text(encoding="utf-8")  # valid UTF-8, parses below
    for timeline in (proto, read_json(json_out)):
        [hostile] = [item for item in timeline.slices if "<script>" in item.args.get("kernel", "")]
        assert hostile.args["kernel"] == stored
        # The charts' short name: parameters and the rest cut, no newline, no <script>.
        short = short_kernel_name(stored, queries.SHORT_NAME_CHARS)
        assert short == "at::native::<lambda>"
        assert hostile.name == f"{phase} mb{microbatch} · compute · {short}"


def test_selection_by_pp_group_replica_and_ranks(warehouse: Path, tmp_path: Path) -> None:
    names = _expected_names(warehouse, SIM)
    kernels = _kernel_counts(warehouse, SIM)
    for selector, column in (("pp_group", "pp_group_index"), ("replica", "model_replica")):
        [(value, wanted)] = query_warehouse(
            warehouse, f"select {column}, list(rank order by rank) from dim_ranks "  # noqa: S608
            f"where run_id = ? group by 1 order by 1 desc limit 1", [SIM])
        out = tmp_path / f"{selector}.pftrace"
        result = export_perfetto(warehouse, SIM, out, **{selector: value})
        timeline = read_proto(out)
        assert list(result.ranks) == wanted
        assert sorted(timeline.processes.values()) == sorted(names[r] for r in wanted)
        written = timeline.per_process("compute")
        assert sum(written.values()) == int(query_warehouse(
            warehouse, "select count(*) from fct_kernels where run_id = ? and kind = 'compute'"
            " and list_contains(?, rank)", [SIM, wanted])[0][0])
    out = tmp_path / "ranks.pftrace"
    result = export_perfetto(warehouse, SIM, out, ranks=[6, 1])
    assert result.ranks == (1, 6)
    assert result.kernel_slices == kernels[1] + kernels[6]


def test_a_window_keeps_only_the_slices_overlapping_it(warehouse: Path, tmp_path: Path) -> None:
    """``window`` (absolute ns on the export's clock) is how ``tracehouse serve`` opens a view's
    window in Perfetto: every slice that overlaps it, and no other."""
    aligned = ("select count(*) from {table} as t left join dim_rank_clock_offsets as o "
               "on o.run_id = t.run_id and o.rank = t.rank where t.run_id = ? "
               "and list_contains(?, t.rank) and t.ts_ns + coalesce(o.offset_ns, 0) < ? "
               "and t.ts_ns + coalesce(o.offset_ns, 0) + {length} > ?")
    [(first, last)] = query_warehouse(
        warehouse, "select min(ts_ns), max(end_ns) from fct_kernels where run_id = ? "
        "and rank in (0, 1)", [SIM])
    window = (first + (last - first) // 3, first + 2 * (last - first) // 3)
    result = export_perfetto(warehouse, SIM, tmp_path / "window.pftrace", ranks=[0, 1],
                             window=window)
    assert result.offsets_applied
    [(kernels,)] = query_warehouse(
        warehouse, aligned.format(table="fct_kernels", length="greatest(t.dur_ns, 0)"),
        [SIM, [0, 1], window[1], window[0]])
    [(steps,)] = query_warehouse(
        warehouse, aligned.format(table="fct_cpu_steps", length="(t.end_ns - t.ts_ns)"),
        [SIM, [0, 1], window[1], window[0]])
    everything = _kernel_counts(warehouse, SIM)
    assert 0 < result.kernel_slices == kernels < everything[0] + everything[1]
    assert result.cpu_step_slices == steps
    timeline = read_proto(tmp_path / "window.pftrace")
    assert sum(timeline.per_process("compute").values()) <= kernels


def test_json_has_the_same_tracks_and_slices(warehouse: Path, sim_proto: tuple[Path, Any],
                                             tmp_path: Path) -> None:
    out = tmp_path / "sim.json"
    result = export_perfetto(warehouse, SIM, out, fmt="json")
    proto = read_proto(sim_proto[0])
    timeline = read_json(out)
    assert timeline.processes == proto.processes
    assert timeline.per_process() == proto.per_process()
    assert result.slices == len(timeline.slices)
    assert {(item.name, item.ts, item.end) for item in timeline.slices} == {
        (item.name, item.ts, item.end) for item in proto.slices}
    # ts/dur: microseconds since origin_ns, small enough for a double to keep
    # every nanosecond (absolute epoch microseconds would not).
    data = json.loads(out.read_bytes())
    origin = data["otherData"]["origin_ns"]
    assert origin == result.origin_ns and origin % 1_000_000_000 == 0
    events = [event for event in data["traceEvents"] if event["ph"] == "X"]
    assert min(event["args"]["start_ns"] for event in events) - origin < 1_000_000_000
    for event in events:
        assert round(event["ts"] * 1000) == event["args"]["start_ns"] - origin
        assert round(event["dur"] * 1000) == event["args"]["dur_ns"]


def test_interning_resets_and_small_batches_decode_the_same(
        warehouse: Path, sim_proto: tuple[Path, Any], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proto_writer, "INTERN_LIMIT", 40)
    monkeypatch.setattr(proto_writer, "BATCH_PACKETS", 7)
    monkeypatch.setattr(queries, "FETCH_ROWS", 13)
    out = tmp_path / "small.pftrace"
    export_perfetto(warehouse, SIM, out)
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    trace = pb.Trace()
    trace.ParseFromString(out.read_bytes())
    resets = sum(1 for packet in trace.packet if packet.sequence_flags & 1)
    assert resets > 10
    small, default = read_proto(out), read_proto(sim_proto[0])
    assert sorted((s.name, s.ts, s.end, s.pid) for s in small.slices) == sorted(
        (s.name, s.ts, s.end, s.pid) for s in default.slices)


def test_clock_offsets_are_applied_when_the_table_exists(warehouse: Path,
                                                         sim_proto: tuple[Path, Any],
                                                         tmp_path: Path) -> None:
    copy = _copy_database(warehouse, tmp_path / "warehouse")
    bare = _copy_database(warehouse, tmp_path / "bare")
    con = duckdb.connect(str(Warehouse(copy).database))
    try:
        con.execute("create or replace table dim_rank_clock_offsets as select * from (values "
                    "(?, 3::bigint, 1500::bigint), ('other', 0::bigint, 99::bigint)) "
                    "as offsets (run_id, rank, offset_ns)", [SIM])
    finally:
        con.close()
    con = duckdb.connect(str(Warehouse(bare).database))
    try:
        con.execute("drop table dim_rank_clock_offsets")
    finally:
        con.close()
    out = tmp_path / "shifted.pftrace"
    result = export_perfetto(copy, SIM, out, ranks=[0, 3])
    assert result.offsets_applied
    assert export_perfetto(warehouse, SIM, tmp_path / "built.pftrace").offsets_applied
    plain_out = tmp_path / "plain.pftrace"
    assert not export_perfetto(bare, SIM, plain_out, ranks=[0, 3]).offsets_applied
    plain = _by_key(read_proto(plain_out))
    shifted = read_proto(out)
    names = _expected_names(warehouse, SIM)
    assert shifted.slices
    for item in shifted.slices:
        before = plain[(item.args["trace_id"], item.args["slice_id"])]
        shift = 1500 if shifted.processes[item.pid] == names[3] else 0
        assert (item.ts, item.end) == (before.ts + shift, before.end + shift)


def test_partially_overlapping_kernels_move_to_an_overlap_track(warehouse: Path,
                                                                 tmp_path: Path) -> None:
    """Stretch one kernel into the next on its stream: both stay, on two tracks."""
    copy = _copy_database(warehouse, tmp_path / "warehouse")
    con = duckdb.connect(str(Warehouse(copy).database))
    try:
        trace_id, slice_id, ts, device, stream, next_ts = con.execute("""
            select trace_id, slice_id, ts_ns, device, stream, next_ts
            from (
                select *, lead(ts_ns) over (partition by device, stream order by ts_ns) as next_ts,
                    lead(end_ns) over (partition by device, stream order by ts_ns) as next_end
                from fct_kernels where run_id = ? and rank = 0
            ) where end_ns <= next_ts and next_end > next_ts + 1
            order by ts_ns limit 1
        """, [SIM]).fetchone()
        # fct_kernels is a view over the per-trace kernel table: stretch it there.
        con.execute("update intermediate.int_kernels_classified set end_ns = ?, dur_ns = ? "
                    "where trace_id = ? and slice_id = ?",
                    [next_ts + 1, next_ts + 1 - ts, trace_id, slice_id])
    finally:
        con.close()
    out = tmp_path / "overlap.pftrace"
    result = export_perfetto(copy, SIM, out, ranks=[0])
    timeline = read_proto(out)
    assert result.overlap_tracks == 1
    assert result.kernel_slices == _kernel_counts(warehouse, SIM)[0]
    assert f"GPU {device} stream {stream} (overlap 1)" in {
        name for _, name in timeline.threads.values()}
    _assert_nested(timeline)
    stretched = _by_key(timeline)[(trace_id, slice_id)]
    assert stretched.end == next_ts + 1


def test_bad_requests_fail_cleanly_and_keep_the_old_file(warehouse: Path, tmp_path: Path) -> None:
    out = tmp_path / "keep.pftrace"
    out.write_bytes(b"old")
    cases = [
        ({"run_id": "nope"}, "not in the warehouse"),
        ({"run_id": SIM, "ranks": [0, 99]}, "99"),
        ({"run_id": SIM, "pp_group": 0, "replica": 1, "ranks": [1]}, "matches the selection"),
        ({"run_id": SIM, "fmt": "svg"}, "unknown format"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ExportError, match=message):
            export_perfetto(warehouse, out=out, **kwargs)
    with pytest.raises(ExportError, match="tracehouse build"):
        export_perfetto(tmp_path / "empty", SIM, out)
    assert out.read_bytes() == b"old"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["keep.pftrace"]


# --------------------------------------------------------------------------- real traces


def test_dlrm_8rank_real_traces(warehouse: Path, tmp_path: Path) -> None:
    if not DLRM_DIR.is_dir():
        pytest.skip(f"shared traces not found at {DLRM_DIR}")
    out = tmp_path / "dlrm.pftrace"
    result = export_perfetto(warehouse, DLRM, out)
    timeline = read_proto(out)
    kernels = _kernel_counts(warehouse, DLRM)
    names = _expected_names(warehouse, DLRM)
    assert sorted(timeline.processes.values()) == sorted(names.values())
    assert timeline.per_process() == {names[r]: n for r, n in kernels.items()}
    assert result.kernel_slices == sum(kernels.values()) > 1000
    # One track per (GPU, stream) of each rank (plus overlap tracks, if any).
    streams = query_warehouse(
        warehouse, "select count(distinct (rank, device, stream)) from fct_kernels "
        "where run_id = ?", [DLRM])[0][0]
    assert len(timeline.threads) == streams + result.overlap_tracks


# --------------------------------------------------------------------------- a trace processor


def _load(env: dict[str, str], monkeypatch: pytest.MonkeyPatch, path: Path,
          queries: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    """Run ``queries`` on ``path`` loaded in the trace processor ``env`` points at."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    backend = perfetto_engine.resolve_backend(None)
    raw = path.read_bytes()
    source = TraceFile(path=path, run_id="export", layout="generic", rank_hint=None,
                       iteration_hint=None, size_bytes=len(raw), mtime_ns=0)
    with perfetto_engine.open_trace_processor(backend, source, raw) as tp:
        return {key: tp.query(sql).as_pandas_dataframe().to_dict("records")
                for key, sql in queries.items()}


def _flow_edges(warehouse: Path, run_id: str) -> int:
    """Arrows a trace processor draws: members - 1 per matched instance of two or more."""
    return int(query_warehouse(
        warehouse, "select coalesce(sum(ranks_matched - 1), 0) from fct_collectives "
        "where run_id = ? and ranks_matched > 1", [run_id])[0][0])


TP_QUERIES = {
    "slices": "select count(*) as n from slice",
    "per_process": """
        select process.name as name, count(*) as n
        from slice
        join thread_track on slice.track_id = thread_track.id
        join thread using (utid)
        join process using (upid)
        group by 1
    """,
    "processes": "select name from process where name like 'rank %'",
    "errors": """
        select name, value from stats
        where value > 0 and severity in ('error', 'data_loss')
    """,
    "colours": "select distinct display_value as colour from args where key = 'correlation_id'",
    "flows": "select count(*) as n from flow",
    "hostile": """
        select count(*) as n from args
        where key like '%.kernel' and display_value like '%<script>alert(1)</script>%'
    """,
}


@pytest.mark.parametrize("fmt", ["proto", "json"])
def test_trace_processor_reads_the_same_tracks_and_slices(
        warehouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str,
        trace_processor: dict[str, str]) -> None:  # noqa: F811 - the imported fixture
    out = tmp_path / f"sim.{fmt}"
    result = export_perfetto(warehouse, SIM, out, fmt=fmt)
    answers = _load(trace_processor, monkeypatch, out, TP_QUERIES)
    names = _expected_names(warehouse, SIM)
    kernels, cpu = _kernel_counts(warehouse, SIM), _cpu_counts(warehouse, SIM)
    calls = _collective_counts(warehouse, SIM)
    assert answers["errors"] == []
    assert answers["slices"] == [{"n": result.slices}]
    assert sorted(row["name"] for row in answers["processes"]) == sorted(names.values())
    assert {row["name"]: row["n"] for row in answers["per_process"]} == {
        names[r]: kernels[r] + cpu.get(r, 0) + calls.get(r, 0) for r in kernels}
    assert answers["flows"] == [{"n": _flow_edges(warehouse, SIM)}]
    assert answers["hostile"] == [{"n": 1}]
    if fmt == "proto":  # one colour per kind (and communication group); JSON has cname
        kinds = query_warehouse(
            warehouse, "select distinct case when kind = 'communication' then "
            "trim('comm ' || coalesce(comm_group_kind, '')) else kind end "
            "from fct_kernels where run_id = ? union select distinct 'cpu ' || phase"
            " from fct_cpu_steps where run_id = ? union select distinct trim('comm ' ||"
            " coalesce(comm_group_kind, '')) from fct_cpu_collectives where run_id = ?",
            [SIM, SIM, SIM])
        assert {row["colour"] for row in answers["colours"]} == {kind for (kind,) in kinds}
