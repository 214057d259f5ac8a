"""fct_idle_breakdown and fct_kernel_launches against HTA on real traces from elsewhere.

The traces in ``tests/data/external`` (real GPU jobs from Holistic Trace
Analysis' own test data; README there names each source) are ingested into
one warehouse (one run each) and built twice: with the defaults (ns) and with
``kernel_time_unit_ns: 1000``. HTA 0.6.1 (the ``traceinsight`` package)
analyses the same files twice: with its default inward rounding of
ns-resolution traces to whole microseconds, which the 1000 build reproduces
exactly, and with that rounding switched off (``HTA_DISABLE_NS_ROUNDING``),
which the ns build reproduces exactly where the trace's timestamps are whole
microseconds. On the ns-resolution trace HTA still reads every timestamp
as a float64 (0.25 us steps at today's clocks), which moves a few percent of
a category between host_wait and kernel_wait; there each category is
compared within 1% of its stream's idle time instead.

What these traces caught (issue 29, item 15): HTA counts only work launched
in the trace when a trace has two ProfilerSteps or more (867 kernels queued
before profiling began had made ``other`` 13-20% too large); HTA's short
kernels are those whose launch is no runtime outlier; and at 1 us HTA's
float64 reading of ns timestamps made host_wait and kernel_wait 12% apart.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import query_warehouse
from tracehouse.build.dbt import EXIT_OK, run_dbt
from tracehouse.ingest.runner import ingest_paths

pytestmark = pytest.mark.slow

EXTERNAL = Path(__file__).parent / "data" / "external"
CAPTURED = Path(__file__).parent / "data" / "captured"
#: run name -> vendored trace.
TRACES = {
    "negative_queue": EXTERNAL / "hta_negative_queue_rank0.json.gz",
    "ns_resolution": EXTERNAL / "hta_ns_resolution_rank0.json.gz",
    "alexnet": EXTERNAL / "hta_alexnet.json.gz",
    "event_sync_multi_stream": EXTERNAL / "hta_event_sync_multi_stream.json.gz",
    # PyTorch < 1.13 wrote `Kernel`, `Runtime`, `async_gpu`: ingest maps them.
    "legacy_categories": EXTERNAL / "hta_legacy_categories_inference.json.gz",
    # Made for this project on an H200 (tests/data/captured/README.md): torch 2.11,
    # a side-stream copy with an event wait and a host sync per step.
    "h200_gpt_step": CAPTURED / "h200_gpt_step" / "rank-0.pt.trace.json.gz",
    "h200_megatron_tp1": CAPTURED / "h200_megatron_tp1" / "iteration_2"
    / "rank_0000_iter_2.pt.trace.json.gz",
}
#: Traces whose timestamps have sub-microsecond digits.
NS_RESOLUTION = {"ns_resolution", "h200_gpt_step", "h200_megatron_tp1"}
#: Acceptance tolerance (issue 29): 1%.
REL = 0.01
#: HTA's launch cut-offs, us (get_cuda_kernel_launch_stats' defaults).
RUNTIME_CUTOFF_US = 50
LAUNCH_DELAY_CUTOFF_US = 100
#: Build vars per mode.
MODES = {"ns": None, "us": "{kernel_time_unit_ns: 1000}"}


@pytest.fixture(scope="session")
def external_warehouses(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """mode -> warehouse: the vendored traces ingested once, built in ns and in us."""
    root = tmp_path_factory.mktemp("idle_external") / "warehouse"
    for run, path in TRACES.items():
        result = ingest_paths([path], warehouse=root, run=run, progress=False)
        assert not result.failed, result.failed
    assert run_dbt(["build"], root) == EXIT_OK
    us = tmp_path_factory.mktemp("idle_external_us") / "warehouse"
    shutil.copytree(root, us, ignore=shutil.ignore_patterns("dbt"))
    args = ["build", "--select", "+fct_idle_breakdown", "+fct_kernel_launches"]
    assert run_dbt([*args, "--vars", MODES["us"]], us) == EXIT_OK
    yield {"ns": root, "us": us}


@pytest.fixture(scope="session")
def hta_external(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], dict]:
    """(mode, run) -> {'idle': DataFrame, 'launch': DataFrame} from HTA, rank 0.

    Mode "us" is HTA's default (ns traces rounded to whole us), "ns" with
    that rounding switched off.
    """
    pytest.importorskip("hta", reason="HTA (pip extra 'traceinsight') is not installed")
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis
    from hta.configs.env_options import HTAEnvOptions
    from hta.trace_analysis import TraceAnalysis

    options = HTAEnvOptions.instance()
    was = options.disable_ns_rounding()
    logging.getLogger("hta").setLevel(logging.ERROR)
    out: dict[tuple[str, str], dict] = {}
    # HTA's per-stream kernel frames (ts, dur, ts_runtime), as its idle analysis
    # sees them: the only way to see how it classified each gap.
    analyze_stream = BreakdownAnalysis._analyze_idle_time_for_stream
    frames: dict[int, object] = {}

    def keep_frame(cls, stream, gpu_kernels, delay, show_idle_interval_stats=False):
        frames[int(stream)] = gpu_kernels[gpu_kernels.stream == stream].copy()
        return analyze_stream.__func__(cls, stream, gpu_kernels, delay,
                                       show_idle_interval_stats)

    BreakdownAnalysis._analyze_idle_time_for_stream = classmethod(keep_frame)
    try:
        for mode in MODES:
            options.set_disable_ns_rounding(mode == "ns")
            for run, path in TRACES.items():
                folder = tmp_path_factory.mktemp(f"hta_{mode}_{run}")  # one file per folder
                shutil.copy(path, folder / path.name)
                analysis = TraceAnalysis(trace_dir=str(folder), include_last_profiler_step=True)
                [rank] = analysis.t.get_ranks()
                frames.clear()
                idle = analysis.get_idle_time_breakdown(ranks=[rank], visualize=False)[0]
                out[(mode, run)] = {
                    "idle": idle,
                    "kernels": dict(frames),
                    "events": analysis.t.get_trace(rank)[["correlation"]],
                    "launch": analysis.get_cuda_kernel_launch_stats(ranks=[rank], visualize=False)[
                        rank
                    ],
                }
    finally:
        BreakdownAnalysis._analyze_idle_time_for_stream = analyze_stream
        options.set_disable_ns_rounding(was)
    return out


def _ours_idle(warehouse: Path, run: str) -> dict[tuple[int, str], float]:
    rows = query_warehouse(
        warehouse,
        "select stream, idle_category, idle_ns / 1000.0 from fct_idle_breakdown where run_id = ?",
        [run],
    )
    return {(int(stream), category): us for stream, category, us in rows}


#: Disagreements with HTA's output that one documented difference explains
#: (int_stream_idle_categorized's docstring): work queued before the trace's
#: CPU events begin has no launch in the trace, and HTA's join gives it the
#: launch time of its data frame's row 0 (the "not found" index, 0, read as a
#: row). On the Megatron H200 capture, 203 kernels of the previous step's
#: optimizer (bf16 copies, multi_tensor_apply) ran in the first ~5 ms, before
#: the first CPU event, and row 0 is an autograd op at 27,470 us: HTA calls
#: their 514 us of gaps host_wait, tracehouse kernel_wait (7,380 against
#: 6,866 us, 7%). In ns mode the same 514 us lie within the 1%-of-stream
#: tolerance of ns-resolution traces, so only the us mode needs this.
EXPLAINED_DIFFERENT = {("us", "h200_megatron_tp1")}


@pytest.fixture(params=[(mode, run) for mode in MODES for run in TRACES], ids="-".join)
def case(
    request: pytest.FixtureRequest, external_warehouses: dict[str, Path], hta_external: dict
) -> tuple[str, str, Path, dict]:
    """(mode, run, our warehouse of that mode, HTA's results in that mode) per trace."""
    mode, run = request.param
    return mode, run, external_warehouses[mode], hta_external[(mode, run)]


def test_idle_breakdown_equals_hta(case: tuple[str, str, Path, dict]) -> None:
    mode, run, warehouse, hta = case
    if (mode, run) in EXPLAINED_DIFFERENT:
        with pytest.raises(AssertionError):  # HTA's own output differs ...
            _assert_idle_equals_hta(mode, run, warehouse, hta["idle"])
        # ... by the launch-less work alone: undo that one artifact, and HTA agrees.
        _assert_idle_equals_hta(mode, run, warehouse, _hta_idle_without_row0_launches(hta))
        return
    _assert_idle_equals_hta(mode, run, warehouse, hta["idle"])


def _hta_idle_without_row0_launches(hta: dict):
    """HTA's idle breakdown recomputed from its own per-kernel frames, with one
    change: work whose launch HTA took from its frame's row 0 (the runtime
    event found has another correlation id: the launch is not in the trace)
    has no launch, so it is never host_wait, as tracehouse has it."""
    import pandas as pd

    events = hta["events"]
    rows = []
    for stream, frame in hta["kernels"].items():
        kernels = frame.sort_values(by="ts").copy()
        found = events["correlation"].reindex(kernels["index_runtime"]).to_numpy()
        launched_in_trace = found == kernels["correlation"].to_numpy()
        ts_runtime = kernels["ts_runtime"].where(launched_in_trace)
        previous_end = (kernels["ts"] + kernels["dur"]).shift(1)
        gap = kernels["ts"] - previous_end
        host_wait = (ts_runtime > previous_end).fillna(False)
        kernel_wait = ~host_wait & (gap < 30)  # HTA's consecutive_kernel_delay default
        category = pd.Series("other", index=kernels.index)
        category[host_wait] = "host_wait"
        category[kernel_wait] = "kernel_wait"
        for name, total in gap.groupby(category).sum().items():
            rows.append({"stream": stream, "idle_category": name, "idle_time": float(total)})
    return pd.DataFrame(rows)


def _assert_idle_equals_hta(mode: str, run: str, warehouse: Path, frame) -> None:
    ours = _ours_idle(warehouse, run)
    assert {stream for stream, _ in ours} == {int(s) for s in frame["stream"]}
    totals = frame.groupby("stream")["idle_time"].sum()
    for row in frame.itertuples():
        ours_us = ours[(int(row.stream), row.idle_category)]
        if mode == "ns" and run in NS_RESOLUTION:
            # HTA's float64 timestamps (0.25 us steps): within 1% of the stream.
            tolerance = REL * totals[row.stream] + 0.01
        else:
            tolerance = REL * row.idle_time + 0.01
        assert abs(ours_us - row.idle_time) <= tolerance, (
            row.stream,
            row.idle_category,
            ours_us,
            row.idle_time,
        )
    for stream, hta_total in totals.items():
        our_total = sum(v for (s, _), v in ours.items() if s == int(stream))
        assert our_total == pytest.approx(hta_total, rel=REL, abs=0.01), stream


def _hta_launch_counts(frame) -> dict[str, int]:
    """HTA's findings as its visualize_cuda_launch_kernel_info cuts them."""
    cpu, gpu, delay = frame["cpu_duration"], frame["gpu_duration"], frame["launch_delay"]
    return {
        "launches": len(frame),
        "short_kernels": int(((cpu <= RUNTIME_CUTOFF_US) & (gpu < cpu)).sum()),
        "runtime_outliers": int((cpu > RUNTIME_CUTOFF_US).sum()),
        "launch_delay_outliers": int((delay > LAUNCH_DELAY_CUTOFF_US).sum()),
    }


def test_launch_stats_equal_hta(case: tuple[str, str, Path, dict]) -> None:
    _mode, run, warehouse, hta = case
    frame = hta["launch"]
    [ours] = query_warehouse(
        warehouse,
        """
        select
            count(*),
            count(*) filter (where is_short_kernel),
            count(*) filter (where is_runtime_outlier),
            count(*) filter (where is_launch_delay_outlier)
        from fct_kernel_launches where run_id = ?
        """,
        [run],
    )
    expected = _hta_launch_counts(frame)
    assert dict(zip(expected, ours, strict=True)) == expected
    correlations = query_warehouse(
        warehouse,
        "select correlation_id from fct_kernel_launches where run_id = ?",
        [run],
    )
    assert sorted(c for (c,) in correlations) == sorted(int(c) for c in frame["correlation"])


def test_multi_step_traces_count_only_work_launched_in_the_trace(
    external_warehouses: dict[str, Path],
) -> None:
    """negative_queue: 872 kernels (867 on stream 7) were queued before
    profiling began; HTA drops them on a trace with several ProfilerSteps,
    and so does the idle breakdown (each stream's first kernel has no gap)."""
    [(counted, every_kernel)] = query_warehouse(
        external_warehouses["ns"],
        """
        select
            (select sum(gap_count) + count(distinct stream)
             from fct_idle_breakdown where run_id = 'negative_queue'),
            (select count(*) from fct_kernels where run_id = 'negative_queue')
        """,
    )
    assert counted == 6875
    assert every_kernel == 6875 + 872


def test_legacy_category_names_land_as_todays(external_warehouses: dict[str, Path]) -> None:
    """A trace of PyTorch < 1.13 names its kernels `Kernel`, its CUDA calls
    `Runtime` and its launch flows `async_gpu`: ingest maps them to today's
    names, so its 4 kernels are kernels, each with its launching call."""
    [(kernels, launched, kinds)] = query_warehouse(
        external_warehouses["ns"],
        """
        select count(*), count(launch_slice_id), list(distinct category)
        from fct_kernels where run_id = 'legacy_categories'
        """,
    )
    assert (kernels, launched, kinds) == (4, 4, ["kernel"])
