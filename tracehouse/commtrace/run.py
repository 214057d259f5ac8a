"""``tracehouse commtrace``: every collective of a Megatron layout, per rank, without GPUs.

Why: network design and expected-vs-observed checks need the exact list of
collectives and point-to-point transfers a layout issues -- which group,
how many bytes, from which Megatron call site -- for every rank, at sizes
nobody has GPUs for. Genstack (seed 04) answers this with one real gloo
process per rank, which stalls past about 64 ranks and misses the
``*_into_tensor``/``*_tensor`` and coalesced collectives. Here each rank runs
alone (``tracehouse.commtrace.megatron_step``: megatron-core on the meta device under
torch's fake process group), so ranks go through a process pool as wide as
the machine, a 128-rank world costs 128 independent short runs, and memory
stays at one rank per worker.

Output (``--out DIR``), readable by Genstack's own tools:

* ``comm_log_rank_<r>.json``: a JSON array per rank, Genstack's record
  schema (``op``, ``call_id``, ``ranks``, ``shape``, ``dtype``, ``peer``,
  ``src_rank``, ...), plus ``nelems``, ``out_nelems``, ``bytes``,
  ``group_desc`` and ``call_site``;
* ``config.json`` and ``summary.json`` as Genstack writes them (with the
  extra layout sizes under ``tracehouse``);
* ``topology.json``: the layout's groups (contract format).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tracehouse.commtrace.megatron_step import RankSpec

__all__ = [
    "MODEL_PRESETS",
    "CommTraceConfig",
    "CommTraceResult",
    "run_commtrace",
]

#: GPT presets of Genstack's ``GPT_MODEL_CONFIGS`` (layers, hidden, heads, seq).
MODEL_PRESETS: dict[str, tuple[int, int, int, int]] = {
    "small": (12, 768, 12, 1024),
    "medium": (24, 1024, 16, 1024),
    "large": (36, 1280, 20, 1024),
    "xl": (48, 1600, 25, 1024),
    "2b": (36, 2048, 32, 1024),
    "6b": (32, 4096, 32, 2048),
    "13b": (40, 5120, 40, 2048),
    "30b": (32, 6656, 52, 2048),
    "175b": (96, 12288, 96, 2048),
}

#: GPT-2's BPE vocabulary, Genstack's tokenizer.
GPT2_VOCAB = 50257


@dataclass(frozen=True)
class CommTraceConfig:
    """A layout and model to trace (see ``tracehouse commtrace --help``)."""

    tp: int
    pp: int
    dp: int
    cp: int = 1
    ep: int = 1
    etp: int | None = None
    vpp: int | None = None
    model: str | None = "small"
    layers: int | None = None
    hidden: int | None = None
    heads: int | None = None
    seq: int | None = None
    vocab: int = GPT2_VOCAB
    vocab_divisible_by: int = 128
    ffn_hidden: int | None = None
    num_experts: int | None = None
    microbatches: int = 4
    micro_batch_size: int = 1
    sequence_parallel: bool = False
    distributed_optimizer: bool = False
    overlap_grad_reduce: bool = False
    bucket_size: int | None = None
    dtype: str = "fp32"
    emulate_training_loop: bool = True
    order: str = "tp-cp-ep-dp-pp"

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    def resolved(self) -> tuple[int, int, int, int]:
        """(layers, hidden, heads, seq): the preset, with explicit sizes taking precedence."""
        base = MODEL_PRESETS.get(self.model or "", (None, None, None, None))
        values = tuple(given if given is not None else preset for given, preset in zip(
            (self.layers, self.hidden, self.heads, self.seq), base))
        if any(value is None for value in values):
            raise ValueError("give --model NAME or all of --layers --hidden --heads --seq")
        return values  # type: ignore[return-value]

    def check(self) -> None:
        """Raise ValueError for a layout megatron-core would reject, before any process starts."""
        for name in ("tp", "pp", "dp", "cp", "ep", "microbatches", "micro_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1")
        if self.model is not None and self.model not in MODEL_PRESETS:
            raise ValueError(f"--model {self.model!r}: choose one of {', '.join(MODEL_PRESETS)}")
        layers, hidden, heads, _ = self.resolved()
        if heads % self.tp:
            raise ValueError(f"{heads} attention heads do not split over TP {self.tp}")
        if hidden % heads:
            raise ValueError(f"hidden {hidden} is not a multiple of {heads} heads")
        stages = self.pp * (self.vpp or 1)
        if layers % stages:
            raise ValueError(f"{layers} layers do not split over PP {self.pp} x VPP "
                             f"{self.vpp or 1}")
        if self.vpp and self.microbatches % self.pp:
            raise ValueError("interleaved schedules need --microbatches a multiple of --pp")
        if self.cp > 1:
            raise ValueError("context parallelism (--cp > 1) is not supported yet: megatron-core "
                             "runs it only in Transformer Engine's attention, which needs CUDA")
        if self.ep > 1 or self.num_experts:
            # MoE token routing is data-dependent (masked_select, per-expert token
            # counts): megatron-core's dispatchers cannot run on meta tensors.
            raise ValueError("MoE layouts (--ep > 1, --num-experts) are not supported yet: "
                             "expert routing depends on data, which meta tensors do not hold")
        if self.sequence_parallel and self.tp == 1:
            raise ValueError("--sequence-parallel needs --tp > 1")
        from tracehouse.core.topology import build_topology

        # The rank order and sizes as megatron-core's RankGenerator accepts them.
        build_topology(world=self.world, tp=self.tp, pp=self.pp, cp=self.cp, ep=self.ep,
                       etp=self.etp, vpp=self.vpp, order=self.order)

    def rank_spec(self, rank: int) -> RankSpec:
        layers, hidden, heads, seq = self.resolved()
        return RankSpec(
            rank=rank, world=self.world, tp=self.tp, pp=self.pp, dp=self.dp, cp=self.cp,
            ep=self.ep, etp=self.etp, vpp=self.vpp, layers=layers, hidden=hidden, heads=heads,
            seq=seq, vocab=self.vocab, vocab_divisible_by=self.vocab_divisible_by,
            ffn_hidden=self.ffn_hidden, num_experts=self.num_experts,
            microbatches=self.microbatches, micro_batch_size=self.micro_batch_size,
            sequence_parallel=self.sequence_parallel,
            distributed_optimizer=self.distributed_optimizer,
            overlap_grad_reduce=self.overlap_grad_reduce, bucket_size=self.bucket_size,
            dtype=self.dtype, emulate_training_loop=self.emulate_training_loop,
            order=self.order,
        )

    def genstack_config(self) -> dict[str, Any]:
        """``config.json`` with Genstack's keys, tracehouse's extra settings beside them."""
        layers, hidden, heads, seq = self.resolved()
        return {
            "model_size": self.model or "custom",
            "model_config": {"hidden_size": hidden, "num_layers": layers,
                             "num_attention_heads": heads, "seq_length": seq},
            "data_parallel_size": self.dp,
            "tensor_model_parallel_size": self.tp,
            "pipeline_model_parallel_size": self.pp,
            "context_parallel_size": self.cp,
            "world_size": self.world,
            "num_micro_batches": self.microbatches,
            "global_batch_size": self.microbatches * self.micro_batch_size * self.dp,
            "tracehouse": {key: value for key, value in asdict(self).items()
                           if key not in ("tp", "pp", "dp", "cp")},
        }


@dataclass
class RankOutcome:
    """What one rank's worker reports back (its log is already on disk)."""

    rank: int
    events: int = 0
    seconds: float = 0.0
    peak_rss_bytes: int = 0
    error: str | None = None


@dataclass
class CommTraceResult:
    """A finished trace: where it is, and what each rank cost."""

    out: Path
    ranks: list[RankOutcome] = field(default_factory=list)
    seconds: float = 0.0
    jobs: int = 1

    @property
    def failed(self) -> list[RankOutcome]:
        return [outcome for outcome in self.ranks if outcome.error]

    @property
    def peak_rss_bytes(self) -> int:
        return max((outcome.peak_rss_bytes for outcome in self.ranks), default=0)


def log_name(rank: int) -> str:
    return f"comm_log_rank_{rank}.json"


def _write_json(path: Path, value: Any) -> None:
    """Write atomically: a reader never sees half a log."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(value, separators=(",", ":")), encoding="utf-8")
    os.replace(tmp, path)


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def _run_one(job: tuple[RankSpec, str]) -> RankOutcome:
    """Worker body: trace one rank, write its log, report cost (never raises)."""
    spec, out = job
    started = time.perf_counter()
    try:
        from tracehouse.commtrace.megatron_step import trace_rank

        events = trace_rank(spec)
        _write_json(Path(out) / log_name(spec.rank), events)
        return RankOutcome(spec.rank, len(events), time.perf_counter() - started,
                           _peak_rss_bytes())
    except Exception as exc:  # noqa: BLE001 - reported per rank, the others go on
        return RankOutcome(spec.rank, 0, time.perf_counter() - started, _peak_rss_bytes(),
                           f"{type(exc).__name__}: {exc}")


def _preload() -> None:
    """Import torch and megatron-core once in the parent, so forked workers start warm."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import megatron.core.distributed  # noqa: F401
        import megatron.core.models.gpt  # noqa: F401
        import megatron.core.optimizer  # noqa: F401
        import megatron.core.pipeline_parallel  # noqa: F401
        import torch.testing._internal.distributed.fake_pg  # noqa: F401


def run_commtrace(config: CommTraceConfig, out: Path, ranks: Sequence[int] | None = None,
                  jobs: int | None = None,
                  progress: Callable[[RankOutcome, int, int], None] | None = None
                  ) -> CommTraceResult:
    """Trace ``ranks`` (default: all) of ``config``'s layout into ``out``.

    Each rank runs in its own forked process (a fresh interpreter state per
    rank: megatron-core keeps its groups in module globals), ``jobs`` at a
    time (default: the CPU count). Raises ValueError for a layout that cannot
    run, ImportError when megatron-core is not installed.
    """
    config.check()
    try:
        _preload()
    except ImportError as exc:
        raise ImportError("tracehouse commtrace needs megatron-core and torch: "
                          "pip install -e '.[megatron]'") from exc
    from tracehouse.core.topology import build_topology
    from tracehouse.core.topology_files import topology_json

    world = config.world
    chosen = sorted(set(ranks)) if ranks is not None else list(range(world))
    bad = [rank for rank in chosen if not 0 <= rank < world]
    if bad:
        raise ValueError(f"ranks {bad} are outside the world of {world}")
    out.mkdir(parents=True, exist_ok=True)
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(chosen) or 1))
    started = time.perf_counter()
    result = CommTraceResult(out=out, jobs=jobs)
    work = [(config.rank_spec(rank), str(out)) for rank in chosen]
    context = multiprocessing.get_context("fork")
    with context.Pool(processes=jobs, maxtasksperchild=1) as pool:
        for outcome in pool.imap_unordered(_run_one, work):
            result.ranks.append(outcome)
            if progress is not None:
                progress(outcome, len(result.ranks), len(work))
    result.ranks.sort(key=lambda outcome: outcome.rank)
    result.seconds = time.perf_counter() - started
    topo = build_topology(world=world, tp=config.tp, pp=config.pp, cp=config.cp, ep=config.ep,
                          etp=config.etp, vpp=config.vpp, order=config.order)
    # Marked as generated: in a run that also has a job's own topology dump, that one wins.
    topo["generator"] = "tracehouse topology"
    (out / "topology.json").write_text(topology_json(topo), encoding="utf-8")
    genstack = config.genstack_config()
    _write_json(out / "config.json", genstack)
    _write_json(out / "summary.json", {
        "config": genstack,
        "log_files": [log_name(outcome.rank) for outcome in result.ranks if not outcome.error],
    })
    return result
