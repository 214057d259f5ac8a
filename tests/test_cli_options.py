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

    monkeypatch.setattr("tracehouse.build.dbt.run_dbt", fake_run_dbt)
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


# --------------------------------------------------------------------------- issue 29, details


def _help(capsys: pytest.CaptureFixture[str], *command: str) -> str:
    assert main([*command, "--help"]) == 0
    return " ".join(capsys.readouterr().out.split())


def test_compare_help_prints_a_percent_sign(capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(capsys, "compare")
    assert "in ms and %," in text and "%%" not in text


def test_ingest_help_names_every_kind_of_file(capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(capsys, "ingest")
    for kind in ("Kineto", "*.sqlite", "topology", "PP-timer", "comm log"):
        assert kind in text, kind


def test_report_takes_quiet_like_ingest_and_simulate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from types import SimpleNamespace

    import tracehouse.reports.report as report

    def fake_render(root, out, *, run_id, compare_run_id, force, stream):  # noqa: ANN001, ANN202
        print("[1/2] kernels: rendered", file=stream)
        failure = report.FamilyFailure("timeline", "boom")
        return SimpleNamespace(index_html=tmp_path / "index.html", failures=[failure])

    monkeypatch.setattr(report, "render_report", fake_render)
    for flag in ("-q", "--quiet"):
        assert main(["report", flag, "--warehouse", str(tmp_path)]) == 1
        err = capsys.readouterr().err
        assert "rendered" not in err  # no progress
        assert "timeline" in err and "boom" in err and "index.html" in err
    assert main(["report", "--warehouse", str(tmp_path)]) == 1
    assert "[1/2] kernels: rendered" in capsys.readouterr().err


def test_build_output_has_no_colour_codes_when_piped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dbt colours its lines unless told not to; a pipe or a file gets plain text."""
    import sys
    from types import SimpleNamespace

    import tracehouse.build.dbt as dbt

    invocations: list[list[str]] = []

    def fake_invoke(invocation, *_args, **_kwargs):  # noqa: ANN001, ANN202
        invocations.append(list(invocation))
        return SimpleNamespace(success=True, exception=None)

    monkeypatch.setattr(dbt, "_invoke", fake_invoke)
    monkeypatch.delenv("DBT_USE_COLORS", raising=False)
    monkeypatch.delenv("DBT_ENGINE_USE_COLORS", raising=False)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False, raising=False)
    assert dbt.run_dbt(["compile"], tmp_path) == 0
    assert "--no-use-colors" in invocations[-1]
    assert "--use-colors-file" in invocations[-1]  # dbt's log file stays as it was
    assert dbt.run_dbt(["compile", "--use-colors"], tmp_path) == 0  # asked for: kept
    assert "--no-use-colors" not in invocations[-1]
    monkeypatch.setenv("DBT_USE_COLORS", "true")
    assert dbt.run_dbt(["compile"], tmp_path) == 0
    assert "--no-use-colors" not in invocations[-1]
    monkeypatch.delenv("DBT_USE_COLORS")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    assert dbt.run_dbt(["compile"], tmp_path) == 0  # a terminal: dbt's colours
    assert "--no-use-colors" not in invocations[-1]


def test_dbt_file_log_is_info_unless_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dbt's file log at info by default (its debug lines cost ~11% of a small build's
    CPU); a --log-level-file on the command line or DBT_LOG_LEVEL_FILE wins."""
    from types import SimpleNamespace

    import tracehouse.build.dbt as dbt

    invocations: list[list[str]] = []

    def fake_invoke(invocation, *_args, **_kwargs):  # noqa: ANN001, ANN202
        invocations.append(list(invocation))
        return SimpleNamespace(success=True, exception=None)

    def level(invocation: list[str]) -> list[str]:
        return [value for flag, value in zip(invocation, invocation[1:])
                if flag == "--log-level-file"]

    monkeypatch.setattr(dbt, "_invoke", fake_invoke)
    monkeypatch.delenv("DBT_LOG_LEVEL_FILE", raising=False)
    assert dbt.run_dbt(["compile"], tmp_path) == 0
    assert level(invocations[-1]) == ["info"]
    assert dbt.run_dbt(["compile", "--log-level-file", "debug"], tmp_path) == 0
    assert level(invocations[-1]) == ["debug"]
    monkeypatch.setenv("DBT_LOG_LEVEL_FILE", "debug")  # dbt reads it itself
    assert dbt.run_dbt(["compile"], tmp_path) == 0
    assert level(invocations[-1]) == []


@pytest.mark.slow
def test_sql_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """`tracehouse sql … | head -1`: no "error: Broken pipe", no traceback; the exit
    status of any unix tool whose reader went away (128 + SIGPIPE)."""
    import subprocess
    import sys

    child = subprocess.Popen(
        [sys.executable, "-m", "tracehouse.cli", "sql", "select * from range(1000000)",
         "--warehouse", str(tmp_path / "wh"), "--format", "csv"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    assert child.stdout is not None and child.stderr is not None
    assert child.stdout.readline() == b"range\n"
    child.stdout.close()
    err = child.stderr.read().decode()
    assert child.wait(timeout=120) == 141, err
    assert "Broken pipe" not in err and "Traceback" not in err and "Exception" not in err
