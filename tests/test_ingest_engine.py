"""One enum chooses the Kineto engine: the CLI's spellings, ``$TRACEHOUSE_DECODER``
and the runner all go through :class:`ingest.kineto.engine.KinetoEngine` (issue 30).

A bad value, from the command line, the environment or a caller, is a usage
error that names the choices, before any file is read; an engine that cannot
run here (no compiled scanner for ``--engine scanner``) is one error for the
command, not one per file.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import duckdb
import pytest

from conftest import SHARED_DATA
from tracehouse.cli.main import main
from tracehouse.ingest.kineto.engine import (
    DECODER_ENV,
    KinetoEngine,
    UnknownEngine,
    choices,
    decoder_override,
    native_decoder,
    scanner_built,
)
from tracehouse.ingest.runner import EngineUnavailable, ingest_paths

A100 = SHARED_DATA / "kineto" / "single_rank" / "a100_nccl_pg_args.json.gz"
SAMPLED = SHARED_DATA / "kineto" / "single_rank" / "sampled_128rank_job_rank-0.json.gz"


@pytest.fixture(autouse=True)
def _no_ambient_decoder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DECODER_ENV, raising=False)


@pytest.fixture
def without_scanner(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as an install without a C compiler: importing the scanner fails."""
    import tracehouse.ingest

    monkeypatch.setitem(sys.modules, "tracehouse.ingest._kineto_scan", None)
    monkeypatch.delattr(tracehouse.ingest, "_kineto_scan", raising=False)


def test_every_member_is_its_own_spelling() -> None:
    assert choices() == ["native", "scanner", "msgspec", "perfetto", "spark"]
    for value in choices():
        assert KinetoEngine.parse(value) is KinetoEngine(value)
        assert KinetoEngine.parse(KinetoEngine(value)) is KinetoEngine(value)
    # What the lake records: every tracehouse parser gives the same tables.
    assert {e.lake_name for e in KinetoEngine if e is not KinetoEngine.PERFETTO} == {"native"}
    assert KinetoEngine.PERFETTO.lake_name == "perfetto"
    assert KinetoEngine.SPARK.parser is KinetoEngine.NATIVE


def test_a_bad_name_names_the_choices() -> None:
    with pytest.raises(UnknownEngine) as info:
        KinetoEngine.parse("pyhton")
    assert str(info.value) == ("engine must be one of native, scanner, msgspec, perfetto, "
                               "spark, not 'pyhton'")
    with pytest.raises(ValueError, match="engine must be one of"):
        ingest_paths([Path("/nowhere")], Path("/nowhere"), engine="c")


@pytest.mark.parametrize(("value", "engine"), [
    ("", None), ("python", KinetoEngine.MSGSPEC), ("msgspec", KinetoEngine.MSGSPEC),
    ("c", KinetoEngine.SCANNER), ("scanner", KinetoEngine.SCANNER),
])
def test_the_environment_overrides_native_only(monkeypatch: pytest.MonkeyPatch, value: str,
                                               engine: KinetoEngine | None) -> None:
    monkeypatch.setenv(DECODER_ENV, value)
    assert decoder_override() is engine
    default = KinetoEngine.SCANNER if scanner_built() else KinetoEngine.MSGSPEC
    assert native_decoder(KinetoEngine.NATIVE) is (engine or default)
    assert native_decoder(KinetoEngine.SPARK) is (engine or default)
    # An engine named explicitly is what it says, whatever the environment.
    assert native_decoder(KinetoEngine.MSGSPEC) is KinetoEngine.MSGSPEC
    assert native_decoder(KinetoEngine.SCANNER) is KinetoEngine.SCANNER


def test_native_is_msgspec_without_the_scanner(without_scanner: None) -> None:
    assert not scanner_built()
    assert native_decoder(KinetoEngine.NATIVE) is KinetoEngine.MSGSPEC


def test_a_bad_environment_value_is_a_usage_error(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(DECODER_ENV, "pyhton")
    code = main(["ingest", str(tmp_path), "--warehouse", str(tmp_path / "wh"), "-q"])
    assert code == 2
    err = capsys.readouterr().err
    assert "$TRACEHOUSE_DECODER='pyhton' is none of msgspec, python, scanner, c" in err
    assert not (tmp_path / "wh").exists()  # refused before the warehouse is touched


@pytest.mark.slow
@pytest.mark.skipif(not SAMPLED.is_file(), reason=f"shared trace {SAMPLED} not found")
def test_scanner_without_the_extension_is_one_usage_error(
        tmp_path: Path, without_scanner: None, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(EngineUnavailable, match="--engine scanner: the compiled Kineto "
                       "scanner is not built .* 1 file"):
        ingest_paths([SAMPLED], tmp_path / "wh", engine="scanner", stream=io.StringIO())
    code = main(["ingest", str(SAMPLED), "--warehouse", str(tmp_path / "wh"), "-q", "-j", "1",
                 "--engine", "scanner"])
    assert code == 2 and "pip install -e ." in capsys.readouterr().err
    assert not list((tmp_path / "wh" / "lake" / "ingest_errors").rglob("run=*/*.parquet"))


@pytest.mark.slow
@pytest.mark.skipif(not A100.is_file(), reason=f"shared trace {A100} not found")
def test_msgspec_and_native_land_the_same_rows_named_native(tmp_path: Path) -> None:
    """Through the runner: --engine msgspec says nothing of a missing scanner, and the
    lake's traces row names the tables' engine, not the decoder that ran."""
    rows = {}
    for engine in ("msgspec", "native"):
        stream = io.StringIO()
        result = ingest_paths([A100], tmp_path / engine, engine=engine, stream=stream,
                              progress=False)
        assert result.failed == [] and len(result.loaded) == 1
        assert "pure-Python decoder" not in stream.getvalue()
        lake = tmp_path / engine / "lake"
        with duckdb.connect() as con:
            rows[engine] = con.execute(
                "select engine, slice_count, flow_count, partial_overlap_count "
                "from read_parquet(?)", [f"{lake}/traces/**/*.parquet"]).fetchall()
    assert rows["msgspec"] == rows["native"] and rows["native"][0][0] == "native"
