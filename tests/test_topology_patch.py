"""megatron_patch: all-rank profiling schedule and the topology dump files.

The profiler test runs torch's real profiler on CPU (needs the optional
``[megatron]`` extra's torch; skipped otherwise) and checks that exactly the
iterations [--profile-step-start, --profile-step-end) are written, one
trace per iteration, in the layout ingest reads.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
from pathlib import Path

import pytest

from tracehouse.core.topology import build_topology
from tracehouse.ingest.discover import classify
from tracehouse.ingest.topology import parse_topology_json, parse_traceviz_txt
from tracehouse.megatron_patch.profiling import (
    ProfilingConfig,
    cuda_sync_events_config,
    env_flag,
    should_profile,
    trace_path,
)
from tracehouse.megatron_patch.topology_dump import dump_topology

pytestmark = pytest.mark.slow  # ingests or builds (README: the fast set is -m "not slow")


def test_env_config() -> None:
    env = {"PROFILE_ALLRANKS": "Yes", "PROFILER_WAIT_STEPS": "2", "PROFILER_WARMUP_STEPS": "3",
           "PROFILER_GZIP": "1"}
    config = ProfilingConfig.from_env(10, 12, env)
    assert (config.start, config.end, config.wait, config.warmup) == (10, 12, 2, 3)
    assert config.all_ranks and config.gzip and should_profile(5, [0], config)
    plain = ProfilingConfig.from_env(10, 12, {})
    assert (plain.wait, plain.warmup, plain.all_ranks, plain.gzip) == (0, 1, False, False)
    assert plain.cuda_sync_events and config.cuda_sync_events  # on unless turned off
    for off in ("0", "off", " No ", "FALSE"):
        assert not ProfilingConfig.from_env(10, 12, {"PROFILER_CUDA_SYNC_EVENTS": off}) \
            .cuda_sync_events, off
    assert should_profile(0, [0], plain) and not should_profile(5, [0], plain)
    assert not env_flag("X", {"X": "0"}) and env_flag("X", {"X": " on "})
    with pytest.raises(ValueError, match="PROFILER_WARMUP_STEPS"):
        ProfilingConfig.from_env(10, 12, {"PROFILER_WARMUP_STEPS": "many"})
    with pytest.raises(ValueError, match="must be greater"):
        ProfilingConfig(start=5, end=5)


def test_trace_path_is_the_layout_ingest_reads(tmp_path: Path) -> None:
    path = trace_path(tmp_path, 7, 12, compress=True)
    assert path == tmp_path / "iteration_12" / "rank_0007_iter_12.pt.trace.json.gz"
    assert classify(path) == ("megatron_traceviz", 7, 12)


@pytest.mark.parametrize("compress", [False, True])
def test_profiler_records_exactly_the_requested_iterations(tmp_path: Path,
                                                           compress: bool) -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed "
                                "(pip install -e '.[megatron]')")
    from tracehouse.megatron_patch.profiling import make_schedule, make_trace_handler

    config = ProfilingConfig(start=4, end=7, warmup=2, gzip=compress)
    first_iteration = 1
    x = torch.randn(16, 16)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=make_schedule(config, first_iteration),
        on_trace_ready=make_trace_handler(tmp_path, 3, config, first_iteration),
    ) as prof:
        for _iteration in range(first_iteration, 11):
            with torch.profiler.record_function("train_step"):
                x = (x @ x).tanh()
            prof.step()
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")
                     if p.is_file())
    suffix = ".pt.trace.json.gz" if compress else ".pt.trace.json"
    assert written == [f"iteration_{i}/rank_0003_iter_{i}{suffix}" for i in (4, 5, 6)]
    for path in tmp_path.rglob("*.json*"):
        raw = path.read_bytes()
        trace = json.loads(gzip.decompress(raw) if compress else raw)
        steps = {e["name"] for e in trace["traceEvents"]
                 if str(e.get("name", "")).startswith("ProfilerStep#")}
        assert len(steps) == 1  # one iteration per file
        assert any(e.get("name") == "train_step" for e in trace["traceEvents"])


def _sync_events_state(torch_profiler_config) -> tuple:
    """An ``_ExperimentalConfig``'s fields (pybind exposes them only through pickling)."""
    return torch_profiler_config.__getstate__()


def test_build_profiler_asks_kineto_for_cuda_sync_events(tmp_path: Path) -> None:
    """The patch's profiler records CUDA sync events, which the replay's
    cross-stream waits need (issue 33; off in torch.profiler by default), and
    still writes one trace per iteration with them on (a CPU run here: no
    CUDA events to record, but the config must not break profiling).
    ``PROFILER_CUDA_SYNC_EVENTS=0`` leaves torch's default."""
    torch = pytest.importorskip("torch", reason="torch is not installed "
                                "(pip install -e '.[megatron]')")
    from torch._C._profiler import _ExperimentalConfig

    from tracehouse.megatron_patch.hooks import build_profiler

    wanted = _sync_events_state(_ExperimentalConfig(enable_cuda_sync_events=True))
    assert wanted != _sync_events_state(_ExperimentalConfig())
    prof = build_profiler(0, [0], 2, 4, tmp_path, first_iteration=0, environ={})
    assert _sync_events_state(prof.experimental_config) == wanted
    x = torch.randn(8, 8)
    with prof:
        for _step in range(5):
            x = (x @ x).tanh()
            prof.step()
    assert sorted(p.name for p in tmp_path.rglob("*.json")) == [
        "rank_0000_iter_2.pt.trace.json", "rank_0000_iter_3.pt.trace.json"]

    off = build_profiler(0, [0], 2, 4, tmp_path / "off", first_iteration=0,
                         environ={"PROFILER_CUDA_SYNC_EVENTS": "0"})
    assert off.experimental_config is None or \
        _sync_events_state(off.experimental_config) != wanted


def test_cuda_sync_events_config_without_the_field() -> None:
    """A PyTorch older than the field (2.0) rejects the keyword: no config, no error."""

    class ConfigBeforeTheField:
        def __init__(self, **fields: object) -> None:
            if fields:
                raise TypeError(f"unexpected keyword arguments {sorted(fields)}")

    config = ProfilingConfig(start=1, end=2)
    assert cuda_sync_events_config(config, ConfigBeforeTheField) is None
    assert cuda_sync_events_config(ProfilingConfig(start=1, end=2, cuda_sync_events=False)) is None


def test_dump_writes_json_and_traceviz_text(tmp_path: Path) -> None:
    topo = build_topology(32, tp=2, pp=2, cp=2, ep=4, etp=1, vpp=2, order="tp-cp-ep-dp-pp")
    when = dt.datetime(2026, 1, 5, 14, 35, 20)
    json_path, txt_path = dump_topology(topo, tmp_path, when)
    assert txt_path.name == "unique_parallel_groups_20260105_143520.txt"
    assert json.loads(json_path.read_text())["groups"] == topo["groups"]
    parsed = parse_topology_json(json_path.read_text())
    assert parsed["groups"]["cp"] == topo["groups"]["cp"]
    expected = topo["process_groups"]["tp"]["0,1"]
    assert parsed["pgs"][("tp", (0, 1))] == (expected["pg_name"], "TENSOR_MODEL_PARALLEL_GROUP")
    text = parse_traceviz_txt(txt_path.read_text())
    for kind in ("tp", "pp", "dp", "cp", "ep", "model_replica"):
        assert text["groups"][kind] == topo["groups"][kind], kind
    assert text["sizes"]["cp"] == 2 and text["sizes"]["ep"] == 4
    assert text["order"] == "tp-cp-ep-dp-pp"
    assert not list(tmp_path.glob(".*"))


def test_original_traceviz_text_parses() -> None:
    """The original patch's text (research/traceviz.md §1.1), trimmed."""
    text = """\
================================================================================
MEGATRON PARALLEL CONFIGURATION
================================================================================
Timestamp: 2026-01-05 14:35:20.123456
TP Size: 2
PP Size: 4
CP Size: 1
EP Size: 1
World Size: 16

Global Batch Size: 256

STATISTICS
--------------------------------------------------
Total Ranks: 16

TENSOR PARALLEL (TP) GROUPS
--------------------------------------------------
Group 1: [0, 1]
Group 2: [2, 3]
Total groups: 8

PIPELINE PARALLEL (PP) GROUPS
--------------------------------------------------
Group 1: [0, 4, 8, 12]
Total groups: 4

FULL MODEL RANK GROUPS (by DP Rank)
--------------------------------------------------
Full model = TP2 x EP1 x PP4 x CP1 = 8 ranks
--------------------------------------------------
Group 0: [0, 1, 4, 5, 8, 9, 12, 13]

Total model replicas (DP): 2
"""
    parsed = parse_traceviz_txt(text)
    assert parsed["groups"] == {"tp": [[0, 1], [2, 3]], "pp": [[0, 4, 8, 12]],
                                "model_replica": [[0, 1, 4, 5, 8, 9, 12, 13]]}
    assert parsed["sizes"]["world"] == 16 and parsed["sizes"]["dp"] == 2


def test_patch_applies_to_a_megatron_checkout() -> None:
    """Set MEGATRON_LM_DIR to a Megatron-LM core_v0.16.1 checkout to run it."""
    import os
    import subprocess

    checkout = os.environ.get("MEGATRON_LM_DIR")
    if not checkout:
        pytest.skip("MEGATRON_LM_DIR is not set (a Megatron-LM core_v0.16.1 checkout)")
    script = Path(__file__).resolve().parent.parent / "megatron_patch" / "check_patch.sh"
    result = subprocess.run([str(script), checkout], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
