"""Discovery: layouts, rank and iteration hints, runs, sidecars, usage errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracehouse.ingest.discover import DiscoveryError, classify, default_run_for, discover


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("job/iteration_7/rank_0012_iter_7.pt.trace.json.gz", ("megatron_traceviz", 12, 7)),
        ("job/rank3.1234.1700000000000.pt.trace.json", ("tensorboard", 3, None)),
        ("job/worker5_step_12.1694128201549.pt.trace.json.gz", ("tensorboard", 5, None)),
        ("job/host_4242.1694128201549.pt.trace.json", ("tensorboard", None, None)),
        ("job/rank-17.json.gz", ("hta", 17, None)),
        ("job/sampled_128rank_job_rank-1.json.gz", ("hta", 1, None)),
        ("job/iteration_2/trace.json", ("generic", None, 2)),
        ("job/my_trace_rank_9_iter_4.json", ("generic", 9, 4)),
    ],
)
def test_classify(path: str, expected) -> None:
    assert classify(Path(path)) == expected


def test_default_run_skips_iteration_folder() -> None:
    assert default_run_for(Path("/x/tp2_pp2/iteration_3/rank_0000_iter_3.pt.trace.json")) == (
        "tp2_pp2"
    )
    assert default_run_for(Path("/x/my job!/rank-0.json")) == "my_job_"


def test_discover_skips_sidecars_but_not_named_files(tmp_path: Path) -> None:
    job = tmp_path / "job"
    (job / "iteration_1").mkdir(parents=True)
    (job / "topology.json").write_text("{}")
    (job / "iteration_1" / "rank_0000_iter_1.pt.trace.json").write_text("{}")
    (job / "notes.txt").write_text("not json")
    found = discover([job])
    assert [t.path.name for t in found.traces] == ["rank_0000_iter_1.pt.trace.json"]
    # Loaded into topology_groups, and counted there only (not also as skipped).
    assert [(p.name, run) for p, run in found.topologies] == [("topology.json", "job")]
    assert found.skipped == []
    assert found.traces[0].run_id == "job"
    named = discover([job / "topology.json"], run="r1")
    assert [t.path.name for t in named.traces] == ["topology.json"]
    assert named.traces[0].run_id == "r1"


def test_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(DiscoveryError, match="no such file"):
        discover([tmp_path / "missing"])
    with pytest.raises(DiscoveryError, match="run names"):
        discover([tmp_path], run="../escape")
