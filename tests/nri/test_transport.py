"""The asyncio layer: answers start in the read callback that received their call, as tasks."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from typing import Any

from topodra.nri.session import RequestReceived, ResponseReceived, Role, Session
from topodra.nri.stub import PLUGIN_SERVICE
from topodra.nri.transport import Connection, Reply
from topodra.nri.ttrpc import Status

from .nri_harness import run

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")


class _Transport(asyncio.Transport):
    """Collects what the connection writes, noting whether the read callback was still running."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[bytes, bool]] = []
        self.reading = False
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append((bytes(data), self.reading))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True


def _feed(conn: Connection, transport: _Transport, data: bytes) -> None:
    """What the loop's read callback does (outside any task)."""
    transport.reading = True
    try:
        conn.data_received(data)
    finally:
        transport.reading = False


async def _deliver(conn: Connection, transport: _Transport, data: bytes) -> None:
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def callback() -> None:
        _feed(conn, transport, data)
        done.set_result(None)

    loop.call_soon(callback)
    await done


def _answers(runtime: Session, transport: _Transport) -> list[tuple[bytes, bool]]:
    out = []
    for data, during_read in transport.writes:
        for event in runtime.receive_data(data):
            assert isinstance(event, ResponseReceived)
            out.append((event.payload, during_read))
    transport.writes.clear()
    return out


def test_a_handler_that_never_waits_is_answered_within_the_read_callback_as_a_task() -> None:
    seen: list[tuple[asyncio.Task[Any] | None, str]] = []

    async def dispatch(event: RequestReceived) -> Reply:
        VAR.set("handler")
        async with asyncio.timeout(1.0):  # needs a current task, as in any task
            seen.append((asyncio.current_task(), VAR.get()))
        return event.request.payload, None

    async def main() -> None:
        runtime, transport = Session(Role.RUNTIME), _Transport()
        conn = Connection(Session(Role.PLUGIN), dispatch)
        conn.connection_made(transport)
        for payload in (b"one", b"two"):
            runtime.start_request(PLUGIN_SERVICE, "CreateContainer", payload)
        await _deliver(conn, transport, runtime.data_to_send())  # both calls in one read
        assert _answers(runtime, transport) == [(b"one", True), (b"two", True)]
        assert len(seen) == 2
        assert all(task is not None for task, _ in seen)
        assert seen[0][0] is not seen[1][0]  # a task per call
        assert [value for _, value in seen] == ["handler", "handler"]
        assert VAR.get() == "unset"  # the handler's context is its task's, not the loop's
        await asyncio.wait([task for task, _ in seen if task is not None])
        assert all(task is not None and task.done() and not task.cancelled() for task, _ in seen)
        await conn.close()

    run(main())


def test_a_handler_that_waits_goes_on_in_its_task_and_answers_in_order() -> None:
    gate: asyncio.Future[bytes] | None = None
    gated = asyncio.Event()  # the handler waits on ``gate``
    tasks: list[asyncio.Task[Any] | None] = []

    async def dispatch(event: RequestReceived) -> Reply:
        nonlocal gate
        tasks.append(asyncio.current_task())
        await asyncio.sleep(0)  # a bare yield
        tasks.append(asyncio.current_task())
        gate = asyncio.get_running_loop().create_future()
        gated.set()
        got = await gate  # a future
        tasks.append(asyncio.current_task())
        return got + event.request.payload, None

    async def main() -> None:
        runtime, transport = Session(Role.RUNTIME), _Transport()
        conn = Connection(Session(Role.PLUGIN), dispatch)
        conn.connection_made(transport)
        runtime.start_request(PLUGIN_SERVICE, "CreateContainer", b"-x")
        await _deliver(conn, transport, runtime.data_to_send())
        assert _answers(runtime, transport) == []
        await gated.wait()
        assert gate is not None
        assert _answers(runtime, transport) == []  # still waiting: nothing answered
        gate.set_result(b"late")
        assert tasks[0] is not None
        await asyncio.wait([tasks[0]])  # the handler's task writes the answer as it ends
        assert _answers(runtime, transport) == [(b"late-x", False)]
        assert len(tasks) == 3
        assert tasks[0] is not None
        assert tasks.count(tasks[0]) == 3  # one task from the read callback to the answer
        await conn.close()

    run(main())


def test_closing_cancels_a_waiting_handler_at_its_wait() -> None:
    events: list[str] = []

    async def dispatch(event: RequestReceived) -> Reply:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            events.append("cancelled")
            raise
        return b"", Status()

    async def main() -> None:
        runtime, transport = Session(Role.RUNTIME), _Transport()
        conn = Connection(Session(Role.PLUGIN), dispatch)
        conn.connection_made(transport)
        runtime.start_request(PLUGIN_SERVICE, "CreateContainer", b"")
        await _deliver(conn, transport, runtime.data_to_send())
        # closed before the task's own first step: the cancellation still reaches the handler
        conn.connection_lost(None)
        await conn.close()
        assert events == ["cancelled"]
        assert _answers(runtime, transport) == []

    run(main())


async def _answer_cancelled_in_its_callback(
    dispatch: Callable[[RequestReceived], Awaitable[Reply]],
) -> tuple[Session, _Transport, Connection, list[asyncio.Task[None]]]:
    """Feed one CreateContainer to a connection in a loop callback, cancel the answer task it
    starts there (before the task's own first step, as a waiting task is cancelled) and wait
    for that task to end: the runtime side, its transport, the connection and the tasks."""
    runtime, transport = Session(Role.RUNTIME), _Transport()
    conn = Connection(Session(Role.PLUGIN), dispatch)
    conn.connection_made(transport)
    runtime.start_request(PLUGIN_SERVICE, "CreateContainer", b"")
    loop = asyncio.get_running_loop()
    started: asyncio.Future[list[asyncio.Task[None]]] = loop.create_future()

    def callback() -> None:
        _feed(conn, transport, runtime.data_to_send())
        tasks = list(conn._tasks)
        for task in tasks:
            task.cancel()
        started.set_result(tasks)

    loop.call_soon(callback)
    tasks = await started
    await asyncio.wait(tasks)
    return runtime, transport, conn, tasks


def test_an_answer_cancelled_before_its_task_ran_ends_cancelled() -> None:
    async def dispatch(event: RequestReceived) -> Reply:
        return b"done", None

    async def main() -> None:
        runtime, transport, conn, tasks = await _answer_cancelled_in_its_callback(dispatch)
        assert _answers(runtime, transport) == [(b"done", True)]  # answered already
        assert len(tasks) == 1
        assert tasks[0].cancelled()
        await conn.close()

    run(main())


def test_cancelling_an_answer_before_its_task_ran_cancels_what_the_handler_awaits() -> None:
    inner: list[asyncio.Task[bool]] = []

    async def dispatch(event: RequestReceived) -> Reply:
        inner.append(asyncio.get_running_loop().create_task(asyncio.Event().wait()))
        await inner[0]
        return b"", None

    async def main() -> None:
        _, _, conn, answers = await _answer_cancelled_in_its_callback(dispatch)
        assert len(inner) == 1
        assert inner[0].cancelled()  # as a task cancels what it waits on
        assert len(answers) == 1
        assert answers[0].done()
        await conn.close()

    run(main())
