"""NRI's stream multiplexer as a sans-IO codec.

One unix socket carries two logical connections: conn 1, where the runtime
calls the plugin, and conn 2, where the plugin calls the runtime. Each frame is
``uint32 conn id | uint32 payload length | payload`` (big-endian). A payload is
an arbitrary slice of that connection's ttrpc byte stream: frame boundaries
need not match message boundaries, so the receiver only splits frames here and
``ttrpc.MessageDecoder`` reassembles messages per connection.

Limits come from the Go implementation every runtime uses: it fails a read when
a frame does not fit the 4096-byte buffer ttrpc reads through, so we never send
a payload above 4096 bytes; it accepts frames up to 4 MiB + 10 bytes, so that is
what we accept. Frames for a connection nobody opened are dropped, as Go does.
"""

from __future__ import annotations

import struct
from collections.abc import Collection
from dataclasses import dataclass
from typing import Final

from topodra.nri.errors import ProtocolError

__all__ = [
    "HEADER_SIZE",
    "MAX_RECV_PAYLOAD",
    "MAX_SEND_PAYLOAD",
    "PLUGIN_SERVICE_CONN",
    "RUNTIME_SERVICE_CONN",
    "Frame",
    "MuxDecoder",
    "MuxError",
    "encode_frames",
]

_HEADER: Final = struct.Struct(">II")
HEADER_SIZE: Final = _HEADER.size

#: Conn 1: the runtime is the ttrpc client, the plugin serves ``Plugin``.
PLUGIN_SERVICE_CONN: Final = 1
#: Conn 2: the plugin is the ttrpc client, the runtime serves ``Runtime``.
RUNTIME_SERVICE_CONN: Final = 2

#: Largest payload we put in one frame (what a Go reader always accepts).
MAX_SEND_PAYLOAD: Final = 4096
#: Largest payload we accept in one frame (Go's own cap: a ttrpc header plus 4 MiB).
MAX_RECV_PAYLOAD: Final = 10 + (4 << 20)


class MuxError(ProtocolError):
    """Broken multiplexer framing: the whole socket is unusable."""


@dataclass(frozen=True, slots=True)
class Frame:
    conn_id: int
    payload: bytes


def encode_frames(conn_id: int, data: bytes, *, max_payload: int = MAX_SEND_PAYLOAD) -> bytes:
    """``data`` for ``conn_id`` as consecutive frames of at most ``max_payload`` bytes.

    Empty ``data`` gives no frames at all (an empty frame carries nothing).
    """
    if not 0 < conn_id <= 0xFFFFFFFF:
        raise ValueError(f"conn id {conn_id} is not a valid multiplexer connection")
    if max_payload <= 0:
        raise ValueError(f"max_payload must be positive, got {max_payload}")
    size = len(data)
    if size <= max_payload:
        return _HEADER.pack(conn_id, size) + data if size else b""
    view = memoryview(data)
    parts: list[bytes] = []
    for start in range(0, size, max_payload):
        chunk = view[start : start + max_payload]
        parts.append(_HEADER.pack(conn_id, len(chunk)))
        parts.append(chunk.tobytes())
    return b"".join(parts)


class MuxDecoder:
    """Splits a received byte stream into frames of the open connections.

    ``feed`` takes bytes in any slicing and returns the frames completed by them.
    A header announcing more than ``max_payload`` bytes raises ``MuxError`` at
    once (before buffering the body), so a hostile length cannot exhaust memory.
    """

    __slots__ = ("_buf", "_conns", "_max", "dropped_bytes", "dropped_frames")

    def __init__(
        self,
        conns: Collection[int] = (PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN),
        *,
        max_payload: int = MAX_RECV_PAYLOAD,
    ) -> None:
        self._buf = bytearray()
        self._conns = frozenset(conns)
        self._max = max_payload
        #: Frames (and their payload bytes) for connections that are not open.
        self.dropped_frames = 0
        self.dropped_bytes = 0

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        buf = self._buf
        buf += data
        frames: list[Frame] = []
        pos = 0
        end = len(buf)
        unpack = _HEADER.unpack_from
        view = memoryview(buf)
        try:
            while end - pos >= HEADER_SIZE:
                conn_id, length = unpack(buf, pos)
                if length > self._max:
                    raise MuxError(
                        f"frame for conn {conn_id} announces {length} payload bytes, "
                        f"more than the {self._max}-byte limit"
                    )
                stop = pos + HEADER_SIZE + length
                if stop > end:
                    break
                if conn_id in self._conns:
                    frames.append(Frame(conn_id, view[pos + HEADER_SIZE : stop].tobytes()))
                else:
                    self.dropped_frames += 1
                    self.dropped_bytes += length
                pos = stop
        finally:
            view.release()
        if pos:
            del buf[:pos]
        return frames

    def eof(self) -> None:
        """The stream ended: raise ``MuxError`` if it stopped inside a frame."""
        if self._buf:
            have = len(self._buf)
            if have < HEADER_SIZE:
                raise MuxError(f"connection closed inside a frame header ({have} of {HEADER_SIZE} bytes)")
            conn_id, length = _HEADER.unpack_from(self._buf, 0)
            raise MuxError(
                f"connection closed inside a frame for conn {conn_id} "
                f"({have - HEADER_SIZE} of {length} payload bytes)"
            )
