"""The simulator's injectable causes beyond stragglers and clock skew.

Each is the ground truth of a finding or a what-if scenario: a slow link
(``slow_groups``), an unhidden data-parallel gradient reduction
(``overlap_grad_reduce`` off), a launch-bound host (``launch_overhead_us``),
slow GEMMs (``slow_gemm``) and Megatron's activation recomputation
(``recompute_granularity`` full or selective).
Every test compares a run with the cause against the same seed without it, so
what moved is the cause's doing and nothing else moved.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracehouse.cli import main
from tracehouse.simulate import SimConfig, costs, parse_slow_group, simulate_run
from tracehouse.simulate.calltree import load_events

#: Two stages, two replicas; big enough (8 layers of hidden 4096) for several
#: gradient buckets, no jitter so a cause's effect is exact.
LAYOUT = dict(tp=1, pp=2, dp=2, microbatches=4, layers=8, hidden=4096, heads=32,
              seq_length=1024, vocab=256, seed=5, jitter=0.0)
DP_GROUP = "DATA_PARALLEL_GROUP_WITH_CP"


def _kernels(run_dir: Path, rank: int) -> list[dict]:
    events = load_events(run_dir / "iteration_1" / f"rank_{rank:04d}_iter_1.pt.trace.json.gz")
    return [e for e in events if e.get("cat") == "kernel"]


def _events(run_dir: Path, rank: int) -> list[dict]:
    return load_events(run_dir / "iteration_1" / f"rank_{rank:04d}_iter_1.pt.trace.json.gz")


def _dp_reduce_scatters(run_dir: Path, rank: int) -> list[dict]:
    return [e for e in _kernels(run_dir, rank)
            if e["args"].get("Process Group Description") == DP_GROUP
            and "ReduceScatter" in e["name"]]


def _rank_facts(run, rank: int) -> dict:
    return run.ground_truth["timing"]["1"]["ranks"][str(rank)]


@pytest.fixture(scope="module")
def calm(tmp_path_factory: pytest.TempPathFactory):
    return simulate_run(SimConfig(**LAYOUT), tmp_path_factory.mktemp("calm"), progress=False)


def test_a_slow_group_slows_only_its_transfers(calm, tmp_path: Path) -> None:
    slow = simulate_run(SimConfig(**LAYOUT, slow_groups=(("dp", 3.0),)), tmp_path,
                        progress=False)
    for rank in range(4):
        dp_calm = [e for e in _kernels(calm.out_dir, rank)
                   if e["args"].get("Process Group Description") == DP_GROUP]
        dp_slow = [e for e in _kernels(slow.out_dir, rank)
                   if e["args"].get("Process Group Description") == DP_GROUP]
        assert len(dp_calm) == len(dp_slow) > 0
        # Peers of a DP group arrive together here, so a kernel is all transfer.
        for a, b in zip(dp_calm, dp_slow):
            assert b["dur"] == pytest.approx(3.0 * a["dur"], rel=1e-3), (rank, a["name"])
        assert _rank_facts(slow, rank)["compute_us"] == _rank_facts(calm, rank)["compute_us"]
        assert _rank_facts(slow, rank)["gpu_end_us"] > _rank_facts(calm, rank)["gpu_end_us"]
    p2p = [e["dur"] for e in _kernels(calm.out_dir, 0) if "SendRecv" in e["name"]]
    p2p_slow = [e["dur"] for e in _kernels(slow.out_dir, 0) if "SendRecv" in e["name"]]
    assert sum(p2p) > 0 and max(p2p_slow) <= 1.001 * max(p2p)  # pp links are healthy
    assert slow.ground_truth["slow_groups"] == [{"kind": "dp", "factor": 3.0}]
    assert calm.ground_truth["slow_groups"] == []


def test_without_overlap_the_grad_reduction_waits_for_the_whole_backward(
        calm, tmp_path: Path) -> None:
    exposed = simulate_run(SimConfig(**LAYOUT, overlap_grad_reduce=False), tmp_path,
                           progress=False)
    for rank in range(4):
        backward_end = _rank_facts(exposed, rank)["schedule_end_us"]
        base_ns = 1_000_000_000  # the simulator's ts origin, in the trace's µs
        starts = [e["ts"] - base_ns for e in _dp_reduce_scatters(exposed.out_dir, rank)]
        assert starts and min(starts) >= backward_end - 0.01, rank  # ts has ns precision
        calm_starts = [e["ts"] - base_ns for e in _dp_reduce_scatters(calm.out_dir, rank)]
        assert len(calm_starts) == len(starts)
        if _rank_facts(calm, rank)["stage"] == 0:
            # With overlap, Megatron's 1F1B lets only the first stage reduce during its
            # last backward (the others launch theirs through grad_sync_func after it).
            assert min(calm_starts) < _rank_facts(calm, rank)["schedule_end_us"], rank
    # The first stage's reduction was partly hidden: without overlap its step is longer.
    assert _rank_facts(exposed, 0)["gpu_end_us"] > _rank_facts(calm, 0)["gpu_end_us"] + 1000
    # No DDP hook marks a bucket ready when nothing overlaps (Megatron's register_grad_ready
    # runs only with overlap_grad_reduce).
    names = {e["name"] for e in _events(exposed.out_dir, 0) if e.get("ph") == "X"}
    assert not any("register_grad_ready" in n for n in names)
    assert any("register_grad_ready" in e["name"] for e in _events(calm.out_dir, 0)
               if e.get("ph") == "X")
    config = json.loads((exposed.out_dir / "model_config.json").read_text())
    assert config["megatron_args"]["overlap_grad_reduce"] is False
    assert exposed.ground_truth["overlap_grad_reduce"] is False


def test_launch_overhead_makes_the_run_launch_bound(calm, tmp_path: Path) -> None:
    bound = simulate_run(SimConfig(**LAYOUT, launch_overhead_us=200.0), tmp_path,
                         progress=False)
    launches = [e for e in _events(bound.out_dir, 0) if e.get("name") == "cudaLaunchKernel"]
    calm_launches = [e for e in _events(calm.out_dir, 0) if e.get("name") == "cudaLaunchKernel"]
    assert len(launches) == len(calm_launches) > 0
    assert {round(e["dur"] - c["dur"], 3) for e, c in zip(launches, calm_launches)} == {200.0}
    # The GPU does the same work, later: a kernel never starts before its launch call ends.
    by_correlation = {e["args"]["correlation"]: e for e in launches}
    for kernel in _kernels(bound.out_dir, 0):
        call = by_correlation.get(kernel["args"]["correlation"])
        if call is not None:
            assert kernel["ts"] >= call["ts"] + 200.0
    assert _rank_facts(bound, 0)["compute_us"] == _rank_facts(calm, 0)["compute_us"]
    assert _rank_facts(bound, 0)["gpu_end_us"] > 1.5 * _rank_facts(calm, 0)["gpu_end_us"]
    assert bound.ground_truth["launch_overhead_us"] == 200.0


def test_parse_slow_group() -> None:
    assert parse_slow_group("dp:3") == ("dp", 3.0)
    assert parse_slow_group(" tp : 1.5 ") == ("tp", 1.5)
    with pytest.raises(ValueError, match="KIND:FACTOR"):
        parse_slow_group("dp")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(slow_groups=(("nvlink", 2.0),)), "not one of"),
        (dict(slow_groups=(("dp", 0.0),)), "must be > 0"),
        (dict(launch_overhead_us=-1.0), "launch_overhead_us"),
        (dict(overlap_grad_reduce="no"), "overlap_grad_reduce"),
        (dict(slow_gemm=0.0), "slow_gemm"),
        (dict(recompute_granularity="block"), "recompute_granularity"),
        (dict(recompute_num_layers=0), "recompute_num_layers"),
    ],
)
def test_invalid_faults_are_rejected(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SimConfig(**kwargs)


def test_cli_passes_the_faults_through(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    rc = main(["simulate", "--tp", "1", "--pp", "2", "--dp", "2", "--microbatches", "2",
               "--iterations", "1", "--layers", "2", "--hidden", "256", "--heads", "8",
               "--seq-length", "256", "--slow-group", "dp:2", "pp:1.5",
               "--no-overlap-grad-reduce", "--launch-overhead-us", "12.5", "--slow-gemm", "1.5",
               "--recompute-granularity", "full", "--recompute-num-layers", "2", "-q",
               "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    truth = json.loads((out / "ground_truth.json").read_text())
    assert truth["slow_groups"] == [{"kind": "dp", "factor": 2.0}, {"kind": "pp", "factor": 1.5}]
    assert truth["overlap_grad_reduce"] is False
    assert truth["launch_overhead_us"] == 12.5
    assert truth["slow_gemm"] == 1.5
    assert truth["recompute"]["granularity"] == "full" and truth["recompute"]["num_layers"] == 2
    assert main(["simulate", "--tp", "1", "--pp", "1", "--dp", "1", "--microbatches", "1",
                 "--iterations", "1", "--slow-group", "dp", "--out",
                 str(tmp_path / "bad")]) == 2
    assert "KIND:FACTOR" in capsys.readouterr().err


def _recomputed_kernels(run_dir: Path, rank: int) -> list[dict]:
    """The kernels launched inside a ``custom_forward`` frame on the thread of a
    ``CheckpointFunctionBackward``: the forward a checkpoint's backward re-runs."""
    events = _events(run_dir, rank)
    frames = [e for e in events if e.get("ph") == "X"]
    backward_tids = {e["tid"] for e in frames if e["name"] == "CheckpointFunctionBackward"}
    reruns = [e for e in frames if e["name"].endswith(": custom_forward")
              and e["tid"] in backward_tids]
    launches = {e["args"]["correlation"]: e for e in frames
                if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    out = []
    for kernel in _kernels(run_dir, rank):
        call = launches.get(kernel["args"]["correlation"])
        if call is not None and any(f["tid"] == call["tid"] and f["ts"] <= call["ts"]
                                    < f["ts"] + f["dur"] for f in reruns):
            out.append(kernel)
    return out


def test_full_recompute_reruns_each_checkpoint_before_its_backward(calm, tmp_path: Path) -> None:
    """Megatron's full recompute (uniform, one layer per checkpoint): the forward runs
    each layer inside CheckpointFunction under no_grad, and each checkpoint's backward
    re-runs that layer's forward on the autograd thread before the layer's backward.
    Every kernel is the calm run's, plus the layers' forward kernels once more."""
    full = simulate_run(SimConfig(**LAYOUT, recompute_granularity="full"), tmp_path,
                        progress=False)
    layers_per_stage, microbatches = 4, 4
    events = _events(full.out_dir, 0)
    names = [e["name"] for e in events if e.get("ph") == "X"]
    assert names.count("CheckpointFunction") == layers_per_stage * microbatches
    assert names.count("CheckpointFunctionBackward") == layers_per_stage * microbatches
    main_tid = next(e["tid"] for e in events if e.get("name", "").endswith(": forward_step"))
    custom = [e for e in events if e.get("name", "").endswith(": custom_forward")]
    assert len([e for e in custom if e["tid"] == main_tid]) == layers_per_stage * microbatches
    assert len([e for e in custom if e["tid"] != main_tid]) == layers_per_stage * microbatches
    rerun = _recomputed_kernels(full.out_dir, 0)
    layer_gemms = [k for k in rerun if k["name"] == costs.GEMM_FWD]
    assert len(layer_gemms) == 4 * layers_per_stage * microbatches  # qkv, proj, fc1, fc2
    assert len(_kernels(full.out_dir, 0)) == len(_kernels(calm.out_dir, 0)) + len(rerun)
    facts, calm_facts = _rank_facts(full, 0), _rank_facts(calm, 0)
    assert facts["recompute_us"] == pytest.approx(sum(k["dur"] for k in rerun),
                                                  abs=0.001 * len(rerun))
    assert facts["compute_us"] == pytest.approx(
        calm_facts["compute_us"] + facts["recompute_us"], rel=1e-6)
    assert calm_facts["recompute_us"] == 0.0
    assert full.ground_truth["recompute"]["granularity"] == "full"
    config = json.loads((full.out_dir / "model_config.json").read_text())["megatron_args"]
    assert (config["recompute_granularity"], config["recompute_method"],
            config["recompute_num_layers"]) == ("full", "uniform", 1)


def test_full_recompute_checkpoints_several_layers_at_once(tmp_path: Path) -> None:
    two = simulate_run(SimConfig(**LAYOUT, recompute_granularity="full",
                                 recompute_num_layers=2), tmp_path, progress=False)
    names = [e["name"] for e in _events(two.out_dir, 0) if e.get("ph") == "X"]
    assert names.count("CheckpointFunctionBackward") == 2 * 4  # 4 layers / 2, 4 microbatches


def test_selective_recompute_reruns_only_the_core_attention(calm, tmp_path: Path) -> None:
    selective = simulate_run(SimConfig(**LAYOUT, recompute_granularity="selective"), tmp_path,
                             progress=False)
    rerun = _recomputed_kernels(selective.out_dir, 0)
    assert rerun and {k["name"] for k in rerun} == {costs.FLASH_FWD}
    assert len(rerun) == 4 * 4  # one per layer and microbatch
    # Trace timestamps have ns precision: each kernel's dur may round by 1 ns.
    assert _rank_facts(selective, 0)["recompute_us"] == pytest.approx(
        sum(k["dur"] for k in rerun), abs=0.001 * len(rerun))
    assert len(_kernels(selective.out_dir, 0)) == len(_kernels(calm.out_dir, 0)) + len(rerun)


def test_slow_gemm_lengthens_only_the_gemms(calm, tmp_path: Path) -> None:
    slow = simulate_run(SimConfig(**LAYOUT, slow_gemm=2.0), tmp_path, progress=False)
    gemms = {costs.GEMM_FWD, costs.GEMM_DGRAD, costs.GEMM_WGRAD}
    calm_kernels, slow_kernels = _kernels(calm.out_dir, 0), _kernels(slow.out_dir, 0)
    assert [k["name"] for k in calm_kernels] == [k["name"] for k in slow_kernels]
    compute = [(a, b) for a, b in zip(calm_kernels, slow_kernels, strict=True)
               if "nccl" not in a["name"].lower()]
    assert any(a["name"] in gemms for a, _ in compute)
    for a, b in compute:
        expected = 2.0 * a["dur"] if a["name"] in gemms else a["dur"]
        assert b["dur"] == pytest.approx(expected, rel=1e-3, abs=0.002), a["name"]
    assert slow.ground_truth["slow_gemm"] == 2.0


def test_exposed_communication_is_stated_per_group_kind(tmp_path: Path) -> None:
    """Without --tp-comm-overlap the forward's TP all-reduces block the compute stream:
    exposed. The ground truth states the exposed transfer time per kind; a 3x slower TP
    link exposes at least 3x as much (the blocking transfers 3x, the backward's async ones
    outgrow the GEMMs that hid them) and at most 3x all its transfers."""
    layout = {**LAYOUT, "tp": 2, "dp": 1}
    healthy = simulate_run(SimConfig(**layout), tmp_path / "healthy", progress=False)
    slow = simulate_run(SimConfig(**layout, slow_groups=(("tp", 3.0),)), tmp_path / "slow",
                        progress=False)
    exposed = _rank_facts(healthy, 0)["exposed_comm_us"]
    tp_time = sum(e["dur"] for e in _kernels(healthy.out_dir, 0)
                  if e["args"].get("Process Group Description") == "TENSOR_MODEL_PARALLEL_GROUP")
    assert 0 < exposed["tp"] <= tp_time
    assert "dp" not in exposed  # DP size 1: no gradient reduce
    slow_exposed = _rank_facts(slow, 0)["exposed_comm_us"]["tp"]
    assert 3.0 * exposed["tp"] * (1 - 1e-6) <= slow_exposed <= 3.0 * tp_time
