"""Chart families heatmaps, kernels, comm_groups and compare on real warehouses.

Each family renders from the marts of a warehouse built by the real ingest
and dbt (a simulated Megatron run, the real dlrm_8rank GPU traces and the
real CPU-only megatron-core run tp1_pp4_dp2), and every image it writes must
be a real picture: a PNG of some size with many colours and ink on it, and
an SVG. Large runs are checked on a 1,024-rank copy of the marts' schema
(real DuckDB tables with the marts' columns) so the aggregate layouts are
exercised without simulating a thousand traces.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import matplotlib.image as mpimg
import numpy as np
import pytest

from report_warehouse import HOSTILE_KERNEL, ReportWarehouse
from tracehouse.core.warehouse import Warehouse
from tracehouse.reports import comm_groups, compare, heatmaps, kernels
from tracehouse.reports.base import ChartContext, NothingToShow, RenderedChart
from tracehouse.reports.kernels import plain_text, short_kernel_name, unique_labels

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def wh(report_wh: ReportWarehouse) -> ReportWarehouse:
    """The session's report warehouse (conftest), read-only."""
    return report_wh


@pytest.fixture(scope="module")
def con(wh: ReportWarehouse) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only connection for this module's tests, closed at its end: an open one
    holds DuckDB's instance of the file in this process, so a later module's connection
    with other settings (`tracehouse compare`'s allowed_directories) would be refused."""
    connection = duckdb.connect(str(Warehouse(wh.root).database), read_only=True)
    yield connection
    connection.close()


def _render(family: object, con: duckdb.DuckDBPyConnection, run: str, out: Path,
            compare_run: str | None = None) -> list[RenderedChart]:
    ctx = ChartContext(con=con, run_id=run, out_dir=out, compare_run_id=compare_run)
    return family.render(ctx)  # type: ignore[attr-defined]


def assert_real_picture(chart: RenderedChart) -> None:
    """The PNG is a drawing (size, colours, ink), the SVG exists, no trace text leaks as markup."""
    assert chart.png.is_file() and chart.svg.is_file()
    assert chart.png.stat().st_size > 10_000, chart.png
    pixels = mpimg.imread(chart.png)[..., :3]
    assert pixels.shape[0] > 150 and pixels.shape[1] > 300
    colours = np.unique((pixels * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 30, f"{chart.png} looks blank ({len(colours)} colours)"
    ink = (pixels < 0.97).any(axis=-1).mean()
    assert ink > 0.01, f"{chart.png} is almost white ({ink:.1%} ink)"
    svg = chart.svg.read_text()
    assert "<svg" in svg and "<script" not in svg
    assert chart.title and chart.caption


# --------------------------------------------------------------------------- heatmaps


def test_heatmaps_on_a_simulated_run_name_the_straggler(
        con: duckdb.DuckDBPyConnection, wh: ReportWarehouse, tmp_path: Path) -> None:
    charts = _render(heatmaps.FAMILY, con, wh.need("sim_a"), tmp_path)
    assert [c.slug for c in charts] == ["heatmaps-rank-iteration"]
    assert_real_picture(charts[0])
    # Rank 1 computes 1.5x longer (the simulator's straggler): the caption's compute note says so.
    assert "compute: worst rank 1 " in charts[0].caption


def test_heatmap_panels_share_one_scale_from_zero(
        con: duckdb.DuckDBPyConnection, wh: ReportWarehouse, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """1.0 ms and 1.1 ms are neighbouring tones, not the two ends of a panel's own scale."""
    low, high = heatmaps.color_range(np.array([1.0, 1.1, np.nan]))
    assert (low, high) == (0.0, 1.1)
    limits = []
    draw = heatmaps.sns.heatmap

    def spy(*args: object, **kwargs: object) -> object:
        limits.append((kwargs["vmin"], kwargs["vmax"]))
        return draw(*args, **kwargs)

    monkeypatch.setattr(heatmaps.sns, "heatmap", spy)
    charts = _render(heatmaps.FAMILY, con, wh.need("sim_a"), tmp_path)
    assert len(limits) == len(heatmaps.GPU_METRICS) and len(set(limits)) == 1
    assert limits[0][0] == 0.0
    assert "shares one colour scale" in charts[0].caption


@pytest.mark.parametrize("run", ["dlrm_8rank", "tp1_pp4_dp2"])
def test_heatmaps_on_real_runs(con: duckdb.DuckDBPyConnection, wh: ReportWarehouse,
                               tmp_path: Path, run: str) -> None:
    charts = _render(heatmaps.FAMILY, con, wh.need(run), tmp_path)
    assert len(charts) == 1
    assert_real_picture(charts[0])
    expected = "CPU step frames" if run == "tp1_pp4_dp2" else "GPU kernels"
    assert expected in charts[0].caption


# --------------------------------------------------------------------------- kernels


@pytest.mark.parametrize("run", ["sim_a", "dlrm_8rank", "hostile"])
def test_kernels_render_top_and_spread(con: duckdb.DuckDBPyConnection, wh: ReportWarehouse,
                                       tmp_path: Path, run: str) -> None:
    charts = _render(kernels.FAMILY, con, wh.need(run), tmp_path)
    assert [c.slug for c in charts] == ["kernels-top", "kernels-spread"]
    for chart in charts:
        assert_real_picture(chart)


def test_hostile_kernel_names_stay_text_in_the_svg(con: duckdb.DuckDBPyConnection,
                                                    wh: ReportWarehouse, tmp_path: Path) -> None:
    charts = _render(kernels.FAMILY, con, wh.need("hostile"), tmp_path)
    svg = charts[0].svg.read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in svg  # drawn as text, escaped as XML
    assert "<script" not in svg


def test_cpu_only_run_has_no_kernel_charts(con: duckdb.DuckDBPyConnection, wh: ReportWarehouse,
                                           tmp_path: Path) -> None:
    """No kernel charts; communication by group comes from the c10d calls instead."""
    run = wh.need("tp1_pp4_dp2")
    assert _render(kernels.FAMILY, con, run, tmp_path) == []
    [chart] = _render(comm_groups.FAMILY, con, run, tmp_path)
    assert "c10d calls" in chart.caption and "pp" in chart.caption
    assert_real_picture(chart)


def test_kernel_names_are_shortened_sensibly() -> None:
    name = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, "
            "float, float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, "
            "3ul> >(int, at::native::BinaryFunctor<float, float, float, at::native::binary_"
            "internal::MulFunctor<float> >, std::array<char*, 3ul>)")
    assert short_kernel_name(name) == "vectorized_elementwise_kernel<BinaryFunctor…>"
    assert short_kernel_name("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)") == (
        "ncclDevKernel_SendRecv")
    assert short_kernel_name(HOSTILE_KERNEL) == HOSTILE_KERNEL  # short names stay as they are
    assert len(short_kernel_name("x" * 500)) <= kernels.LABEL_LIMIT
    # GEMMs that differ only in the middle keep distinct labels.
    gemms = [f"sm90_xmma_gemm_bf16bf16_bf16f32_f32_{kind}_n_tilesize128x128x64_warpgroupsize"
             "1x1x1_execute_segment_k_off_kernel__5x_cublas" for kind in ("nt", "nn", "tn")]
    labels = unique_labels(gemms)
    assert len(set(labels.values())) == 3
    assert all(kind in labels[g] for g, kind in zip(gemms, ("_nt_", "_nn_", "_tn_")))


def test_one_short_name_helper_for_charts_page_and_perfetto() -> None:
    """A kernel has one short name everywhere: charts, the report table, the timeline."""
    from conftest import REPO_ROOT
    from tracehouse.reports import html, kernel_names
    from tracehouse.reports.perfetto import queries as perfetto_queries

    assert kernels.short_kernel_name is kernel_names.short_kernel_name
    assert html.unique_labels is kernel_names.unique_labels
    assert perfetto_queries.short_kernel_name is kernel_names.short_kernel_name
    own = [path.name for path in (REPO_ROOT / "reports").rglob("*.py")
           if path.name != "kernel_names.py"
           and "def short_kernel_name" in path.read_text(encoding="utf-8")]
    assert own == []


def test_plain_text_defuses_mathtext_and_control_characters() -> None:
    assert plain_text("cost $x$\nnext\tcol") == r"cost \$x\$ next col"


# --------------------------------------------------------------------------- comm groups


def test_comm_groups_on_a_simulated_run(con: duckdb.DuckDBPyConnection, wh: ReportWarehouse,
                                        tmp_path: Path) -> None:
    charts = _render(comm_groups.FAMILY, con, wh.need("sim_a"), tmp_path)
    assert [c.slug for c in charts] == ["comm-groups-per-rank", "comm-groups-by-phase"]
    for chart in charts:
        assert_real_picture(chart)
    kinds = {row[0] for row in con.execute(
        "select distinct comm_group_kind from fct_kernels where run_id = 'sim_a' "
        "and kind = 'communication' and comm_group_kind is not null").fetchall()}
    assert kinds, "the simulated run should have classified communication"
    for kind in kinds:
        assert f"{kind} " in charts[0].caption


def test_comm_groups_on_dlrm_say_why_instead_of_one_unknown_bar(
        con: duckdb.DuckDBPyConnection, wh: ReportWarehouse, tmp_path: Path) -> None:
    """DLRM's collectives carry no process-group args: every group is unknown."""
    run = wh.need("dlrm_8rank")
    [(kinds,)] = con.execute("select list(distinct coalesce(comm_group_kind, 'unknown')) "
                             "from fct_kernels where run_id = ? and kind = 'communication'",
                             [run]).fetchall()
    assert kinds == ["unknown"]
    with pytest.raises(NothingToShow, match="no process-group args") as verdict:
        _render(comm_groups.FAMILY, con, run, tmp_path)
    assert "topology" in verdict.value.reason
    assert list(tmp_path.iterdir()) == []  # no figure was saved


# --------------------------------------------------------------------------- compare


def test_compare_renders_nothing_without_a_second_run(con: duckdb.DuckDBPyConnection,
                                                      wh: ReportWarehouse,
                                                      tmp_path: Path) -> None:
    assert _render(compare.FAMILY, con, wh.need("sim_a"), tmp_path) == []
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("other", ["sim_b", "tp1_pp4_dp2"])
def test_compare_two_runs(con: duckdb.DuckDBPyConnection, wh: ReportWarehouse, tmp_path: Path,
                          other: str) -> None:
    charts = _render(compare.FAMILY, con, wh.need("sim_a"), tmp_path, wh.need(other))
    assert [c.slug for c in charts] == ["compare-step-time", "compare-breakdown"]
    for chart in charts:
        assert_real_picture(chart)
    mean_a = con.execute("select avg(step_ns) / 1e6 from (select max(step_ns) as step_ns "
                         "from fct_rank_iterations where run_id = 'sim_a' "
                         "and step_ns is not null group by iteration)").fetchone()[0]
    assert f"sim_a: {mean_a:.2f} ms" in charts[0].caption


# --------------------------------------------------------------------------- 1,024 ranks


#: The marts the heatmaps, the comm-group bars and the page read.
SUMMARY_MARTS = ("fct_run_summary", "fct_group_communication")


def _summarise_gpu_run(mem: duckdb.DuckDBPyConnection, run: str) -> None:
    """Made-up fct_rank_iterations rows given the step the models would (step = span,
    its parts the span figures, the rank's coordinates); the rules themselves are
    the models' (unit-tested in dbt)."""
    mem.execute("""
        update fct_rank_iterations set
            timing_source = 'gpu', step_rule = 'gpu_projected_step', step_ns = span_ns,
            step_compute_ns = compute_ns - coalesce(overlap_ns, 0),
            step_overlap_ns = coalesce(overlap_ns, 0),
            step_exposed_communication_ns = exposed_communication_ns,
            step_exposed_memory_ns = coalesce(exposed_memory_ns, 0), step_optimizer_ns = 0,
            step_idle_ns = idle_ns
        where run_id = ?
    """, [run])
    mem.execute("""
        update fct_rank_iterations as i set
            pp_stage = d.pp_stage, tp_rank = d.tp_rank, dp_rank = d.dp_rank, cp_rank = d.cp_rank
        from dim_ranks as d
        where i.run_id = ? and d.run_id = i.run_id and d.rank = i.rank
    """, [run])
    mem.execute("insert into fct_run_summary (run_id, timing_source) values (?, 'gpu')", [run])
    mem.execute("""
        insert into fct_group_communication (run_id, rank, pp_stage, tp_rank, dp_rank,
            counted_from,
            group_kind, phase, call_count, summed_dur_ns)
        select k.run_id, k.rank, d.pp_stage, d.tp_rank, d.dp_rank, 'gpu_kernels',
               coalesce(k.comm_group_kind, 'unknown'), k.phase, count(*), sum(k.dur_ns)
        from fct_kernels as k
        left join dim_ranks as d on d.run_id = k.run_id and d.rank = k.rank
        where k.run_id = ? and k.kind = 'communication'
        group by all
    """, [run])


@pytest.fixture(scope="module")
def big_marts(wh: ReportWarehouse) -> Iterator[duckdb.DuckDBPyConnection]:
    """Marts of a 1,024-rank run (TP8 x PP8 x DP16, 3 iterations): the real schema, made-up rows.

    Rank 777 is a straggler (compute 1.5x, so its exposed communication is
    smaller); rank 300 has idle time.
    """
    mem = duckdb.connect(":memory:")
    mem.execute("attach ? as built (read_only)", [str(Warehouse(wh.root).database)])
    for table in ("fct_rank_iterations", "dim_ranks", "fct_kernels",
                  "fct_kernel_summary", "fct_microbatch_phases", *SUMMARY_MARTS):
        mem.execute(f"create table {table} as select * from built.{table} limit 0")
    mem.execute("detach built")
    mem.execute("""
        insert into dim_ranks (run_id, rank, tp_rank, dp_rank, pp_stage, pp_size, has_trace)
        select 'big', r, r % 8, (r // 8) % 16, r // 128, 8, true from range(1024) as t(r)
    """)
    mem.execute("""
        insert into fct_rank_iterations (run_id, rank, iteration, kernel_count, span_ns,
            busy_ns, compute_ns, communication_ns, memory_ns, overlap_ns,
            exposed_communication_ns, exposed_memory_ns, idle_ns, overlap_ratio)
        select 'big', r, it, 100, 50e6, 50e6 - idle, compute, 50e6 - compute, 0, 0,
               50e6 - compute - idle, 0, idle, 0
        from (
            select r, it,
                   case when r = 777 then 30e6 else 20e6 + (r % 7) * 1e5 end as compute,
                   case when r = 300 then 4e6 else 1e4 end as idle
            from range(1024) as t(r), range(1, 4) as i(it)
        )
    """)
    mem.execute("""
        insert into fct_kernels (run_id, rank, trace_id, slice_id, name, kind, phase,
                                 comm_group_kind, iteration, dur_ns)
        select 'big', r, 't' || r, k, 'nccl', 'communication',
               ['forward', 'dp_sync', 'pp_p2p'][k % 3 + 1], ['tp', 'dp', 'pp'][k % 3 + 1],
               1, 1e5 * (1 + k)
        from range(1024) as t(r), range(6) as s(k)
    """)
    mem.execute("""
        insert into fct_kernel_summary (run_id, rank, name, kind, kernel_count, total_dur_ns)
        select 'big', r, 'kernel_' || k, case when k < 3 then 'compute' else 'communication' end,
               10, 1e6 * (12 - k) * case when r = 777 and k = 0 then 3 else 1 end
        from range(1024) as t(r), range(12) as s(k)
    """)
    _summarise_gpu_run(mem, "big")
    yield mem
    mem.close()


def test_heatmaps_at_1024_ranks_use_stage_grids(big_marts: duckdb.DuckDBPyConnection,
                                               tmp_path: Path) -> None:
    started = time.perf_counter()
    charts = _render(heatmaps.FAMILY, big_marts, "big", tmp_path)
    seconds = time.perf_counter() - started
    assert [c.slug for c in charts] == ["heatmaps-step", "heatmaps-compute",
                                        "heatmaps-exposed-communication", "heatmaps-idle"]
    for chart in charts:
        assert_real_picture(chart)
        assert "1024 ranks are too many for one row each" in chart.caption
        assert "pipeline stage" in chart.caption
    assert "worst rank 777" in charts[1].caption  # compute
    assert "worst rank 300" in charts[3].caption  # idle
    assert seconds < 60, f"heatmaps took {seconds:.1f} s at 1,024 ranks"


def test_square_grid_without_stages() -> None:
    import pandas as pd

    layout = heatmaps._square_grid(pd.Index(range(1000)))
    assert layout.shape == (32, 32)
    assert sorted(int(r) for r in layout.ravel() if r >= 0) == list(range(1000))


def test_comm_groups_and_kernels_at_1024_ranks_aggregate(big_marts: duckdb.DuckDBPyConnection,
                                                         tmp_path: Path) -> None:
    charts = _render(comm_groups.FAMILY, big_marts, "big", tmp_path)
    assert len(charts) == 2
    assert "one bar per pipeline stage" in charts[0].caption
    charts += _render(kernels.FAMILY, big_marts, "big", tmp_path)
    assert len(charts) == 4
    assert "box plots only" in charts[3].caption
    assert "rank 777 at 3.00× the median" in charts[3].caption
    for chart in charts:
        assert_real_picture(chart)


def test_many_ranks_without_stages_and_many_iterations(wh: ReportWarehouse,
                                                       tmp_path: Path) -> None:
    """100 ranks, 8 iterations, no topology: square grids of the mean, blocks of ranks."""
    mem = duckdb.connect(":memory:")
    mem.execute("attach ? as built (read_only)", [str(Warehouse(wh.root).database)])
    for table in ("fct_rank_iterations", "dim_ranks", "fct_kernels",
                  "fct_microbatch_phases", *SUMMARY_MARTS):
        mem.execute(f"create table {table} as select * from built.{table} limit 0")
    mem.execute("detach built")
    mem.execute("""
        insert into fct_rank_iterations (run_id, rank, iteration, span_ns, compute_ns,
            exposed_communication_ns, idle_ns)
        select 'flat', r, it, 10e6, case when r = 42 then 9e6 else 5e6 end, 1e6, 1e5
        from range(100) as t(r), range(8) as i(it)
    """)
    mem.execute("""
        insert into fct_kernels (run_id, rank, trace_id, slice_id, name, kind, phase,
                                 comm_group_kind, dur_ns)
        select 'flat', r, 't' || r, 0, 'nccl', 'communication', 'other',
               case when r % 2 = 0 then 'dp' end, 1e6
        from range(100) as t(r)
    """)
    _summarise_gpu_run(mem, "flat")
    charts = _render(heatmaps.FAMILY, mem, "flat", tmp_path)
    assert len(charts) == 4
    assert "mean over the 8 traced iterations" in charts[1].caption
    assert "ranks laid out in rows of 16" in charts[1].caption
    assert "worst rank 42" in charts[1].caption
    assert_real_picture(charts[1])
    comm = _render(comm_groups.FAMILY, mem, "flat", tmp_path)
    assert "block of 2 consecutive ranks" in comm[0].caption
    assert_real_picture(comm[0])
    mem.close()
