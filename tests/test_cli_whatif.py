"""``tracehouse whatif``: a user's own scenario, parsed, selected and replayed.

The parsing and the selection's SQL are checked without a warehouse; the
replay on the simulated runs of tests/whatif_warehouse.py (conftest's
``whatif_wh``), where ``slow_stage`` is ``clean`` with every compute kernel
of pipeline stage 1 made 1.5x longer: scaling them back by 1/1.5 must
predict the clean run's measured step (issue 33's 3%).
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from whatif_warehouse import SLOW_DP_FACTOR

from conftest import NASTY_NAME, query_warehouse
from tracehouse.cli.main import main
from tracehouse.query.whatif_scale import parse_scale, selection_sql

TOLERANCE = 0.03


def test_parse_scale_reads_selectors_ranges_and_the_factor() -> None:
    scale = parse_scale("rank=4-6,9,kind=compute,phase=backward:0.5")
    assert scale.factor == 0.5
    assert scale.selectors == {"rank": ("4", "5", "6", "9"),
                               "kind": ("gpu_compute", "host_compute"),
                               "phase": ("backward",)}
    assert parse_scale("kind=cpu,group=dp:2").selectors == {
        "kind": ("cpu_call", "cpu_sync"), "group": ("dp",)}
    # The factor follows the last ':' so a kernel-name pattern may hold one.
    assert parse_scale("name=at::native:0").selectors == {"name": ("at::native",)}


@pytest.mark.parametrize("text", ["rank=6", "rank=6:fast", "rank=6:-1", ":0.5",
                                  "colour=red:0.5", "kind=tensor:0.5", "rank=7-3:0.5",
                                  "rank=:0.5", "rank=6,compute:0.5", "compute:0.5",
                                  "name=(unclosed:0.5"])
def test_parse_scale_rejects_mistakes_by_name(text: str) -> None:
    with pytest.raises(ValueError, match=repr(text).strip("'\"")[:4] if text else ""):
        parse_scale(text)


def test_selection_binds_every_value(tmp_path: Path) -> None:
    """A kernel-name pattern full of quotes reaches DuckDB as a parameter, never as SQL."""
    sql, parameters = selection_sql(parse_scale(f"rank=1,name={NASTY_NAME}:0.5"))
    assert NASTY_NAME not in sql and parameters == [1, NASTY_NAME]
    assert sql.count("?") == 1 + len(parameters)  # the run, then each value


def test_a_warehouse_without_what_if_tables_says_how_to_build_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A real DuckDB warehouse holding marts but no what-if tables (a build with the
    var off)."""
    root = tmp_path / "wh"
    root.mkdir()
    con = duckdb.connect(str(root / "tracehouse.duckdb"))
    con.execute("create table fct_rank_iterations (run_id varchar)")
    con.close()
    assert main(["whatif", "--warehouse", str(root), "--scale", "rank=0:0.5"]) == 1
    err = capsys.readouterr().err
    assert "fct_what_if" in err and "--vars '{whatif: false}'" in err
    assert err.rstrip().endswith("build it again without that var: `tracehouse build`")
    assert str(root) in err


@pytest.mark.slow
def test_scaling_the_slow_stage_back_predicts_the_clean_run(
        whatif_wh, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["whatif", "--warehouse", str(whatif_wh.root), "--run", "slow_stage",
                 "--scale", f"stage=1,kind=compute:{1 / 1.5:.6f}", "--format", "json"]) == 0
    rows = {row["scenario"]: row for row in json.loads(capsys.readouterr().out)}
    clean = query_warehouse(whatif_wh.root, "select max(step_ns) from fct_rank_iterations "
                                            "where run_id = 'clean'")[0][0]
    mine = rows[f"stage=1,kind=compute:{1 / 1.5:.6f}"]
    assert mine["step_ns"] > 1.05 * clean
    assert abs(mine["predicted_step_ns"] - clean) / clean <= TOLERANCE, (mine, clean)
    # Every compute kernel of ranks 4-7, and nothing else.
    kernels = query_warehouse(
        whatif_wh.root, "select count(*) from intermediate.int_replay_nodes_listed "
                        "where run_id = 'slow_stage' and rank between 4 and 7 "
                        "and node_kind = 'gpu_compute'")[0][0]
    assert mine["scaled_node_count"] == kernels
    # The plain replay reproduces the run; the standard scenarios are fct_what_if's.
    assert rows["as_measured"]["predicted_step_ns"] == rows["as_measured"]["step_ns"]
    standard = query_warehouse(
        whatif_wh.root, "select scenario, predicted_step_ns, saved_ns from fct_what_if "
                        "where run_id = 'slow_stage'")
    assert {(s, p, v) for s, p, v in standard} == {
        (s, rows[s]["predicted_step_ns"], rows[s]["saved_ns"]) for s, _p, _v in standard}


@pytest.mark.slow
def test_a_selection_of_nothing_is_a_usage_error(
        whatif_wh, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["whatif", "--warehouse", str(whatif_wh.root), "--run", "clean",
                 "--scale", "rank=99:0.5"]) == 2
    assert "selects no op" in capsys.readouterr().err
    assert main(["whatif", "--warehouse", str(whatif_wh.root), "--run", "no_such_run"]) == 1
    assert "no_such_run" in capsys.readouterr().err


@pytest.mark.slow
def test_speeding_the_slow_link_back_up_predicts_the_clean_run(
        whatif_wh, capsys: pytest.CaptureFixture[str]) -> None:
    """slow_dp is clean with every data-parallel transfer 3x slower: the DP
    group's collectives scaled by 1/3 predict the clean run within 3%."""
    scale = f"group=dp:{1 / SLOW_DP_FACTOR:.6f}"
    assert main(["whatif", "--warehouse", str(whatif_wh.root), "--run", "slow_dp",
                 "--scale", scale, "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines[0].split(",")
    [mine] = [dict(zip(header, line.split(","))) for line in lines[1:]
              if line.startswith(f"slow_dp,{scale},")]
    clean = query_warehouse(whatif_wh.root, "select max(step_ns) from fct_rank_iterations "
                                            "where run_id = 'clean'")[0][0]
    assert int(mine["step_ns"]) > 1.05 * clean
    assert abs(int(mine["predicted_step_ns"]) - clean) / clean <= TOLERANCE, (mine, clean)
