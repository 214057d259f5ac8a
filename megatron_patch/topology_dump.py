"""Topology dump for a Megatron-LM job: every parallel group, as JSON and TraceViz text.

Why: tracehouse needs to know which ranks form each tensor-, pipeline-,
data-, context- and expert-parallel group. Megatron-TraceViz's patch dumped
only TP/PP/DP (and EP) groups in a fixed rank order and ignored CP when EP
was on. Here rank 0 writes the full layout right after
``parallel_state.initialize_model_parallel``:

* ``topology.json``: the contract "Topology JSON" (ARCHITECTURE.md), built
  by :func:`tracehouse.core.topology.build_topology` from the sizes and order
  Megatron was initialised with;
* ``unique_parallel_groups_<timestamp>.txt``: Megatron-TraceViz's text
  format, for its aggregator.

Every rank checks its own groups, read back from ``parallel_state``, against
that layout (:func:`check_rank_groups`), so a dump can never silently
disagree with what Megatron built. Nothing here needs a GPU; the functions
taking ``parallel_state`` accept the module (``megatron.core.parallel_state``).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from tracehouse.core.topology import DEFAULT_ORDER, GROUP_DESCRIPTIONS, build_topology
from tracehouse.core.topology_files import format_traceviz_txt, topology_json

__all__ = [
    "KIND_BY_DESCRIPTION",
    "check_rank_groups",
    "dump_topology",
    "format_traceviz_txt",
    "rank_groups_from_parallel_state",
    "topology_from_parallel_state",
    "topology_json",
]

#: Topology kind of each ``group_desc`` Megatron gives ``new_group``.
KIND_BY_DESCRIPTION: dict[str, str] = {desc: kind for kind, desc in GROUP_DESCRIPTIONS.items()}

#: This rank's group of each kind: (kind, getter name, getter keyword arguments).
_GETTERS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("tp", "get_tensor_model_parallel_group", {}),
    ("pp", "get_pipeline_model_parallel_group", {}),
    ("dp", "get_data_parallel_group", {}),
    ("dp_cp", "get_data_parallel_group", {"with_context_parallel": True}),
    ("cp", "get_context_parallel_group", {}),
    ("mp", "get_model_parallel_group", {}),
    ("tp_dp", "get_tensor_and_data_parallel_group", {}),
    ("tp_dp_cp", "get_tensor_and_data_parallel_group", {"with_context_parallel": True}),
    ("tp_cp", "get_tensor_and_context_parallel_group", {}),
    ("ep", "get_expert_model_parallel_group", {}),
    ("etp", "get_expert_tensor_parallel_group", {}),
    ("tp_ep", "get_expert_tensor_and_model_parallel_group", {}),
    ("tp_ep_pp", "get_expert_tensor_model_pipeline_parallel_group", {}),
    ("edp", "get_expert_data_parallel_group", {}),
    ("intra_dist_opt", "get_intra_distributed_optimizer_instance_group", {}),
)


def rank_groups_from_parallel_state(parallel_state: Any) -> dict[str, list[int]]:
    """This rank's group of every kind, read back from Megatron's ``parallel_state``.

    Embedding and position-embedding groups are included only on the ranks
    that belong to one (the first and last pipeline stages).
    """
    import torch.distributed as dist

    groups: dict[str, list[int]] = {}
    for kind, getter, kwargs in _GETTERS:
        group = getattr(parallel_state, getter)(**kwargs)
        groups[kind] = list(dist.get_process_group_ranks(group))
    for kind, attribute in (
        ("embedding", "_EMBEDDING_GLOBAL_RANKS"),
        ("position_embedding", "_POSITION_EMBEDDING_GLOBAL_RANKS"),
    ):
        ranks = getattr(parallel_state, attribute, None)
        if ranks is not None and dist.get_rank() in ranks:
            groups[kind] = list(ranks)
    return groups


def topology_from_parallel_state(parallel_state: Any, order: str = DEFAULT_ORDER) -> dict:
    """The contract topology of the layout ``parallel_state`` was initialised with.

    ``order`` is Megatron's ``--order`` (``args.order``); parallel_state does
    not keep it.
    """
    import torch.distributed as dist

    vpp = parallel_state.get_virtual_pipeline_model_parallel_world_size()
    return build_topology(
        world=dist.get_world_size(),
        tp=parallel_state.get_tensor_model_parallel_world_size(),
        pp=parallel_state.get_pipeline_model_parallel_world_size(),
        cp=parallel_state.get_context_parallel_world_size(),
        ep=parallel_state.get_expert_model_parallel_world_size(),
        etp=parallel_state.get_expert_tensor_parallel_world_size(),
        vpp=vpp if vpp and vpp > 1 else None,
        order=order,
    )


def check_rank_groups(topology: dict, rank: int, own_groups: dict[str, list[int]]) -> list[str]:
    """Differences between ``rank``'s own groups and the topology's; empty when they agree."""
    problems = []
    for kind, ranks in sorted(own_groups.items()):
        expected = [g for g in topology["groups"].get(kind, []) if rank in g]
        if expected != [ranks]:
            problems.append(
                f"rank {rank}: Megatron's {kind} group is {ranks}, the topology says "
                f"{expected[0] if expected else 'none'}"
            )
    return problems


def dump_topology(topology: dict, out_dir: Path | str,
                  timestamp: dt.datetime | None = None) -> tuple[Path, Path]:
    """Write ``topology.json`` and ``unique_parallel_groups_<timestamp>.txt`` into ``out_dir``.

    Call it on rank 0 only. Each file is written to a temporary and renamed,
    so a reader never sees half a file.
    """
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    when = timestamp or dt.datetime.now()
    json_path = folder / "topology.json"
    txt_path = folder / f"unique_parallel_groups_{when:%Y%m%d_%H%M%S}.txt"
    for path, text in ((json_path, topology_json(topology)),
                       (txt_path, format_traceviz_txt(topology, when))):
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return json_path, txt_path
