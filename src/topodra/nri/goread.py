"""Which frames a Go NRI peer can read: a model of Go's ttrpc-over-mux reader.

Go's multiplexer hands one whole frame to each ``Read`` and fails (ENOMEM) when
the caller's buffer is smaller than the frame. ttrpc reads through a 4096-byte
``bufio.Reader``: headers and short bodies go through that buffer, but once
4096 or more body bytes are still missing and the buffer is empty, it reads
straight into the message buffer, sized to what is missing. So a frame is
readable when it fits the buffer the reader offers at that moment. The
embedded runtime applies this to what plugins send, which is how containerd
drops a plugin that sends one 7,632-byte frame but accepts 4096 + 3536, and
accepts Go senders' "4096 bytes, then all the rest" frames.
"""

from __future__ import annotations

import struct
from typing import Final

__all__ = ["GO_READ_BUFFER", "GoReadModel"]

#: Size of the bufio.Reader ttrpc puts over each mux connection.
GO_READ_BUFFER: Final = 4096
_HEADER_SIZE: Final = 10
_LENGTH: Final = struct.Struct(">I")


class GoReadModel:
    """Tracks one mux connection's ttrpc stream as a Go reader would consume it."""

    __slots__ = ("_body_left", "_bufsize", "_header")

    def __init__(self, bufsize: int = GO_READ_BUFFER) -> None:
        self._bufsize = bufsize
        self._header = bytearray()  # bytes of the header being read
        self._body_left = 0  # body bytes of the current message still to read

    def offered(self) -> int:
        """Size of the buffer the next underlying read will offer."""
        if self._body_left >= self._bufsize:
            return self._body_left
        return self._bufsize

    def accept(self, payload: bytes) -> bool:
        """Feed one frame; False when a Go reader would fail reading it."""
        size = len(payload)
        if size > self.offered():
            return False
        if self._body_left >= self._bufsize:
            # read straight into the message buffer; the frame fits, so it ends inside the body
            self._body_left -= size
            return True
        pos = 0
        while pos < size:
            if self._body_left:
                take = min(self._body_left, size - pos)
                self._body_left -= take
                pos += take
                continue
            need = _HEADER_SIZE - len(self._header)
            chunk = payload[pos : pos + need]
            self._header += chunk
            pos += len(chunk)
            if len(self._header) == _HEADER_SIZE:
                (self._body_left,) = _LENGTH.unpack_from(self._header, 0)
                self._header.clear()
        return True
