"""What a simulated Megatron run looks like: layout, schedule, model, faults.

Why a frozen dataclass: the same config drives the timing model in the main
process and the trace writers in worker processes, so it must pickle, hash
(workers cache per-stage programs on it) and never change mid-run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SCHEDULES = ("1f1b", "interleaved")
#: Megatron's ``--recompute-granularity`` choices (None: no recomputation).
RECOMPUTE_GRANULARITIES = ("full", "selective")
#: Process-group kinds whose transfers ``slow_groups`` may slow: the groups
#: the simulated program communicates in (``pp`` = its P2P sends and receives).
SLOWABLE_GROUPS = frozenset({"tp", "cp", "ep", "etp", "dp", "pp", "embedding", "world"})
#: The simulator's own group names that a user's kind stands for: the gradient
#: buckets reduce in ``dp_cp`` (``edp`` for experts), the distributed
#: optimizer's grad-norm all-reduce in a world-sized group.
GROUP_KIND = {"dp_cp": "dp", "edp": "dp", "intra_dist_opt": "world"}


@dataclass(frozen=True)
class SimConfig:
    """A synthetic Megatron-LM training run.

    Layout: ``tp``, ``pp``, ``dp``, ``cp``, ``ep`` (expert parallel; MoE layers
    when > 1), ``etp`` (expert tensor parallel, default ``tp``), ``vpp``
    (model chunks per pipeline rank; > 1 means the interleaved schedule).
    World size is tp * pp * dp * cp, as in Megatron (EP folds into DP).

    Faults: ``stragglers`` maps a global rank to a factor (1.5 = its GPU
    compute kernels take 1.5x as long); ``clock_skew_us`` is the largest
    offset, in microseconds, that a node's clock may have (offsets are drawn
    per node from ``seed``; node 0 keeps the reference clock).

    More faults, each the cause of a finding or a what-if scenario:
    ``overlap_grad_reduce`` (Megatron's ``--overlap-grad-reduce``, on by
    default here as the reference runs have it) off moves the data-parallel
    reduce-scatters into ``finalize_model_grads``, after the last backward,
    where nothing hides them; ``launch_overhead_us`` adds host time to every
    kernel launch call (Python and launch overhead: a launch-bound run whose
    GPU waits for the CPU); ``slow_groups`` maps a process-group kind (``dp``,
    ``tp``, ``pp``, …) to a factor every transfer in such groups is slowed by
    (a slow link or a congested fabric); ``slow_gemm`` makes every GEMM
    kernel that many times longer (a card held at a lower clock, or fp32
    GEMMs where bf16 was meant), so the GEMMs run that much further below
    the roof.

    ``recompute_granularity`` (Megatron's ``--recompute-granularity``):
    ``full`` checkpoints every ``recompute_num_layers`` transformer layers
    (``--recompute-method uniform``) and re-runs their forward at the start
    of their backward; ``selective`` checkpoints only the core attention.

    ``record_shapes``: write the transformer ops' shapes (``Input Dims``,
    ``Input type``, ``Concrete Inputs``), as the PyTorch profiler's
    ``record_shapes`` (Megatron's ``--pytorch-profiler-collect-shapes``) does;
    off by default, as in Megatron. Timings and kernels are the same either way.
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int | None = None
    vpp: int = 1
    microbatches: int = 4
    iterations: int = 1
    schedule: str = "1f1b"
    layers: int = 32
    hidden: int = 4096
    ffn_hidden: int | None = None
    heads: int = 32
    seq_length: int = 4096
    micro_batch_size: int = 1
    vocab: int = 51200
    experts: int | None = None
    sequence_parallel: bool = False
    stragglers: tuple[tuple[int, float], ...] = ()
    clock_skew_us: float = 0.0
    gpus_per_node: int = 8
    seed: int = 0
    first_iteration: int = 1
    jitter: float = 0.03
    record_shapes: bool = False
    overlap_grad_reduce: bool = True
    launch_overhead_us: float = 0.0
    slow_groups: tuple[tuple[str, float], ...] = ()
    slow_gemm: float = 1.0
    recompute_granularity: str | None = None
    recompute_num_layers: int = 1

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "cp", "ep", "vpp", "microbatches", "iterations",
                     "layers", "hidden", "heads", "seq_length", "micro_batch_size", "vocab",
                     "gpus_per_node"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.etp is not None and (not isinstance(self.etp, int) or self.etp < 1):
            raise ValueError(f"etp must be a positive integer, got {self.etp!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.schedule == "interleaved":
            if self.pp < 2:
                raise ValueError("the interleaved schedule needs pp >= 2")
            if self.vpp < 2:
                raise ValueError("the interleaved schedule needs vpp >= 2 (--vpp)")
            # Megatron: microbatch_group_size_per_vp_stage defaults to pp; M must be a
            # multiple of it (or leave a remainder >= pp, impossible for group size pp).
            if self.microbatches % self.pp:
                raise ValueError(
                    f"the interleaved schedule needs microbatches ({self.microbatches}) to be "
                    f"a multiple of pp ({self.pp}), as Megatron requires"
                )
        elif self.vpp != 1:
            raise ValueError("vpp > 1 needs --schedule interleaved")
        if self.layers % (self.pp * self.vpp):
            raise ValueError(
                f"layers ({self.layers}) must be divisible by pp*vpp ({self.pp * self.vpp}) so "
                "every model chunk gets the same number of layers"
            )
        if self.hidden % self.heads or self.heads % self.tp:
            raise ValueError("hidden must be divisible by heads, and heads by tp")
        if self.seq_length % (self.cp * (self.tp if self.sequence_parallel else 1)):
            raise ValueError(
                "seq_length must be divisible by cp (and by tp with sequence parallel)")
        if self.ep > 1:
            experts = self.experts or self.ep * 2
            if experts % self.ep:
                raise ValueError(f"experts ({experts}) must be divisible by ep ({self.ep})")
        if self.world % (self.expert_tp * self.ep * self.pp):
            raise ValueError(
                f"world size {self.world} is not divisible by etp*ep*pp "
                f"({self.expert_tp}*{self.ep}*{self.pp})"
            )
        if not 0 <= self.clock_skew_us <= 1e8:
            raise ValueError("clock_skew_us must be between 0 and 1e8 (100 s)")
        if not isinstance(self.record_shapes, bool):
            raise ValueError(f"record_shapes must be True or False, got {self.record_shapes!r}")
        if not 0 <= self.jitter < 0.5:
            raise ValueError("jitter must be in [0, 0.5)")
        for rank, factor in self.stragglers:
            if not 0 <= rank < self.world:
                raise ValueError(f"straggler rank {rank} is outside 0..{self.world - 1}")
            if factor <= 0:
                raise ValueError(f"straggler factor for rank {rank} must be > 0, got {factor}")
        if not isinstance(self.overlap_grad_reduce, bool):
            raise ValueError("overlap_grad_reduce must be True or False, "
                             f"got {self.overlap_grad_reduce!r}")
        if not 0 <= self.launch_overhead_us <= 1e6:
            raise ValueError("launch_overhead_us must be between 0 and 1e6 (1 s), "
                             f"got {self.launch_overhead_us!r}")
        for kind, factor in self.slow_groups:
            if kind not in SLOWABLE_GROUPS:
                raise ValueError(f"slow group kind {kind!r} is not one of "
                                 f"{', '.join(sorted(SLOWABLE_GROUPS))}")
            if factor <= 0:
                raise ValueError(f"slow group factor for {kind} must be > 0, got {factor}")
        if not 0 < self.slow_gemm <= 1000:
            raise ValueError(f"slow_gemm must be in (0, 1000], got {self.slow_gemm!r}")
        if self.recompute_granularity not in (None, *RECOMPUTE_GRANULARITIES):
            raise ValueError(f"recompute_granularity must be one of {RECOMPUTE_GRANULARITIES} "
                             f"or None, got {self.recompute_granularity!r}")
        if (not isinstance(self.recompute_num_layers, int)
                or isinstance(self.recompute_num_layers, bool) or self.recompute_num_layers < 1):
            raise ValueError("recompute_num_layers must be a positive integer, "
                             f"got {self.recompute_num_layers!r}")
        if self.first_iteration < 0:
            raise ValueError("first_iteration must be >= 0")

    @property
    def world(self) -> int:
        """Number of ranks: tp * pp * dp * cp."""
        return self.tp * self.pp * self.dp * self.cp

    @property
    def expert_tp(self) -> int:
        """Expert tensor-parallel size (Megatron's default: tp)."""
        return self.tp if self.etp is None else self.etp

    @property
    def ffn(self) -> int:
        """MLP hidden size (default 4 * hidden)."""
        return self.ffn_hidden or 4 * self.hidden

    @property
    def num_experts(self) -> int:
        """Routed experts per MoE layer (default 2 per expert-parallel rank)."""
        return self.experts or self.ep * 2

    @property
    def layers_per_chunk(self) -> int:
        """Transformer layers in one model chunk (pp * vpp chunks in all)."""
        return self.layers // (self.pp * self.vpp)

    @property
    def iteration_numbers(self) -> list[int]:
        """The traced iterations, as the Megatron patch names their folders."""
        return [self.first_iteration + i for i in range(self.iterations)]

    def straggler_factor(self, rank: int) -> float:
        """Slow-down factor of ``rank``'s compute kernels (1.0 unless injected)."""
        for r, factor in self.stragglers:
            if r == rank:
                return factor
        return 1.0

    def group_slowdown(self, group: str) -> float:
        """Factor the transfers in ``group`` (a simulator group name) are slowed by
        (1.0 unless its kind was injected)."""
        kind = GROUP_KIND.get(group, group)
        for k, factor in self.slow_groups:
            if k == kind:
                return factor
        return 1.0

    def analytical_bubble_ratio(self) -> float:
        """Megatron's pipeline bubble: (p-1)/(m+p-1), interleaved (p-1)/(v*m+p-1)."""
        p, m, v = self.pp, self.microbatches, self.vpp
        return (p - 1) / (v * m + p - 1)


_STRAGGLER = re.compile(r"^\s*(\d+)\s*:\s*([0-9]*\.?[0-9]+(?:[eE][-+]?\d+)?)\s*$")


def parse_straggler(text: str) -> tuple[int, float]:
    """``"5:1.5"`` → ``(5, 1.5)``; raise ValueError naming the expected form."""
    match = _STRAGGLER.match(text)
    if not match:
        raise ValueError(f"invalid straggler {text!r}: expected RANK:FACTOR, e.g. 5:1.5")
    return int(match.group(1)), float(match.group(2))


_SLOW_GROUP = re.compile(r"^\s*([a-z_]+)\s*:\s*([0-9]*\.?[0-9]+(?:[eE][-+]?\d+)?)\s*$")


def parse_slow_group(text: str) -> tuple[str, float]:
    """``"dp:3"`` → ``("dp", 3.0)``; raise ValueError naming the expected form."""
    match = _SLOW_GROUP.match(text)
    if not match:
        raise ValueError(f"invalid slow group {text!r}: expected KIND:FACTOR, e.g. dp:3")
    return match.group(1), float(match.group(2))
