"""``tracehouse simulate --record-shapes``: the ops' shapes, and nothing else, change.

Simulating a small run takes well under a second and loads nothing, so these
run in the fast set; what the warehouse makes of the shapes is
tests/test_models_efficiency.py's (a simulated run in the reference warehouse).
"""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path

import pytest

from tracehouse.simulate import SimConfig, simulate_run
from tracehouse.simulate.model_config import (
    cost_model_flops_per_iteration,
    kernel_flops_per_iteration,
)

SMALL = dict(layers=4, hidden=256, heads=8, seq_length=256, vocab=1024, microbatches=4,
             iterations=1)
SHAPE_KEYS = ("Input Dims", "Input type", "Concrete Inputs")


def _trace(path: Path) -> dict:
    with gzip.open(path, "rt") as stream:
        return json.load(stream)


def _without_shapes(trace: dict) -> dict:
    for event in trace["traceEvents"]:
        for key in SHAPE_KEYS:
            event.get("args", {}).pop(key, None)
    trace.pop("record_shapes")
    return trace


def test_record_shapes_adds_the_ops_shapes_and_changes_nothing_else(tmp_path: Path) -> None:
    """Every trace of a run recorded with shapes is the run without them plus the
    ops' Input Dims / Input type / Concrete Inputs and the header's record_shapes: the
    timings, kernels and call tree are the same, and without the flag no op has shapes."""
    cfg = SimConfig(tp=2, pp=2, dp=1, vpp=2, schedule="interleaved", stragglers=((1, 1.5),),
                    **SMALL)
    plain = simulate_run(cfg, tmp_path / "plain")
    shaped = simulate_run(replace(cfg, record_shapes=True), tmp_path / "shaped")
    assert plain.ground_truth["timing"] == shaped.ground_truth["timing"]
    assert len(plain.trace_paths) == len(shaped.trace_paths) == 4
    for plain_path, shaped_path in zip(plain.trace_paths, shaped.trace_paths):
        without, with_shapes = _trace(plain_path), _trace(shaped_path)
        assert (without["record_shapes"], with_shapes["record_shapes"]) == (0, 1)
        assert not any("Input Dims" in event.get("args", {})
                       for event in without["traceEvents"])
        shaped_ops = {event["name"] for event in with_shapes["traceEvents"]
                      if "Input Dims" in event.get("args", {})}
        assert {"aten::mm", "aten::matmul", "aten::_scaled_dot_product_flash_attention",
                "aten::_scaled_dot_product_flash_attention_backward",
                "aten::layer_norm", "aten::add"} <= shaped_ops
        assert _without_shapes(with_shapes) == _without_shapes(without)


@pytest.mark.parametrize("layout", [
    dict(tp=2, pp=2, dp=2),
    dict(tp=1, pp=4, dp=1, microbatches=8),
    dict(tp=2, pp=2, dp=1, vpp=2, schedule="interleaved"),
    dict(tp=2, pp=1, dp=1, cp=2, sequence_parallel=True),
])
def test_timed_kernel_flops_add_up_to_the_closed_form(layout: dict, tmp_path: Path) -> None:
    """The GEMM and attention FLOPs the cost model timed, summed over every rank's
    kernels, are the closed form from the model config (TP, CP and sequence-parallel
    shards add up to the whole model); they exceed Megatron's model FLOPs by the
    flash-attention backward's recompute, half a forward attention per microbatch."""
    cfg = SimConfig(**{**SMALL, **layout})
    run = simulate_run(cfg, tmp_path / "run")
    truth = run.ground_truth["efficiency"]
    per_rank = truth["timed_kernel_flops_per_rank"]
    assert len(per_rank) == cfg.world
    kernel_flops = kernel_flops_per_iteration(cfg)
    assert truth["kernel_flops_per_iteration"] == kernel_flops
    assert sum(per_rank.values()) == pytest.approx(kernel_flops, rel=1e-12)
    forward_attention = (cfg.layers * cfg.micro_batch_size * 4 * cfg.seq_length ** 2
                         * cfg.hidden * 0.5)
    recompute = 0.5 * forward_attention * cfg.microbatches * cfg.dp
    assert kernel_flops - cost_model_flops_per_iteration(cfg) == pytest.approx(recompute,
                                                                               rel=1e-12)


def test_an_moe_run_states_its_timed_flops_per_rank_only(tmp_path: Path) -> None:
    """Megatron's closed form does not follow the MoE cost model's routing, so an MoE
    run states no per-iteration figure, but its ranks' timed FLOPs are there."""
    run = simulate_run(SimConfig(tp=1, pp=1, dp=2, ep=2, **SMALL), tmp_path / "moe")
    truth = run.ground_truth["efficiency"]
    assert truth["kernel_flops_per_iteration"] is None
    assert truth["model_flops_per_iteration"] is None
    assert all(flops > 0 for flops in truth["timed_kernel_flops_per_rank"].values())


def test_record_shapes_must_be_a_boolean() -> None:
    with pytest.raises(ValueError, match="record_shapes"):
        SimConfig(record_shapes="yes")  # type: ignore[arg-type]
