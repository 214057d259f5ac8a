"""Training phases of plain PyTorch traces, from torch's own signals (seed torch_phase_patterns).

A job without Megatron's schedule frames (HTA's users, FSDP, DLRM) still says
which kernels are which: torch.optim wraps its step in an
``Optimizer.step#AdamW.step`` range, and the autograd engine runs backward on
a thread of its own. int_kernels_classified reads both; Megatron's frames
keep priority, so a Megatron trace's phases are what its frames give.

The checks read signals the models do not use where the trace has them: the
autograd thread's own name (``pt_autograd_0`` in torch 2.11's thread
metadata), and the CPU op that launched each kernel (fct_op_efficiency).
"""

from __future__ import annotations

import gzip
import json

import pytest

from conftest import REFERENCE_CAPTURES, ReferenceWarehouse, query_warehouse

pytestmark = pytest.mark.slow

#: The plain-PyTorch H200 captures (tests/data/captured/README.md).
PLAIN = ("h200_gpt_step", "h200_gpt_step_fused_adamw")
#: Phase counts of the Megatron capture's kernels as main built them before
#: torch phases existed (fct_kernels, count per phase): its frames must decide alone.
MEGATRON_PHASE_COUNTS = {"backward": 3632, "forward": 1904, "optimizer": 1124, "other": 217}


@pytest.fixture(scope="module")
def warehouse(reference_warehouse: ReferenceWarehouse):
    return reference_warehouse.root


def _phases_by(warehouse, run: str, condition: str, table: str = "fct_kernels",
               params: tuple = ()) -> dict[str, int]:
    """Kernel count per phase of ``run``'s kernels that meet ``condition`` (SQL on ``table``
    k, its ``?`` bound to ``params``)."""
    return dict(query_warehouse(warehouse, f"""
        select k.phase, count(*) from {table} as k
        where k.run_id = ? and {condition} group by 1""", [run, *params]))


@pytest.mark.parametrize("run", PLAIN)
def test_kernels_inside_optimizer_step_are_optimizer(warehouse, run: str) -> None:
    """Every kernel launched inside ``Optimizer.step#AdamW.step`` (or a range in it) is
    optimizer, and nothing else is but zero_grad's."""
    inside = _phases_by(warehouse, run, """k.annotation_slice_id in (
        select r.slice_id from fct_annotation_ranges as r
        where r.run_id = k.run_id and r.annotation_path like '%Optimizer.step#AdamW.step%')""")
    assert set(inside) == {"optimizer"} and inside["optimizer"] > 0, inside
    outside = _phases_by(warehouse, run, """k.phase = 'optimizer' and k.annotation_slice_id in (
        select r.slice_id from fct_annotation_ranges as r
        where r.run_id = k.run_id and r.annotation_path not like '%Optimizer.%')""")
    assert outside == {}, outside


def _autograd_tids(run: str) -> list[str]:
    """The threads the trace file itself names ``pt_autograd_*`` (a metadata event the
    lake's threads table overwrites with the later ``python3`` name of the same tid)."""
    [trace] = REFERENCE_CAPTURES[run].glob("*.pt.trace.json.gz")
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    return sorted({str(event["tid"]) for event in events
                   if event.get("ph") == "M" and event.get("name") == "thread_name"
                   and "pt_autograd" in event["args"]["name"]})


@pytest.mark.parametrize("run", PLAIN)
def test_autograd_threads_kernels_are_backward(warehouse, run: str) -> None:
    """The kernels launched from the thread torch names ``pt_autograd_0`` are all backward,
    and no other thread launches backward work (the launch's thread: in the intermediate
    model, which fct_kernels leaves it out of)."""
    tids = _autograd_tids(run)
    assert len(tids) == 1, tids
    kernels = "intermediate.int_kernels_classified"
    autograd_thread = """(k.trace_id, k.launch_track_id) in (
        select (t.trace_id, t.track_id) from stg_lake__threads as t
        where t.run_id = k.run_id and t.tid = ?)"""
    on_thread = _phases_by(warehouse, run, autograd_thread, kernels, (tids[0],))
    assert set(on_thread) == {"backward"} and on_thread["backward"] > 0, on_thread
    elsewhere = _phases_by(warehouse, run, f"k.phase = 'backward' and not {autograd_thread}",
                           kernels, (tids[0],))
    assert elsewhere == {}, elsewhere


@pytest.mark.parametrize("run", PLAIN)
def test_attention_ops_fall_in_their_phase(warehouse, run: str) -> None:
    """cuDNN attention's forward op launches forward work, its backward op backward work;
    the loss (cross entropy) is forward; copies before backward are other."""
    phases = dict(query_warehouse(warehouse, """
        select cpu_op_name, string_agg(distinct phase, ',') from fct_op_efficiency
        where run_id = ? and cpu_op_name in ('aten::_cudnn_attention_forward',
            'aten::_cudnn_attention_backward', 'aten::_log_softmax', 'aten::nll_loss_forward')
        group by 1""", [run]))
    assert phases == {"aten::_cudnn_attention_forward": "forward",
                      "aten::_cudnn_attention_backward": "backward",
                      "aten::_log_softmax": "forward",
                      "aten::nll_loss_forward": "forward"}, phases
    copies = _phases_by(warehouse, run, "k.category = 'gpu_memcpy'")
    assert "forward" not in copies and copies, copies


def test_megatron_capture_keeps_its_frames_phases(warehouse) -> None:
    """h200_megatron_tp1 has Megatron frames (and an autograd thread, and torch.optim
    ranges): its kernels' phases are the frames' alone, as before torch phases."""
    counts = _phases_by(warehouse, "h200_megatron_tp1", "true")
    assert counts == MEGATRON_PHASE_COUNTS
    # Frames give every forward/backward kernel its microbatch; torch's rules give none.
    unassigned = _phases_by(warehouse, "h200_megatron_tp1",
                            "k.phase in ('forward', 'backward') and k.microbatch is null")
    assert unassigned == {}


def test_dlrm_gets_the_phases_its_trace_supports(warehouse) -> None:
    """dlrm_8rank (torch of 2023, both threads named python3): its autograd thread is
    found by its top-level engine ops; the training loop's thread, which runs one
    AccumulateGrad inside its step, is not backward; Adagrad's step is optimizer."""
    rows = query_warehouse(warehouse, """
        select rank, phase, count(*) from fct_kernels where run_id = 'dlrm_8rank'
        group by all order by all""")
    per_rank: dict[int, dict[str, int]] = {}
    for rank, phase, count in rows:
        per_rank.setdefault(rank, {})[phase] = count
    assert sorted(per_rank) == list(range(8))
    for rank, counts in per_rank.items():
        assert all(counts.get(phase, 0) > 0 for phase in ("forward", "backward", "optimizer")), (
            rank, counts)
    threads = query_warehouse(warehouse, """
        select count(distinct (trace_id, track_id)), count(distinct trace_id)
        from intermediate.int_backward_threads_found
        where trace_id in (select trace_id from fct_kernels where run_id = 'dlrm_8rank')""")
    assert threads == [(8, 8)]
