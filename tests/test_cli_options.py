"""Command-line details: where options may stand, what --help says, quiet flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import SHARED_DATA
from tracehouse.cli import main


@pytest.fixture
def dbt_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[str], Path]]:
    """``tracehouse build`` without dbt: the arguments and warehouse it would run with."""
    calls: list[tuple[list[str], Path]] = []

    def fake_run_dbt(args: list[str], warehouse: Path) -> int:
        calls.append((list(args), Path(warehouse)))
        return 0

    monkeypatch.setattr("tracehouse.dbt.run_dbt", fake_run_dbt)
    return calls


@pytest.mark.parametrize("argv", [
    ["--target", "spark", "--warehouse", "{wh}"],
    ["--warehouse", "{wh}", "--target", "spark"],
    ["--target", "spark", "--warehouse={wh}"],
    ["--", "--target", "spark", "--warehouse", "{wh}"],
])  # fmt: skip
def test_build_takes_its_own_options_wherever_they_stand(
    argv: list[str], tmp_path: Path, dbt_calls: list
) -> None:
    wh = tmp_path / "wh"
    assert main(["build", *[a.replace("{wh}", str(wh)) for a in argv]]) == 0
    assert dbt_calls == [(["--target", "spark"], wh)]


def test_build_keeps_dbt_arguments_in_order(tmp_path: Path, dbt_calls: list) -> None:
    wh = tmp_path / "wh"
    assert main(["build", "--", "build", "--select", "fct_kernels", "--warehouse", str(wh),
                 "--vars", "{kernel_time_unit_ns: 1000}"]) == 0
    assert dbt_calls == [(["build", "--select", "fct_kernels", "--vars",
                           "{kernel_time_unit_ns: 1000}"], wh)]


@pytest.mark.parametrize("bad", [["--warehouse"], ["--warehouse", ""], ["--warehouse="]])
def test_build_warehouse_among_dbt_arguments_is_checked(
    bad: list[str], dbt_calls: list, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["build", "--target", "spark", *bad]) == 2
    assert "--warehouse" in capsys.readouterr().err
    assert dbt_calls == []


DLRM = SHARED_DATA / "kineto" / "dlrm_8rank"


@pytest.mark.slow
def test_ingest_of_a_folder_without_inputs_warns_and_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pngs = tmp_path / "folder_of_pngs"
    pngs.mkdir()
    for name in ("a.png", "b.png"):
        (pngs / name).write_bytes(b"\x89PNG\r\n\x1a\n")
    assert main(["ingest", str(pngs), "--warehouse", str(tmp_path / "wh")]) == 2
    err = capsys.readouterr().err
    assert f"warning: {pngs}: no trace" in err
    assert "loaded 0" not in err


@pytest.mark.slow
@pytest.mark.skipif(not DLRM.is_dir(), reason=f"shared data missing: {DLRM}")
def test_ingest_names_each_path_without_inputs_while_the_others_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = tmp_path / "job"
    job.mkdir()
    first = sorted(DLRM.glob("worker0_*"))[0]
    (job / first.name).write_bytes(first.read_bytes())
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["ingest", str(job), str(empty), "--warehouse", str(tmp_path / "wh")]) == 0
    err = capsys.readouterr().err
    assert f"warning: {empty}: no trace" in err and f"warning: {job}" not in err
    assert "loaded 1 trace(s)" in err
