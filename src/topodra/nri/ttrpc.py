"""ttrpc, containerd's small RPC protocol, as a sans-IO codec.

A ttrpc message is a 10-byte big-endian header (``uint32 length | uint32
stream id | uint8 type | uint8 flags``) and a protobuf body: ``Request`` for
calls, ``Response`` for answers. NRI only uses unary calls with flags 0.

``MessageDecoder`` cuts one connection's byte stream into messages. A body
longer than 4 MiB is skipped without being buffered and reported as
``OversizedMessage``, so the server can answer RESOURCE_EXHAUSTED on that
stream and keep the connection, exactly as Go's ttrpc does.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Final

from google.protobuf.message import DecodeError

from topodra.nri.errors import OversizedMessageError, ProtocolError
from topodra.nri.proto import ttrpc_pb2

__all__ = [
    "HEADER_SIZE",
    "MAX_MESSAGE_LENGTH",
    "Code",
    "Message",
    "MessageDecoder",
    "MessageType",
    "OversizedMessage",
    "Request",
    "Status",
    "code_name",
    "decode_request",
    "decode_response",
    "encode_message",
    "encode_request",
    "encode_response",
]

_HEADER: Final = struct.Struct(">IIBB")
HEADER_SIZE: Final = _HEADER.size
#: Largest message body either side sends or accepts.
MAX_MESSAGE_LENGTH: Final = 4 << 20


class MessageType(enum.IntEnum):
    REQUEST = 1
    RESPONSE = 2
    DATA = 3  # streaming; never used by NRI


class Code(enum.IntEnum):
    """gRPC status codes, as ttrpc carries them."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16

    @property
    def title(self) -> str:
        """The name Go prints (``InvalidArgument``), as seen in runtime logs."""
        return "Canceled" if self is Code.CANCELLED else "".join(p.title() for p in self.name.split("_"))


def code_name(code: int) -> str:
    """Go's name of a status code (``InvalidArgument``), or ``Code(N)`` when unknown."""
    try:
        return Code(code).title
    except ValueError:
        return f"Code({code})"


@dataclass(frozen=True, slots=True)
class Status:
    code: int = Code.OK
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.code == Code.OK

    def __str__(self) -> str:
        name = code_name(self.code)
        return f"{name}: {self.message}" if self.message else name


@dataclass(frozen=True, slots=True)
class Message:
    """One complete ttrpc message; ``body`` is the serialized Request/Response."""

    stream_id: int
    type: int
    flags: int
    body: bytes


@dataclass(frozen=True, slots=True)
class OversizedMessage:
    """A message whose body exceeded the limit; the body was skipped."""

    stream_id: int
    type: int
    length: int


def encode_message(stream_id: int, type_: int, body: bytes, flags: int = 0) -> bytes:
    """Header plus body; refuses bodies above the limit like Go's client does."""
    if len(body) > MAX_MESSAGE_LENGTH:
        raise OversizedMessageError(len(body), MAX_MESSAGE_LENGTH)
    return _HEADER.pack(len(body), stream_id, type_, flags) + body


class MessageDecoder:
    """Reassembles the ttrpc messages of one mux connection from its frame payloads."""

    __slots__ = ("_buf", "_max", "_skip")

    def __init__(self, *, max_length: int = MAX_MESSAGE_LENGTH) -> None:
        self._buf = bytearray()
        self._max = max_length
        self._skip = 0  # body bytes of an oversized message still to discard

    @property
    def buffered(self) -> int:
        return len(self._buf) + self._skip

    def feed(self, data: bytes | bytearray | memoryview) -> list[Message | OversizedMessage]:
        out: list[Message | OversizedMessage] = []
        if self._skip:
            dropped = min(self._skip, len(data))
            self._skip -= dropped
            data = memoryview(data)[dropped:]
        buf = self._buf
        buf += data
        pos = 0
        end = len(buf)
        view = memoryview(buf)
        try:
            while end - pos >= HEADER_SIZE:
                length, stream_id, type_, flags = _HEADER.unpack_from(buf, pos)
                if length > self._max:
                    out.append(OversizedMessage(stream_id, type_, length))
                    available = end - pos - HEADER_SIZE
                    if available >= length:
                        pos += HEADER_SIZE + length
                        continue
                    self._skip = length - available
                    pos = end
                    break
                stop = pos + HEADER_SIZE + length
                if stop > end:
                    break
                out.append(Message(stream_id, type_, flags, view[pos + HEADER_SIZE : stop].tobytes()))
                pos = stop
        finally:
            view.release()
        if pos:
            del buf[:pos]
        return out

    def eof(self) -> None:
        """The connection ended: raise ``ProtocolError`` if a message was cut off."""
        if self._skip:
            raise ProtocolError(f"connection closed while skipping an oversized message ({self._skip} bytes left)")
        if self._buf:
            have = len(self._buf)
            if have < HEADER_SIZE:
                raise ProtocolError(f"connection closed inside a ttrpc header ({have} of {HEADER_SIZE} bytes)")
            length, stream_id, _, _ = _HEADER.unpack_from(self._buf, 0)
            raise ProtocolError(
                f"connection closed inside ttrpc message on stream {stream_id} "
                f"({have - HEADER_SIZE} of {length} body bytes)"
            )


@dataclass(frozen=True, slots=True)
class Request:
    service: str
    method: str
    payload: bytes = b""
    timeout_nano: int = 0
    metadata: tuple[tuple[str, str], ...] = ()


def encode_request(request: Request) -> bytes:
    """The Request body. Like Go, an empty payload and a zero timeout are left out."""
    msg = ttrpc_pb2.Request(service=request.service, method=request.method, timeout_nano=request.timeout_nano)
    if request.payload:
        msg.payload = request.payload
    for key, value in request.metadata:
        msg.metadata.add(key=key, value=value)
    return msg.SerializeToString()


def decode_request(body: bytes) -> Request:
    msg = ttrpc_pb2.Request()
    try:
        msg.ParseFromString(body)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise ProtocolError(f"unmarshal request error: {exc}") from None
    return Request(
        service=msg.service,
        method=msg.method,
        payload=msg.payload,
        timeout_nano=msg.timeout_nano,
        metadata=tuple((kv.key, kv.value) for kv in msg.metadata),
    )


def encode_response(payload: bytes = b"", status: Status | None = None) -> bytes:
    """The Response body. Success carries no status and errors no payload, as Go sends them."""
    msg = ttrpc_pb2.Response()
    if status is not None and not status.ok:
        msg.status.code = status.code
        msg.status.message = status.message
    elif payload:
        msg.payload = payload
    return msg.SerializeToString()


def decode_response(body: bytes) -> tuple[Status, bytes]:
    """(status, payload); a missing status is OK and a missing payload is empty."""
    msg = ttrpc_pb2.Response()
    try:
        msg.ParseFromString(body)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise ProtocolError(f"unmarshal response error: {exc}") from None
    if msg.HasField("status"):
        return Status(msg.status.code, msg.status.message), msg.payload
    return Status(), msg.payload

