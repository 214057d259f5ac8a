"""A rank's program: the CPU call tree ("tape") and the GPU work it launches.

Why a tape: the timing model and the trace writer must agree on every
microsecond. Both read the same flat list of entries -- frame begin/end,
runtime calls, GPU operations -- built once per pipeline stage (every rank of
a stage runs the same program). The timing model only needs the GPU
operations and the CPU time spent between them (``Op.cpu_before``); the
writer replays the whole tape for one rank with the times the model computed.

CPU time is deterministic: each entry costs a fixed number of microseconds
(``COSTS``), so a frame's duration is the cost of its children plus the time
the CPU waited inside it (device syncs). One logical CPU cursor per rank runs
through both the main thread and the autograd thread, as in PyTorch, where the
main thread blocks in ``run_backward`` while the autograd thread works.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

MAIN, AUTOGRAD = 0, 1

# Tape entry tags.
BEGIN, END, LAUNCH, RUNTIME = 0, 1, 2, 3

# Frame kinds: Kineto category and CPU cost differ.
PY, MODULE, CPU_OP, ANNOTATION, COMMS = 0, 1, 2, 3, 4
CATEGORY = {PY: "python_function", MODULE: "python_function", CPU_OP: "cpu_op",
            ANNOTATION: "user_annotation", COMMS: "cpu_op"}

#: CPU microseconds from a frame's start to its first child, and from its last
#: child to its end.
COSTS = {PY: (0.8, 0.4), MODULE: (1.6, 0.6), CPU_OP: (1.8, 0.8), ANNOTATION: (1.2, 0.6),
         COMMS: (2.5, 1.0)}
#: CPU gap after every runtime call.
GAP_US = 0.4
#: Time from a launch call's start until the GPU may start the work.
LAUNCH_LATENCY_US = 2.5

# GPU operation kinds.
KERNEL, MEMOP, COLL, P2P, WAIT, SYNC = 0, 1, 2, 3, 4, 5

#: Runtime calls: name -> (cbid, duration in us).
RUNTIME_CALLS = {
    "cudaLaunchKernel": (211, 4.2),
    "cudaLaunchKernelExC": (430, 6.0),
    "cudaMemcpyAsync": (41, 5.0),
    "cudaMemsetAsync": (51, 3.5),
    "cudaEventRecord": (135, 1.5),
    "cudaStreamWaitEvent": (147, 1.2),
    "cudaDeviceSynchronize": (165, 2.0),
    "cudaStreamSynchronize": (131, 2.0),
}


@cache
def escape(name: str) -> str:
    """``name`` as the inside of a JSON string (no surrounding quotes)."""
    return json.dumps(name)[1:-1]


class Op:
    """One GPU-relevant operation of a stage program.

    ``kind`` is KERNEL (compute stream), MEMOP (memcpy/memset on the compute
    stream), COLL (an NCCL collective on ``group``'s stream), P2P (pipeline
    send/recv, matched with the peer stage's ops through ``keys``), WAIT (the
    compute stream waits for op ``wait``) or SYNC (the CPU waits for the GPU).
    ``dur_us`` is the un-jittered duration: for compute, at straggler factor
    1; for communication, the data transfer alone (the wait for the slowest
    peer comes on top).
    """

    __slots__ = (
        "kind", "thread", "stream", "name", "cat", "dur_us", "group", "coll", "in_nelems",
        "out_nelems", "dtype", "blocking", "keys", "wait", "sync_all", "runtime", "grid",
        "block", "regs", "smem", "nbytes", "cpu_before", "phase", "annotation", "flops",
    )

    def __init__(self, kind: int, *, name: str = "", cat: str = "kernel", stream: int = 7,
                 dur_us: float = 0.0, thread: int = MAIN, group: str | None = None,
                 coll: str = "", in_nelems: int = 0, out_nelems: int = 0, dtype: str = "BFloat16",
                 blocking: bool = True, keys: tuple = (), wait: int = -1, sync_all: bool = True,
                 runtime: str = "cudaLaunchKernel", grid: tuple = (1, 1, 1),
                 block: tuple = (128, 1, 1), regs: int = 32, smem: int = 0, nbytes: int = 0,
                 phase: str = "other", annotation: str = "", flops: float = 0.0) -> None:
        self.kind = kind
        self.thread = thread
        self.stream = stream
        self.name = escape(name) if name else ""
        self.cat = cat
        self.dur_us = dur_us
        self.group = group
        self.coll = coll
        self.in_nelems = in_nelems
        self.out_nelems = out_nelems
        self.dtype = dtype
        self.blocking = blocking
        self.keys = keys
        self.wait = wait
        self.sync_all = sync_all
        self.runtime = runtime
        self.grid = grid
        self.block = block
        self.regs = regs
        self.smem = smem
        self.nbytes = nbytes
        self.cpu_before = 0.0
        self.phase = phase
        self.annotation = annotation  # an nccl:* title: plain ASCII, no escaping needed
        #: FLOPs the cost model timed for a GEMM or attention kernel (its share of
        #: the op's, as the warehouse splits it), 0 for any other op.
        self.flops = flops

    @property
    def runtime_us(self) -> float:
        """Duration of the CPU runtime call that issues this operation."""
        return RUNTIME_CALLS[self.runtime][1]


#: Runtime calls that launch a kernel: what ``SimConfig.launch_overhead_us``
#: lengthens.
KERNEL_LAUNCH_CALLS = frozenset({"cudaLaunchKernel", "cudaLaunchKernelExC"})


def launch_call_us(op: Op, launch_overhead_us: float) -> float:
    """How long the CPU runtime call that issues ``op`` runs: its nominal
    duration, plus the injected host overhead where it launches a kernel (the
    GPU can start the work only after that overhead, so a large one starves
    it, as a launch-bound run does)."""
    extra = launch_overhead_us if op.runtime in KERNEL_LAUNCH_CALLS else 0.0
    return op.runtime_us + extra


class Tape:
    """Builder and container of one stage's program.

    Entries: ``(BEGIN, thread, kind, escaped_name, extra, shapes)``, ``(END, thread)``,
    ``(LAUNCH, op_index)``, ``(RUNTIME, thread, escaped_name, cbid, dur_us)``.
    ``extra`` is None or a tuple: ``("fwd", seq)`` (forward op that autograd
    records; a ``fwdbwd`` flow starts here), ``("bwd", seq)`` (its backward
    op; the flow ends here), ``("comms", op_index)`` (``record_param_comms``
    carrying the args of that collective) or ``("module", module_id)``.
    ``shapes`` is None or the op's ``record_shapes`` args text (:mod:`.shapes`).
    """

    def __init__(self) -> None:
        self.entries: list[tuple] = []
        self.ops: list[Op] = []
        self.tail_us = 0.0
        #: Forward/backward passes: (phase, model chunk, microbatch, first op, end op),
        #: the ops ``range(first, end)`` launched inside that ``forward_step`` or
        #: ``backward_step`` (what the PP timer brackets with its marks).
        self.passes: list[tuple[str, int, int, int, int]] = []
        self._open: dict[int, list[str]] = {MAIN: [], AUTOGRAD: []}
        self._module_ids: dict[str, int] = {}
        #: Inside :meth:`recomputing`: the forward re-run by a checkpoint's backward.
        self._recomputing = False

    # -- recomputation --------------------------------------------------------
    @contextmanager
    def recomputing(self) -> Iterator[None]:
        """Within the block, forward code runs as activation recomputation does
        in ``CheckpointFunction.backward``: on the autograd thread (the frames
        and launches the forward code puts on the main thread move there), and
        its forward kernels are phase ``recompute``. Why here and not in the
        model: the same forward code then writes both passes."""
        outer = self._recomputing
        self._recomputing = True
        try:
            yield
        finally:
            self._recomputing = outer

    def _thread(self, thread: int) -> int:
        return AUTOGRAD if self._recomputing else thread

    # -- building ---------------------------------------------------------
    def begin(self, name: str, kind: int = PY, thread: int = MAIN, extra: tuple | None = None,
              shapes: str | None = None) -> None:
        """Open a frame on ``thread``."""
        thread = self._thread(thread)
        self._open[thread].append(name)
        self.entries.append((BEGIN, thread, kind, escape(name), extra, shapes))

    def end(self, thread: int = MAIN) -> None:
        """Close the innermost open frame of ``thread``."""
        thread = self._thread(thread)
        self._open[thread].pop()
        self.entries.append((END, thread))

    @contextmanager
    def frame(self, name: str, kind: int = PY, thread: int = MAIN, extra: tuple | None = None,
              ) -> Iterator[None]:
        """``with tape.frame(...)``: a frame around whatever the block adds."""
        self.begin(name, kind, thread, extra)
        yield
        self.end(thread)

    @contextmanager
    def module(self, name: str, thread: int = MAIN) -> Iterator[None]:
        """An ``nn.Module: Name_k`` frame (module ids are stable per name)."""
        module_id = self._module_ids.setdefault(name, len(self._module_ids) + 1)
        self.begin(f"nn.Module: {name}", MODULE, thread, ("module", module_id))
        yield
        self.end(thread)

    def leaf(self, name: str, kind: int = PY, thread: int = MAIN) -> None:
        """A frame with no children."""
        self.begin(name, kind, thread)
        self.end(thread)

    def runtime(self, name: str, thread: int = MAIN) -> None:
        """A CUDA runtime call that launches nothing (event record, stream wait)."""
        cbid, dur = RUNTIME_CALLS[name]
        self.entries.append((RUNTIME, self._thread(thread), name, cbid, dur))

    def launch(self, op: Op) -> int:
        """Add a GPU operation at the current point; return its index."""
        if self._recomputing:
            op.thread = AUTOGRAD
            if op.phase == "forward":
                op.phase = "recompute"
        self.ops.append(op)
        self.entries.append((LAUNCH, len(self.ops) - 1))
        return len(self.ops) - 1

    def finish(self) -> Tape:
        """Seal the tape: every op's ``cpu_before``, the trailing CPU time, and
        END entries resolved to ``(END, thread, kind)`` so costs need no lookup."""
        for thread, stack in self._open.items():
            if stack:
                raise AssertionError(f"unclosed frames on thread {thread}: {stack}")
        acc = 0.0
        stacks: dict[int, list[int]] = {MAIN: [], AUTOGRAD: []}
        resolved: list[tuple] = []
        for entry in self.entries:
            tag = entry[0]
            if tag == BEGIN:
                stacks[entry[1]].append(entry[2])
                acc += COSTS[entry[2]][0]
                resolved.append(entry)
            elif tag == END:
                kind = stacks[entry[1]].pop()
                acc += COSTS[kind][1]
                resolved.append((END, entry[1], kind))
            elif tag == RUNTIME:
                acc += entry[4] + GAP_US
                resolved.append(entry)
            else:
                self.ops[entry[1]].cpu_before = acc
                acc = 0.0
                resolved.append(entry)
        self.entries = resolved
        self.tail_us = acc
        return self
