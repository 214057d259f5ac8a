"""The viewer's hand-offs: every view's rows as CSV and Parquet, and "open in Perfetto".

On the report tests' shared warehouse, through the session's viewer
(read-only): each export is the view's own selection, whole, compared with
the mart it reads; the hostile kernel names survive CSV quoting; the
Perfetto trace of a window is what ``tracehouse export perfetto`` writes
for the same ranks and window.
"""

from __future__ import annotations

import csv
import io
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlencode

import pyarrow.parquet as pq
import pytest

from report_warehouse import HOSTILE_KERNEL, QUOTED_KERNEL, ReportWarehouse
from tracehouse.reports.perfetto import export_perfetto
from tracehouse.serve.server import ViewerServer
from viewer import get

pytestmark = pytest.mark.slow  # reads the report tests' built warehouse


def _download(server: ViewerServer, path: str, **params: object) -> tuple[str, bytes]:
    """(the file name the browser would save, the bytes) of one download."""
    try:
        with urllib.request.urlopen(f"{server.url}{path}?{urlencode(params)}",
                                    timeout=120) as answer:
            disposition = answer.headers["Content-Disposition"]
            return disposition.split('filename="')[1].rstrip('"'), answer.read()
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"{exc.code}: {exc.read().decode()}") from None


def _csv_rows(body: bytes) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(body.decode("utf-8"))))


def test_kernels_export_every_row_the_table_pages(report_viewer: ViewerServer,
                                                  report_wh: ReportWarehouse) -> None:
    run = report_wh.need("sim_a")
    where = {"run": run, "rank": 0, "iteration": 1, "sort": "dur_ns", "desc": 1}
    name, body = _download(report_viewer, "/export/table", view="kernels", format="csv",
                           **where)
    assert name == "sim_a-rank0-kernels.csv"
    expected = report_wh.rows("select slice_id, dur_ns from fct_kernels where run_id = ? "
                              "and rank = 0 and iteration = 1 "
                              "order by dur_ns desc nulls last, ts_ns, slice_id", [run])
    assert [(int(r["slice_id"]), int(r["dur_ns"])) for r in _csv_rows(body)] == expected
    assert len(expected) > get(report_viewer, "kernels", **where)["page_rows"]

    name, body = _download(report_viewer, "/export/table", view="kernels", format="parquet",
                           **where)
    table = pq.read_table(io.BytesIO(body))
    assert name.endswith(".parquet")
    assert list(zip(table["slice_id"].to_pylist(), table["dur_ns"].to_pylist())) == expected


def test_hostile_names_survive_the_csv(report_viewer: ViewerServer,
                                       report_wh: ReportWarehouse) -> None:
    run = report_wh.need("hostile")
    _name, body = _download(report_viewer, "/export/table", view="kernels", format="csv",
                            run=run, rank=0, iteration=1)
    assert {HOSTILE_KERNEL, QUOTED_KERNEL} <= {row["name"] for row in _csv_rows(body)}


@pytest.mark.parametrize(("view", "params", "mart", "where"), [
    ("iterations", {}, "fct_iteration_summary", "true"),
    ("heatmap", {}, "fct_rank_iterations", "step_ns is not null"),
    ("iteration", {"iteration": 2}, "fct_rank_iterations",
     "iteration = 2 and step_ns is not null"),
    ("pipeline", {"group": 0, "iteration": 1}, "fct_microbatch_phases",
     "iteration = 1 and microbatch is not null and rank in "
     "(select rank from dim_ranks where run_id = 'sim_a' and pp_group_index = 0)"),
    ("annotations", {"rank": 0}, "fct_annotation_ranges",
     "rank = 0 and parent_range_id is null"),
    ("stragglers", {"iteration": 2}, "fct_stragglers", "iteration = 2"),
    ("collectives", {"iteration": 2}, "fct_collectives", "iteration = 2"),
])
def test_each_view_exports_its_mart_rows(report_viewer: ViewerServer,
                                         report_wh: ReportWarehouse, view: str,
                                         params: dict, mart: str, where: str) -> None:
    run = report_wh.need("sim_a")
    _name, body = _download(report_viewer, "/export/table", view=view, format="parquet",
                            run=run, **params)
    table = pq.read_table(io.BytesIO(body))
    (count,), = report_wh.rows(f"select count(*) from {mart} where run_id = ? "  # noqa: S608
                               f"and {where}", [run])
    assert table.num_rows == count > 0
    mart_columns = [c for (c,) in report_wh.rows(
        "select column_name from information_schema.columns where table_name = ?", [mart])]
    assert set(mart_columns) <= set(table.column_names)


def test_the_timeline_exports_its_window_whole(report_viewer: ViewerServer,
                                               report_wh: ReportWarehouse) -> None:
    run = report_wh.need("sim_a")
    window = get(report_viewer, "timeline_choices", run=run)["iterations"][0]
    shown = get(report_viewer, "timeline", run=run, ranks="0-1", start=window["start"],
                end=window["end"], px=80)
    _name, body = _download(report_viewer, "/export/table", view="timeline", format="csv",
                            run=run, ranks="0-1", start=window["start"], end=window["end"])
    exported = _csv_rows(body)
    kernels = [n for lane, n in zip(shown["rects"]["lane"], shown["rects"]["n"])
               if shown["lanes"][lane]["stream"] != "cpu"]
    assert len(exported) == sum(kernels) > len(kernels)
    assert {int(row["rank"]) for row in exported} == {0, 1}
    assert all(int(row["start_in_view_ns"]) < window["end"] for row in exported)


def test_open_in_perfetto_is_the_export_of_that_window(report_viewer: ViewerServer,
                                                      report_wh: ReportWarehouse,
                                                      tmp_path: Path) -> None:
    run = report_wh.need("sim_a")
    choices = get(report_viewer, "timeline_choices", run=run)
    window = choices["iterations"][1]
    name, body = _download(report_viewer, "/export/perfetto", run=run, group="pp", index=1,
                           start=window["start"], end=window["end"])
    assert name == "sim_a-ranks1-3.pftrace"
    origin = int(choices["origin_ns"])
    reference = export_perfetto(report_wh.root, run, tmp_path / "same.pftrace", ranks=[1, 3],
                                window=(origin + window["start"], origin + window["end"]))
    assert body == (tmp_path / "same.pftrace").read_bytes()
    assert reference.kernel_slices > 0
    everything = export_perfetto(report_wh.root, run, tmp_path / "all.pftrace", ranks=[1, 3])
    assert reference.kernel_slices < everything.kernel_slices


def test_unknown_views_and_formats_are_refused(report_viewer: ViewerServer,
                                               report_wh: ReportWarehouse) -> None:
    run = report_wh.need("sim_a")
    with pytest.raises(AssertionError, match="400: .*'view' must be one of"):
        _download(report_viewer, "/export/table", view="fct_kernels", run=run)
    with pytest.raises(AssertionError, match="400: .*'format' must be one of"):
        _download(report_viewer, "/export/table", view="heatmap", format="xlsx", run=run)
