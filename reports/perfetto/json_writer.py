"""The Chrome trace-event JSON writer (``--format json``), event by event.

Times are exact microsecond decimals since a whole-second origin (see
:class:`JsonSink` for why), strings JSON-escaped with non-ASCII kept as UTF-8.
"""

from __future__ import annotations

import json
from typing import IO, Any

from .slices import BATCH_PACKETS, TIDS_PER_RANK, Rank, Sink, Slice, clean_text

#: chrome://tracing reserved colour names per kind (JSON only; Perfetto ignores them).
_JSON_COLOURS = {
    "compute": "thread_state_running",
    "communication": "thread_state_iowait",
    "memory": "thread_state_runnable",
    "cpu": "generic_work",
}


class JsonSink(Sink):
    """Chrome trace-event JSON, written event by event.

    Slices are complete (``X``) events. ``ts`` is microseconds since
    ``otherData.origin_ns`` (the whole second before the first event), ``dur``
    microseconds, both exact decimals of nanosecond values (``12.345678``);
    the exact absolute integers are in ``args.start_ns`` / ``args.dur_ns``.
    Why relative: readers (Perfetto included) parse ``ts`` as a double, which
    at absolute epoch nanoseconds (~1.7e15 us) keeps only a quarter of a
    microsecond, enough to make back-to-back kernels overlap and be dropped.
    Strings are written by ``json``
    (quotes, backslashes and control characters escaped) but non-ASCII text
    stays UTF-8: Perfetto's JSON importer keeps ``\\uXXXX`` escapes as
    literal text, so ``·`` written as ``\\u00b7`` would show as six
    characters.
    """

    def __init__(self, handle: IO[bytes], origin_ns: int, run_id: str) -> None:
        self.handle = handle
        self.origin = origin_ns
        self.buffer: list[str] = []
        self.first = True
        self.open: dict[int, list[tuple[int, Slice]]] = {}
        self.pids: dict[int, int] = {}
        other = json_dumps({"run_id": clean_text(run_id), "origin_ns": origin_ns,
                            "time_base": "ts = (absolute ns - origin_ns) / 1000"})
        self.handle.write(f'{{"displayTimeUnit":"ns","otherData":{other},'
                          '"traceEvents":[\n'.encode())

    def _event(self, event: dict[str, Any]) -> None:
        self._write(json_dumps(event))

    def _write(self, text: str) -> None:
        self.buffer.append(text if self.first else ",\n" + text)
        self.first = False
        if len(self.buffer) >= BATCH_PACKETS:
            self._flush()

    def _flush(self) -> None:
        if self.buffer:
            self.handle.write("".join(self.buffer).encode("utf-8"))
            self.buffer.clear()

    def process(self, rank: Rank) -> None:
        self._event({"ph": "M", "name": "process_name", "pid": rank.pid, "tid": 0,
                     "args": {"name": rank.name}})
        self._event({"ph": "M", "name": "process_sort_index", "pid": rank.pid, "tid": 0,
                     "args": {"sort_index": rank.rank}})

    def thread(self, rank: Rank, tid: int, label: str) -> None:
        self.pids[tid] = rank.pid
        self._event({"ph": "M", "name": "thread_name", "pid": rank.pid, "tid": tid,
                     "args": {"name": label}})
        self._event({"ph": "M", "name": "thread_sort_index", "pid": rank.pid, "tid": tid,
                     "args": {"sort_index": tid % TIDS_PER_RANK}})

    def begin(self, tid: int, item: Slice) -> None:
        kind = item.category if item.category in _JSON_COLOURS else "cpu"
        body = json_dumps({
            "ph": "X", "name": item.name, "cat": item.category,
            "pid": self.pids[tid], "tid": tid, "cname": _JSON_COLOURS[kind],
            "args": {**{key: clean_text(value) if isinstance(value, str) else value
                        for key, value in item.static + item.dynamic if value is not None},
                     "start_ns": item.start, "dur_ns": item.end - item.start},
        })
        # json writes floats with float.__repr__: write the exact decimals by hand.
        times = (f'{{"ts":{_micros(item.start - self.origin)},'
                 f'"dur":{_micros(item.end - item.start)},')
        self._write(times + body[1:])
        if item.flow is not None:
            flow_id, order, members = item.flow
            is_last = order == members
            phase = "f" if is_last else ("s" if order == 1 else "t")
            flow = {"ph": phase, "name": "collective", "cat": "collective", "id": flow_id,
                    "pid": self.pids[tid], "tid": tid}
            if is_last:
                flow["bp"] = "e"
            self._write(f'{{"ts":{_micros(item.start - self.origin)},' + json_dumps(flow)[1:])

    def end(self, tid: int, ts: int) -> None:
        """Complete events carry their end already."""

    def close(self) -> None:
        self._flush()
        self.handle.write(b"\n]}\n")


def _micros(ns: int) -> str:
    """Nanoseconds as exact microseconds with three decimals (``-12.005``)."""
    sign = "-" if ns < 0 else ""
    whole, frac = divmod(abs(ns), 1000)
    return f"{sign}{whole}.{frac:03d}"


def json_dumps(event: dict[str, Any]) -> str:
    """One event as compact JSON, UTF-8 kept as is (see :class:`JsonSink` for why)."""
    return json.dumps(event, ensure_ascii=False, allow_nan=False, separators=(",", ":"),
                      default=str)
