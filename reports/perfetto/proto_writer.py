"""The Perfetto protobuf writer: a ``Trace`` of ``TracePacket``s, written packet by packet.

Track descriptors and track events from the ``perfetto`` package's protobuf
definitions; event names and long argument strings interned on one trusted
sequence; absolute nanoseconds.
"""

from __future__ import annotations

from typing import IO, Any

from .slices import BATCH_PACKETS, Rank, Sink, Slice, clean_text

#: Interned strings kept before the sequence's interning state is reset.
INTERN_LIMIT = 100_000
#: Serialized repeating parts of slices kept for reuse (a bounded cache).
EVENT_CACHE_LIMIT = 20_000

_SEQUENCE_ID = 1
_SEQ_INCREMENTAL_STATE_CLEARED = 1
_SEQ_NEEDS_INCREMENTAL_STATE = 2


class ProtoSink(Sink):
    """Perfetto protobuf: a ``Trace`` written packet by packet (field 1, length-delimited).

    Track uuids: a rank's process track is its pid, a thread track its tid
    (both unique in the file). Event names, debug-annotation names and
    string values are interned on one trusted sequence; the interning state
    is cleared and rebuilt when it grows past :data:`INTERN_LIMIT`.
    """

    def __init__(self, handle: IO[bytes]) -> None:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

        self.pb = pb
        self.handle = handle
        self.buffer: list[bytes] = []
        self.names: dict[str, int] = {}
        self.arg_names: dict[str, int] = {}
        self.strings: dict[str, int] = {}
        self.events: dict[tuple[Any, ...], bytes] = {}
        self.cleared = False
        self.begin_type = pb.TrackEvent.TYPE_SLICE_BEGIN
        self.end_type = pb.TrackEvent.TYPE_SLICE_END

    def _emit(self, packet: Any) -> None:
        self._emit_bytes(packet.SerializeToString())

    def _emit_bytes(self, data: bytes) -> None:
        """Append one serialized TracePacket as ``Trace.packet`` (field 1, tag 0x0a)."""
        self.buffer.append(b"\x0a" + _varint(len(data)) + data)
        if len(self.buffer) >= BATCH_PACKETS:
            self._flush()

    def _flush(self) -> None:
        if self.buffer:
            self.handle.write(b"".join(self.buffer))
            self.buffer.clear()

    def process(self, rank: Rank) -> None:
        packet = self.pb.TracePacket()
        packet.trusted_packet_sequence_id = _SEQUENCE_ID
        track = packet.track_descriptor
        track.uuid = rank.pid
        track.process.pid = rank.pid
        track.process.process_name = rank.name
        self._emit(packet)

    def thread(self, rank: Rank, tid: int, label: str) -> None:
        packet = self.pb.TracePacket()
        packet.trusted_packet_sequence_id = _SEQUENCE_ID
        track = packet.track_descriptor
        track.uuid = tid
        track.parent_uuid = rank.pid
        track.thread.pid = rank.pid
        track.thread.tid = tid
        track.thread.thread_name = label
        self._emit(packet)

    def _packet(self, ts: int) -> Any:
        packet = self.pb.TracePacket()
        packet.timestamp = ts
        packet.trusted_packet_sequence_id = _SEQUENCE_ID
        if len(self.names) + len(self.arg_names) + len(self.strings) > INTERN_LIMIT:
            self.names.clear()
            self.arg_names.clear()
            self.strings.clear()
            self.events.clear()
            self.cleared = False
        if not self.cleared:
            packet.sequence_flags = _SEQ_INCREMENTAL_STATE_CLEARED | _SEQ_NEEDS_INCREMENTAL_STATE
            self.cleared = True
        else:
            packet.sequence_flags = _SEQ_NEEDS_INCREMENTAL_STATE
        return packet

    @staticmethod
    def _intern(table: dict[str, int], text: str) -> tuple[int, bool]:
        iid = table.get(text)
        if iid is not None:
            return iid, False
        iid = len(table) + 1
        table[text] = iid
        return iid, True

    def begin(self, tid: int, item: Slice) -> None:
        packet = self._packet(item.start)
        interned = self.pb.InternedData()
        key = (item.name, item.category, item.colour, item.static)
        static = self.events.get(key)
        if static is None:
            if len(self.events) >= EVENT_CACHE_LIMIT:
                self.events.clear()
            # Name, category, colour and the repeating args: serialized once per
            # distinct combination; protobuf merges concatenated messages, so
            # each slice only adds its track and its own args.
            event = self.pb.TrackEvent()
            event.type = self.begin_type
            iid, new = self._intern(self.names, item.name)
            event.name_iid = iid
            if new:
                entry = interned.event_names.add()
                entry.iid = iid
                entry.name = item.name
            event.categories.append(item.category)
            event.correlation_id_str = item.colour
            self._annotate(event, interned, item.static)
            static = event.SerializeToString()
            self.events[key] = static
        event = self.pb.TrackEvent()
        event.track_uuid = tid
        self._annotate(event, interned, item.dynamic)
        if item.flow is not None:
            flow_id, order, members = item.flow
            (event.terminating_flow_ids if order == members else event.flow_ids).append(flow_id)
        body = static + event.SerializeToString()
        if interned.ByteSize():
            packet.interned_data.CopyFrom(interned)
        # TracePacket.track_event is field 11, length-delimited (tag 0x5a).
        self._emit_bytes(packet.SerializeToString() + b"\x5a" + _varint(len(body)) + body)

    def _annotate(self, event: Any, interned: Any, args: tuple[tuple[str, Any], ...]) -> None:
        for key, value in args:
            if value is None:
                continue
            annotation = event.debug_annotations.add()
            name_iid, new = self._intern(self.arg_names, key)
            annotation.name_iid = name_iid
            if new:
                entry = interned.debug_annotation_names.add()
                entry.iid = name_iid
                entry.name = key
            if isinstance(value, bool):
                annotation.bool_value = value
            elif isinstance(value, int):
                annotation.int_value = value
            elif isinstance(value, float):
                annotation.double_value = value
            else:
                text = clean_text(value)
                if len(text) > 16:  # long, repeated strings (kernel names, frames)
                    value_iid, new = self._intern(self.strings, text)
                    annotation.string_value_iid = value_iid
                    if new:
                        entry = interned.debug_annotation_string_values.add()
                        entry.iid = value_iid
                        entry.str = text.encode("utf-8")
                else:
                    annotation.string_value = text

    def end(self, tid: int, ts: int) -> None:
        packet = self._packet(ts)
        packet.track_event.type = self.end_type
        packet.track_event.track_uuid = tid
        self._emit(packet)

    def close(self) -> None:
        self._flush()


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)
