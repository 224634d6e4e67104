"""The thin asyncio layer: one ``Session`` driven over a stream socket.

``Connection`` reads, feeds the session, hands each received call to a
dispatcher and resolves the futures of our own calls. All protocol decisions
live in ``Session``; all NRI semantics live in the stub and the runtime. The
dispatcher is called synchronously on receipt (so callers can do bookkeeping
in arrival order) and returns an awaitable reply that runs as its own task, so
a slow handler never stalls the reader: answers to our calls keep flowing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TypeAlias

from topodra.nri.errors import ConnectionClosed, ProtocolError, RpcError
from topodra.nri.session import (
    CallFailed,
    MessageIgnored,
    RequestReceived,
    RequestRejected,
    ResponseReceived,
    Session,
)
from topodra.nri.ttrpc import Code, Status

__all__ = ["Connection", "Dispatcher", "Reply"]

log = logging.getLogger("topodra.nri.transport")

#: What a handler answers: the reply payload, or an error status.
Reply: TypeAlias = tuple[bytes, Status | None]
Dispatcher: TypeAlias = Callable[[RequestReceived], Awaitable[Reply]]

_READ_SIZE = 256 * 1024


class Connection:
    """A running NRI socket: ``call`` out, dispatched requests in."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        session: Session,
        dispatch: Dispatcher,
        *,
        name: str = "nri",
        on_reply_sent: Callable[[int], None] | None = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self.session = session
        self._dispatch = dispatch
        self._on_reply_sent = on_reply_sent
        self.name = name
        self._calls: dict[int, asyncio.Future[bytes]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._reader_task: asyncio.Task[None] | None = None
        self._closed = asyncio.Event()
        self.close_reason: str | None = None

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        if self._reader_task is None:
            self._reader_task = asyncio.get_running_loop().create_task(self._read_loop(), name=f"{self.name}-reader")

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def close(self, reason: str = "closed locally") -> None:
        self._shutdown(reason)
        current = asyncio.current_task()
        tasks = [t for t in (self._reader_task, *self._tasks) if t is not None and t is not current]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        try:
            await asyncio.wait_for(self._writer.wait_closed(), 1.0)
        except Exception:  # a peer that stopped reading must not keep us here
            self._writer.transport.abort()

    def _shutdown(self, reason: str) -> None:
        if self._closed.is_set():
            return
        self.close_reason = reason
        self._closed.set()
        for fut in self._calls.values():
            if not fut.done():
                fut.set_exception(ConnectionClosed(f"{self.name}: connection closed ({reason})"))
        self._calls.clear()
        with contextlib.suppress(Exception):
            self._writer.close()

    # ---------------------------------------------------------------- calls
    async def call(self, service: str, method: str, payload: bytes, *, timeout: float | None) -> bytes:
        """Call ``service.method``; returns the reply payload or raises ``RpcError``.

        ``timeout`` bounds the wait locally and is sent as ``timeout_nano``.
        Raises ``TimeoutError`` when it expires and ``ConnectionClosed`` when
        the connection ends first.
        """
        if self.closed:
            raise ConnectionClosed(f"{self.name}: connection closed ({self.close_reason})")
        timeout_nano = int(timeout * 1e9) if timeout else 0
        sid = self.session.start_request(service, method, payload, timeout_nano=timeout_nano)
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._calls[sid] = fut
        self._flush()
        try:
            await self._drain()
            async with asyncio.timeout(timeout):
                return await fut
        except TimeoutError:
            self.session.abandon_call(sid)
            raise TimeoutError(f"{self.name}: {method} got no answer within {timeout:g} s") from None
        finally:
            self._calls.pop(sid, None)

    def _flush(self) -> None:
        data = self.session.data_to_send()
        if data and not self.closed:
            self._writer.write(data)

    async def _drain(self) -> None:
        try:
            await self._writer.drain()
        except (ConnectionError, OSError) as exc:
            self._shutdown(f"write failed: {exc}")

    # ---------------------------------------------------------------- receiving
    async def _read_loop(self) -> None:
        reason = "peer closed the connection"
        try:
            while True:
                data = await self._reader.read(_READ_SIZE)
                if not data:
                    self.session.eof()
                    break
                events = self.session.receive_data(data)
                for event in events:
                    self._on_event(event)
                self._flush()
        except ProtocolError as exc:
            reason = f"protocol error: {exc}"
            log.warning("%s: %s", self.name, reason)
        except (ConnectionError, OSError) as exc:
            reason = f"read failed: {exc}"
        except asyncio.CancelledError:
            reason = "closed locally"
            raise
        finally:
            self._shutdown(reason)

    def _on_event(self, event: object) -> None:
        if isinstance(event, RequestReceived):
            reply = self._dispatch(event)
            task = asyncio.get_running_loop().create_task(self._answer(event, reply))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif isinstance(event, ResponseReceived):
            fut = self._calls.get(event.stream_id)
            if fut is not None and not fut.done():
                if event.status.ok:
                    fut.set_result(event.payload)
                else:
                    fut.set_exception(RpcError(event.status.code, event.status.message))
        elif isinstance(event, CallFailed):
            fut = self._calls.get(event.stream_id)
            if fut is not None and not fut.done():
                fut.set_exception(RpcError(event.status.code, event.status.message))
        elif isinstance(event, RequestRejected):
            log.warning("%s: rejected request on stream %d: %s", self.name, event.stream_id, event.status)
        elif isinstance(event, MessageIgnored):
            log.debug("%s: ignored message on conn %d stream %d: %s", self.name, event.conn_id, event.stream_id, event.reason)

    async def _answer(self, event: RequestReceived, reply: Awaitable[Reply]) -> None:
        try:
            payload, status = await reply
        except asyncio.CancelledError:
            if self.closed:
                raise
            payload, status = b"", Status(Code.CANCELLED, "handler cancelled")
        except Exception as exc:  # a handler bug must not kill the connection
            log.exception("%s: handler for %s failed", self.name, event.request.method)
            payload, status = b"", Status(Code.UNKNOWN, str(exc) or type(exc).__name__)
        if self.closed:
            return
        self.session.send_response(event.stream_id, payload, status)
        self._flush()
        if self._on_reply_sent is not None:
            self._on_reply_sent(event.stream_id)
        await self._drain()
