"""The simulator's timing: bubbles, stragglers and clock skew arise and are recorded.

The model used here is big enough per kernel (hidden 2048, sequence 2048) for
the GPU, not Python's launch overhead, to set the pace, as in a real run.
"""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import pytest

from tracehouse.cli import main
from tracehouse.simulate import SimConfig, parse_straggler, simulate_run
from tracehouse.simulate.calltree import load_events

#: GPU-bound and balanced across stages (tiny vocabulary: no heavy output layer).
BALANCED = dict(layers=8, hidden=2048, heads=16, seq_length=2048, vocab=256)


def _trace(run_dir: Path, rank: int, iteration: int = 1) -> list[dict]:
    return load_events(run_dir / f"iteration_{iteration}" /
                       f"rank_{rank:04d}_iter_{iteration}.pt.trace.json.gz")


@pytest.mark.parametrize(
    ("layout", "formula"),
    [
        (dict(pp=4, microbatches=8), 3 / 11),
        (dict(pp=4, microbatches=8, vpp=2, schedule="interleaved"), 3 / 19),
        (dict(pp=2, microbatches=4, vpp=2, schedule="interleaved"), 1 / 9),
    ],
)
def test_pipeline_bubble_arises_from_the_schedule(tmp_path: Path, layout: dict,
                                                  formula: float) -> None:
    """Ground truth states Megatron's formula; the simulated bubble follows it."""
    cfg = SimConfig(tp=1, dp=1, jitter=0.0, **BALANCED, **layout)
    truth = simulate_run(cfg, tmp_path).ground_truth
    assert truth["analytical_bubble_ratio"] == pytest.approx(formula)
    assert truth["bubble_formula"] == ("(p-1)/(v*m+p-1)" if cfg.vpp > 1 else "(p-1)/(m+p-1)")
    group = truth["timing"]["1"]["pipeline_groups"][0]
    for ratio in group["stage_bubble_ratio"]:
        # P2P latency and launch gaps come on top of the ideal schedule's idle time.
        assert formula - 0.01 <= ratio <= formula + 0.08, group


def _tp_nccl_us(run_dir: Path, rank: int) -> float:
    return sum(e["dur"] for e in _trace(run_dir, rank)
               if e.get("cat") == "kernel"
               and e["args"].get("Process Group Description") == "TENSOR_MODEL_PARALLEL_GROUP")


def _dp_nccl_us(run_dir: Path, rank: int) -> float:
    return sum(e["dur"] for e in _trace(run_dir, rank)
               if e.get("cat") == "kernel"
               and e["args"].get("Process Group Description") == "DATA_PARALLEL_GROUP_WITH_CP")


def test_straggler_makes_its_peers_wait_at_the_next_collective(tmp_path: Path) -> None:
    base = dict(tp=2, pp=2, dp=2, microbatches=4, layers=4, hidden=2048, heads=16,
                seq_length=2048, vocab=1024, seed=7)
    calm = simulate_run(SimConfig(**base), tmp_path / "calm")
    slow = simulate_run(SimConfig(**base, stragglers=((1, 1.5),)), tmp_path / "slow")
    # Rank 1's tensor-parallel peer is rank 0, its data-parallel peer rank 3.
    assert _tp_nccl_us(slow.out_dir, 0) > 1.5 * _tp_nccl_us(calm.out_dir, 0)
    assert _dp_nccl_us(slow.out_dir, 3) > 2 * _dp_nccl_us(calm.out_dir, 3)
    # The straggler itself does not wait for its tensor-parallel peer.
    assert _tp_nccl_us(slow.out_dir, 1) <= _tp_nccl_us(calm.out_dir, 1) * 1.05
    calm_truth = calm.ground_truth["timing"]["1"]["ranks"]
    slow_truth = slow.ground_truth["timing"]["1"]["ranks"]
    assert slow_truth["0"]["comm_wait_us"]["tp"] > 10 * calm_truth["0"]["comm_wait_us"]["tp"]
    assert slow_truth["1"]["compute_us"] == pytest.approx(
        1.5 * calm_truth["1"]["compute_us"], rel=0.05)
    facts = {r["rank"]: r for r in slow.ground_truth["ranks"]}
    assert facts[1]["straggler_factor"] == 1.5 and facts[0]["straggler_factor"] == 1.0
    assert slow.ground_truth["stragglers"] == [{"rank": 1, "factor": 1.5}]


def test_clock_skew_shifts_a_nodes_timestamps(tmp_path: Path) -> None:
    base = dict(tp=2, pp=2, dp=2, microbatches=4, layers=4, hidden=256, heads=8,
                seq_length=256, vocab=1024, gpus_per_node=2, seed=3)
    true = simulate_run(SimConfig(**base), tmp_path / "true")
    skewed = simulate_run(SimConfig(**base, clock_skew_us=500.0), tmp_path / "skewed")
    skew = {r["rank"]: r["clock_skew_us"] for r in skewed.ground_truth["ranks"]}
    assert skew[0] == skew[1] == 0.0  # node 0 keeps the reference clock
    assert skew[2] == skew[3] and skew[4] == skew[5]  # one offset per node
    assert any(abs(s) > 1.0 for s in skew.values())
    assert all(abs(s) <= 500.0 for s in skew.values())
    for rank in range(8):
        a = [e for e in _trace(true.out_dir, rank) if e.get("ph") == "X"]
        b = [e for e in _trace(skewed.out_dir, rank) if e.get("ph") == "X"]
        shifts = {round(y["ts"] - x["ts"], 3) for x, y in zip(a, b)}
        assert shifts == {skew[rank]}, rank
        # Durations are untouched: skew is a clock offset, not a slowdown.
        assert [x["dur"] for x in a] == [y["dur"] for y in b]


def _digest(run_dir: Path) -> list[str]:
    files = sorted(run_dir.rglob("*.json.gz"))
    return [hashlib.sha256(gzip.open(p).read()).hexdigest() for p in files] + [
        hashlib.sha256((run_dir / "ground_truth.json").read_bytes()).hexdigest()]


def test_runs_are_deterministic_by_seed(tmp_path: Path) -> None:
    cfg = dict(tp=2, pp=2, dp=1, microbatches=4, vpp=2, schedule="interleaved", layers=4,
               hidden=256, heads=8, seq_length=256, vocab=1024, iterations=2,
               stragglers=((2, 1.4),), clock_skew_us=30.0, gpus_per_node=2)
    first = simulate_run(SimConfig(**cfg, seed=11), tmp_path / "a")
    again = simulate_run(SimConfig(**cfg, seed=11), tmp_path / "b", jobs=2)  # worker processes
    other = simulate_run(SimConfig(**cfg, seed=12), tmp_path / "c")
    assert _digest(first.out_dir) == _digest(again.out_dir)
    assert _digest(first.out_dir) != _digest(other.out_dir)


def test_iterations_follow_each_other(tmp_path: Path) -> None:
    cfg = SimConfig(tp=1, pp=2, dp=1, microbatches=2, layers=2, hidden=256, heads=8,
                    seq_length=256, vocab=1024, iterations=3, first_iteration=10)
    truth = simulate_run(cfg, tmp_path).ground_truth
    assert truth["iterations"] == [10, 11, 12]
    for rank in ("0", "1"):
        ends = [truth["timing"][str(i)]["ranks"][rank]["cpu_end_us"] for i in (10, 11, 12)]
        starts = [truth["timing"][str(i)]["ranks"][rank]["cpu_start_us"] for i in (10, 11, 12)]
        assert starts[1] > ends[0] and starts[2] > ends[1]
    steps = {e["name"] for e in _trace(tmp_path, 0, 11) if e["name"].startswith("ProfilerStep")}
    assert steps == {"ProfilerStep#11"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(tp=1, pp=1, dp=1, schedule="interleaved", vpp=2), "needs pp >= 2"),
        (dict(tp=1, pp=2, dp=1, schedule="interleaved"), "needs vpp >= 2"),
        (dict(tp=1, pp=2, dp=1, vpp=2), "needs --schedule interleaved"),
        (dict(tp=1, pp=4, dp=1, vpp=2, schedule="interleaved", microbatches=6, layers=8),
         "multiple of pp"),
        (dict(tp=1, pp=3, dp=1, layers=4), "divisible by pp\\*vpp"),
        (dict(tp=2, pp=1, dp=1, stragglers=((2, 1.5),)), "outside 0..1"),
        (dict(tp=1, pp=1, dp=1, microbatches=0), "positive integer"),
    ],
)
def test_invalid_configs_are_rejected(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SimConfig(**kwargs)


def test_parse_straggler() -> None:
    assert parse_straggler("5:1.5") == (5, 1.5)
    assert parse_straggler(" 12 : 2 ") == (12, 2.0)
    with pytest.raises(ValueError, match="RANK:FACTOR"):
        parse_straggler("5x1.5")


def test_cli_simulate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    code = main(["simulate", "--tp", "2", "--pp", "2", "--dp", "1", "--vpp", "2",
                 "--microbatches", "4", "--iterations", "1", "--layers", "4", "--hidden", "256",
                 "--heads", "8", "--seq-length", "256", "--straggler", "1:1.5", "3:1.2",
                 "--clock-skew-us", "10", "--seed", "1", "--out", str(out), "-q"])
    assert code == 0
    truth = (out / "ground_truth.json").read_text()
    assert '"schedule": "interleaved"' in truth
    assert len(list(out.glob("iteration_1/rank_*_iter_1.pt.trace.json.gz"))) == 4
    assert "ground truth" in capsys.readouterr().err
    assert main(["simulate", "--tp", "2", "--pp", "3", "--dp", "1", "--microbatches", "4",
                 "--iterations", "1", "--layers", "4", "--out", str(tmp_path / "bad")]) == 2
    assert "divisible by pp*vpp" in capsys.readouterr().err
    assert main(["simulate", "--tp", "1", "--pp", "1", "--dp", "1", "--microbatches", "1",
                 "--iterations", "1", "--straggler", "nope", "--out", str(tmp_path)]) == 2
