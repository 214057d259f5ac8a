"""``tracehouse whatif``: a user's own scenario replayed beside the standard ones.

Why here and not a model: a scenario the user types is not known when the
warehouse is built. It is replayed from the graph tables the build left
(``int_replay_nodes_listed``, ``int_replay_edges_typed``) with the same
routine the models use (tracehouse.core.replay, replay_scenarios), and
its step predicted by fct_what_if's rule: per rank and iteration, the
replayed span of the rank's GPU ops plus its step window's measured tail
(fct_step_replay.window_tail_ns), the slowest rank's. The standard
scenarios are read from fct_what_if, never recomputed.

Rows, per run (means over the run's iterations; saved_ratio a ratio of
sums, as share_of_sums): ``as_measured`` (the plain replay), each standard
scenario, then each ``--scale`` in the order given (each applied to the
measured graph on its own) and, with several, ``combined`` (all of them at
once, applied in order).
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa

from tracehouse.core.replay import ReplayGraph, drop_cyclic_parts, graph_from_relations, replay
from tracehouse.core.replay_scenarios import scale_durations
from tracehouse.core.warehouse import Warehouse
from tracehouse.query.whatif_scale import Scale, selection_sql

#: The tables a what-if answer needs: every DuckDB build makes them, but one with
#: ``--vars '{whatif: false}'`` (or one from before they were on by default).
REQUIRED_TABLES = ("fct_what_if", "fct_step_replay", "int_replay_nodes_listed",
                   "int_replay_edges_typed")
#: The build that makes them: a plain one, without the opt-out.
BUILD_HINT = "tracehouse build"
#: Why a warehouse lacks them.
LEFT_OUT = ("the warehouse was built without the what-if models (`--vars '{whatif: false}'` "
            "leaves them out)")
COLUMNS = ("run_id", "scenario", "iterations", "step_ns", "predicted_step_ns", "saved_ns",
           "saved_ratio", "scaled_node_count")


class WhatifUnavailable(RuntimeError):
    """The warehouse has no what-if tables (built with the var off), or no such run."""


class SelectionError(ValueError):
    """A ``--scale`` selects no op of the run (a mistake, not a scenario that saves
    0), or DuckDB refuses its kernel-name pattern."""


@dataclass(frozen=True)
class RunGraph:
    """One run's replay graph, its nodes renumbered 1..n (``warehouse_node_id`` keeps
    the warehouse's ids) in a temp table ``run_nodes`` of the connection."""

    run_id: str
    node_id: np.ndarray
    graph: ReplayGraph


def check_tables(con: duckdb.DuckDBPyConnection, place: Warehouse) -> None:
    """Raise WhatifUnavailable naming the warehouse and the build that makes the tables."""
    present = {name for (name,) in con.execute(
        "select table_name from information_schema.tables").fetchall()}
    missing = [name for name in REQUIRED_TABLES if name not in present]
    if missing:
        raise WhatifUnavailable(
            f"{place.root}: no what-if tables ({', '.join(missing)}): {LEFT_OUT}; "
            f"build it again without that var: `{BUILD_HINT}`")


def runs(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Runs with what-if answers, sorted."""
    return [run for (run,) in con.execute(
        "select distinct run_id from fct_what_if order by 1").fetchall()]


def load_run_graph(con: duckdb.DuckDBPyConnection, run: str) -> RunGraph:
    """The run's graph, weighed from its measured times (replay.graph_from_relations)."""
    con.execute(
        "create or replace temp table run_nodes as select * exclude (node_id), "
        "node_id as warehouse_node_id, row_number() over (order by node_id) as node_id "
        "from intermediate.int_replay_nodes_listed where run_id = ?", [run])
    edges = con.sql(
        "select edges.* exclude (src_node_id, dst_node_id), src.node_id as src_node_id, "
        "dst.node_id as dst_node_id from intermediate.int_replay_edges_typed as edges "
        "inner join run_nodes as src on edges.src_node_id = src.warehouse_node_id "
        "inner join run_nodes as dst on edges.dst_node_id = dst.warehouse_node_id")
    node_id, graph = graph_from_relations(con.table("run_nodes"), edges)
    # An iteration whose graph has a cycle or a stray node is cut loose, as the replay model
    # does (it has no fct_step_replay row, so no prediction either).
    parts = con.sql("select dense_rank() over (order by iteration) as part from run_nodes "
                    "order by node_id").fetchnumpy()["part"]
    graph, _cut, _why = drop_cyclic_parts(graph, np.asarray(parts, dtype=np.int64))
    return RunGraph(run_id=run, node_id=node_id, graph=graph)


def selected_nodes(con: duckdb.DuckDBPyConnection, run: RunGraph, scale: Scale) -> np.ndarray:
    """Indexes (node_id - 1 in ``run_nodes``) of the nodes ``scale`` selects."""
    sql, parameters = selection_sql(scale)
    try:
        con.execute(
            "create or replace temp table selected as " + sql, [run.run_id, *parameters])
    except duckdb.Error as error:
        raise SelectionError(f"--scale {scale.text!r}: {error}") from None
    rows = con.execute(
        "select distinct run_nodes.node_id from selected "
        "inner join run_nodes on selected.node_id = run_nodes.warehouse_node_id").fetchnumpy()
    return np.sort(np.asarray(rows["node_id"], dtype=np.int64)) - 1


def predicted_steps(con: duckdb.DuckDBPyConnection, run: RunGraph,
                    graph: ReplayGraph) -> list[tuple[int, int, int]]:
    """(iteration, measured step, predicted step) per iteration of the run under
    ``graph``'s weights, by fct_what_if's rule (see the module's docstring)."""
    start, end = replay(graph)
    con.register("replayed", pa.table({
        "node_id": run.node_id, "replayed_start_ns": start, "replayed_end_ns": end}))
    try:
        return con.execute(
            "with spans as (select nodes.rank, nodes.iteration, "
            "max(replayed.replayed_end_ns) - min(replayed.replayed_start_ns) as span_ns "
            "from run_nodes as nodes inner join replayed using (node_id) "
            "where nodes.node_kind like 'gpu_%' or nodes.node_kind like 'host_%' "
            "group by 1, 2) "
            "select steps.iteration, max(steps.measured_step_ns), "
            "max(spans.span_ns + steps.window_tail_ns)::bigint "
            "from fct_step_replay as steps inner join spans "
            "on steps.rank = spans.rank and steps.iteration = spans.iteration "
            "where steps.run_id = ? group by 1 order by 1", [run.run_id]).fetchall()
    finally:
        con.unregister("replayed")


def _summary(run: str, scenario: str, steps: list[tuple[int, int]], scaled: int | None,
             ) -> tuple:
    """One output row from (measured, predicted) per iteration."""
    measured = sum(step for step, _predicted in steps)
    predicted = sum(prediction for _step, prediction in steps)
    count = len(steps)
    return (run, scenario, count, round(measured / count), round(predicted / count),
            round((measured - predicted) / count),
            (measured - predicted) / measured if measured else None, scaled)


def whatif_rows(place: Warehouse, scales: list[Scale], run: str | None = None) -> list[tuple]:
    """Rows of :data:`COLUMNS` for ``run`` (default: every run with what-if answers)."""
    con = duckdb.connect(str(place.database), read_only=True) if place.database.is_file() \
        else None
    if con is None:
        raise WhatifUnavailable(f"{place.root}: no warehouse database; build one first "
                                f"(`{BUILD_HINT}`)")
    try:
        check_tables(con, place)
        available = runs(con)
        chosen = available if run is None else [run]
        if run is not None and run not in available:
            raise WhatifUnavailable(f"{place.root}: run {run!r} has no what-if answers "
                                    f"(runs with them: {', '.join(available) or 'none'})")
        rows: list[tuple] = []
        for run_id in chosen:
            rows.extend(_run_rows(con, run_id, scales))
        return rows
    finally:
        con.close()


def _run_rows(con: duckdb.DuckDBPyConnection, run_id: str, scales: list[Scale]) -> list[tuple]:
    """as_measured, the standard scenarios (fct_what_if), then the user's."""
    run = load_run_graph(con, run_id)
    plain = predicted_steps(con, run, run.graph)
    rows = [_summary(run_id, "as_measured", [(m, p) for _i, m, p in plain], None)]
    standard = con.execute(
        "select scenario, count(*), round(avg(step_ns)), round(avg(predicted_step_ns)), "
        "round(avg(saved_ns)), sum(saved_ns) / nullif(sum(step_ns), 0) "
        "from fct_what_if where run_id = ? group by 1 order by 1", [run_id]).fetchall()
    rows.extend((run_id, scenario, count, int(step), int(predicted), int(saved), ratio, None)
                for scenario, count, step, predicted, saved, ratio in standard)
    combined, combined_count = run.graph, 0
    for scale in scales:
        index = selected_nodes(con, run, scale)
        if index.size == 0:
            raise SelectionError(f"--scale {scale.text!r} selects no op of run {run_id!r}")
        steps = predicted_steps(con, run, scale_durations(run.graph, index, scale.factor))
        rows.append(_summary(run_id, scale.text, [(m, p) for _i, m, p in steps], index.size))
        combined = scale_durations(combined, index, scale.factor)
        combined_count += index.size
    if len(scales) > 1:
        steps = predicted_steps(con, run, combined)
        rows.append(_summary(run_id, "combined", [(m, p) for _i, m, p in steps],
                             combined_count))
    return rows

