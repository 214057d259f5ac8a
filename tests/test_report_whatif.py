"""The report's "What would help most" section (tracehouse.reports.whatif).

Every figure it shows is fct_what_if's, recomputed here from the mart's
rows in Python (one answer per question): the mean time saved over the
iterations and the share of the step as a ratio of sums, in the order the
section ranks them. Without the what-if marts it says how to build them.
"""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path

import duckdb
import pytest

from tracehouse.core.warehouse import Warehouse
from tracehouse.reports.base import ChartContext, NothingToShow
from tracehouse.reports.whatif import FAMILY

#: The caption's figure per scenario (reports.whatif.saving_line).
SAVING = re.compile(r"(\w+): saves (-?[\d.]+) ms of ([\d.]+) ms \((-?[\d.]+) %\)")
#: A bar's label: share and time saved.
BAR_LABEL = re.compile(r"^(-?[\d.]+) % \((-?[\d.]+) ms\)$")
#: The table's columns (reports.whatif._table), as the SVG's text elements hold them.
TABLE_COLUMNS = 7


def _svg_texts(path: Path) -> list[str]:
    """The text elements of a chart's SVG, in drawing order (text stays text there)."""
    return [unescape(text) for text in re.findall(r"<text[^>]*>([^<]*)</text>",
                                                  path.read_text())]


def test_without_what_if_marts_it_says_how_to_build_them(tmp_path: Path) -> None:
    """A real DuckDB warehouse built with the var off: marts, but no fct_what_if."""
    con = duckdb.connect(str(tmp_path / "tracehouse.duckdb"))
    con.execute("create table fct_rank_iterations (run_id varchar, step_ns bigint)")
    said = re.escape("`--vars '{whatif: false}'` leaves them out); build it again with "
                     "`tracehouse build`")
    with pytest.raises(NothingToShow, match=said):
        FAMILY.render(ChartContext(con=con, run_id="r", out_dir=tmp_path / "out"))
    con.close()
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.parametrize("run", ["clean", "slow_stage"])
def test_each_figure_equals_fct_what_if(whatif_wh, run: str, tmp_path: Path) -> None:
    con = duckdb.connect(str(Warehouse(whatif_wh.root).database), read_only=True)
    try:
        charts = FAMILY.render(ChartContext(con=con, run_id=run, out_dir=tmp_path))
        rows = con.execute("select scenario, step_ns, saved_ns, predicted_step_ns "
                           "from fct_what_if where run_id = ?", [run]).fetchall()
    finally:
        con.close()
    expected: dict[str, tuple[float, float, float, float]] = {}
    for scenario in {row[0] for row in rows}:
        mine = [row for row in rows if row[0] == scenario]
        steps, saved = [row[1] for row in mine], [row[2] for row in mine]
        expected[scenario] = (sum(saved) / len(saved) / 1e6, sum(steps) / len(steps) / 1e6,
                              100 * sum(saved) / sum(steps),
                              sum(row[3] for row in mine) / len(mine) / 1e6)
    assert [chart.slug for chart in charts] == ["whatif_savings", "whatif_table"]
    assert all(chart.png.stat().st_size > 0 and chart.svg.is_file() for chart in charts)
    shown = SAVING.findall(charts[0].caption)
    assert [name for name, *_figures in shown] == sorted(
        expected, key=lambda name: (-expected[name][0], name)), "ranked by time saved"
    assert set(expected) == {"no_straggler", "ideal_communication", "perfect_overlap",
                             "perfect_dp_overlap", "balanced_stages", "no_host_gaps"}
    ranked = [name for name, *_figures in shown]
    for name, saved_ms, step_ms, share in shown:
        want_saved, want_step, want_share, _want_predicted = expected[name]
        assert float(saved_ms) == pytest.approx(want_saved, abs=0.0005), name
        assert float(step_ms) == pytest.approx(want_step, abs=0.0005), name
        assert float(share) == pytest.approx(want_share, abs=0.05), name
    # The bars' labels, top to bottom, and the table's rows say the same.
    labels = [BAR_LABEL.match(text) for text in _svg_texts(charts[0].svg)]
    bars = [match.groups() for match in labels if match]
    assert len(bars) == len(ranked)
    for name, (share, saved_ms) in zip(ranked, bars):
        assert float(share) == pytest.approx(expected[name][2], abs=0.05), name
        assert float(saved_ms) == pytest.approx(expected[name][0], abs=0.005), name
    cells = _svg_texts(charts[1].svg)[TABLE_COLUMNS:]
    table = [cells[i:i + TABLE_COLUMNS] for i in range(0, len(cells), TABLE_COLUMNS)]
    assert [row[1] for row in table] == ranked
    for position, name, _what, step_ms, predicted_ms, saved_ms, share in table:
        want_saved, want_step, want_share, want_predicted = expected[name]
        assert int(position) == ranked.index(name) + 1
        assert float(step_ms) == pytest.approx(want_step, abs=0.0005), name
        assert float(predicted_ms) == pytest.approx(want_predicted, abs=0.0005), name
        assert float(saved_ms) == pytest.approx(want_saved, abs=0.0005), name
        assert float(share.rstrip(" %")) == pytest.approx(want_share, abs=0.05), name
