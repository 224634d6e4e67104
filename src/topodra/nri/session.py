"""One NRI socket from one side's point of view, sans-IO.

A ``Session`` owns the multiplexer and both ttrpc connections of a socket and
enforces ttrpc's rules: the caller numbers its streams 1, 3, 5, ...; a server
answers an even or reused stream id, an undecodable request or an oversized
message with an error status on that stream (the connection survives), and a
client ignores answers nobody waits for. What it cannot survive (broken mux
framing, a frame a Go peer could not read) raises ``ProtocolError``.

Bytes in: ``receive_data`` returns events. Bytes out: calls queue bytes that
``data_to_send`` hands to whatever does the I/O. Both the plugin stub and the
embedded runtime drive this same class, with the roles of conn 1 and 2 swapped.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeAlias

from topodra.nri import mux, ttrpc
from topodra.nri.errors import OversizedMessageError, ProtocolError
from topodra.nri.goread import GoReadModel
from topodra.nri.ttrpc import Code, MessageType, Request, Status

__all__ = [
    "CallFailed",
    "MessageIgnored",
    "RequestReceived",
    "RequestRejected",
    "ResponseReceived",
    "Role",
    "Session",
    "SessionEvent",
]


class Role(enum.Enum):
    """Which end of the socket this session is."""

    PLUGIN = "plugin"
    RUNTIME = "runtime"

    @property
    def serve_conn(self) -> int:
        """The mux conn on which this side answers calls."""
        return mux.PLUGIN_SERVICE_CONN if self is Role.PLUGIN else mux.RUNTIME_SERVICE_CONN

    @property
    def call_conn(self) -> int:
        """The mux conn on which this side makes calls."""
        return mux.RUNTIME_SERVICE_CONN if self is Role.PLUGIN else mux.PLUGIN_SERVICE_CONN


@dataclass(frozen=True, slots=True)
class RequestReceived:
    """A valid call to answer with ``Session.send_response`` on ``stream_id``."""

    stream_id: int
    request: Request


@dataclass(frozen=True, slots=True)
class ResponseReceived:
    """The answer to one of our calls."""

    stream_id: int
    status: Status
    payload: bytes


@dataclass(frozen=True, slots=True)
class CallFailed:
    """One of our calls got an answer we cannot use (oversized or undecodable)."""

    stream_id: int
    status: Status


@dataclass(frozen=True, slots=True)
class RequestRejected:
    """A call the session already answered with an error status (bad id, garbage, too big)."""

    stream_id: int
    status: Status


@dataclass(frozen=True, slots=True)
class MessageIgnored:
    """A message with no place in the protocol, dropped as Go drops it."""

    conn_id: int
    stream_id: int
    reason: str


SessionEvent: TypeAlias = RequestReceived | ResponseReceived | CallFailed | RequestRejected | MessageIgnored


class Session:
    """Mux + ttrpc state of one socket: bytes in, events out; calls in, bytes out."""

    def __init__(
        self,
        role: Role,
        *,
        max_send_frame: int = mux.MAX_SEND_PAYLOAD,
        max_recv_frame: int = mux.MAX_RECV_PAYLOAD,
        go_reader: bool = False,
    ) -> None:
        """``go_reader=True`` refuses frames a Go peer could not read (see ``goread``)."""
        self.role = role
        self._serve = role.serve_conn
        self._call = role.call_conn
        self._max_send_frame = max_send_frame
        self._mux = mux.MuxDecoder((self._serve, self._call), max_payload=max_recv_frame)
        self._decoders = {self._serve: ttrpc.MessageDecoder(), self._call: ttrpc.MessageDecoder()}
        self._go = {self._serve: GoReadModel(), self._call: GoReadModel()} if go_reader else None
        self._out: list[bytes] = []
        self._next_call_id = 1
        self._pending: set[int] = set()
        self._last_served_id = 0
        self._unanswered: set[int] = set()
        self.frames_received = 0
        self.frames_sent = 0

    # ---------------------------------------------------------------- state
    @property
    def pending_calls(self) -> frozenset[int]:
        """Stream ids of our calls that have no answer yet."""
        return frozenset(self._pending)

    @property
    def unanswered_requests(self) -> frozenset[int]:
        """Stream ids of received calls we have not answered yet."""
        return frozenset(self._unanswered)

    @property
    def dropped_frames(self) -> int:
        return self._mux.dropped_frames

    def data_to_send(self) -> bytes:
        """Everything queued for the peer since the last call, in order."""
        if not self._out:
            return b""
        data = b"".join(self._out)
        self._out.clear()
        return data

    # ---------------------------------------------------------------- sending
    def start_request(
        self,
        service: str,
        method: str,
        payload: bytes = b"",
        *,
        timeout_nano: int = 0,
        metadata: Iterable[tuple[str, str]] = (),
    ) -> int:
        """Queue a call and return its stream id.

        The id is used up even when the message is refused as oversized
        (``OversizedMessageError``), as Go's client does.
        """
        stream_id = self._next_call_id
        self._next_call_id += 2
        body = ttrpc.encode_request(Request(service, method, payload, timeout_nano, tuple(metadata)))
        self._queue(self._call, ttrpc.encode_message(stream_id, MessageType.REQUEST, body))
        self._pending.add(stream_id)
        return stream_id

    def abandon_call(self, stream_id: int) -> None:
        """Stop waiting for a call (timed out); a late answer is then ignored."""
        self._pending.discard(stream_id)

    def send_response(self, stream_id: int, payload: bytes = b"", status: Status | None = None) -> None:
        """Answer a received call. A reply above 4 MiB is replaced by RESOURCE_EXHAUSTED."""
        if stream_id not in self._unanswered:
            raise ValueError(f"stream {stream_id} has no unanswered request")
        self._unanswered.discard(stream_id)
        body = ttrpc.encode_response(payload, status)
        try:
            message = ttrpc.encode_message(stream_id, MessageType.RESPONSE, body)
        except OversizedMessageError as exc:
            err = Status(Code.RESOURCE_EXHAUSTED, str(exc))
            message = ttrpc.encode_message(stream_id, MessageType.RESPONSE, ttrpc.encode_response(status=err))
        self._queue(self._serve, message)

    def _reject(self, stream_id: int, status: Status) -> RequestRejected:
        body = ttrpc.encode_response(status=status)
        self._queue(self._serve, ttrpc.encode_message(stream_id, MessageType.RESPONSE, body))
        return RequestRejected(stream_id, status)

    def _queue(self, conn_id: int, message: bytes) -> None:
        frames = mux.encode_frames(conn_id, message, max_payload=self._max_send_frame)
        self.frames_sent += -(-len(message) // self._max_send_frame)
        self._out.append(frames)

    # ---------------------------------------------------------------- receiving
    def receive_data(self, data: bytes | bytearray | memoryview) -> list[SessionEvent]:
        """Feed received bytes; raises ``ProtocolError`` when the socket must be closed."""
        events: list[SessionEvent] = []
        for frame in self._mux.feed(data):
            self.frames_received += 1
            if self._go is not None and not self._go[frame.conn_id].accept(frame.payload):
                raise ProtocolError(
                    f"frame of {len(frame.payload)} bytes on conn {frame.conn_id} does not fit the "
                    f"{self._go[frame.conn_id].offered()}-byte read of a Go peer (ttrpc: closed)"
                )
            for item in self._decoders[frame.conn_id].feed(frame.payload):
                event = self._on_message(frame.conn_id, item)
                if event is not None:
                    events.append(event)
        return events

    def eof(self) -> None:
        """The peer closed; raise ``ProtocolError`` if it stopped mid-frame or mid-message."""
        self._mux.eof()
        for decoder in self._decoders.values():
            decoder.eof()

    def _on_message(self, conn_id: int, item: ttrpc.Message | ttrpc.OversizedMessage) -> SessionEvent | None:
        if conn_id == self._serve:
            return self._on_served(item)
        return self._on_answer(item)

    def _on_served(self, item: ttrpc.Message | ttrpc.OversizedMessage) -> SessionEvent | None:
        sid = item.stream_id
        if item.type != MessageType.REQUEST:
            return MessageIgnored(self._serve, sid, f"message type {item.type} where requests are served")
        if isinstance(item, ttrpc.OversizedMessage):
            text = f"message length {item.length} exceed maximum message size of {ttrpc.MAX_MESSAGE_LENGTH}"
            return self._reject(sid, Status(Code.RESOURCE_EXHAUSTED, text))
        if sid % 2 == 0:
            return self._reject(sid, Status(Code.INVALID_ARGUMENT, "StreamID must be odd for client initiated streams"))
        if sid <= self._last_served_id:
            return self._reject(sid, Status(Code.INVALID_ARGUMENT, "StreamID cannot be re-used and must increment"))
        self._last_served_id = sid
        try:
            request = ttrpc.decode_request(item.body)
        except ProtocolError as exc:
            return self._reject(sid, Status(Code.INVALID_ARGUMENT, str(exc)))
        self._unanswered.add(sid)
        return RequestReceived(sid, request)

    def _on_answer(self, item: ttrpc.Message | ttrpc.OversizedMessage) -> SessionEvent | None:
        sid = item.stream_id
        if item.type != MessageType.RESPONSE:
            return MessageIgnored(self._call, sid, f"message type {item.type} where only responses are expected")
        if sid not in self._pending:
            return MessageIgnored(self._call, sid, "response for a stream nobody waits for")
        self._pending.discard(sid)
        if isinstance(item, ttrpc.OversizedMessage):
            text = f"message length {item.length} exceed maximum message size of {ttrpc.MAX_MESSAGE_LENGTH}"
            return CallFailed(sid, Status(Code.RESOURCE_EXHAUSTED, text))
        try:
            status, payload = ttrpc.decode_response(item.body)
        except ProtocolError as exc:
            return CallFailed(sid, Status(Code.INTERNAL, str(exc)))
        return ResponseReceived(sid, status, payload)
