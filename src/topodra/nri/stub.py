"""The plugin side of NRI: connect, register, serve a ``Plugin``, reconnect.

``Stub`` connects to the runtime's socket (or takes fd 3 when the runtime
launched it), registers while already serving conn 1 (Configure and even
Synchronize may arrive before the RegisterPlugin reply), subscribes the
events the plugin handles within what the runtime's NRI version accepts,
joins split Synchronize chunks, and answers every event within the runtime's
deadline. ``update_containers`` queues unsolicited updates and sends them only
while no runtime request is unanswered: containerd holds one lock while it
delivers an event and needs it to apply updates, so an update sent from inside
a handler deadlocks until the runtime drops the plugin.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
import re
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from google.protobuf.message import DecodeError, Message

from topodra.nri import convert, replywire
from topodra.nri.errors import (
    ConnectionClosed,
    ConversionError,
    EmptyCPUSetError,
    NRIError,
    RegistrationError,
    RpcError,
    UpdateInHandlerError,
)
from topodra.nri.plugin import Plugin
from topodra.nri.proto import api_pb2
from topodra.nri.session import RequestReceived, Role, Session
from topodra.nri.transport import Connection, Reply, connect_unix
from topodra.nri.ttrpc import Code, Request, Status
from topodra.nri.types import (
    Container,
    ContainerAdjustment,
    ContainerUpdate,
    CreateContainerResult,
    Event,
    PlacementUpdates,
    Pod,
    event_mask,
    events_in_mask,
)
from topodra.nri.version import CURRENT, RuntimeInfo

__all__ = [
    "DEFAULT_SOCKET_PATH",
    "PLUGIN_SERVICE",
    "RUNTIME_SERVICE",
    "Stub",
    "StubState",
    "UpdateFuture",
    "check_plugin_index",
    "check_plugin_name",
    "one_line",
]

log = logging.getLogger("topodra.nri.stub")

DEFAULT_SOCKET_PATH: Final = "/var/run/nri/nri.sock"
PLUGIN_SERVICE: Final = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME_SERVICE: Final = "nri.pkg.api.v1alpha1.Runtime"
ENV_SOCKET: Final = "NRI_PLUGIN_SOCKET"
ENV_NAME: Final = "NRI_PLUGIN_NAME"
ENV_IDX: Final = "NRI_PLUGIN_IDX"
DEFAULT_REQUEST_TIMEOUT: Final = 2.0

_NAME_RE: Final = re.compile(r"^[A-Za-z0-9_.+-]+$")

#: Notification events that have a dedicated rpc since v0.12.0 and the StateChange fallback.
_NOTIFICATIONS: Final = {
    "RunPodSandbox": Event.RUN_POD_SANDBOX,
    "StopPodSandbox": Event.STOP_POD_SANDBOX,
    "RemovePodSandbox": Event.REMOVE_POD_SANDBOX,
    "PostUpdatePodSandbox": Event.POST_UPDATE_POD_SANDBOX,
    "PostCreateContainer": Event.POST_CREATE_CONTAINER,
    "StartContainer": Event.START_CONTAINER,
    "PostStartContainer": Event.POST_START_CONTAINER,
    "PostUpdateContainer": Event.POST_UPDATE_CONTAINER,
    "RemoveContainer": Event.REMOVE_CONTAINER,
}


def one_line(text: str) -> str:
    """An error text as one line (the kubelet shows a CreateContainer error in the pod's events)."""
    return " ".join(part for part in (line.strip() for line in text.splitlines()) if part)


def check_plugin_index(idx: str) -> None:
    """The runtime's rule: exactly two ASCII digits (plugins run in idx order)."""
    if len(idx) != 2:
        raise ValueError(f"invalid plugin index {idx!r}, must be 2 digits")
    if not (idx.isascii() and idx.isdigit()):
        raise ValueError(f"invalid plugin index {idx!r} (not [0-9][0-9])")


def check_plugin_name(name: str) -> None:
    """The runtime's rule: non-empty, only [a-zA-Z0-9_.+-]."""
    if not name:
        raise ValueError("invalid plugin name: name is empty")
    if not _NAME_RE.match(name):
        bad = next(ch for ch in name if not _NAME_RE.match(ch))
        raise ValueError(f"invalid plugin name {name!r}: contains invalid character {bad!r}")


class StubState(enum.Enum):
    IDLE = "idle"
    CONNECTING = "connecting"
    REGISTERING = "registering"
    REGISTERED = "registered"
    SYNCHRONIZED = "synchronized"
    DISCONNECTED = "disconnected"
    STOPPED = "stopped"


class UpdateFuture(asyncio.Future[list[ContainerUpdate]]):
    """Result of ``Stub.update_containers``: the updates the runtime reported as failed.

    Awaiting it from inside the event handler that queued it raises
    ``UpdateInHandlerError`` at once: the update can only go out after that
    handler's reply, so waiting for it there would wait forever.
    """

    def __init__(self, stub: Stub, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop=loop)
        self._stub = stub

    def __await__(self) -> Generator[Any, None, list[ContainerUpdate]]:
        if not self.done() and asyncio.current_task() in self._stub._handler_tasks:
            raise UpdateInHandlerError(
                "update_containers() awaited inside an event handler: it is sent only after that "
                "handler's reply (the runtime holds its lock until then); keep the future and let the "
                "handler return, or put the changes in the handler's own reply"
            )
        return (yield from super().__await__())

    __iter__ = __await__


@dataclass
class _Link:
    """Per-connection state; a reconnect starts a fresh one (``conn`` is None for ``Stub.handle``)."""

    conn: Connection | None
    in_flight: int = 0
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    synchronized: asyncio.Event = field(default_factory=asyncio.Event)
    runtime: RuntimeInfo | None = None
    events: int = 0
    sync_pods: list[Pod] = field(default_factory=list)
    sync_containers: list[Container] = field(default_factory=list)
    #: UpdateContainersRequest payloads, encoded when queued
    updates: asyncio.Queue[tuple[bytes, UpdateFuture]] = field(default_factory=asyncio.Queue)
    sender: asyncio.Task[None] | None = None
    sending: UpdateFuture | None = None

    def __post_init__(self) -> None:
        self.idle.set()


class _Expired(Exception):
    """A handler ran out of its budget and was cancelled."""


class _Watchdog:
    """Cancels handler tasks that run past their deadline, with one timer for all of them.

    ``asyncio.timeout`` schedules a timer per call and leaves it, cancelled, in the loop's heap
    until its time (seconds): at hundreds of calls a second that heap is what every loop turn
    works through. Here a call only notes its deadline; the one timer is armed for the earliest
    and, when it fires, cancels what is overdue and re-arms for the next.
    """

    __slots__ = ("_at", "_due", "_expired", "_loop", "_timer")

    def __init__(self) -> None:
        self._due: dict[asyncio.Task[Any], float] = {}
        self._expired: set[asyncio.Task[Any]] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._at = float("inf")
        self._loop: asyncio.AbstractEventLoop | None = None

    def watch(self, task: asyncio.Task[Any], budget: float) -> None:
        """Cancel ``task`` if it is still watched ``budget`` seconds from now."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # first use, or a new loop: the old one's timer is gone
            self._loop, self._timer, self._at = loop, None, float("inf")
        when = loop.time() + budget
        self._due[task] = when
        if when < self._at:
            self._arm(loop, when)

    def release(self, task: asyncio.Task[Any]) -> bool:
        """Stop watching ``task``; whether its deadline had passed (and it was cancelled)."""
        self._due.pop(task, None)
        if task in self._expired:
            self._expired.discard(task)
            return True
        return False

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(when, self._fire)
        self._at = when

    def _fire(self) -> None:
        self._timer, self._at = None, float("inf")
        assert self._loop is not None
        now = self._loop.time()
        nearest = float("inf")
        for task, when in list(self._due.items()):
            if when <= now:
                del self._due[task]
                self._expired.add(task)
                task.cancel()
            elif when < nearest:
                nearest = when
        if nearest < float("inf"):
            self._arm(self._loop, nearest)


class Stub:
    """Runs a ``Plugin`` against a runtime; see the module docstring."""

    def __init__(
        self,
        plugin: Plugin,
        *,
        socket_path: str = DEFAULT_SOCKET_PATH,
        name: str | None = None,
        idx: str | None = None,
        registration_timeout: float = 5.0,
        update_timeout: float = 10.0,
        reconnect: bool = True,
        backoff_initial: float = 0.5,
        backoff_max: float = 10.0,
        nri_version: str = str(CURRENT),
        use_state_change: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """``env`` defaults to ``os.environ``; ``NRI_PLUGIN_SOCKET`` there selects launched mode.

        ``use_state_change=True`` answers the v0.12 notification rpcs with
        UNIMPLEMENTED, so the runtime falls back to StateChange (what plugins
        built before v0.12 do); handlers are called the same either way.
        """
        environ = os.environ if env is None else env
        self.plugin = plugin
        #: where handler failures and refusals are logged (a scratch stub may silence them)
        self.log = log
        self.socket_path = socket_path
        self.launched_fd: int | None = None
        if environ.get(ENV_SOCKET):
            try:
                self.launched_fd = int(environ[ENV_SOCKET])
            except ValueError:
                raise ValueError(f"{ENV_SOCKET}={environ[ENV_SOCKET]!r} is not a file descriptor number") from None
            name = environ.get(ENV_NAME) or name
            idx = environ.get(ENV_IDX) or idx
        if name is None or idx is None:
            raise ValueError("a plugin name and a two-digit index are required (name=..., idx=...)")
        check_plugin_name(name)
        check_plugin_index(idx)
        self.name = name
        self.idx = idx
        self.registration_timeout = registration_timeout
        self.update_timeout = update_timeout
        self.reconnect = reconnect and self.launched_fd is None
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.nri_version = nri_version
        self.use_state_change = use_state_change
        self.state = StubState.IDLE
        self.connections = 0
        self.last_error: str | None = None
        self._link: _Link | None = None
        self._offline: _Link | None = None
        self._handler_lock = asyncio.Lock()
        self._handler_tasks: set[asyncio.Task[Any]] = set()
        self._watchdog = _Watchdog()
        self._stopping = False
        self._wake = asyncio.Event()
        self._state_changed = asyncio.Event()
        #: (method, seconds) of the latest answered calls: request bytes in to reply bytes out
        #: (decode, handler, encode), the plugin's own share of a round trip.
        self.handler_times: deque[tuple[str, float]] = deque(maxlen=4096)

    # ---------------------------------------------------------------- observable state
    @property
    def connected(self) -> bool:
        return self._link is not None and self._link.conn is not None and not self._link.conn.closed

    @property
    def registered(self) -> bool:
        return self.state in (StubState.REGISTERED, StubState.SYNCHRONIZED)

    @property
    def synchronized(self) -> bool:
        return self.state is StubState.SYNCHRONIZED

    @property
    def runtime(self) -> RuntimeInfo | None:
        """What Configure told us about the runtime on the current connection."""
        return self._link.runtime if self._link else None

    @property
    def subscribed_events(self) -> frozenset[Event]:
        return events_in_mask(self._link.events) if self._link else frozenset()

    def _set_state(self, state: StubState) -> None:
        if state is not self.state:
            log.debug("%s-%s: %s -> %s", self.idx, self.name, self.state.value, state.value)
        self.state = state
        self._state_changed.set()
        self._state_changed = asyncio.Event()

    async def wait_state(self, state: StubState, timeout: float | None = None) -> None:
        """Wait until the stub reaches ``state`` (e.g. ``SYNCHRONIZED``)."""

        async def _wait() -> None:
            while self.state is not state:
                await self._state_changed.wait()

        await asyncio.wait_for(_wait(), timeout)

    async def wait_synchronized(self, timeout: float | None = None) -> None:
        await self.wait_state(StubState.SYNCHRONIZED, timeout)

    # ---------------------------------------------------------------- run / stop
    async def run(self) -> None:
        """Connect, register and serve until ``stop()``; reconnect with backoff.

        Returns after ``stop()``, when a launched plugin's socket closes, or when
        the connection ends and ``reconnect`` is off. Raises
        ``RegistrationError`` when the runtime refuses the registration.
        """
        delay = self.backoff_initial
        try:
            while not self._stopping:
                link = self._new_link()
                try:
                    await self._open(link)
                except OSError as exc:
                    self.last_error = f"cannot connect to {self.socket_path}: {exc.strerror or exc}"
                    if not self.reconnect:
                        raise ConnectionClosed(self.last_error) from exc
                    log.info("%s; retrying in %.1f s", self.last_error, delay)
                else:
                    registered = await self._serve(link)
                    if registered:
                        delay = self.backoff_initial
                    if self._stopping or not self.reconnect:
                        break
                    log.info("connection to the runtime lost (%s); reconnecting in %.1f s", self.last_error, delay)
                self._set_state(StubState.DISCONNECTED)
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), delay)
                delay = min(delay * 2, self.backoff_max)
        finally:
            self._set_state(StubState.STOPPED if self._stopping else StubState.DISCONNECTED)

    async def stop(self) -> None:
        """Close the connection and make ``run()`` return."""
        self._stopping = True
        self._wake.set()
        link = self._link
        if link is not None:
            await self._close_link(link, "stub stopped")

    def _new_link(self) -> _Link:
        """A fresh connection (not open yet) and its per-connection state."""
        link: _Link
        conn = Connection(
            Session(Role.PLUGIN),
            lambda event: self._dispatch(link, event),
            name=f"{self.idx}-{self.name}",
            on_reply_sent=lambda _sid: self._reply_sent(link),
        )
        link = _Link(conn)
        return link

    async def _open(self, link: _Link) -> None:
        self._set_state(StubState.CONNECTING)
        assert link.conn is not None
        if self.launched_fd is not None:
            sock = socket.socket(fileno=self.launched_fd)
            self.launched_fd = None  # the socket object owns the fd now
            await connect_unix(link.conn, sock=sock)
        else:
            await connect_unix(link.conn, self.socket_path)

    async def _serve(self, link: _Link) -> bool:
        """One connection's life; returns whether registration succeeded."""
        self.connections += 1
        conn = link.conn
        assert conn is not None
        self._link = link
        link.sender = asyncio.get_running_loop().create_task(self._send_updates(link))
        self._set_state(StubState.REGISTERING)
        registered = False
        try:
            req = api_pb2.RegisterPluginRequest(plugin_name=self.name, plugin_idx=self.idx, NRI_version=self.nri_version)
            await conn.call(RUNTIME_SERVICE, "RegisterPlugin", req.SerializeToString(), timeout=self.registration_timeout)
            registered = True
            if not link.synchronized.is_set() and not conn.closed:
                self._set_state(StubState.REGISTERED)
            await conn.wait_closed()
            self.last_error = conn.close_reason
        except RpcError as exc:
            self.last_error = f"runtime refused registration as {self.idx}-{self.name}: {exc.message}"
            await self._close_link(link, self.last_error)
            raise RegistrationError(self.last_error) from None
        except TimeoutError:
            self.last_error = f"no RegisterPlugin reply within {self.registration_timeout:g} s"
        except ConnectionClosed as exc:
            self.last_error = str(exc)
        finally:
            await self._close_link(link, self.last_error or "connection ended")
        return registered

    async def _close_link(self, link: _Link, reason: str) -> None:
        if link.conn is not None:
            await link.conn.close(reason)
        if link.sender is not None:
            link.sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await link.sender
        pending = [link.sending] if link.sending is not None else []
        while not link.updates.empty():
            pending.append(link.updates.get_nowait()[1])
        for fut in pending:
            if not fut.done():
                fut.set_exception(ConnectionClosed(f"update not delivered: {reason}"))
        if self._link is link:
            self._link = None

    # ---------------------------------------------------------------- unsolicited updates
    def update_containers(self, updates: Iterable[ContainerUpdate]) -> UpdateFuture:
        """Queue an UpdateContainers call; the returned future gives the failed updates.

        Callable from anywhere, including from inside an event handler (then it
        goes out right after that handler's reply; do not await it there).
        Fails with ``ConnectionClosed`` when there is no connection or it ends
        before the answer, and with ``TimeoutError`` after ``update_timeout``.
        """
        batch = list(updates)
        request = replywire.updates_message(batch)  # an UpdateContainersRequest (bad values raise here)
        fut = UpdateFuture(self, asyncio.get_running_loop())
        fut.add_done_callback(_log_undelivered)
        link = self._link
        if not batch:
            fut.set_result([])
        elif link is None or link.conn is None or link.conn.closed:
            fut.set_exception(ConnectionClosed("not connected to a runtime"))
        else:
            link.updates.put_nowait((request, fut))
        return fut

    async def _send_updates(self, link: _Link) -> None:
        conn = link.conn
        assert conn is not None
        while not conn.closed:
            request, fut = await link.updates.get()
            if fut.done():
                continue
            link.sending = fut
            await link.synchronized.wait()
            while link.in_flight:
                await link.idle.wait()
            try:
                payload = await conn.call(RUNTIME_SERVICE, "UpdateContainers", request, timeout=self.update_timeout)
                reply = api_pb2.UpdateContainersResponse()
                reply.ParseFromString(payload)
                failed = convert.updates_from_proto(reply.failed)
            except (NRIError, TimeoutError, DecodeError) as exc:
                if not fut.done():
                    fut.set_exception(exc)
            else:
                if not fut.done():
                    fut.set_result(failed)
            link.sending = None

    # ---------------------------------------------------------------- dispatch
    async def handle(self, method: str, payload: bytes = b"", *, timeout_nano: int = 0) -> Reply:
        """Answer one Plugin-service call as if the runtime had sent it, without a socket.

        Returns (reply payload, error status or None). For tests and fuzzing:
        it runs the same decoding, dispatch, deadline and encoding as a call
        arriving on the connection, with state kept apart from any live one.
        """
        if self._offline is None:
            self._offline = _Link(None)
        request = RequestReceived(0, Request(PLUGIN_SERVICE, method, payload, timeout_nano))
        return await self._handle(self._offline, request)

    def _dispatch(self, link: _Link, event: RequestReceived) -> Awaitable[Reply]:
        link.in_flight += 1
        link.idle.clear()
        return self._handle(link, event)

    def _reply_sent(self, link: _Link) -> None:
        link.in_flight -= 1
        if link.in_flight == 0:
            link.idle.set()

    async def _handle(self, link: _Link, event: RequestReceived) -> Reply:
        req = event.request
        if req.service != PLUGIN_SERVICE:
            return b"", Status(Code.UNIMPLEMENTED, f"service {req.service}")
        handler = self._METHODS.get(req.method)
        if handler is None:
            return b"", Status(Code.UNIMPLEMENTED, f"method {req.method}")
        if self.use_state_change and req.method in _NOTIFICATIONS:
            return b"", Status(Code.UNIMPLEMENTED, f"method {req.method}")
        request_type, run = handler
        t0 = time.perf_counter()
        message = request_type()
        try:
            message.ParseFromString(req.payload)
        except (DecodeError, ValueError, RuntimeError) as exc:
            return b"", Status(Code.INVALID_ARGUMENT, f"invalid {request_type.__name__} payload: {exc}")
        budget = self._budget(link, req.timeout_nano)
        started = time.monotonic()
        # The handler runs in this task (the connection's answer task): no second task and no
        # wait() per call. The set marks it as "inside a handler" for UpdateFuture.
        task = asyncio.current_task()
        assert task is not None
        cancelling = task.cancelling()
        watchdog = self._watchdog
        watchdog.watch(task, budget)
        self._handler_tasks.add(task)
        try:
            try:
                async with self._handler_lock:
                    reply = await run(self, link, message)
            except asyncio.CancelledError:
                # As asyncio.timeout: our cancellation becomes the deadline's error unless the
                # task is also being cancelled from outside.
                if watchdog.release(task) and task.uncancel() <= cancelling:
                    raise _Expired from None
                raise
            finally:
                self._handler_tasks.discard(task)
                if watchdog.release(task):  # it fired, and the handler finished anyway
                    task.uncancel()
        except _Expired:
            log.error("%s handler still running after %.2f s: cancelled, answering DEADLINE_EXCEEDED", req.method, budget)
            return b"", Status(Code.DEADLINE_EXCEEDED, f"{req.method} handler did not finish within {budget:.2f} s")
        except TimeoutError as exc:  # the handler's own
            self.log.warning("%s handler failed: %s", req.method, exc, exc_info=True)
            return b"", Status(Code.UNKNOWN, one_line(str(exc)) or type(exc).__name__)
        except RpcError as exc:
            return b"", Status(exc.code, exc.message)
        except EmptyCPUSetError as exc:  # the plugin tried to send "": never let that pass as "no change"
            log.error("%s handler answered an empty set: %s", req.method, exc)
            return b"", Status(Code.UNKNOWN, str(exc))
        except ConversionError as exc:  # the runtime sent something we cannot read
            return b"", Status(Code.INVALID_ARGUMENT, str(exc))
        except asyncio.CancelledError:
            if not _current_cancelling():  # the handler's own cancellation, not ours
                return b"", Status(Code.CANCELLED, f"{req.method} handler was cancelled")
            raise
        except Exception as exc:
            text = one_line(str(exc)) or type(exc).__name__
            if isinstance(exc, self.plugin.refusals):
                self.log.warning("%s refused: %s", req.method, text)
            else:
                self.log.warning("%s handler failed: %s", req.method, text, exc_info=not isinstance(exc, NRIError))
            return b"", Status(Code.UNKNOWN, text)
        elapsed = time.monotonic() - started
        if elapsed > budget / 2:
            log.warning("%s handler took %.3f s of its %.2f s budget", req.method, elapsed, budget)
        payload = reply if isinstance(reply, bytes) else reply.SerializeToString()
        self.handler_times.append((req.method, time.perf_counter() - t0))
        return payload, None

    def _budget(self, link: _Link, timeout_nano: int) -> float:
        """Time a handler may take: the caller's deadline minus a margin for the reply."""
        if timeout_nano > 0:
            total = timeout_nano / 1e9
        elif link.runtime is not None and link.runtime.request_timeout:
            total = link.runtime.request_timeout
        else:
            total = DEFAULT_REQUEST_TIMEOUT
        return max(0.001, total - max(0.005, min(0.25, total * 0.1)))

    _METHODS: dict[str, tuple[type[Message], _Run]]


#: A handler answers a message, or its wire bytes already written (``replywire``).
_Run = Callable[[Stub, _Link, Any], Awaitable[Message | bytes]]


# --- the Plugin-service handlers: (stub, link, request) -> reply, looked up in Stub._METHODS ---


async def _on_configure(stub: Stub, link: _Link, req: api_pb2.ConfigureRequest) -> Message:
    info = RuntimeInfo.from_configure(
        req.runtime_name, req.runtime_version, req.NRI_version, req.registration_timeout, req.request_timeout
    )
    link.runtime = info
    chosen = await stub.plugin.configure(req.config, info)
    wanted = frozenset(chosen) if chosen is not None else stub.plugin.overridden_events()
    mask = event_mask(wanted)
    valid = info.valid_events
    if mask & ~valid:
        dropped = sorted(e.rpc for e in events_in_mask(mask & ~valid))
        log.warning(
            "runtime %s %s (NRI %s) does not know %s; not subscribing to them",
            info.name,
            info.version,
            info.nri_version or "unknown",
            ", ".join(dropped),
        )
        mask &= valid
    if mask == 0:
        log.info("no events subscribed: the runtime reads an empty mask as 'all events'")
    link.events = mask or valid
    log.info(
        "configured by %s %s (NRI %s%s), events 0x%x",
        info.name,
        info.version,
        info.nri_version or "unknown",
        ", inferred" if info.nri_version_inferred else "",
        mask,
    )
    return api_pb2.ConfigureResponse(events=mask)


async def _on_synchronize(stub: Stub, link: _Link, req: api_pb2.SynchronizeRequest) -> Message | bytes:
    link.sync_pods.extend(convert.pod_from_proto(p) for p in req.pods)
    link.sync_containers.extend(convert.container_from_proto(c) for c in req.containers)
    if req.more:
        return api_pb2.SynchronizeResponse(more=True)
    pods, containers = link.sync_pods, link.sync_containers
    link.sync_pods, link.sync_containers = [], []
    updates = await stub.plugin.synchronize(pods, containers) or ()
    reply = replywire.updates_message(updates)  # a final SynchronizeResponse: only its updates
    link.synchronized.set()
    if link is stub._link:
        stub._set_state(StubState.SYNCHRONIZED)
    return reply


async def _on_shutdown(stub: Stub, link: _Link, req: api_pb2.Empty) -> Message:
    log.info("runtime asked the plugin to shut down")
    return api_pb2.Empty()


async def _on_create_container(stub: Stub, link: _Link, req: api_pb2.CreateContainerRequest) -> Message | bytes:
    pod, ctr = convert.pod_from_proto(req.pod), convert.container_from_proto(req.container)
    result = await stub.plugin.create_container(pod, ctr)
    if isinstance(result, ContainerAdjustment):
        result = CreateContainerResult(adjust=result)
    if result is None:
        return b""  # an empty CreateContainerResponse
    adjust = replywire.adjustment_bytes(result.adjust) if result.adjust is not None else None
    updates = result.updates
    cid = ctr.id
    ids = updates.container_ids if type(updates) is PlacementUpdates else [u.container_id for u in updates]
    if cid in ids:
        raise ValueError(
            f"an update of {cid} during its own creation fails the creation; put its resources in the adjustment"
        )
    return replywire.create_container_response(adjust, updates)


async def _on_update_container(stub: Stub, link: _Link, req: api_pb2.UpdateContainerRequest) -> Message | bytes:
    pod, ctr = convert.pod_from_proto(req.pod), convert.container_from_proto(req.container)
    resources = (
        convert.resources_from_proto(req.linux_resources, "UpdateContainerRequest.linux_resources")
        if req.HasField("linux_resources")
        else None
    )
    updates = await stub.plugin.update_container(pod, ctr, resources) or ()
    return replywire.updates_message(updates)  # an UpdateContainerResponse


async def _on_stop_container(stub: Stub, link: _Link, req: api_pb2.StopContainerRequest) -> Message | bytes:
    pod, ctr = convert.pod_from_proto(req.pod), convert.container_from_proto(req.container)
    updates = await stub.plugin.stop_container(pod, ctr) or ()
    return replywire.updates_message(updates)  # a StopContainerResponse


async def _on_update_pod_sandbox(stub: Stub, link: _Link, req: api_pb2.UpdatePodSandboxRequest) -> Message:
    overhead = (
        convert.resources_from_proto(req.overhead_linux_resources, "overhead_linux_resources")
        if req.HasField("overhead_linux_resources")
        else None
    )
    resources = (
        convert.resources_from_proto(req.linux_resources, "linux_resources") if req.HasField("linux_resources") else None
    )
    await stub.plugin.update_pod_sandbox(convert.pod_from_proto(req.pod), overhead, resources)
    return api_pb2.UpdatePodSandboxResponse()


async def _on_validate(stub: Stub, link: _Link, req: api_pb2.ValidateContainerAdjustmentRequest) -> Message:
    adjust = convert.adjustment_from_proto(req.adjust) if req.HasField("adjust") else None
    reason = await stub.plugin.validate_container_adjustment(
        convert.pod_from_proto(req.pod),
        convert.container_from_proto(req.container),
        adjust,
        convert.updates_from_proto(req.update),
    )
    if reason is None:
        return api_pb2.ValidateContainerAdjustmentResponse()
    return api_pb2.ValidateContainerAdjustmentResponse(reject=True, reason=reason)


async def _notify(stub: Stub, event: Event, pod_pb: api_pb2.PodSandbox, ctr_pb: api_pb2.Container | None) -> None:
    pod = convert.pod_from_proto(pod_pb)
    plugin = stub.plugin
    if event is Event.RUN_POD_SANDBOX:
        await plugin.run_pod_sandbox(pod)
    elif event is Event.STOP_POD_SANDBOX:
        await plugin.stop_pod_sandbox(pod)
    elif event is Event.REMOVE_POD_SANDBOX:
        await plugin.remove_pod_sandbox(pod)
    elif event is Event.POST_UPDATE_POD_SANDBOX:
        await plugin.post_update_pod_sandbox(pod)
    else:
        ctr = convert.container_from_proto(ctr_pb if ctr_pb is not None else api_pb2.Container())
        if event is Event.POST_CREATE_CONTAINER:
            await plugin.post_create_container(pod, ctr)
        elif event is Event.START_CONTAINER:
            await plugin.start_container(pod, ctr)
        elif event is Event.POST_START_CONTAINER:
            await plugin.post_start_container(pod, ctr)
        elif event is Event.POST_UPDATE_CONTAINER:
            await plugin.post_update_container(pod, ctr)
        elif event is Event.REMOVE_CONTAINER:
            await plugin.remove_container(pod, ctr)
        else:
            raise RpcError(Code.INVALID_ARGUMENT, f"event {event.name} is not a notification")


async def _on_state_change(stub: Stub, link: _Link, req: api_pb2.StateChangeEvent) -> Message:
    try:
        event = Event(req.event)
    except ValueError:
        log.warning("StateChange with unknown event %d ignored", req.event)
        return api_pb2.Empty()
    await _notify(stub, event, req.pod, req.container if req.HasField("container") else None)
    return api_pb2.Empty()


def _notification(event: Event, response: type[Message]) -> _Run:
    async def run(stub: Stub, link: _Link, req: Any) -> Message:
        await _notify(stub, event, req.pod, req.container if "container" in req.DESCRIPTOR.fields_by_name else None)
        return response()

    return run


def _log_undelivered(fut: asyncio.Future[list[ContainerUpdate]]) -> None:
    """Log (and mark as seen) a failed delivery, so fire-and-forget callers still hear of it."""
    if not fut.cancelled() and (exc := fut.exception()) is not None:
        log.warning("unsolicited update not delivered: %s", exc)


def _current_cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


Stub._METHODS = {
    "Configure": (api_pb2.ConfigureRequest, _on_configure),
    "Synchronize": (api_pb2.SynchronizeRequest, _on_synchronize),
    "Shutdown": (api_pb2.Empty, _on_shutdown),
    "CreateContainer": (api_pb2.CreateContainerRequest, _on_create_container),
    "UpdateContainer": (api_pb2.UpdateContainerRequest, _on_update_container),
    "StopContainer": (api_pb2.StopContainerRequest, _on_stop_container),
    "UpdatePodSandbox": (api_pb2.UpdatePodSandboxRequest, _on_update_pod_sandbox),
    "ValidateContainerAdjustment": (api_pb2.ValidateContainerAdjustmentRequest, _on_validate),
    "StateChange": (api_pb2.StateChangeEvent, _on_state_change),
    **{
        method: (getattr(api_pb2, f"{method}Request"), _notification(event, getattr(api_pb2, f"{method}Response")))
        for method, event in _NOTIFICATIONS.items()
    },
}
