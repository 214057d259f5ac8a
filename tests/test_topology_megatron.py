"""`tracehouse topology` equals the groups real megatron-core builds.

megatron-core's ``initialize_model_parallel`` runs on CPU with torch's fake
process group (no processes, no network): for each rank of a layout, the
test records every ``new_group`` call Megatron makes (kind from its
``group_desc``, ranks, creation order) and reads the rank's own groups back
through ``parallel_state``'s getters. Both must equal what
``tracehouse topology`` prints. Needs the optional extra
``pip install -e '.[megatron]'`` (torch 2.13 CPU + megatron-core 0.16);
skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tracehouse.cli import main

with warnings.catch_warnings():  # "Transformer Engine and Apex are not installed"
    warnings.simplefilter("ignore")
    parallel_state = pytest.importorskip(
        "megatron.core.parallel_state",
        reason="megatron-core is not installed (pip install -e '.[megatron]')",
    )
dist = pytest.importorskip("torch.distributed")
fake_pg = pytest.importorskip("torch.testing._internal.distributed.fake_pg")

from tracehouse.megatron_patch.topology_dump import (  # noqa: E402
    KIND_BY_DESCRIPTION,
    check_rank_groups,
    rank_groups_from_parallel_state,
    topology_from_parallel_state,
)

#: (world, tp, pp, cp, ep, etp, vpp, order)
LAYOUTS = [
    (8, 2, 2, 1, 1, None, None, "tp-cp-ep-dp-pp"),
    (8, 1, 4, 1, 1, None, None, "tp-cp-ep-dp-pp"),
    (4, 2, 2, 1, 1, None, 2, "tp-cp-ep-dp-pp"),
    (16, 2, 4, 1, 1, None, 4, "tp-cp-ep-dp-pp"),
    (8, 2, 1, 2, 1, None, None, "tp-cp-ep-dp-pp"),
    (8, 2, 2, 1, 2, 1, None, "tp-cp-ep-dp-pp"),
    (16, 2, 2, 2, 2, 1, None, "tp-cp-ep-dp-pp"),  # EP and CP together
    (32, 2, 2, 2, 4, 1, 2, "tp-cp-ep-dp-pp"),  # EP + CP + VPP
    (16, 1, 2, 2, 4, 2, None, "tp-cp-ep-dp-pp"),  # etp > tp
    (8, 2, 2, 1, 1, None, None, "tp-pp-dp"),  # non-default orders
    (16, 2, 2, 1, 1, None, 2, "tp-dp-pp"),
    (16, 2, 2, 2, 1, None, None, "cp-tp-dp-pp"),
    (8, 2, 2, 1, 2, 1, None, "tp-ep-pp-dp"),
    (8, 2, 1, 1, 1, None, None, "dp-tp"),
]


@contextmanager
def fake_rank(rank: int, world: int) -> Iterator[list[tuple[str, list[int]]]]:
    """Initialise torch's fake process group as ``rank``; yield Megatron's new_group calls."""
    dist.init_process_group("fake", store=fake_pg.FakeStore(), rank=rank, world_size=world)
    created: list[tuple[str, list[int]]] = []
    original = dist.new_group

    def recording_new_group(*args: Any, **kwargs: Any) -> Any:
        group = original(*args, **kwargs)
        created.append((kwargs.get("group_desc"), list(kwargs["ranks"])))
        return group

    dist.new_group = recording_new_group
    try:
        yield created
    finally:
        dist.new_group = original
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()


def initialize(world: int, tp: int, pp: int, cp: int, ep: int, etp: int | None,
               vpp: int | None, order: str) -> None:
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vpp,
        context_parallel_size=cp,
        expert_model_parallel_size=ep,
        expert_tensor_parallel_size=etp,
        order=order,
        create_gloo_process_groups=False,  # gloo cannot run on the fake store
    )


def cli_topology(world: int, tp: int, pp: int, cp: int, ep: int, etp: int | None,
                 vpp: int | None, order: str, capsys: pytest.CaptureFixture[str]) -> dict:
    argv = ["topology", "--world", str(world), "--tp", str(tp), "--pp", str(pp),
            "--cp", str(cp), "--ep", str(ep), "--order", order]
    if etp is not None:
        argv += ["--etp", str(etp)]
    if vpp is not None:
        argv += ["--vpp", str(vpp)]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda lay: "w{}_tp{}_pp{}_cp{}_ep{}_etp{}_vpp{}_{}"
                         .format(*lay))
def test_topology_command_equals_megatron_core(layout: tuple, capsys: pytest.CaptureFixture[str]
                                               ) -> None:
    world, tp, pp, cp, ep, etp, vpp, order = layout
    ours = cli_topology(*layout, capsys=capsys)
    gloo_kinds = {"dp_gloo", "dp_cp_gloo", "edp_gloo"}  # not created on the fake store
    by_name = sorted(
        (int(pg["pg_name"]), kind, [int(r) for r in key.split(",")])
        for kind, by_key in ours["process_groups"].items()
        for key, pg in by_key.items()
    )
    expected_created = [(kind, ranks) for _, kind, ranks in by_name if kind not in gloo_kinds]
    for rank in range(world):
        with fake_rank(rank, world) as created:
            initialize(world, tp, pp, cp, ep, etp, vpp, order)
            own = rank_groups_from_parallel_state(parallel_state)
            from_state = topology_from_parallel_state(parallel_state, order=order)
        megatron_groups: dict[str, list[list[int]]] = {}
        for desc, ranks in created:
            kind = KIND_BY_DESCRIPTION[desc]
            # torch sorts a group's ranks; the topology lists this one as torch holds it.
            megatron_groups.setdefault(kind, []).append(
                sorted(ranks) if kind == "intra_dist_opt" else ranks)
        # Every kind, every group, in Megatron's order (which fixes torch's pg_name).
        for kind, groups in megatron_groups.items():
            assert ours["groups"][kind] == groups, (rank, kind)
        assert [(KIND_BY_DESCRIPTION[d], sorted(r)) for d, r in created] == expected_created
        # What parallel_state hands this rank is its group in our topology.
        assert check_rank_groups(ours, rank, own) == []
        assert from_state["groups"] == ours["groups"]
        assert from_state["sizes"] == ours["sizes"]
        # Coordinates agree with Megatron's own rank getters.
        coords = ours["ranks"][str(rank)]
        assert coords["tp"] == parallel_state_rank("tp", rank, world, layout)
        assert coords["pp"] == parallel_state_rank("pp", rank, world, layout)


def parallel_state_rank(dim: str, rank: int, world: int, layout: tuple) -> int:
    """Megatron's own coordinate of ``rank`` along ``dim``."""
    with fake_rank(rank, world):
        initialize(*layout)
        getter = {
            "tp": parallel_state.get_tensor_model_parallel_rank,
            "pp": parallel_state.get_pipeline_model_parallel_rank,
        }[dim]
        return getter()


@pytest.mark.parametrize(
    "layout",
    [
        (6, 4, 1, 1, 1, None, None, "tp-cp-ep-dp-pp"),
        (8, 2, 1, 1, 3, None, None, "tp-cp-ep-dp-pp"),
        (8, 2, 2, 1, 1, None, None, "tp-pp"),
        (8, 2, 2, 1, 2, 1, None, "tp-pp-ep-dp"),
    ],
)
def test_layouts_megatron_rejects_are_usage_errors(layout: tuple,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    world, tp, pp, cp, ep, etp, vpp, order = layout
    with fake_rank(0, world):
        with pytest.raises((AssertionError, RuntimeError, ValueError)):
            initialize(*layout)
    argv = ["topology", "--world", str(world), "--tp", str(tp), "--pp", str(pp),
            "--cp", str(cp), "--ep", str(ep), "--order", order]
    if etp is not None:
        argv += ["--etp", str(etp)]
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_patch_hook_dumps_what_megatron_built(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The patch's hook on every rank: no disagreement; rank 0 writes both files."""
    from tracehouse.ingest.topology import parse_traceviz_txt
    from tracehouse.megatron_patch.hooks import on_model_parallel_initialized

    layout = (16, 2, 2, 2, 2, 1, 2, "tp-cp-ep-dp-pp")
    for rank in range(layout[0]):
        with fake_rank(rank, layout[0]), warnings.catch_warnings():
            warnings.simplefilter("error")  # a disagreement would be a warning
            initialize(*layout)
            on_model_parallel_initialized(tmp_path, order=layout[-1],
                                          parallel_state=parallel_state)
    ours = cli_topology(*layout, capsys=capsys)
    dumped = json.loads((tmp_path / "topology.json").read_text())
    assert dumped["groups"] == ours["groups"] and dumped["sizes"] == ours["sizes"]
    [txt] = tmp_path.glob("unique_parallel_groups_*.txt")
    assert parse_traceviz_txt(txt.read_text())["groups"]["cp"] == ours["groups"]["cp"]


def test_patch_hook_dumps_the_model_config_megatron_runs(tmp_path: Path) -> None:
    """Rank 0 of a real megatron-core layout writes model_config.json from Megatron's
    arguments, and ingest reads back the values megatron-core's TransformerConfig
    holds (its fields share Megatron-LM's argument names: core_transformer_config_from_args
    copies them by name, so a misspelt name here would drop a value). The training
    arguments megatron-core lacks (seq length, batch, vocab, swiglu) stand in as
    Megatron-LM's parse_args names them: megatron.training is not in megatron-core."""
    import argparse
    import dataclasses

    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    from tracehouse.core.model_config_format import MODEL_CONFIG_INTEGERS
    from tracehouse.ingest.model_config import parse_model_config
    from tracehouse.megatron_patch.hooks import on_model_parallel_initialized

    # Llama-3-8B-like: GQA with 8 groups, SwiGLU, tp=2, pp=2.
    config = TransformerConfig(num_layers=32, hidden_size=4096, num_attention_heads=32,
                               num_query_groups=8, ffn_hidden_size=14336,
                               gated_linear_unit=True, params_dtype=torch.bfloat16,
                               pipeline_dtype=torch.bfloat16, bf16=True,
                               tensor_model_parallel_size=2, pipeline_model_parallel_size=2)
    args = argparse.Namespace(
        **{field.name: getattr(config, field.name) for field in dataclasses.fields(config)},
        seq_length=8192, micro_batch_size=1, global_batch_size=512, vocab_size=128256,
        padded_vocab_size=128256, make_vocab_size_divisible_by=128, num_experts=None,
        swiglu=True, group_query_attention=True, data_parallel_size=2)
    layout = (8, 2, 2, 1, 1, None, None, "tp-cp-ep-dp-pp")
    for rank in (1, 0):
        with fake_rank(rank, layout[0]):
            initialize(*layout)
            on_model_parallel_initialized(tmp_path, order=layout[-1],
                                          parallel_state=parallel_state, args=args)
        # Only rank 0 writes.
        assert (tmp_path / "model_config.json").exists() == (rank == 0)
    row = parse_model_config((tmp_path / "model_config.json").read_text())
    core_fields = {field.name for field in dataclasses.fields(config)}
    shared = [name for name in MODEL_CONFIG_INTEGERS if name in core_fields]
    assert len(shared) >= 10
    for name in shared:
        assert row[name] == getattr(config, name), name
    assert (row["kv_channels"], row["num_query_groups"]) == (128, 8)
    assert (row["seq_length"], row["global_batch_size"], row["padded_vocab_size"]) == (
        8192, 512, 128256)
    assert row["num_experts"] is None  # dense: left out, Megatron's default applies
    assert (row["swiglu"], row["group_query_attention"]) == (True, True)
    assert (row["params_dtype"], row["config_source"]) == ("torch.bfloat16", "megatron")
