"""The thin asyncio layer: one ``Session`` driven over a stream socket.

``Connection`` is the socket's ``asyncio.Protocol``: received bytes go to the
session in the event loop's read callback, each received call is handed to a
dispatcher and the futures of our own calls are resolved there, with no reader
task between the socket and the session (a ``StreamReader`` costs one more loop
turn per message on both sides of every round trip). All protocol decisions
live in ``Session``; all NRI semantics live in the stub and the runtime. The
dispatcher is called synchronously on receipt (so callers can do bookkeeping
in arrival order) and returns an awaitable reply that runs as its own task,
started right there (``_start_eagerly``: a handler that never waits is answered
within the read callback), so a slow handler never stalls the reader: answers
to our calls keep flowing.

Open one with ``connect_unix`` (a path or a connected socket) or hand
``Connection`` instances to ``loop.create_unix_server`` as the protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import socket
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, TypeAlias

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

__all__ = ["Connection", "Dispatcher", "Reply", "connect_unix"]

log = logging.getLogger("topodra.nri.transport")

#: What a handler answers: the reply payload, or an error status.
Reply: TypeAlias = tuple[bytes, Status | None]
Dispatcher: TypeAlias = Callable[[RequestReceived], Awaitable[Reply]]


class Connection(asyncio.Protocol):
    """A running NRI socket: ``call`` out, dispatched requests in."""

    def __init__(
        self,
        session: Session,
        dispatch: Dispatcher,
        *,
        name: str = "nri",
        on_reply_sent: Callable[[int], None] | None = None,
    ) -> None:
        self.session = session
        self._dispatch = dispatch
        self._on_reply_sent = on_reply_sent
        self.name = name
        self._transport: asyncio.Transport | None = None
        self._calls: dict[int, asyncio.Future[bytes]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = asyncio.Event()
        self._lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._writable: asyncio.Future[None] | None = None  # set while the transport's buffer is full
        self.close_reason: str | None = None

    # ---------------------------------------------------------------- protocol callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._flush()

    def data_received(self, data: bytes) -> None:
        if self._closed.is_set():
            return
        try:
            events = self.session.receive_data(data)
            for event in events:
                self._on_event(event)
            self._flush()
        except ProtocolError as exc:
            reason = f"protocol error: {exc}"
            log.warning("%s: %s", self.name, reason)
            self._shutdown(reason)

    def eof_received(self) -> bool | None:
        reason = "peer closed the connection"
        try:
            self.session.eof()
        except ProtocolError as exc:
            reason = f"protocol error: {exc}"
            log.warning("%s: %s", self.name, reason)
        self._shutdown(reason)
        return None  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._shutdown(f"read failed: {exc}" if exc is not None else "peer closed the connection")
        if not self._lost.done():
            self._lost.set_result(None)
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def pause_writing(self) -> None:
        if self._writable is None or self._writable.done():
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    # ---------------------------------------------------------------- lifecycle
    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def close(self, reason: str = "closed locally") -> None:
        self._shutdown(reason)
        current = asyncio.current_task()
        tasks = [t for t in self._tasks if t is not current]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._transport is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._lost), 1.0)
        except TimeoutError:  # a peer that stopped reading must not keep us here
            self._transport.abort()

    def _shutdown(self, reason: str) -> None:
        if self._closed.is_set():
            return
        self.close_reason = reason
        self._closed.set()
        for fut in self._calls.values():
            if not fut.done():
                fut.set_exception(ConnectionClosed(f"{self.name}: connection closed ({reason})"))
        self._calls.clear()
        if self._transport is not None:
            self._transport.close()

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
        if self._transport is None or self.closed:
            return  # not connected yet: the bytes stay queued in the session
        data = self.session.data_to_send()
        if data:
            self._transport.write(data)

    async def _drain(self) -> None:
        """Wait while the transport's buffer is over its high-water mark (a peer not reading)."""
        writable = self._writable
        if writable is not None and not writable.done():
            await writable

    # ---------------------------------------------------------------- receiving
    def _on_event(self, event: object) -> None:
        if isinstance(event, RequestReceived):
            task = _start_eagerly(self._answer(event, self._dispatch(event)))
            if not task.done():
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


class _Eager(Coroutine[Any, Any, None]):
    """A coroutine whose first step already ran (``start``) when its task takes it over.

    A call's answer starts in the read callback that received it, as its task (the task is
    current there, so ``asyncio.timeout``, ``current_task`` and cancellation work as in any
    task): a handler that never waits has its reply written before the callback returns,
    without the loop turn a new task waits for. The task's own first step then finds it
    finished, or suspended on what it awaits, and goes on from there as ``yield from`` would.
    """

    __slots__ = ("_coro", "_first", "_handed", "_outcome")

    def __init__(self, coro: Coroutine[Any, Any, None]) -> None:
        self._coro = coro
        self._first: Any = None  # what the first step waits on
        self._handed = True  # the first step's wait was given to the task (or there is none)
        self._outcome: BaseException | None = None  # StopIteration if it finished, or its error

    def start(self, task: asyncio.Task[None]) -> None:
        loop = task.get_loop()
        asyncio.tasks._enter_task(loop, task)
        try:
            self._first = self._coro.send(None)
            self._handed = False
        except BaseException as exc:  # the task raises it at its first step, as if it ran there
            self._outcome = exc
        finally:
            asyncio.tasks._leave_task(loop, task)

    def send(self, value: Any) -> Any:
        if self._outcome is not None:
            outcome, self._outcome = self._outcome, None
            raise outcome
        if not self._handed:
            self._handed = True
            first, self._first = self._first, None
            return first
        return self._coro.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        if self._outcome is not None:  # it finished in its first step: the task ends with this
            self._outcome = None
            raise typ if val is None else val
        first, self._first = self._first, None
        if not self._handed and isinstance(first, asyncio.Future):
            first.cancel()  # as a task cancels what it waits on
        self._handed = True
        if val is None and tb is None:
            return self._coro.throw(typ)
        return self._coro.throw(typ, val, tb)

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, None, None]:
        raise TypeError("an eagerly started answer is only run by its task")


def _start_eagerly(coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
    """A task for ``coro`` whose first step runs now, in the caller's turn of the loop (a plain
    task when called from inside one: a step cannot run within another task's)."""
    loop = asyncio.get_running_loop()
    if asyncio.current_task(loop) is not None:
        return loop.create_task(coro)
    eager = _Eager(coro)
    context = contextvars.copy_context()
    task = loop.create_task(eager, context=context)
    context.run(eager.start, task)
    return task


async def connect_unix(
    conn: Connection, path: str | None = None, *, sock: socket.socket | None = None
) -> Connection:
    """Open ``conn`` on the unix socket at ``path`` (or the connected ``sock``)."""
    await asyncio.get_running_loop().create_unix_connection(lambda: conn, path, sock=sock)
    return conn
