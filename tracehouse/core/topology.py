"""Megatron-LM's rank layout, reproduced without Megatron or torch.

Why: every analysis of a distributed trace needs to know which ranks form a
tensor-, pipeline-, data-, context- or expert-parallel group. megatron-core
builds those groups in ``parallel_state.initialize_model_parallel`` from two
``RankGenerator`` objects (a dense one over tp-cp-dp-pp and an expert one over
etp-ep-edp-pp) and ``generate_masked_orthogonal_rank_groups``. This module
re-implements exactly that arithmetic (checked against the ``topology.json``
files that real megatron-core 0.16.1 wrote for the runs in
``../shared/data/kineto/megatron_cpu``), so tracehouse can build the groups of
any layout Megatron accepts, for the simulator, for ``tracehouse topology`` and
as a cross-check of what a trace's ``distributedInfo.pg_config`` says.

It also reproduces the *names* torch gives those process groups: each
``torch.distributed.new_group`` call takes the next integer name, and every
rank calls ``new_group`` for every group in the same order, so a group's
``pg_name`` is its creation index (``"0"`` is the default group). The order
below is megatron-core 0.16.1's with its defaults (gloo groups created, one
distributed-optimizer instance, no hierarchical context parallelism).

The result is the contract "Topology JSON" of ARCHITECTURE.md; see
:func:`build_topology`.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

__all__ = [
    "DEFAULT_ORDER",
    "GROUP_DESCRIPTIONS",
    "RankGenerator",
    "build_topology",
    "generate_masked_orthogonal_rank_groups",
    "rank_key",
]

#: Megatron's default rank order, fastest-varying dimension first.
DEFAULT_ORDER = "tp-cp-ep-dp-pp"

_TOKENS = ("tp", "pp", "dp", "ep", "cp")

#: ``group_desc`` Megatron passes to ``new_group`` for each group kind; PyTorch
#: records it as ``pg_desc`` in ``distributedInfo.pg_config`` and as
#: ``Process Group Description`` on collectives. The SQL side reads the same
#: mapping from the exact rows (``pg_desc`` set) of ``seeds/process_group_kinds.csv``;
#: it stays a constant here because the Megatron patch imports it inside a
#: training job, where the dbt project's seeds are not installed.
#: ``tests/test_topology.py`` checks that the two are equal.
GROUP_DESCRIPTIONS: dict[str, str] = {
    "dp_cp": "DATA_PARALLEL_GROUP_WITH_CP",
    "dp_cp_gloo": "DATA_PARALLEL_GROUP_WITH_CP_GLOO",
    "dp": "DATA_PARALLEL_GROUP",
    "dp_gloo": "DATA_PARALLEL_GROUP_GLOO",
    "cp": "CONTEXT_PARALLEL_GROUP",
    "mp": "MODEL_PARALLEL_GROUP",
    "tp": "TENSOR_MODEL_PARALLEL_GROUP",
    "pp": "PIPELINE_MODEL_PARALLEL_GROUP",
    "embedding": "EMBEDDING_GROUP",
    "position_embedding": "POSITION_EMBEDDING_GROUP",
    "tp_dp_cp": "TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP",
    "tp_dp": "TENSOR_AND_DATA_PARALLEL_GROUP",
    "tp_cp": "TENSOR_AND_CONTEXT_PARALLEL_GROUP",
    "ep": "EXPERT_MODEL_PARALLEL_GROUP",
    "etp": "EXPERT_TENSOR_PARALLEL_GROUP",
    "tp_ep": "EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP",
    "tp_ep_pp": "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP",
    "edp": "EXPERT_DATA_PARALLEL_GROUP",
    "edp_gloo": "EXPERT_DATA_PARALLEL_GROUP_GLOO",
    "intra_dist_opt": "INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP",
}


def generate_masked_orthogonal_rank_groups(
    world_size: int, parallel_size: Sequence[int], mask: Sequence[bool]
) -> list[list[int]]:
    """Groups of ranks that vary along the masked dimensions only.

    ``parallel_size`` lists the dimension sizes in rank order (fastest first),
    so ``rank = sum(coord[i] * prod(parallel_size[:i]))``. A group holds every
    rank whose *unmasked* coordinates are equal; groups are numbered by their
    unmasked coordinates (first unmasked dimension fastest) and ranks inside a
    group by their masked coordinates (first masked dimension fastest) -- the
    same enumeration as megatron-core, which fixes the order of the returned
    lists and therefore the order in which Megatron creates process groups.
    """
    strides = [prod(parallel_size[:i]) for i in range(len(parallel_size))]
    masked = [(s, d) for s, d, m in zip(parallel_size, strides, mask) if m]
    unmasked = [(s, d) for s, d, m in zip(parallel_size, strides, mask) if not m]
    group_size = prod(s for s, _ in masked)
    groups = []
    for group_index in range(world_size // group_size):
        base = _offset(group_index, unmasked)
        groups.append([base + _offset(i, masked) for i in range(group_size)])
    return groups


def _offset(index: int, dims: Sequence[tuple[int, int]]) -> int:
    """Global-rank offset of the ``index``-th point of the sub-grid ``dims``."""
    total = 0
    for size, stride in dims:
        total += (index % size) * stride
        index //= size
    return total


class RankGenerator:
    """Megatron's ``RankGenerator``: rank groups for one ordered set of sizes.

    ``order`` names the dimensions fastest-varying first (``"tp-cp-ep-dp-pp"``).
    A dimension missing from it is appended if its size is 1 and rejected
    otherwise, as in Megatron.
    """

    def __init__(self, tp: int, ep: int, dp: int, pp: int, cp: int, order: str) -> None:
        if ep != 1 and cp != 1:
            raise ValueError(
                "one RankGenerator cannot have both ep > 1 and cp > 1 (Megatron keeps CP in "
                "the dense generator and EP in the expert generator)"
            )
        self.sizes = {"tp": tp, "pp": pp, "dp": dp, "ep": ep, "cp": cp}
        tokens = _parse_order(order)
        for name in _TOKENS:
            if name not in tokens:
                if self.sizes[name] != 1:
                    raise ValueError(
                        f"order {order!r} does not name {name!r}, but its size is "
                        f"{self.sizes[name]}; add {name} to the order"
                    )
                tokens.append(name)
        self.tokens = tokens
        self.ordered_sizes = [self.sizes[t] for t in tokens]
        self.world_size = prod(self.ordered_sizes)

    def get_ranks(self, token: str) -> list[list[int]]:
        """Groups for one dimension (``"dp"``) or a combination (``"tp-pp"``)."""
        mask = [False] * len(self.tokens)
        for name in token.split("-"):
            mask[self.tokens.index(name)] = True
        return generate_masked_orthogonal_rank_groups(self.world_size, self.ordered_sizes, mask)

    def coordinate(self, rank: int, token: str) -> int:
        """``rank``'s coordinate along one dimension."""
        i = self.tokens.index(token)
        return (rank // prod(self.ordered_sizes[:i])) % self.ordered_sizes[i]


def _parse_order(order: str) -> list[str]:
    tokens = [t.strip().lower() for t in order.split("-")]
    unknown = [t for t in tokens if t not in _TOKENS]
    if unknown or not tokens:
        raise ValueError(
            f"invalid rank order {order!r}: unknown dimension(s) {unknown}; use names from "
            f"{', '.join(_TOKENS)} joined by '-', e.g. {DEFAULT_ORDER}"
        )
    if len(set(tokens)) != len(tokens):
        raise ValueError(f"invalid rank order {order!r}: a dimension appears twice")
    return tokens


def rank_key(ranks: Sequence[int]) -> str:
    """The key of a group in the topology's ``process_groups``: ``"0,1,4,5"``."""
    return ",".join(str(r) for r in ranks)


def _check_positive(**sizes: int | None) -> None:
    for name, value in sizes.items():
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def build_topology(
    world: int,
    tp: int,
    pp: int,
    cp: int = 1,
    ep: int = 1,
    etp: int | None = None,
    vpp: int | None = None,
    order: str = DEFAULT_ORDER,
) -> dict:
    """Every process group megatron-core builds for a layout, as contract JSON.

    Args:
        world: number of ranks.
        tp, pp, cp, ep: tensor-, pipeline-, context- and expert-parallel sizes.
        etp: expert tensor-parallel size (Megatron's default: ``tp``).
        vpp: virtual pipeline (interleaving) size, or None for no interleaving.
        order: rank order, fastest-varying first, as Megatron's ``--order``.

    Returns:
        ``{"sizes", "order", "groups", "replicas", "ranks", "process_groups"}``:
        ``groups[kind]`` lists each group's global ranks for the kinds ``tp``,
        ``pp``, ``dp``, ``dp_cp``, ``cp``, ``mp`` (tp-pp), ``tp_dp``, ``tp_cp``,
        ``tp_dp_cp``, ``ep``, ``etp``, ``edp`` (expert data parallel),
        ``tp_ep``, ``tp_ep_pp``, ``embedding`` (first and last rank of each
        pipeline group), ``position_embedding``, the gloo twins
        (``dp_gloo``, ``dp_cp_gloo``, ``edp_gloo``), ``intra_dist_opt``, and
        ``model_replica`` (tp x cp x pp: all ranks sharing a data-parallel
        coordinate; also under ``replicas``). ``ranks[str(r)]`` holds r's
        coordinates; ``process_groups[kind]["r0,r1,..."]`` the ``pg_name`` and
        ``pg_desc`` torch gives that group.

    Raises:
        ValueError: a size is not a positive integer, ``world`` is not
            divisible by tp*pp*cp or etp*ep*pp, the order is invalid or does
            not end in pp when it must, or vpp is set with pp == 1 -- the
            layouts megatron-core rejects.
    """
    _check_positive(world=world, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, vpp=vpp)
    model_size = tp * pp * cp
    if world % model_size:
        raise ValueError(
            f"world size {world} is not divisible by tp*pp*cp = {tp}*{pp}*{cp} = {model_size}"
        )
    dp = world // model_size
    if vpp is not None and pp == 1:
        raise ValueError("vpp (interleaved schedule) needs pp > 1")
    etp = tp if etp is None else etp
    expert_model = etp * ep * pp
    if world % expert_model:
        raise ValueError(
            f"world size {world} is not divisible by etp*ep*pp = {etp}*{ep}*{pp} = {expert_model}"
        )
    edp = world // expert_model
    order = order.lower()
    dense = RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=cp, order=order)
    expert = RankGenerator(tp=etp, ep=ep, dp=edp, pp=pp, cp=1, order=order)
    if not (order.endswith("pp") or pp == 1 or edp == dp):
        raise ValueError(
            f"order {order!r} does not end in pp, which Megatron allows only when pp == 1 "
            f"or the expert data-parallel size ({edp}) equals the data-parallel size ({dp})"
        )
    if dense.get_ranks("pp") != expert.get_ranks("pp"):
        raise ValueError(
            f"order {order!r} gives different pipeline groups for the dense and the expert "
            "layers; Megatron requires them to be the same"
        )

    created: list[tuple[str, list[int]]] = []  # (kind, ranks) in new_group order

    def create(kind: str, groups: list[list[int]]) -> None:
        for ranks in groups:
            created.append((kind, ranks))

    for ranks in dense.get_ranks("dp-cp"):
        create("dp_cp", [ranks])
        create("dp_cp_gloo", [ranks])
    for ranks in dense.get_ranks("dp"):
        create("dp", [ranks])
        create("dp_gloo", [ranks])
    create("cp", dense.get_ranks("cp"))
    create("mp", dense.get_ranks("tp-pp"))
    create("tp", dense.get_ranks("tp"))
    for ranks in dense.get_ranks("pp"):
        create("pp", [ranks])
        create("embedding", [[ranks[0], ranks[-1]] if len(ranks) > 1 else [ranks[0]]])
        create("position_embedding", [[ranks[0]]])
    create("tp_dp_cp", dense.get_ranks("tp-dp-cp"))
    create("tp_dp", dense.get_ranks("tp-dp"))
    create("tp_cp", dense.get_ranks("tp-cp"))
    create("ep", expert.get_ranks("ep"))
    create("etp", expert.get_ranks("tp"))
    create("tp_ep", expert.get_ranks("tp-ep"))
    create("tp_ep_pp", expert.get_ranks("tp-ep-pp"))
    for ranks in expert.get_ranks("dp"):
        create("edp", [ranks])
        create("edp_gloo", [ranks])
    # One distributed-optimizer instance: every tp-ep-pp group joined (new_group sorts).
    create("intra_dist_opt", [sorted(r for g in expert.get_ranks("tp-ep-pp") for r in g)])

    groups: dict[str, list[list[int]]] = {}
    process_groups: dict[str, dict[str, dict[str, str]]] = {}
    for index, (kind, ranks) in enumerate(created, start=1):  # "0" is the default group
        groups.setdefault(kind, []).append(list(ranks))
        process_groups.setdefault(kind, {})[rank_key(sorted(ranks))] = {
            "pg_name": str(index),
            "pg_desc": GROUP_DESCRIPTIONS[kind],
        }
    replicas = dense.get_ranks("tp-cp-pp")
    groups["model_replica"] = replicas

    ranks_info = {
        str(r): {
            "tp": dense.coordinate(r, "tp"),
            "cp": dense.coordinate(r, "cp"),
            "dp": dense.coordinate(r, "dp"),
            "pp": dense.coordinate(r, "pp"),
            "ep": expert.coordinate(r, "ep"),
            "etp": expert.coordinate(r, "tp"),
            "edp": expert.coordinate(r, "dp"),
        }
        for r in range(world)
    }
    return {
        "sizes": {
            "world": world, "tp": tp, "pp": pp, "vpp": vpp or 1, "cp": cp, "ep": ep,
            "etp": etp, "dp": dp, "edp": edp,
        },
        "order": order,
        "groups": groups,
        "replicas": replicas,
        "ranks": ranks_info,
        "process_groups": process_groups,
        "pg_count": len(created) + 1,
    }
