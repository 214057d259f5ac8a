"""Command-line details: where options may stand, what --help says, quiet flags."""

from __future__ import annotations

from pathlib import Path

import pytest

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
