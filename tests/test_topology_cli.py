"""`tracehouse topology`: the contract topology JSON, usage errors, the TraceViz text.

Always on (no torch needed): the command's output is compared with the
``topology.json`` files real megatron-core 0.16.1 wrote for the runs in
``../shared/data/kineto/megatron_cpu``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import SHARED_DATA
from tracehouse.cli import main
from tracehouse.ingest.topology import parse_topology_json, parse_traceviz_txt

MEGATRON_CPU = SHARED_DATA / "kineto" / "megatron_cpu"
#: run folder → command-line arguments of its layout
REAL_RUNS = {
    "tp2_pp2_dp2": ["--world", "8", "--tp", "2", "--pp", "2"],
    "tp1_pp4_dp2": ["--world", "8", "--tp", "1", "--pp", "4"],
    "tp2_pp2_dp1_vpp2": ["--world", "4", "--tp", "2", "--pp", "2", "--vpp", "2"],
}


@pytest.mark.parametrize("run", sorted(REAL_RUNS))
def test_topology_equals_the_real_megatron_dump(run: str, tmp_path: Path) -> None:
    out = tmp_path / "sub" / "topology.json"
    assert main(["topology", *REAL_RUNS[run], "--out", str(out)]) == 0
    ours = json.loads(out.read_text())
    reference = json.loads((MEGATRON_CPU / run / "topology.json").read_text())
    for kind, groups in reference["groups"].items():
        assert ours["groups"][kind] == groups, kind
    assert ours["groups"]["model_replica"] == reference["replicas"]
    for key, value in reference["sizes"].items():
        assert ours["sizes"][key] == value, key
    assert ours["order"] == reference["order"]
    assert ours["ranks"] == {
        rank: {**ours["ranks"][rank], **coords} for rank, coords in reference["ranks"].items()
    }
    assert not list(out.parent.glob(".*.tmp"))
    assert parse_topology_json(out.read_text())["source"] == "generated"


def test_topology_prints_json_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topology", "--world", "16", "--tp", "2", "--pp", "2", "--cp", "2",
                 "--ep", "2", "--etp", "1", "--order", "tp-cp-ep-dp-pp"]) == 0
    topo = json.loads(capsys.readouterr().out)
    assert set(topo) >= {"sizes", "order", "groups"}
    assert topo["sizes"] == {"world": 16, "tp": 2, "pp": 2, "vpp": 1, "cp": 2, "ep": 2,
                             "etp": 1, "dp": 2, "edp": 4}
    for kind in ("tp", "pp", "dp", "dp_cp", "cp", "mp", "ep", "etp", "edp", "embedding",
                 "model_replica"):
        assert topo["groups"][kind], kind


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--world", "6", "--tp", "4", "--pp", "1"], "not divisible by tp*pp*cp"),
        (["--world", "8", "--tp", "2", "--pp", "1", "--ep", "3"], "not divisible by etp*ep*pp"),
        (["--world", "8", "--tp", "2", "--pp", "2", "--order", "tp-pp"], "does not name 'dp'"),
        (["--world", "8", "--tp", "2", "--pp", "1", "--vpp", "2"], "needs pp > 1"),
        (["--world", "8", "--tp", "2", "--pp", "2", "--order", "tp-xx-dp-pp"],
         "unknown dimension"),
        (["--world", "8", "--tp", "0", "--pp", "1"], "positive integer"),
        (["--world", "8", "--pp", "1"], "required: --tp"),
    ],
)
def test_layouts_megatron_rejects_exit_2(argv: list[str], message: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topology", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message in captured.err


def test_traceviz_format_round_trips(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["topology", "--world", "16", "--tp", "2", "--pp", "4"]
    assert main(argv) == 0
    topo = json.loads(capsys.readouterr().out)
    assert main([*argv, "--format", "traceviz"]) == 0
    parsed = parse_traceviz_txt(capsys.readouterr().out)
    assert parsed["sizes"]["tp"] == 2 and parsed["sizes"]["pp"] == 4
    for kind in ("tp", "pp", "dp", "model_replica"):
        assert parsed["groups"][kind] == topo["groups"][kind], kind
