"""The what-if replay on real traces that are not simulated: what it cannot match, it
says, and it never fails the build.

The sampled 128-rank job's ranks 0 and 1 (../shared/data/kineto/single_rank),
loaded together as one run, carry no process-group args: every collective's
group is `inferred:unknown`, matched across ranks by op and sequence number,
and in iteration 552 the two ranks issue their alltoall and allreduce in
different orders. Matched anyway, the instances cross and the replay graph
has a cycle (issue 33: the whole what-if chain and fct_findings were skipped).
One warehouse, built once for this module with the what-if models on.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import SHARED_DATA, query_warehouse, shared_read_only

pytestmark = pytest.mark.slow

#: The sampled pair, loaded as one run under this name.
SAMPLED = "sampled"
SAMPLED_TRACES = [
    SHARED_DATA / "kineto" / "single_rank" / f"sampled_128rank_job_rank-{rank}.json.gz"
    for rank in (0, 1)
]


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    missing = [str(path) for path in SAMPLED_TRACES if not path.exists()]
    if missing:
        pytest.skip(f"shared traces not found: {missing}")
    from tracehouse.build.dbt import build_warehouse
    from tracehouse.ingest.runner import ingest_paths

    root = tmp_path_factory.mktemp("whatif_real") / "warehouse"
    result = ingest_paths(SAMPLED_TRACES, warehouse=root, run=SAMPLED, progress=False)
    assert not result.failed, result.failed
    build_warehouse(root, ["--vars", "{whatif: true}"])
    with shared_read_only(root):
        yield root


def test_disordered_inferred_collectives_replay_rank_local(warehouse: Path) -> None:
    """Every iteration of both ranks is replayed; where the ranks' op orders in
    the inferred group disagree (derived here from the matched members), each
    of those members is counted in rank_local_comm_count and has no collective
    edge, and where they agree none is."""
    members = query_warehouse(
        warehouse,
        "select iteration, rank, op from intermediate.int_collective_members_aligned "
        "where run_id = ? and match_basis = 'inferred' order by arrival_ns, slice_id",
        [SAMPLED])
    orders: dict[int, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for iteration, rank, op in members:
        orders[iteration][rank].append(op)
    disordered = {it for it, by_rank in orders.items()
                  if len({tuple(ops) for ops in by_rank.values()}) > 1}
    assert disordered and set(orders) - disordered, "the pair should have both kinds"
    expected = {(it, rank): (len(ops) if it in disordered else 0)
                for it, by_rank in orders.items() for rank, ops in by_rank.items()}
    replayed = query_warehouse(
        warehouse,
        "select iteration, rank, rank_local_comm_count, error_ratio from fct_step_replay "
        "where run_id = ?", [SAMPLED])
    assert {(it, rank): count for it, rank, count, _ in replayed} == expected
    assert all(error is not None for *_, error in replayed)
    tied = query_warehouse(
        warehouse,
        """
        select ops.iteration, count(*)
        from intermediate.int_replay_collective_edges_typed as edges
        inner join intermediate.int_replay_ops_listed as ops on edges.dst_node_id = ops.node_id
        where edges.run_id = ? group by 1
        """, [SAMPLED])
    assert {it for it, _ in tied} == set(orders) - disordered


def test_findings_and_what_if_cover_the_run(warehouse: Path) -> None:
    """The models downstream of the replay are built for the run (they were
    skipped when the replay failed)."""
    (findings,) = query_warehouse(
        warehouse, "select count(*) from fct_findings where run_id = ?", [SAMPLED])[0]
    assert findings > 0
    iterations = query_warehouse(
        warehouse, "select distinct iteration from fct_what_if where run_id = ?", [SAMPLED])
    assert len(iterations) == 2
    (path_rows,) = query_warehouse(
        warehouse, "select count(*) from fct_critical_path where run_id = ?", [SAMPLED])[0]
    assert path_rows > 0
