"""The efficiency marts on a real Hopper trace, against what torch itself measured.

tests/data/captured holds two PyTorch-profiler captures of a small GPT's
training step on one H200, recorded with shapes (capture_gpt_step.py beside
them says how), one with AdamW's foreach default and one with its fused
kernel. Beside each is what torch measured while capturing: its profiler's
own FLOP count per operator. The reference warehouse (tests/conftest.py)
ingests both as runs ``h200_gpt_step`` and ``h200_gpt_step_fused_adamw``.

What only a real Hopper trace could show, and these tests keep: torch >= 2.9
runs attention through cuDNN ops (``aten::_cudnn_attention_forward`` and
``_backward``) that had no FLOP model, and the backward's is_causal sits at
`Concrete Inputs` position 14, beyond what the FLOP macro read; a
hand-written ``params_dtype: "bf16"`` gave no peak, so no MFU.
"""

from __future__ import annotations

import json

import pytest

from conftest import CAPTURED_DATA, REFERENCE_CAPTURES, ReferenceWarehouse, query_warehouse

pytestmark = pytest.mark.slow

#: The plain-PyTorch pair: foreach AdamW, then fused AdamW.
BEFORE, AFTER = "h200_gpt_step", "h200_gpt_step_fused_adamw"
PLAIN = (BEFORE, AFTER)
#: megatron-core on one GPU through the Megatron patch (capture_megatron_gpu.py).
MEGATRON = "h200_megatron_tp1"


def _measured(run: str) -> dict:
    return json.loads((CAPTURED_DATA / f"{run}.measured.json").read_text())


def _model_args(run: str) -> dict:
    return json.loads((REFERENCE_CAPTURES[run] / "model_config.json").read_text())["megatron_args"]


@pytest.fixture(scope="module")
def warehouse(reference_warehouse: ReferenceWarehouse):
    return reference_warehouse.root


@pytest.mark.parametrize("run", PLAIN)
def test_mm_flops_equal_the_profilers_own_count(warehouse, run: str) -> None:
    """torch's profiler counts aten::mm and addmm from the same shapes
    (``with_flops=True``): mm is equal to the FLOP; addmm is ours plus its bias
    add (M·N per op, which TraceLens counts and torch does not)."""
    torch_flops = _measured(run)["torch_profiler_flops_by_op"]
    ours = dict(query_warehouse(warehouse, """
        select cpu_op_name, sum(flops) from fct_op_efficiency
        where run_id = ? and cpu_op_name in ('aten::mm', 'aten::addmm') group by all""", [run]))
    assert ours["aten::mm"] == torch_flops["aten::mm"]
    bias = ours["aten::addmm"] - torch_flops["aten::addmm"]
    assert 0 < bias < ours["aten::addmm"] * 1e-3


@pytest.mark.parametrize("run", PLAIN)
def test_cudnn_attention_is_counted_causal_both_ways(warehouse, run: str) -> None:
    """Forward 2·B·H·N²·(d_qk + d_v), halved for the causal mask; backward 2.5× it
    (flash/cuDNN recompute the scores: 5 GEMM-like products against 2)."""
    args = _model_args(run)
    head_dim = args["hidden_size"] // args["num_attention_heads"]
    forward = (2.0 * args["micro_batch_size"] * args["num_attention_heads"]
               * args["seq_length"] ** 2 * 2 * head_dim / 2)
    rows = dict(((name, (ops, flops, nulls)) for name, ops, flops, nulls in query_warehouse(
        warehouse, """
        select cpu_op_name, count(distinct cpu_op_slice_id), sum(flops),
               count(*) filter (where flops is null and flops_null_reason <> 'helper_of_op')
        from fct_kernels where run_id = ? and cpu_op_name like 'aten::_cudnn_attention_%'
        group by all""", [run])))
    layers_times_iterations = args["num_layers"] * _measured(run)["profiled_iterations"]
    for name, factor in (("aten::_cudnn_attention_forward", 1.0),
                         ("aten::_cudnn_attention_backward", 2.5)):
        ops, flops, unexplained = rows[name]
        assert (ops, unexplained) == (layers_times_iterations, 0)
        assert flops == pytest.approx(ops * forward * factor, rel=1e-12)


def test_no_kernel_beats_its_roof_and_gemms_run_near_it(warehouse) -> None:
    rows = query_warehouse(warehouse, """
        select max(roof_ratio), sum(flops) / sum(dur_ns) / 1e3, any_value(peak_tflops)
        from fct_kernels where run_id in (?, ?, ?) and flop_model in ('mm', 'addmm')""",
        list(REFERENCE_CAPTURES))
    worst_ratio, gemm_tflops, peak = rows[0]
    assert peak == pytest.approx(989.4)  # seed gpu_peaks: H200 dense bf16
    assert worst_ratio <= 1.0
    # A bf16 GEMM of these sizes runs at 60-95% of the dense peak on Hopper.
    assert 0.6 * peak < gemm_tflops < peak


@pytest.mark.parametrize("run", PLAIN)
def test_model_flops_and_counted_flops_differ_by_what_megatron_leaves_out(
        warehouse, run: str) -> None:
    """Megatron's formula (int_model_flops_computed) and the FLOPs counted from
    shapes come by separate roads; on this GPT they differ exactly where the
    formula says they should: it counts attention's backward as 2× the forward
    where the kernels do 2.5×, and it leaves out addmm's bias adds."""
    (model_flops, counted, attention_forward), = query_warehouse(warehouse, """
        with iteration as (
            select any_value(model_flops_per_iteration) as model_flops
            from fct_iteration_efficiency where run_id = $run
        ), counted as (
            select sum(flops) / 2 as flops,
                   sum(flops) filter (where cpu_op_name = 'aten::_cudnn_attention_forward') / 2
                       as attention_forward
            from fct_op_efficiency where run_id = $run
        )
        select model_flops, flops, attention_forward from iteration, counted""", {"run": run})
    torch_gemm = sum(_measured(run)["torch_profiler_flops_by_op"][op]
                     for op in ("aten::mm", "aten::addmm")) / 2  # two profiled iterations
    assert model_flops == pytest.approx(torch_gemm + 3 * attention_forward, rel=1e-9)
    bias = counted - torch_gemm - 3.5 * attention_forward
    assert 0 < bias < 1e-3 * counted


def test_mfu_is_there_for_a_hand_written_bf16_config(warehouse) -> None:
    rows = query_warehouse(warehouse, """
        select run_id, params_dtype, peak_tflops, mfu from fct_run_efficiency
        where run_id in (?, ?) order by run_id""", list(PLAIN))
    assert [(r[1], r[2]) for r in rows] == [("torch.bfloat16", pytest.approx(989.4))] * 2
    assert all(0.2 < mfu < 0.6 for *_, mfu in rows), rows


def test_fused_adamw_shortens_the_step_and_its_optimizer_kernels(warehouse) -> None:
    """The before/after pair as `tracehouse compare` reads it: every iteration is
    shorter with the fused optimizer, and the kernels under
    ``Optimizer.step#AdamW.step`` are fewer and take less GPU time."""
    steps = query_warehouse(warehouse, """
        select run_id, iteration, step_ns from fct_iteration_summary
        where run_id in (?, ?) order by iteration, run_id""", [BEFORE, AFTER])
    by_iteration: dict[int, dict[str, int]] = {}
    for run, iteration, step_ns in steps:
        by_iteration.setdefault(iteration, {})[run] = step_ns
    assert len(by_iteration) == 2
    assert all(it[AFTER] < it[BEFORE] for it in by_iteration.values()), by_iteration
    optimizer = dict((run, (kernels, ns)) for run, kernels, ns in query_warehouse(warehouse, """
        select k.run_id, count(*), sum(k.dur_ns)
        from fct_kernels as k
        inner join stg_lake__annotation_ranges as a
            on k.trace_id = a.trace_id and k.annotation_slice_id = a.slice_id
        where k.run_id in (?, ?) and a.annotation_path like '%> Optimizer.step#AdamW.step'
        group by all""", [BEFORE, AFTER]))
    assert optimizer[AFTER][0] < optimizer[BEFORE][0] / 4
    assert optimizer[AFTER][1] < optimizer[BEFORE][1]


def test_megatron_phases_hold_every_microbatch_alike(warehouse) -> None:
    """megatron-core's schedule frames give each GPU kernel its phase and
    microbatch on a real GPU trace: 4 forward and 4 backward microbatches per
    iteration, each (same shapes, same data) within a few percent of the
    others' kernel time, and an optimizer phase."""
    rows = query_warehouse(warehouse, """
        select iteration, phase, microbatch, sum(dur_ns)
        from fct_kernels where run_id = ? and phase in ('forward', 'backward', 'optimizer')
        group by all order by all""", [MEGATRON])
    microbatches = _model_args(MEGATRON)["global_batch_size"]
    iterations = sorted({row[0] for row in rows})
    assert iterations == [2, 3]
    for iteration in iterations:
        for phase in ("forward", "backward"):
            times = {mb: ns for it, ph, mb, ns in rows if (it, ph) == (iteration, phase)}
            assert sorted(times) == list(range(microbatches)), (iteration, phase, times)
            assert max(times.values()) < 1.05 * min(times.values()), (iteration, phase, times)
        assert any(ph == "optimizer" and it == iteration and ns > 0 for it, ph, _, ns in rows)


def test_megatron_mfu_from_the_patchs_config_is_below_the_unprofiled_one(warehouse) -> None:
    """The patch's model_config.json gives MFU; the profiled iterations (with
    Python stacks) run slower than the unprofiled ones torch timed while
    capturing, so the mart's MFU is lower than the unprofiled estimate."""
    (source, model_flops, peak, mfu), = query_warehouse(warehouse, """
        select c.config_source, r.model_flops / r.iterations, r.peak_tflops, r.mfu
        from fct_run_efficiency as r
        inner join intermediate.int_model_flops_computed as c on r.run_id = c.run_id
        where r.run_id = ?""", [MEGATRON])
    times = sorted(_measured(MEGATRON)["unprofiled_iteration_ms"])
    unprofiled_mfu = model_flops / (times[len(times) // 2] * 1e-3) / (peak * 1e12)
    assert source == "megatron"
    assert unprofiled_mfu / 3 < mfu < unprofiled_mfu, (mfu, unprofiled_mfu)


def test_a_single_stage_run_has_no_pipeline_bubble(warehouse) -> None:
    """PP = 1 is no pipeline: its idle time is idle, not a bubble."""
    assert query_warehouse(warehouse, "select count(*) from fct_pipeline_bubbles where run_id = ?",
                           [MEGATRON]) == [(0,)]
    rows = query_warehouse(warehouse, """
        select bubble_ratio, idle_share from fct_iteration_summary where run_id = ?""",
        [MEGATRON])
    assert len(rows) == 2 and all(bubble is None and idle > 0 for bubble, idle in rows), rows


def test_megatron_compute_is_mostly_counted(warehouse) -> None:
    """The local-spec GPT's forward and backward run GEMMs (linear layers,
    unfused attention's baddbmm/bmm), softmax and elementwise kernels with a
    FLOP or byte model: most of their compute time has one."""
    (coverage,), = query_warehouse(warehouse, """
        select sum(flop_coverage_ratio * compute_ns) / sum(compute_ns)
        from fct_op_efficiency where run_id = ? and phase in ('forward', 'backward')""",
        [MEGATRON])
    assert coverage > 0.75
