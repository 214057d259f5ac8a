"""Run one step in a forked child process and bring back its (small) result.

Why: each GPU of an Nsight export is mapped, contextualized and written
with a few GiB of Arrow, DuckDB and numpy memory at its peak, and what a
step frees stays with the allocator that gave it out (Arrow's mimalloc
pool, glibc's heap; ``release_free_memory`` hands back only part of it).
On a 713 MB export (2 GPUs) the second GPU started 1.5 GiB higher than the
first, and ``tracehouse nsys summary``'s dbt build, in the same process,
higher still. A child process gives all of it back when it exits, so each
GPU starts from the parent's few hundred MiB, and the parent only ever
holds what the GPUs share. The child inherits the parent's memory (the
export's shared tables) by ``fork``, without a copy or a pickle.

The result travels back pickled through a pipe; errors travel as data
(a :class:`TraceError`'s kind, message and hint; ``MemoryError``; any
other as its text), never as a pickled exception, and a child killed by
the kernel (out of memory) is reported as ``MemoryError``.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import traceback
from collections.abc import Callable
from typing import TypeVar

from ..trace_types import TraceError

T = TypeVar("T")


class ChildFailed(RuntimeError):
    """The step raised something unexpected in the child; the message is its text."""


def run_in_child(step: Callable[[], T]) -> T:
    """``step()`` run in a forked child; its return value (picklable), or its error raised
    here. Runs in this process where ``fork`` does not exist."""
    if not hasattr(os, "fork"):
        return step()
    sys.stdout.flush()
    sys.stderr.flush()  # else text buffered here would be written twice
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns, never runs the parent's cleanup
        os.close(read_end)
        _child(step, write_end)
    os.close(write_end)
    try:
        with os.fdopen(read_end, "rb") as pipe:
            data = pipe.read()
        _, status = os.waitpid(pid, 0)
        pid = 0
    finally:
        if pid:  # interrupted while the child ran: stop it, leave no zombie
            os.kill(pid, signal.SIGTERM)
            os.waitpid(pid, 0)
    return _outcome(data, status)


def _child(step: Callable[[], object], write_end: int) -> None:
    code = 0
    try:
        try:
            reply = ("ok", step())
        except TraceError as exc:
            reply = ("trace_error", (exc.kind, exc.message, exc.hint))
        except MemoryError:
            reply = ("memory", None)
        except Exception as exc:  # noqa: BLE001 - reported to the parent as text
            reply = ("error", "".join(traceback.format_exception_only(type(exc), exc)).strip())
        with os.fdopen(write_end, "wb") as pipe:
            pickle.dump(reply, pipe, protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException:  # noqa: BLE001 - interrupted, or the pipe broke: exit all the same
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _outcome(data: bytes, status: int) -> object:
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        if signum == signal.SIGKILL:  # what the kernel's out-of-memory killer sends
            raise MemoryError(f"the process loading this GPU was killed (signal {signum})")
        raise ChildFailed(f"the process loading this GPU died of signal {signum}")
    if not data:
        raise ChildFailed(f"the process loading this GPU exited {os.WEXITSTATUS(status)} "
                          "without a result")
    kind, value = pickle.loads(data)  # noqa: S301 - our own child's bytes
    if kind == "ok":
        return value
    if kind == "trace_error":
        raise TraceError(*value)
    if kind == "memory":
        raise MemoryError
    raise ChildFailed(value)
