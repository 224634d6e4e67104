"""The embedded runtime's plugin side: accepting and launching plugins, and starting them.

A plugin connects to ``socket_path``, is launched on a socketpair, or comes from
``plugin_dir``; one plugin starts at a time: registration within ``registration_timeout``
(a refused plugin is answered with an error and left alone on its open connection, as
containerd does), Configure with the emulated NRI version's fields, then Synchronize split
into ``more`` chunks past 4 MiB under the Synchronize lock. The plugin's requests on its
connection are served by ``RuntimeService``: RegisterPlugin, and UpdateContainers under
containerd's NRI locks (``embedded/nrilocks.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from google.protobuf.message import DecodeError, Message

from topodra.embedded.nrilocks import NRILocks, RuntimeHung
from topodra.embedded.runtime_store import ContainerStore
from topodra.embedded.runtime_types import (
    V0_7,
    V0_12,
    PluginInfo,
    RuntimeJournal,
    RuntimeSettings,
    RuntimeUsageError,
    rpc_reason,
)
from topodra.nri import convert
from topodra.nri.errors import ConnectionClosed, ConversionError, OversizedMessageError, RpcError
from topodra.nri.proto import api_pb2
from topodra.nri.session import RequestReceived, Role, Session
from topodra.nri.stub import PLUGIN_SERVICE, RUNTIME_SERVICE, check_plugin_index, check_plugin_name
from topodra.nri.transport import Connection, Reply, connect_unix
from topodra.nri.ttrpc import Code, Status
from topodra.nri.types import ContainerUpdate, Event, events_in_mask
from topodra.nri.version import valid_event_mask

__all__ = ["Fatal", "PluginHost", "PluginLink", "Refused", "RuntimeService"]

_MIN_SYNC_OBJECTS: Final = 8


class Fatal(Exception):
    """A plugin failure that closes the plugin (timeout, closed, protocol)."""


class Refused(Fatal):
    """Registration refused: answered with an error, the connection is left open."""


@dataclass
class PluginLink:
    """One plugin connection as the runtime tracks it."""

    conn: Connection
    launched: bool
    name: str = ""
    idx: str = ""
    nri_version: str = ""
    events: int = 0
    synchronized: bool = False
    fallback: bool = False
    warned: set[Event] = field(default_factory=set)
    registered: asyncio.Future[None] | None = None
    close_reason: str | None = None
    process: asyncio.subprocess.Process | None = None

    @property
    def id(self) -> str:
        return f"{self.idx}-{self.name}"

    @property
    def closed(self) -> bool:
        return self.conn.closed

    def info(self) -> PluginInfo:
        return PluginInfo(
            name=self.name,
            idx=self.idx,
            events=events_in_mask(self.events),
            launched=self.launched,
            synchronized=self.synchronized,
            closed=self.closed,
            state_change_fallback=self.fallback,
            nri_version=self.nri_version,
            close_reason=self.close_reason or self.conn.close_reason,
        )

    async def call(self, method: str, request: Message, reply_type: type[Message], timeout: float) -> Message:
        """One Plugin-service call; ``Fatal`` for what closes a plugin, ``RpcError`` otherwise."""
        try:
            payload = await self.conn.call(PLUGIN_SERVICE, method, request.SerializeToString(), timeout=timeout)
        except TimeoutError:
            raise Fatal("context deadline exceeded") from None
        except ConnectionClosed:
            raise Fatal("ttrpc: closed") from None
        reply = reply_type()
        try:
            reply.ParseFromString(payload)
        except DecodeError as exc:
            raise Fatal(f"ttrpc: invalid {reply_type.__name__}: {exc}") from None
        return reply

    async def close(self, reason: str) -> None:
        if self.close_reason is None:
            self.close_reason = reason
        await self.conn.close(reason)
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()


class RuntimeService:
    """The Runtime service a plugin calls on its connection: RegisterPlugin and UpdateContainers."""

    def __init__(
        self,
        store: ContainerStore,
        locks: NRILocks,
        journal: RuntimeJournal,
        *,
        spawn: Callable[[Awaitable[Any]], asyncio.Task[Any]],
    ) -> None:
        self._store = store
        self._locks = locks
        self._journal = journal
        self._spawn = spawn

    async def serve(self, plugin: PluginLink, event: RequestReceived) -> Reply:
        req = event.request
        if req.service != RUNTIME_SERVICE:
            return b"", Status(Code.UNIMPLEMENTED, f"service {req.service}")
        if req.method == "RegisterPlugin":
            msg = api_pb2.RegisterPluginRequest()
            try:
                msg.ParseFromString(req.payload)
            except DecodeError as exc:
                return b"", Status(Code.UNKNOWN, f"invalid RegisterPluginRequest: {exc}")
            return self._register(plugin, msg)
        if req.method == "UpdateContainers":
            msg2 = api_pb2.UpdateContainersRequest()
            try:
                msg2.ParseFromString(req.payload)
                updates = convert.updates_from_proto(msg2.update)
            except (DecodeError, ConversionError) as exc:
                return b"", Status(Code.UNKNOWN, f"invalid UpdateContainersRequest: {exc}")
            self._journal.note(
                f"plugin {plugin.id!r} requested container updates: {', '.join(u.container_id for u in updates)}"
            )
            # runtime-owned: applied even if the plugin is dropped while it waits for the lock
            try:
                failed = await asyncio.shield(self._spawn(self._apply_unsolicited(updates, plugin.id)))
            except RuntimeHung as exc:
                return b"", Status(Code.UNAVAILABLE, str(exc))
            if failed:
                # containerd applies what it can, then fails the whole call: ttrpc sends the
                # error status alone, so the plugin never sees which updates failed.
                return b"", Status(Code.UNKNOWN, "NRI update of some containers failed")
            return api_pb2.UpdateContainersResponse().SerializeToString(), None
        return b"", Status(Code.UNIMPLEMENTED, f"method {req.method}")

    async def _apply_unsolicited(self, updates: list[ContainerUpdate], plugin_id: str) -> list[ContainerUpdate]:
        async with self._locks.unsolicited(f"UpdateContainers from {plugin_id}"):
            return self._store.apply_updates(updates, source="unsolicited", plugin=plugin_id)

    def _register(self, plugin: PluginLink, msg: api_pb2.RegisterPluginRequest) -> Reply:
        fut = plugin.registered
        if fut is None or fut.done():
            return b"", Status(Code.UNKNOWN, "plugin already registered")
        if not plugin.launched:
            try:
                check_plugin_name(msg.plugin_name)
            except ValueError as exc:
                fut.set_exception(Refused(f"plugin registered with an invalid name: {exc}"))
                return b"", Status(Code.UNKNOWN, f"invalid plugin name: {exc}")
            try:
                check_plugin_index(msg.plugin_idx)
            except ValueError as exc:
                fut.set_exception(Refused(f"plugin {msg.plugin_name!r} registered with an invalid index: {exc}"))
                return b"", Status(Code.UNKNOWN, f"invalid plugin index: {exc}")
            plugin.name, plugin.idx = msg.plugin_name, msg.plugin_idx
        plugin.nri_version = msg.NRI_version
        self._journal.note(f"plugin {plugin.id!r} registered (with NRI version {msg.NRI_version or 'unknown'})")
        fut.set_result(None)
        return b"", None


class PluginHost:
    """Accepts, launches and starts plugins; ``active`` lists the synchronized ones."""

    def __init__(
        self, settings: RuntimeSettings, store: ContainerStore, locks: NRILocks, journal: RuntimeJournal
    ) -> None:
        self._settings = settings
        self._store = store
        self._locks = locks
        self._journal = journal
        #: synchronized plugins in invocation (index) order; a plugin leaves when it closes
        self.active: list[PluginLink] = []
        self._all: list[PluginLink] = []
        self._service = RuntimeService(store, locks, journal, spawn=self._spawn)
        self._accept_lock = asyncio.Lock()
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._plugins_changed = asyncio.Event()

    # ---------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Launch pre-installed plugins (``plugin_dir``), then listen on ``socket_path``."""
        if self._settings.plugin_dir is not None:
            await self._start_plugin_dir(self._settings.plugin_dir)
        socket_path = self._settings.socket_path
        if socket_path is not None:
            with contextlib.suppress(FileNotFoundError):
                socket_path.unlink()
            socket_path.parent.mkdir(parents=True, exist_ok=True)
            loop = asyncio.get_running_loop()
            self._server = await loop.create_unix_server(self._on_connect, path=str(socket_path))

    async def stop(self) -> None:
        """Stop listening, close every plugin (launched ones are killed)."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for plugin in list(self._all):
            await plugin.close("runtime stopped")
            if plugin.process is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(plugin.process.wait(), 2)
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._settings.socket_path is not None:
            with contextlib.suppress(FileNotFoundError):
                self._settings.socket_path.unlink()

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ---------------------------------------------------------------- plugins
    @property
    def plugins(self) -> list[PluginInfo]:
        """Synchronized, connected plugins in invocation (index) order."""
        return [p.info() for p in self.active if not p.closed]

    def all_plugins(self) -> list[PluginInfo]:
        """Every plugin connection ever accepted, including closed and refused ones."""
        return [p.info() for p in self._all]

    async def wait_for_plugins(self, count: int = 1, *, timeout: float = 5.0) -> list[PluginInfo]:
        """Wait until ``count`` plugins are connected and synchronized."""

        async def _wait() -> list[PluginInfo]:
            while len(self.plugins) < count:
                self._plugins_changed.clear()
                await self._plugins_changed.wait()
            return self.plugins

        return await asyncio.wait_for(_wait(), timeout)

    async def wait_for_plugin_gone(self, plugin_id: str, *, timeout: float = 5.0) -> PluginInfo:
        """Wait until the plugin ``NN-name`` is closed; returns its final info."""

        async def _wait() -> PluginInfo:
            while True:
                for p in self._all:
                    if p.id == plugin_id and p.closed and p.registered is not None and p.registered.done():
                        return p.info()
                self._plugins_changed.clear()
                await self._plugins_changed.wait()

        return await asyncio.wait_for(_wait(), timeout)

    def _changed_plugins(self) -> None:
        self._plugins_changed.set()

    def _on_connect(self) -> Connection:
        """A plugin connected to the socket: its connection, and its start (tracked, so stop() can cancel it)."""
        plugin = self._new_plugin(launched=None)
        self._spawn(self._start_plugin(plugin))
        return plugin.conn

    async def attach(self, sock: socket.socket, *, name: str, idx: str) -> None:
        """Serve a pre-connected plugin socket (what a runtime-launched plugin gets on fd 3)."""
        check_plugin_name(name)
        check_plugin_index(idx)
        plugin = self._new_plugin(launched=(name, idx))
        await self._open(plugin, sock)
        await self._start_plugin(plugin)

    async def launch_plugin(
        self, argv: Sequence[str], *, name: str, idx: str, stderr: int | None = None
    ) -> asyncio.subprocess.Process:
        """Exec ``argv`` as a launched plugin: a socketpair end and exactly three NRI variables.

        The runtime's end is served like containerd serves ``NN-name`` plugins
        from its plugin directory; returns once the plugin is synchronized (or
        has failed to start). Launched plugins are killed by ``stop()``.
        """
        check_plugin_name(name)
        check_plugin_index(idx)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = {"NRI_PLUGIN_NAME": name, "NRI_PLUGIN_IDX": idx, "NRI_PLUGIN_SOCKET": str(theirs.fileno())}
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                env=env,
                pass_fds=(theirs.fileno(),),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=stderr if stderr is not None else asyncio.subprocess.DEVNULL,
            )
        finally:
            theirs.close()
        self._journal.note(f"starting pre-installed NRI plugin {name!r}...")
        plugin = self._new_plugin(launched=(name, idx), process=process)
        await self._open(plugin, ours)
        await self._start_plugin(plugin)
        return process

    async def _start_plugin_dir(self, directory: Path) -> None:
        entries = sorted(p for p in directory.iterdir() if p.is_file() and os.access(p, os.X_OK))
        for entry in entries:
            idx, _, name = entry.name.partition("-")
            try:
                check_plugin_index(idx)
                check_plugin_name(name)
            except ValueError as exc:
                raise RuntimeUsageError(f"invalid plugin file {entry.name!r} in {directory}: {exc}") from None
        for entry in entries:
            idx, _, name = entry.name.partition("-")
            self._journal.note(f"discovered plugin {entry.name}")
            await self.launch_plugin([str(entry)], name=name, idx=idx)

    def _new_plugin(
        self, *, launched: tuple[str, str] | None, process: asyncio.subprocess.Process | None = None
    ) -> PluginLink:
        """A plugin's record and its connection (to be opened), known to ``stop()`` from now on."""
        plugin: PluginLink
        conn = Connection(
            Session(Role.RUNTIME, go_reader=self._settings.go_frame_rules),
            lambda event: self._service.serve(plugin, event),
            name="runtime",
        )
        plugin = PluginLink(conn, launched=launched is not None, process=process)
        if launched is not None:
            plugin.name, plugin.idx = launched
        plugin.registered = asyncio.get_running_loop().create_future()
        self._all.append(plugin)
        return plugin

    async def _open(self, plugin: PluginLink, sock: socket.socket) -> None:
        try:
            await connect_unix(plugin.conn, sock=sock)
        except BaseException:
            self._all.remove(plugin)
            raise

    async def _start_plugin(self, plugin: PluginLink) -> None:
        self._spawn(self._watch_close(plugin))
        async with self._accept_lock:  # containerd starts one plugin at a time
            try:
                await self._register_configure_sync(plugin)
            except Exception as exc:  # anything that fails a plugin's start closes it
                self._journal.note(f"failed to start plugin: {exc}", logging.ERROR)
                if not isinstance(exc, Refused):
                    await plugin.close(str(exc))
            finally:
                self._changed_plugins()

    async def _watch_close(self, plugin: PluginLink) -> None:
        await plugin.conn.wait_closed()
        if plugin.registered is not None and not plugin.registered.done():
            plugin.registered.set_exception(Fatal("connection closed"))
            plugin.registered.exception()  # consumed here when nobody waits any more
        if plugin in self.active:
            self.active.remove(plugin)
            reason = plugin.close_reason or plugin.conn.close_reason
            self._journal.note(f"connection to plugin {plugin.id!r} closed ({reason})")
        self._changed_plugins()

    async def _register_configure_sync(self, plugin: PluginLink) -> None:
        assert plugin.registered is not None
        try:
            await asyncio.wait_for(asyncio.shield(plugin.registered), self._settings.registration_timeout)
        except TimeoutError:
            raise Fatal("plugin registration timed out") from None
        except Refused:
            raise
        except Fatal:
            raise Fatal("failed to register plugin, connection closed") from None
        await self._configure(plugin)
        async with self._locks.synchronize(f"Synchronize {plugin.id}"):
            updates = await self._synchronize(plugin)
            self._store.apply_updates(updates, source="synchronize", plugin=plugin.id)
            plugin.synchronized = True
            self.active.append(plugin)
            self.active.sort(key=lambda p: p.idx)
        self._journal.note(f"plugin {plugin.id!r} connected and synchronized")

    # ---------------------------------------------------------------- Configure / Synchronize
    def _config_for(self, plugin: PluginLink) -> str:
        config = self._settings.plugin_config
        return config.get(plugin.id, config.get(plugin.name, ""))

    async def _configure(self, plugin: PluginLink) -> None:
        settings = self._settings
        req = api_pb2.ConfigureRequest(
            config=self._config_for(plugin), runtime_name=settings.runtime_name,
            runtime_version=settings.runtime_version,
        )
        if settings.version >= V0_7:
            req.registration_timeout = int(settings.registration_timeout * 1000)
            req.request_timeout = int(settings.request_timeout * 1000)
        if settings.version >= V0_12:
            req.NRI_version = settings.nri_version
        try:
            reply = await plugin.call("Configure", req, api_pb2.ConfigureResponse, settings.request_timeout)
        except (Fatal, RpcError) as exc:
            raise Fatal(f"failed to configure plugin: {rpc_reason(exc)}") from None
        assert isinstance(reply, api_pb2.ConfigureResponse)
        valid = valid_event_mask(settings.version)
        events = reply.events & 0xFFFFFFFF
        if events and events & ~valid:
            raise Fatal(f"invalid plugin events: 0x{events & ~valid:x}")
        plugin.events = events or valid

    async def _synchronize(self, plugin: PluginLink) -> list[ContainerUpdate]:
        self._journal.note(f"synchronizing plugin {plugin.id}")
        pods = [convert.pod_to_proto(p) for p in self._store.pods()]
        ctrs = [convert.container_to_proto(c) for c in self._store.containers()]
        deadline = time.monotonic() + self._settings.request_timeout
        pods_per, ctrs_per = len(pods), len(ctrs)
        while True:
            req = api_pb2.SynchronizeRequest(more=len(pods) > pods_per or len(ctrs) > ctrs_per)
            req.pods.extend(pods[:pods_per])
            req.containers.extend(ctrs[:ctrs_per])
            if req.more and not (req.pods or req.containers):
                # NRI's split loop keeps a per-chunk share that rounded to 0 at 0, so with objects of that
                # kind left it sends empty chunks until the request timeout; fail at once instead.
                raise Fatal("failed to synchronize plugin: split sync stopped making progress")
            if req.more and self._settings.version < V0_7:
                raise Fatal("failed to synchronize plugin: state too large for NRI < v0.7.0")
            try:
                reply = await plugin.call("Synchronize", req, api_pb2.SynchronizeResponse, deadline - time.monotonic())
            except OversizedMessageError as exc:
                pods_per, ctrs_per = _shrink(pods_per, ctrs_per, exc)
                continue
            except (Fatal, RpcError) as exc:
                raise Fatal(f"failed to synchronize plugin: {rpc_reason(exc)}") from None
            assert isinstance(reply, api_pb2.SynchronizeResponse)
            self._journal.note(
                f"sync chunk: {len(req.pods)} pods, {len(req.containers)} containers, more={req.more}", logging.DEBUG
            )
            if not req.more:
                try:
                    return convert.updates_from_proto(reply.update)
                except ConversionError as exc:
                    raise Fatal(f"failed to synchronize plugin: {exc}") from None
            if reply.update or reply.more != req.more:
                raise Fatal("plugin does not handle split sync requests")
            pods, ctrs = pods[pods_per:], ctrs[ctrs_per:]
            pods_per, ctrs_per = min(pods_per, len(pods)), min(ctrs_per, len(ctrs))


def _shrink(pods: int, ctrs: int, exc: OversizedMessageError) -> tuple[int, int]:
    """containerd's rule for the next Synchronize chunk after an oversized attempt."""
    if pods + ctrs <= _MIN_SYNC_OBJECTS:
        raise Fatal("failed to synchronize plugin with split messages")
    if exc.length <= exc.limit:
        raise Fatal("failed to synchronize plugin with split messages")
    factor = min(exc.limit / exc.length, 0.9)
    pods, ctrs = int(pods * factor), int(ctrs * factor)
    if pods + ctrs < _MIN_SYNC_OBJECTS:
        pods = ctrs = _MIN_SYNC_OBJECTS // 2
    return pods, ctrs
