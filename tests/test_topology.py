"""tracehouse.core.topology reproduces megatron-core's rank groups and process-group names.

The references are the ``topology.json`` files real megatron-core 0.16.1 wrote
for the runs in ``../shared/data/kineto/megatron_cpu`` (every group read back
from ``parallel_state``), the ``pg_count`` torch recorded in those runs'
traces, and layouts checked against megatron-core in research/deps.md §6.
"""

from __future__ import annotations

import gzip
import json

import pytest

from conftest import SHARED_DATA
from tracehouse.core.topology import (
    RankGenerator,
    build_topology,
    generate_masked_orthogonal_rank_groups,
    rank_key,
)

MEGATRON_CPU = SHARED_DATA / "kineto" / "megatron_cpu"
#: run folder → (world, tp, pp, vpp)
REAL_RUNS = {
    "tp2_pp2_dp2": (8, 2, 2, None),
    "tp1_pp4_dp2": (8, 1, 4, None),
    "tp2_pp2_dp1_vpp2": (4, 2, 2, 2),
}


@pytest.fixture(params=sorted(REAL_RUNS))
def real(request: pytest.FixtureRequest) -> tuple[dict, dict]:
    """(megatron-core's topology.json, ours) for one real run."""
    world, tp, pp, vpp = REAL_RUNS[request.param]
    path = MEGATRON_CPU / request.param / "topology.json"
    return json.loads(path.read_text()), build_topology(world, tp, pp, vpp=vpp)


def test_every_group_kind_matches_megatron(real: tuple[dict, dict]) -> None:
    reference, ours = real
    for kind, groups in reference["groups"].items():
        assert ours["groups"][kind] == groups, kind
    assert ours["groups"]["model_replica"] == reference["replicas"]
    assert ours["replicas"] == reference["replicas"]
    for key, value in reference["sizes"].items():
        assert ours["sizes"][key] == value, key
    assert ours["order"] == reference["order"]


def test_rank_coordinates_match_megatron(real: tuple[dict, dict]) -> None:
    reference, ours = real
    for rank, coords in reference["ranks"].items():
        for dim, value in coords.items():
            assert ours["ranks"][rank][dim] == value, (rank, dim)


def test_process_group_names_follow_megatrons_creation_order(real: tuple[dict, dict]) -> None:
    reference, ours = real
    for kind, groups in reference["process_groups"].items():
        assert ours["process_groups"][kind] == groups, kind


@pytest.mark.parametrize("run", sorted(REAL_RUNS))
def test_pg_count_matches_the_traces(run: str) -> None:
    world, tp, pp, vpp = REAL_RUNS[run]
    trace = next((MEGATRON_CPU / run).glob("iteration_*/rank_0000_*.json.gz"))
    with gzip.open(trace, "rt") as f:
        info = json.load(f)["distributedInfo"]
    ours = build_topology(world, tp, pp, vpp=vpp)
    assert ours["pg_count"] == info["pg_count"]
    # Every group in rank 0's pg_config has the name and description we give it.
    by_name = {
        info_["pg_name"]: (info_["pg_desc"], key)
        for groups in ours["process_groups"].values()
        for key, info_ in groups.items()
    }
    for config in info["pg_config"]:
        if config["pg_name"] == "0":
            continue
        assert by_name[config["pg_name"]] == (config["pg_desc"], rank_key(config["ranks"]))


def test_masked_groups_docstring_example() -> None:
    # megatron-core's own example: sizes [tp=2, dp=3, pp=4], data-parallel mask.
    groups = generate_masked_orthogonal_rank_groups(24, [2, 3, 4], [False, True, False])
    assert groups[0] == [0, 2, 4]
    assert groups[1] == [1, 3, 5]
    assert groups[7] == [19, 21, 23]
    assert len(groups) == 8


def test_layouts_checked_against_megatron_core() -> None:
    """Groups research/deps.md §6 read from real megatron-core (fake process groups)."""
    topo = build_topology(8, tp=2, pp=2)
    assert topo["groups"]["tp"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert topo["groups"]["pp"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert topo["groups"]["dp"] == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert topo["groups"]["mp"] == [[0, 1, 4, 5], [2, 3, 6, 7]]
    ep = build_topology(8, tp=2, pp=2, ep=2)
    assert [0, 2] in ep["groups"]["ep"]
    assert [0] in ep["groups"]["edp"]
    cp = build_topology(8, tp=2, pp=1, cp=2)
    assert [0, 2] in cp["groups"]["cp"]
    assert [0, 4] in cp["groups"]["dp"]
    assert [0, 2, 4, 6] in cp["groups"]["dp_cp"]
    assert [0, 1, 2, 3] in cp["groups"]["model_replica"]  # tp x cp x pp
    reordered = build_topology(8, tp=2, pp=2, order="tp-pp-dp")
    assert [0, 2] in reordered["groups"]["pp"]
    assert [0, 4] in reordered["groups"]["dp"]


def test_every_rank_is_in_exactly_one_group_of_each_kind() -> None:
    topo = build_topology(64, tp=2, pp=4, cp=2, ep=4, etp=1, vpp=2)
    partial = {"embedding", "position_embedding"}  # first/last pipeline stages only
    for kind, groups in topo["groups"].items():
        if kind in partial:
            continue
        members = sorted(r for g in groups for r in g)
        assert members == list(range(64)), kind
    assert topo["sizes"]["dp"] == 4 and topo["sizes"]["edp"] == 64 // (1 * 4 * 4)
    # Embedding groups: first and last rank of each pipeline group.
    assert topo["groups"]["embedding"] == [[g[0], g[-1]] for g in topo["groups"]["pp"]]


def test_rank_generator_appends_size_one_dimensions() -> None:
    gen = RankGenerator(tp=2, ep=1, dp=2, pp=1, cp=1, order="tp-dp")
    assert gen.get_ranks("dp") == [[0, 2], [1, 3]]
    assert gen.coordinate(3, "dp") == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(world=6, tp=4, pp=1), "not divisible by tp\\*pp\\*cp"),
        (dict(world=8, tp=2, pp=1, ep=3), "not divisible by etp\\*ep\\*pp"),
        (dict(world=8, tp=2, pp=2, order="tp-pp"), "does not name 'dp'"),
        (dict(world=8, tp=2, pp=2, order="tp-pp-dp", etp=1), "does not end in pp"),
        (dict(world=8, tp=2, pp=1, vpp=2), "needs pp > 1"),
        (dict(world=8, tp=2, pp=2, order="tp-xx-pp"), "unknown dimension"),
        (dict(world=8, tp=2, pp=2, order="tp-tp-dp-pp"), "appears twice"),
        (dict(world=8, tp=0, pp=1), "positive integer"),
    ],
)
def test_invalid_layouts_are_rejected_like_megatron(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_topology(**kwargs)


def test_group_descriptions_equal_the_seed() -> None:
    """One pg_desc -> kind mapping: the seed's exact rows are GROUP_DESCRIPTIONS (+ world)."""
    import csv
    from pathlib import Path

    from tracehouse.core.topology import GROUP_DESCRIPTIONS

    seed = Path(__file__).resolve().parent.parent / "seeds" / "process_group_kinds.csv"
    with seed.open(newline="") as handle:
        exact = {row["pg_desc"]: row for row in csv.DictReader(handle) if row["pg_desc"]}
    assert {desc: row["topology_kind"] for desc, row in exact.items()} == {
        "default_pg": "world", **{desc: kind for kind, desc in GROUP_DESCRIPTIONS.items()}}
    for desc, row in exact.items():
        # The exact rows win over the regular expressions, and match only their name.
        assert row["pattern"] == f"^{desc}$" and int(row["priority"]) < 10
