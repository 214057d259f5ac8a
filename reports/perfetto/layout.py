"""Lane layout: the slices of one rank's thread or stream on tracks where they nest.

Perfetto's importers drop or truncate slices that partially overlap on one
track; a slice that would do so here opens an extra track ``… (overlap N)``
of the same rank instead, so every row becomes one slice.
"""

from __future__ import annotations

from collections.abc import Iterator

from .slices import TIDS_PER_RANK, ExportError, ExportResult, Rank, Sink, Slice


class Lanes:
    """Tracks of one rank's thread or stream: slices nest within a lane, never overlap partly.

    The first lane is the thread or stream itself; a slice that would
    partially overlap an open slice on every existing lane opens a new lane
    (``… (overlap N)``). Each lane keeps the stack of its open slices and
    emits ends in time order before the next begin, as Perfetto expects.
    """

    def __init__(self, rank: Rank, label: str, writer: TrackAllocator) -> None:
        self.rank = rank
        self.label = label
        self.writer = writer
        self.uuids: list[int] = []
        self.stacks: list[list[int]] = []

    def add(self, item: Slice) -> None:
        for lane, stack in enumerate(self.stacks):
            self._close_until(lane, item.start)
            if not stack or stack[-1] >= item.end:
                break
        else:
            lane = len(self.stacks)
            label = self.label if lane == 0 else f"{self.label} (overlap {lane})"
            self.uuids.append(self.writer.new_track(self.rank, label, overlap=lane > 0))
            self.stacks.append([])
        self.writer.sink.begin(self.uuids[lane], item)
        self.stacks[lane].append(item.end)

    def _close_until(self, lane: int, ts: int) -> None:
        stack = self.stacks[lane]
        while stack and stack[-1] <= ts:
            self.writer.sink.end(self.uuids[lane], stack.pop())

    def close(self) -> None:
        for lane, stack in enumerate(self.stacks):
            while stack:
                self.writer.sink.end(self.uuids[lane], stack.pop())


class TrackAllocator:
    """Allocates track ids per rank and feeds the sink."""

    def __init__(self, sink: Sink, result: ExportResult) -> None:
        self.sink = sink
        self.result = result
        self.next_thread: dict[int, int] = {}

    def new_track(self, rank: Rank, label: str, overlap: bool) -> int:
        index = self.next_thread.get(rank.rank, 1)
        self.next_thread[rank.rank] = index + 1
        if index >= TIDS_PER_RANK:
            raise ExportError(f"rank {rank.rank} needs more than {TIDS_PER_RANK - 1} tracks")
        tid = rank.pid * TIDS_PER_RANK + index
        self.sink.thread(rank, tid, label)
        self.result.tracks += 1
        self.result.overlap_tracks += int(overlap)
        return tid


def grouped_by_track(rows: Iterator[tuple[int, str, str, Slice]], by_rank: dict[int, Rank],
                     writer: TrackAllocator) -> Iterator[tuple[Lanes, Slice]]:
    """Pair each slice with the lanes of its (rank, track key), closing a track when it ends.

    ``rows`` (rank, key, label, slice) arrive ordered by rank, key and time,
    so one track is open at a time.
    """
    current: tuple[int, str] | None = None
    lanes: Lanes | None = None
    for rank, key, label, item in rows:
        if (rank, key) != current:
            if lanes is not None:
                lanes.close()
            current = (rank, key)
            lanes = Lanes(by_rank[rank], label, writer)
        assert lanes is not None
        yield lanes, item
    if lanes is not None:
        lanes.close()
