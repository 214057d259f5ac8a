"""The timeline marts: fct_kernel_timeline is fct_kernels' rows in read order,
fct_collective_timeline fct_collective_ranks' rows in read order, and
fct_rank_busy_buckets' busy time is the one busy time of the other marts.

On the report tests' shared warehouse (simulated, hostile-named, CPU-only and
real runs; real ingest and build; read-only). The oracles are other marts:
fct_kernels' rows, fct_rank_iterations' busy columns, and the union of
fct_kernels' intervals merged here in Python for a window of buckets.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from report_warehouse import ReportWarehouse

pytestmark = pytest.mark.slow  # reads the report tests' built warehouse

KINDS = ("compute", "communication", "memory")


#: Each timeline-layout mart, the mart whose rows it holds, and the columns it keeps of them.
LAYOUTS = [
    ("fct_kernel_timeline", "fct_kernels", "run_id, rank, iteration, stream, trace_id, "
     "slice_id, kind, name, ts_ns, dur_ns, end_ns"),
    ("fct_collective_timeline", "fct_collective_ranks", "run_id, iteration, rank, "
     "collective_id, device, trace_id, slice_id, op, process_group_key, arrival_ns, end_ns, "
     "arrival_order, is_last, wait_ns"),
]


@pytest.mark.parametrize(("mart", "oracle", "columns"), LAYOUTS)
def test_timeline_layout_holds_its_marts_rows(report_wh: ReportWarehouse, mart: str,
                                              oracle: str, columns: str) -> None:
    """The same rows, figure for figure (one definition, two layouts)."""
    laid_out = report_wh.rows(f"select {columns} from {mart}")
    assert report_wh.need("sim_a") in {row[0] for row in laid_out}
    assert len(laid_out) > 100
    assert sorted(laid_out, key=repr) == sorted(report_wh.rows(f"select {columns} from {oracle}"),
                                                key=repr)


@pytest.mark.parametrize("mart", [mart for mart, _, _ in LAYOUTS])
def test_timeline_layout_is_stored_in_read_order(report_wh: ReportWarehouse, mart: str) -> None:
    """Run, iteration (NULL last), rank: the order zone maps prune by."""
    stored = report_wh.rows(f"select run_id, iteration, rank from {mart} order by rowid")
    keys = [(run, iteration is None, iteration or 0, rank) for run, iteration, rank in stored]
    assert keys == sorted(keys)
    assert len(set(keys)) > 10


def test_collective_timeline_gpu_calls_are_timeline_kernels(report_wh: ReportWarehouse) -> None:
    """A GPU member's call is a kernel the timeline draws (the viewer finds its stream there),
    at its start and end moved by the rank's clock offset."""
    unmatched = report_wh.rows("""
        select count(*) filter (where kernels.slice_id is null),
               count(*) filter (where members.arrival_ns - kernels.ts_ns
                                      <> coalesce(offsets.offset_ns, 0)
                                  or members.end_ns - kernels.end_ns
                                      <> coalesce(offsets.offset_ns, 0)),
               count(*)
        from fct_collective_timeline as members
        left join fct_kernel_timeline as kernels
            on members.trace_id = kernels.trace_id and members.slice_id = kernels.slice_id
        left join dim_rank_clock_offsets as offsets
            on members.run_id = offsets.run_id and members.rank = offsets.rank
        where members.device = 'gpu'
    """)
    (missing, moved, total), = unmatched
    assert (missing, moved) == (0, 0)
    assert total > 100


def test_busy_buckets_sum_to_the_ranks_iterations(report_wh: ReportWarehouse) -> None:
    """Per rank, every busy column summed over the buckets equals fct_rank_iterations'."""
    sums = ", ".join(f"sum({column})::bigint"
                     for column in ("busy_ns", *(f"{kind}_ns" for kind in KINDS)))
    buckets = {tuple(row[:2]): row[2:] for row in report_wh.rows(
        f"select run_id, rank, {sums} from fct_rank_busy_buckets group by 1, 2")}
    iterations = {tuple(row[:2]): row[2:] for row in report_wh.rows(
        f"select run_id, rank, {sums} from fct_rank_iterations where busy_ns is not null "
        "group by 1, 2")}
    assert report_wh.need("sim_a") in {run for run, _ in buckets}
    assert buckets == iterations


def _union_ns(intervals: list[tuple[int, int]], low: int, high: int) -> int:
    """Length of the union of ``intervals`` inside ``[low, high)``."""
    total, reach = 0, low
    for start, end in sorted(intervals):
        start, end = max(start, reach), min(end, high)
        if end > start:
            total += end - start
            reach = end
    return total


def test_busy_buckets_of_a_window_are_its_kernels_busy_time(report_wh: ReportWarehouse) -> None:
    """For a window of whole buckets in the middle of an iteration, each rank's busy time
    per kind is the union of its kernels' intervals clipped to the window (fct_kernels)."""
    run = report_wh.need("sim_a")
    (bucket_ns,), = report_wh.rows("select distinct bucket_ns from fct_rank_busy_buckets "
                                   "where run_id = ?", [run])
    (first, last), = report_wh.rows("select min(first_start_ns), max(last_end_ns) "
                                    "from fct_rank_iterations where run_id = ? and iteration = "
                                    "(select min(iteration) from fct_rank_iterations "
                                    "where run_id = ?)", [run, run])
    low = (first + (last - first) // 3) // bucket_ns * bucket_ns
    high = low + 37 * bucket_ns
    assert high < last
    intervals: dict[tuple[int, str], list[tuple[int, int]]] = defaultdict(list)
    for rank, kind, ts, end in report_wh.rows(
            "select rank, kind, ts_ns, end_ns from fct_kernels where run_id = ? "
            "and ts_ns < ? and end_ns > ?", [run, high, low]):
        intervals[(rank, kind)].append((ts, end))
        intervals[(rank, "all")].append((ts, end))
    expected = {(rank, kind): _union_ns(spans, low, high)
                for (rank, kind), spans in intervals.items()}
    found = report_wh.rows("""
        select rank, sum(busy_ns)::bigint, sum(compute_ns)::bigint,
               sum(communication_ns)::bigint, sum(memory_ns)::bigint
        from fct_rank_busy_buckets
        where run_id = ? and bucket_start_ns >= ? and bucket_start_ns < ?
        group by 1
    """, [run, low, high])
    assert len(found) >= 4
    for rank, busy, *by_kind in found:
        assert busy == expected.get((rank, "all"), 0), rank
        for kind, value in zip(KINDS, by_kind):
            assert value == expected.get((rank, kind), 0), (rank, kind)
    assert sum(row[1] for row in found) > 0
