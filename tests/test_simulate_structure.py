"""Simulated runs have the structure of real Megatron-LM traces and load everywhere.

References: the real megatron-core 0.16.1 runs in
``../shared/data/kineto/megatron_cpu`` (same layouts: TP2xPP2xDP2 M=4 1F1B,
PP4xDP2 M=8 1F1B, TP2xPP2 VPP2 M=4 interleaved) for the Python/CPU side and
the schedule call tree; the A100 trace in ``single_rank`` for the GPU side
(kernels, launches, NCCL args, flows).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from conftest import SHARED_DATA
from tracehouse.ingest.runner import ingest_paths
from tracehouse.simulate import SimConfig, SimulatedRun, simulate_run
from tracehouse.simulate.calltree import flatten, load_events, schedule_call_tree

pytestmark = pytest.mark.slow  # ingests or builds (README: the fast set is -m "not slow")

MEGATRON_CPU = SHARED_DATA / "kineto" / "megatron_cpu"
A100 = SHARED_DATA / "kineto" / "single_rank" / "a100_nccl_pg_args.json.gz"
#: A model small enough to simulate and load in well under a second per run.
SMALL = dict(layers=4, hidden=256, heads=8, seq_length=256, vocab=1024)
LAYOUTS = {
    "tp2_pp2_dp2": dict(tp=2, pp=2, dp=2, microbatches=4),
    "tp1_pp4_dp2": dict(tp=1, pp=4, dp=2, microbatches=8),
    "tp2_pp2_dp1_vpp2": dict(tp=2, pp=2, dp=1, microbatches=4, vpp=2, schedule="interleaved"),
}
#: The reference traces are iteration 3; simulate iterations 3 and 4.
FIRST_ITERATION = 3


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, SimulatedRun]:
    """The three reference layouts, simulated (2 iterations, one straggler, clock skew)."""
    root = tmp_path_factory.mktemp("sim")
    return {
        name: simulate_run(
            SimConfig(**SMALL, **layout, iterations=2, first_iteration=FIRST_ITERATION,
                      stragglers=((1, 1.3),), clock_skew_us=40.0, gpus_per_node=2),
            root / name,
        )
        for name, layout in LAYOUTS.items()
    }


@pytest.fixture(scope="module")
def lake(runs: dict[str, SimulatedRun], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """All simulated traces ingested with the real ingest."""
    warehouse = tmp_path_factory.mktemp("warehouse")
    for name, run in runs.items():
        # The whole run folder: topology.json loads into topology_groups;
        # ground_truth.json is a sidecar, skipped.
        result = ingest_paths([run.out_dir], warehouse=warehouse, run=name, progress=False)
        assert not result.failed, result.failed
        assert len(result.loaded) == len(run.trace_paths)
        assert {Path(p).name for p, _ in result.skipped} == {"ground_truth.json"}
        assert [Path(p).name for p, _run, _rows in result.topologies] == ["topology.json"]
        assert [Path(p).name for p, _run, _rows in result.model_configs] == ["model_config.json"]
    return warehouse


def _events(path: Path) -> list[dict]:
    return load_events(path)


def test_run_layout_is_the_megatron_patchs(runs: dict[str, SimulatedRun]) -> None:
    run = runs["tp2_pp2_dp2"]
    names = sorted(p.relative_to(run.out_dir).as_posix() for p in run.trace_paths)
    assert names[0] == "iteration_3/rank_0000_iter_3.pt.trace.json.gz"
    assert names[-1] == "iteration_4/rank_0007_iter_4.pt.trace.json.gz"
    assert len(names) == 16
    assert json.loads(run.topology_path.read_text())["sizes"]["world"] == 8
    assert run.ground_truth["world"] == 8


def test_every_trace_loads_without_flags(lake: Path, runs: dict[str, SimulatedRun]) -> None:
    con = duckdb.connect()
    rows = con.execute(
        "select run_id, count(*), sum(partial_overlap_count), sum(unpaired_flow_events), "
        "count(distinct rank), min(min_profiler_step), max(max_profiler_step) "
        "from read_parquet(?, hive_partitioning = false) group by run_id order by run_id",
        [str(lake / "lake" / "traces" / "run=*" / "*.parquet")],
    ).fetchall()
    assert {r[0] for r in rows} == set(runs)
    for run_id, traces, partial, unpaired, ranks, first, last in rows:
        world = runs[run_id].config.world
        assert (traces, partial, unpaired, ranks) == (2 * world, 0, 0, world), run_id
        assert (first, last) == (FIRST_ITERATION, FIRST_ITERATION + 1)
    flagged = con.execute(
        "select count(*) from read_parquet(?, hive_partitioning = false) where is_partial_overlap",
        [str(lake / "lake" / "slices" / "run=*" / "*.parquet")],
    ).fetchone()[0]
    assert flagged == 0


def test_phases_and_categories_are_those_of_real_traces(runs: dict[str, SimulatedRun]) -> None:
    def kinds(events: list[dict]) -> set[tuple]:
        return {(e.get("ph"), e.get("cat")) for e in events}

    gpu = kinds(_events(A100))
    cpu = kinds(_events(MEGATRON_CPU / "tp2_pp2_dp2" / "iteration_3" /
                        "rank_0000_iter_3.pt.trace.json.gz"))
    for run in runs.values():
        for path in (run.trace_paths[0], run.trace_paths[-1]):
            assert kinds(_events(path)) == gpu | cpu, path


def _arg_keys(events: list[dict], predicate: Callable[[dict], bool]) -> set[tuple]:
    return {tuple(sorted(e.get("args", {}))) for e in events if predicate(e)}


def _flow_keys(events: list[dict], ph: str) -> set[tuple]:
    return {tuple(sorted(e)) for e in events if e.get("ph") == ph}


def test_kernel_runtime_and_flow_arguments_match_a_real_gpu_trace(
        runs: dict[str, SimulatedRun]) -> None:
    real = _events(A100)
    sim = _events(runs["tp2_pp2_dp2"].trace_paths[0])

    def nccl(e: dict) -> bool:
        return e.get("cat") == "kernel" and "nccl" in e["name"].lower()

    def compute(e: dict) -> bool:
        return e.get("cat") == "kernel" and "nccl" not in e["name"].lower()

    checks = {
        "compute kernels": compute,
        "NCCL kernels": nccl,
        "runtime calls": lambda e: e.get("cat") == "cuda_runtime",
        "memcpy/memset": lambda e: e.get("cat") in ("gpu_memcpy", "gpu_memset"),
        "record_param_comms": lambda e: e.get("name") == "record_param_comms",
        "gpu annotations": lambda e: e.get("cat") == "gpu_user_annotation",
    }
    for label, predicate in checks.items():
        assert _arg_keys(sim, predicate) == _arg_keys(real, predicate), label
    for ph in ("s", "f"):
        assert _flow_keys(sim, ph) == _flow_keys(real, ph), ph


def test_threads_streams_and_distributed_info(runs: dict[str, SimulatedRun]) -> None:
    events = _events(runs["tp2_pp2_dp2"].trace_paths[0])
    names = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert any(n.endswith("(pt_main_thread)") for n in names)
    assert any(n.endswith("(pt_autograd_0)") for n in names)
    assert "stream 7 " in names
    # Backward kernels are launched from the autograd thread, forward ones from the main thread.
    tid = {n.split("(")[1][:-1]: int(n.split()[1]) for n in names if n.startswith("thread")}
    launchers = {e["tid"] for e in events if e.get("name") == "cudaLaunchKernel"}
    assert launchers == {tid["pt_main_thread"], tid["pt_autograd_0"]}
    with gzip.open(runs["tp2_pp2_dp2"].trace_paths[0], "rt") as f:
        top = json.load(f)
    assert top["baseTimeNanoseconds"] > 0 and top["distributedInfo"]["backend"] == "nccl"
    assert len(top["deviceProperties"]) == 2  # gpus_per_node


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_pg_config_is_megatrons(runs: dict[str, SimulatedRun], layout: str) -> None:
    """Same groups, pg names and descriptions as real megatron-core gave each rank."""
    run = runs[layout]
    for rank in range(run.config.world):
        real = MEGATRON_CPU / layout / "iteration_3" / f"rank_{rank:04d}_iter_3.pt.trace.json.gz"
        sim = run.out_dir / "iteration_3" / f"rank_{rank:04d}_iter_3.pt.trace.json.gz"
        with gzip.open(real, "rt") as f:
            want = json.load(f)["distributedInfo"]
        with gzip.open(sim, "rt") as f:
            got = json.load(f)["distributedInfo"]
        assert got["pg_count"] == want["pg_count"]
        assert [(c["pg_name"], c["pg_desc"], c["ranks"]) for c in got["pg_config"]] == [
            (c["pg_name"], c["pg_desc"], c["ranks"]) for c in want["pg_config"]]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_schedule_call_tree_is_megatron_cores(runs: dict[str, SimulatedRun], layout: str) -> None:
    """Every schedules.py / p2p_communication.py frame, in order and nesting, per rank."""
    run = runs[layout]
    for rank in range(run.config.world):
        real = schedule_call_tree(
            MEGATRON_CPU / layout / "iteration_3" / f"rank_{rank:04d}_iter_3.pt.trace.json.gz")
        assert real, "reference trace has no schedule frames"
        for iteration in (3, 4):
            sim = schedule_call_tree(
                run.out_dir / f"iteration_{iteration}" /
                f"rank_{rank:04d}_iter_{iteration}.pt.trace.json.gz")
            assert flatten(sim) == flatten(real), (layout, rank, iteration)


def test_collectives_name_their_megatron_groups(runs: dict[str, SimulatedRun]) -> None:
    """NCCL kernels carry the rank's real group (ranks, pg name, description)."""
    run = runs["tp2_pp2_dp2"]
    topology = json.loads(run.topology_path.read_text())
    events = _events(run.out_dir / "iteration_3" / "rank_0000_iter_3.pt.trace.json.gz")
    groups = {}
    for e in events:
        if e.get("cat") == "kernel" and "Collective name" in e["args"]:
            args = e["args"]
            groups[args["Process Group Description"]] = (args["Process Group Name"],
                                                         args["Process Group Ranks"])
    assert groups["TENSOR_MODEL_PARALLEL_GROUP"] == (
        topology["process_groups"]["tp"]["0,1"]["pg_name"], "[0, 1]")
    assert groups["PIPELINE_MODEL_PARALLEL_GROUP"][1] == "[0, 4]"
    assert groups["DATA_PARALLEL_GROUP_WITH_CP"][1] == "[0, 2]"
    assert groups["EMBEDDING_GROUP"][1] == "[0, 4]"
    assert groups["INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP"][1] == str(list(range(8)))


def test_fwdbwd_flows_link_forward_ops_to_their_backward(runs: dict[str, SimulatedRun]) -> None:
    events = _events(runs["tp2_pp2_dp2"].trace_paths[0])
    starts = {e["id"]: e for e in events if e.get("cat") == "fwdbwd" and e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e.get("cat") == "fwdbwd" and e["ph"] == "f"}
    assert starts and starts.keys() == ends.keys()
    assert all(ends[i]["ts"] > starts[i]["ts"] and ends[i]["tid"] != starts[i]["tid"]
               for i in starts)


def test_hta_loads_a_simulated_run(runs: dict[str, SimulatedRun]) -> None:
    trace_analysis = pytest.importorskip(
        "hta.trace_analysis", reason="Holistic Trace Analysis (the traceinsight extra) is "
                                     "not installed: pip install -e '.[traceinsight]'")
    run = runs["tp2_pp2_dp2"]
    analysis = trace_analysis.TraceAnalysis(trace_dir=str(run.out_dir / "iteration_3"))
    assert sorted(analysis.t.traces) == list(range(run.config.world))
    breakdown = analysis.get_temporal_breakdown(visualize=False)
    assert len(breakdown) == run.config.world
    assert (breakdown["compute_time(us)"] > 0).all()


def test_context_expert_and_sequence_parallel_runs(tmp_path: Path) -> None:
    """CP all-gathers, EP all-to-alls and SP reduce-scatters on their groups; clean ingest."""
    cfg = SimConfig(**SMALL, tp=2, pp=2, dp=2, cp=2, ep=2, microbatches=2,
                    sequence_parallel=True)
    run = simulate_run(cfg, tmp_path / "run")
    topology = json.loads(run.topology_path.read_text())
    seen: dict[tuple[str, str], str] = {}
    for e in _events(run.out_dir / "iteration_1" / "rank_0000_iter_1.pt.trace.json.gz"):
        if e.get("cat") == "kernel" and "Collective name" in e["args"]:
            args = e["args"]
            seen[(args["Process Group Description"], args["Collective name"])] = (
                args["Process Group Ranks"])
    cp_group = next(g for g in topology["groups"]["cp"] if 0 in g)
    ep_group = next(g for g in topology["groups"]["ep"] if 0 in g)
    assert seen[("CONTEXT_PARALLEL_GROUP", "allgather")] == str(cp_group)
    assert seen[("EXPERT_MODEL_PARALLEL_GROUP", "all_to_allv")] == str(ep_group)
    assert ("TENSOR_MODEL_PARALLEL_GROUP", "reduce_scatter") in seen
    assert ("EXPERT_DATA_PARALLEL_GROUP", "reduce_scatter_tensor_coalesced") in seen
    result = ingest_paths([run.out_dir / "iteration_1"], warehouse=tmp_path / "wh",
                          progress=False)
    assert not result.failed and len(result.loaded) == cfg.world
    partial = duckdb.connect().execute(
        "select sum(partial_overlap_count) from read_parquet(?, hive_partitioning = false)",
        [str(tmp_path / "wh" / "lake" / "traces" / "run=*" / "*.parquet")]).fetchone()[0]
    assert partial == 0
