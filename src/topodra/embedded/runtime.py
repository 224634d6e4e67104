"""An embedded container runtime that speaks NRI like containerd does.

``EmbeddedRuntime`` listens on a unix socket (and/or launches plugins on a
socketpair), keeps a store of pods and containers, and drives plugins with the
real protocol and the real runtime's rules:

* registration within ``registration_timeout`` of accepting, plugin name and
  two-digit index validation (a refused plugin is answered with an error and
  then left alone on its open connection, as containerd does), one plugin
  starting at a time;
* Configure with the emulated NRI version's fields, and the event mask checked
  against that version's valid events;
* Synchronize split into ``more`` chunks past 4 MiB (ids of refused oversized
  attempts are used up), all chunks within one request timeout;
* every request within ``request_timeout``, else the plugin is closed and the
  operation goes on without it; frames checked as Go's reader would take them;
* notification events as dedicated rpcs (v0.12+) or StateChange (older, or
  for good after a plugin answers UNIMPLEMENTED);
* containerd's two NRI locks (``embedded/nrilocks.py``): a CRI call takes the
  local NRI lock, then the adaptation's while the event is delivered; a
  plugin-initiated UpdateContainers takes the local lock (NRI v0.12.1+) or the
  adaptation's and then the local one (older: the lock inversion of
  containerd#13733, which hangs the runtime for good when it meets a CRI call
  between its two locks: ``RuntimeHung``, ``deadlocks``). An update requested
  from inside an event handler waits for that event: the plugin deadlocks and
  is dropped;
* field ownership across plugins, updates of the container being created
  refused, validators consulted after all adjustments;
* the spec and the running task kept apart, as containerd does: StartContainer
  creates the task from the spec, then spends ``start_delay`` starting it; an
  update arriving in that window is stored in the spec but never reaches the
  task (containerd applies updates to a task only once the container is
  running), so the container keeps running on the old cpuset;
* a batched unsolicited UpdateContainers applies every update it can and, if
  any failed, answers the whole call with an error (containerd returns
  "NRI update of some containers failed" and the failed list is lost);
  updating a stopped container fails;
* optionally the task's cpuset and mems written to cgroup v2 files under
  ``cgroup_root`` at the container's ``cgroups_path`` (what the kernel would
  hold), for the agent's drift check to read.

It is the test double of the NRI tests, the runtime of the agent's end-to-end
tests and the playground's container runtime. Operations return an
``EventResult`` (what the plugins did, or the error a CRI call would get);
``subscribe()``/``on_change`` report every change of a container's cpus/mems.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from google.protobuf.message import DecodeError, Message

from topodra import __version__
from topodra.cpuset import CPUSet
from topodra.embedded.nrilocks import NRILocks, RuntimeHung
from topodra.nri import convert
from topodra.nri.errors import ConnectionClosed, ConversionError, NRIError, OversizedMessageError, RpcError
from topodra.nri.merge import (
    Owners,
    OwnershipConflict,
    apply_adjustment,
    apply_update,
    cpus_and_mems,
    merge_adjustment,
    merge_update,
)
from topodra.nri.proto import api_pb2
from topodra.nri.session import RequestReceived, Role, Session
from topodra.nri.stub import PLUGIN_SERVICE, RUNTIME_SERVICE, check_plugin_index, check_plugin_name
from topodra.nri.transport import Connection, Reply, connect_unix
from topodra.nri.ttrpc import Code, Status, code_name
from topodra.nri.types import (
    Container,
    ContainerAdjustment,
    ContainerState,
    ContainerUpdate,
    Event,
    LinuxResources,
    Pod,
    events_in_mask,
)
from topodra.nri.version import NRIVersion, valid_event_mask

__all__ = ["ContainerChange", "EmbeddedRuntime", "EventResult", "PluginInfo", "RuntimeUsageError"]

log = logging.getLogger("topodra.embedded.runtime")

_V0_7: Final = NRIVersion(0, 7, 0)
_V0_10: Final = NRIVersion(0, 10, 0)
_V0_12: Final = NRIVersion(0, 12, 0)
_V0_12_1: Final = NRIVersion(0, 12, 1)
_MIN_SYNC_OBJECTS: Final = 8

#: Notification events and their dedicated rpc (v0.12+); others always have their own rpc.
_NOTIFICATION_RPCS: Final = {
    Event.RUN_POD_SANDBOX: "RunPodSandbox",
    Event.STOP_POD_SANDBOX: "StopPodSandbox",
    Event.REMOVE_POD_SANDBOX: "RemovePodSandbox",
    Event.POST_UPDATE_POD_SANDBOX: "PostUpdatePodSandbox",
    Event.POST_CREATE_CONTAINER: "PostCreateContainer",
    Event.START_CONTAINER: "StartContainer",
    Event.POST_START_CONTAINER: "PostStartContainer",
    Event.POST_UPDATE_CONTAINER: "PostUpdateContainer",
    Event.REMOVE_CONTAINER: "RemoveContainer",
}


class RuntimeUsageError(NRIError):
    """A caller mistake against the embedded runtime (unknown id, bad state)."""


@dataclass(frozen=True, slots=True)
class PluginInfo:
    """A plugin as the runtime sees it."""

    name: str
    idx: str
    events: frozenset[Event]
    launched: bool
    synchronized: bool
    closed: bool
    state_change_fallback: bool
    nri_version: str
    close_reason: str | None = None

    @property
    def id(self) -> str:
        return f"{self.idx}-{self.name}"


@dataclass(frozen=True, slots=True)
class ContainerChange:
    """A container's cpus or mems changed (``source``: adjustment, update, unsolicited, synchronize)."""

    container_id: str
    cpus: CPUSet | None
    mems: CPUSet | None
    previous_cpus: CPUSet | None
    previous_mems: CPUSet | None
    source: str
    plugin: str | None = None


@dataclass(frozen=True, slots=True)
class EventResult:
    """What one runtime operation did; ``error`` is what the CRI call would return."""

    event: str
    pod: Pod | None = None
    container: Container | None = None
    adjustment: ContainerAdjustment | None = None
    updates: tuple[ContainerUpdate, ...] = ()
    failed_updates: tuple[ContainerUpdate, ...] = ()
    error: str | None = None
    plugins: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None

    def check(self) -> EventResult:
        """Return self, or raise ``NRIError`` with the error."""
        if self.error is not None:
            raise NRIError(f"{self.event}: {self.error}")
        return self


class _Fatal(Exception):
    """A plugin failure that closes the plugin (timeout, closed, protocol)."""


@dataclass
class _Plugin:
    runtime: EmbeddedRuntime
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
        """One Plugin-service call; ``_Fatal`` for what closes a plugin, ``RpcError`` otherwise."""
        try:
            payload = await self.conn.call(PLUGIN_SERVICE, method, request.SerializeToString(), timeout=timeout)
        except TimeoutError:
            raise _Fatal("context deadline exceeded") from None
        except ConnectionClosed:
            raise _Fatal("ttrpc: closed") from None
        reply = reply_type()
        try:
            reply.ParseFromString(payload)
        except DecodeError as exc:
            raise _Fatal(f"ttrpc: invalid {reply_type.__name__}: {exc}") from None
        return reply

    async def close(self, reason: str) -> None:
        if self.close_reason is None:
            self.close_reason = reason
        await self.conn.close(reason)
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()


class EmbeddedRuntime:
    """A container runtime's NRI side plus a container store; see the module docstring."""

    def __init__(
        self,
        socket_path: str | os.PathLike[str] | None = None,
        *,
        runtime_name: str = "topodra-embedded",
        runtime_version: str = __version__,
        nri_version: str = "v0.12.2",
        registration_timeout: float = 5.0,
        request_timeout: float = 2.0,
        containerd_lock: bool = True,
        plugin_config: Mapping[str, str] | None = None,
        plugin_dir: str | os.PathLike[str] | None = None,
        online_cpus: CPUSet | None = None,
        online_mems: CPUSet | None = None,
        fail_updates: Collection[str] = (),
        go_frame_rules: bool = True,
        on_change: Callable[[ContainerChange], None] | None = None,
        start_delay: float = 0.0,
        start_gate: Callable[[str], Awaitable[None]] | None = None,
        cgroup_root: str | os.PathLike[str] | None = None,
        between_locks: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        """``plugin_config`` maps "NN-name" or "name" to the config text sent in Configure.

        ``online_cpus``/``online_mems`` make cpusets outside them fail like the
        kernel would; ``fail_updates`` lists container ids whose updates fail.
        ``start_delay`` is how long starting a created task takes (runc start;
        ~170 ms on a real node), ``start_gate`` an awaitable called in that
        window instead (tests act inside it); ``cgroup_root`` makes the runtime
        write each task's cpuset to ``<cgroup_root>/<cgroups_path>/cpuset.{cpus,mems}``.
        ``between_locks`` is awaited by every CRI call between taking containerd's local NRI lock
        and the adaptation's (``embedded/nrilocks.py``), with the call's label.
        """
        self.socket_path = Path(socket_path) if socket_path is not None else None
        self.runtime_name = runtime_name
        self.runtime_version = runtime_version
        self.nri_version = nri_version
        self.version = NRIVersion.parse(nri_version)
        self.registration_timeout = registration_timeout
        self.request_timeout = request_timeout
        self.containerd_lock = containerd_lock
        self.plugin_config = dict(plugin_config or {})
        self.plugin_dir = Path(plugin_dir) if plugin_dir is not None else None
        self.online_cpus = online_cpus
        self.online_mems = online_mems
        self.fail_updates = set(fail_updates)
        self.go_frame_rules = go_frame_rules
        self.on_change = on_change
        self.start_delay = start_delay
        self.start_gate = start_gate
        self.cgroup_root = Path(cgroup_root) if cgroup_root is not None else None
        if self.cgroup_root is not None:  # a cgroup v2 hierarchy
            self.cgroup_root.mkdir(parents=True, exist_ok=True)
            (self.cgroup_root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
        #: container id -> (cpus, mems) its task runs with (the cgroup), once the task exists
        self._task: dict[str, tuple[CPUSet | None, CPUSet | None]] = {}
        self._starting: set[str] = set()  # task created, not yet running: updates reach the spec only
        #: updates stored in a starting container's spec that its task never got
        self.lost_updates: list[ContainerUpdate] = []
        #: seconds from the end of a start whose update was lost to the next update of its task
        self.repair_delays: list[float] = []
        self._unrepaired: dict[str, float] = {}  # container -> when its start ended (monotonic)
        #: human-readable record of what happened, like a runtime's log
        self.log: list[str] = []
        self._pods: dict[str, Pod] = {}
        self._containers: dict[str, Container] = {}
        self._plugins: list[_Plugin] = []
        self._all: list[_Plugin] = []
        #: containerd's local NRI lock and the NRI adaptation's, in this NRI version's order
        self._locks = NRILocks(
            inverted_updates=self.version < _V0_12_1, serialize_updates=containerd_lock, between=between_locks
        )
        self._accept_lock = asyncio.Lock()
        self._server: asyncio.base_events.Server | None = None
        self._subscribers: list[asyncio.Queue[ContainerChange]] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._plugins_changed = asyncio.Event()
        self._pid = 10000

    @property
    def nri_locks(self) -> NRILocks:
        """containerd's two NRI locks as this runtime takes them (tests watch who waits)."""
        return self._locks

    @property
    def deadlocks(self) -> list[str]:
        """The lock inversions that hung this runtime (empty: it never hung)."""
        return list(self._locks.deadlocks)

    # ---------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Launch pre-installed plugins (``plugin_dir``), then listen on ``socket_path``."""
        if self.plugin_dir is not None:
            await self._start_plugin_dir(self.plugin_dir)
        if self.socket_path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()
            self.socket_path.parent.mkdir(parents=True, exist_ok=True)
            loop = asyncio.get_running_loop()
            self._server = await loop.create_unix_server(self._on_connect, path=str(self.socket_path))

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
        if self.socket_path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()

    async def __aenter__(self) -> EmbeddedRuntime:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _note(self, text: str, level: int = logging.INFO) -> None:
        self.log.append(text)
        log.log(level, "%s", text)

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ---------------------------------------------------------------- plugins
    @property
    def plugins(self) -> list[PluginInfo]:
        """Synchronized, connected plugins in invocation (index) order."""
        return [p.info() for p in self._plugins if not p.closed]

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
        self._note(f"starting pre-installed NRI plugin {name!r}...")
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
            self._note(f"discovered plugin {entry.name}")
            await self.launch_plugin([str(entry)], name=name, idx=idx)

    def _new_plugin(
        self, *, launched: tuple[str, str] | None, process: asyncio.subprocess.Process | None = None
    ) -> _Plugin:
        """A plugin's record and its connection (to be opened), known to ``stop()`` from now on."""
        plugin: _Plugin
        conn = Connection(
            Session(Role.RUNTIME, go_reader=self.go_frame_rules),
            lambda event: self._dispatch(plugin, event),
            name="runtime",
        )
        plugin = _Plugin(self, conn, launched=launched is not None, process=process)
        if launched is not None:
            plugin.name, plugin.idx = launched
        plugin.registered = asyncio.get_running_loop().create_future()
        self._all.append(plugin)
        return plugin

    async def _open(self, plugin: _Plugin, sock: socket.socket) -> None:
        try:
            await connect_unix(plugin.conn, sock=sock)
        except BaseException:
            self._all.remove(plugin)
            raise

    async def _start_plugin(self, plugin: _Plugin) -> None:
        self._spawn(self._watch_close(plugin))
        async with self._accept_lock:  # containerd starts one plugin at a time
            try:
                await self._register_configure_sync(plugin)
            except Exception as exc:  # anything that fails a plugin's start closes it
                self._note(f"failed to start plugin: {exc}", logging.ERROR)
                if not isinstance(exc, _Refused):
                    await plugin.close(str(exc))
            finally:
                self._changed_plugins()

    async def _watch_close(self, plugin: _Plugin) -> None:
        await plugin.conn.wait_closed()
        if plugin.registered is not None and not plugin.registered.done():
            plugin.registered.set_exception(_Fatal("connection closed"))
            plugin.registered.exception()  # consumed here when nobody waits any more
        if plugin in self._plugins:
            self._plugins.remove(plugin)
            self._note(f"connection to plugin {plugin.id!r} closed ({plugin.close_reason or plugin.conn.close_reason})")
        self._changed_plugins()

    async def _register_configure_sync(self, plugin: _Plugin) -> None:
        assert plugin.registered is not None
        try:
            await asyncio.wait_for(asyncio.shield(plugin.registered), self.registration_timeout)
        except TimeoutError:
            raise _Fatal("plugin registration timed out") from None
        except _Refused:
            raise
        except _Fatal:
            raise _Fatal("failed to register plugin, connection closed") from None
        await self._configure(plugin)
        async with self._locks.synchronize(f"Synchronize {plugin.id}"):
            updates = await self._synchronize(plugin)
            self._apply_updates(updates, source="synchronize", plugin=plugin.id)
            plugin.synchronized = True
            self._plugins.append(plugin)
            self._plugins.sort(key=lambda p: p.idx)
        self._note(f"plugin {plugin.id!r} connected and synchronized")

    # ---------------------------------------------------------------- Runtime service (conn 2)
    def _dispatch(self, plugin: _Plugin, event: RequestReceived) -> Awaitable[Reply]:
        return self._serve(plugin, event)

    async def _serve(self, plugin: _Plugin, event: RequestReceived) -> Reply:
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
            self._note(f"plugin {plugin.id!r} requested container updates: {', '.join(u.container_id for u in updates)}")
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
            return self._apply_updates(updates, source="unsolicited", plugin=plugin_id)

    def _register(self, plugin: _Plugin, msg: api_pb2.RegisterPluginRequest) -> Reply:
        fut = plugin.registered
        if fut is None or fut.done():
            return b"", Status(Code.UNKNOWN, "plugin already registered")
        if not plugin.launched:
            try:
                check_plugin_name(msg.plugin_name)
            except ValueError as exc:
                fut.set_exception(_Refused(f"plugin registered with an invalid name: {exc}"))
                return b"", Status(Code.UNKNOWN, f"invalid plugin name: {exc}")
            try:
                check_plugin_index(msg.plugin_idx)
            except ValueError as exc:
                fut.set_exception(_Refused(f"plugin {msg.plugin_name!r} registered with an invalid index: {exc}"))
                return b"", Status(Code.UNKNOWN, f"invalid plugin index: {exc}")
            plugin.name, plugin.idx = msg.plugin_name, msg.plugin_idx
        plugin.nri_version = msg.NRI_version
        self._note(f"plugin {plugin.id!r} registered (with NRI version {msg.NRI_version or 'unknown'})")
        fut.set_result(None)
        return b"", None

    # ---------------------------------------------------------------- Configure / Synchronize
    def _config_for(self, plugin: _Plugin) -> str:
        return self.plugin_config.get(plugin.id, self.plugin_config.get(plugin.name, ""))

    async def _configure(self, plugin: _Plugin) -> None:
        req = api_pb2.ConfigureRequest(
            config=self._config_for(plugin), runtime_name=self.runtime_name, runtime_version=self.runtime_version
        )
        if self.version >= _V0_7:
            req.registration_timeout = int(self.registration_timeout * 1000)
            req.request_timeout = int(self.request_timeout * 1000)
        if self.version >= _V0_12:
            req.NRI_version = self.nri_version
        try:
            reply = await plugin.call("Configure", req, api_pb2.ConfigureResponse, self.request_timeout)
        except (_Fatal, RpcError) as exc:
            raise _Fatal(f"failed to configure plugin: {_reason(exc)}") from None
        assert isinstance(reply, api_pb2.ConfigureResponse)
        valid = valid_event_mask(self.version)
        events = reply.events & 0xFFFFFFFF
        if events and events & ~valid:
            raise _Fatal(f"invalid plugin events: 0x{events & ~valid:x}")
        plugin.events = events or valid

    async def _synchronize(self, plugin: _Plugin) -> list[ContainerUpdate]:
        self._note(f"synchronizing plugin {plugin.id}")
        pods = [convert.pod_to_proto(p) for p in self._pods.values()]
        ctrs = [convert.container_to_proto(c) for c in self._containers.values()]
        deadline = time.monotonic() + self.request_timeout
        pods_per, ctrs_per = len(pods), len(ctrs)
        while True:
            req = api_pb2.SynchronizeRequest(more=len(pods) > pods_per or len(ctrs) > ctrs_per)
            req.pods.extend(pods[:pods_per])
            req.containers.extend(ctrs[:ctrs_per])
            if req.more and not (req.pods or req.containers):
                # NRI's split loop keeps a per-chunk share that rounded to 0 at 0, so with objects of that
                # kind left it sends empty chunks until the request timeout; fail at once instead.
                raise _Fatal("failed to synchronize plugin: split sync stopped making progress")
            if req.more and self.version < _V0_7:
                raise _Fatal("failed to synchronize plugin: state too large for NRI < v0.7.0")
            try:
                reply = await plugin.call("Synchronize", req, api_pb2.SynchronizeResponse, deadline - time.monotonic())
            except OversizedMessageError as exc:
                pods_per, ctrs_per = _shrink(pods_per, ctrs_per, exc)
                continue
            except (_Fatal, RpcError) as exc:
                raise _Fatal(f"failed to synchronize plugin: {_reason(exc)}") from None
            assert isinstance(reply, api_pb2.SynchronizeResponse)
            self._note(f"sync chunk: {len(req.pods)} pods, {len(req.containers)} containers, more={req.more}",
                       logging.DEBUG)
            if not req.more:
                try:
                    return convert.updates_from_proto(reply.update)
                except ConversionError as exc:
                    raise _Fatal(f"failed to synchronize plugin: {exc}") from None
            if reply.update or reply.more != req.more:
                raise _Fatal("plugin does not handle split sync requests")
            pods, ctrs = pods[pods_per:], ctrs[ctrs_per:]
            pods_per, ctrs_per = min(pods_per, len(pods)), min(ctrs_per, len(ctrs))

    # ---------------------------------------------------------------- delivering events
    def _subscribed(self, event: Event) -> list[_Plugin]:
        return [p for p in self._plugins if not p.closed and p.events & event.bit]

    async def _send(
        self, plugin: _Plugin, event: Event, method: str, request: Message, reply_type: type[Message], dropped: list[str]
    ) -> Message | None:
        """One plugin call; None when the plugin was closed for it (the event goes on)."""
        try:
            return await plugin.call(method, request, reply_type, self.request_timeout)
        except _Fatal as exc:
            self._note(f"closing plugin {plugin.id}, failed to handle {event.rpc} request: {exc}", logging.ERROR)
            await plugin.close(str(exc))
            dropped.append(plugin.id)
            return None

    async def _notify(self, event: Event, pod: Pod, container: Container | None, dropped: list[str]) -> str | None:
        """Deliver a notification event; returns the first plugin error (which stops delivery)."""
        for plugin in self._subscribed(event):
            pod_pb = convert.pod_to_proto(pod)
            ctr_pb = convert.container_to_proto(container) if container is not None else None
            use_state_change = plugin.fallback or self.version < _V0_12
            if not use_state_change:
                request = getattr(api_pb2, f"{_NOTIFICATION_RPCS[event]}Request")(pod=pod_pb)
                if ctr_pb is not None:
                    request.container.CopyFrom(ctr_pb)
                response_type = getattr(api_pb2, f"{_NOTIFICATION_RPCS[event]}Response")
                try:
                    await self._send(plugin, event, _NOTIFICATION_RPCS[event], request, response_type, dropped)
                    continue
                except RpcError as exc:
                    if exc.code != Code.UNIMPLEMENTED:
                        return f"plugin {plugin.id}: {_reason(exc)}"
                    plugin.fallback = True
            if plugin.fallback and event not in plugin.warned:
                plugin.warned.add(event)
                self._note(
                    f"plugin {plugin.id} uses deprecated StateChange instead of a dedicated {event.rpc} RPC call",
                    logging.WARNING,
                )
            change = api_pb2.StateChangeEvent(event=event.value, pod=pod_pb)  # type: ignore[arg-type]
            if ctr_pb is not None:
                change.container.CopyFrom(ctr_pb)
            try:
                await self._send(plugin, event, "StateChange", change, api_pb2.Empty, dropped)
            except RpcError as exc:
                return f"plugin {plugin.id}: {_reason(exc)}"
        return None

    # ---------------------------------------------------------------- state and notifications
    def pods(self) -> list[Pod]:
        return list(self._pods.values())

    def containers(self) -> list[Container]:
        return list(self._containers.values())

    def pod(self, pod_id: str) -> Pod:
        try:
            return self._pods[pod_id]
        except KeyError:
            raise RuntimeUsageError(f"no pod sandbox {pod_id!r}") from None

    def container(self, container_id: str) -> Container:
        try:
            return self._containers[container_id]
        except KeyError:
            raise RuntimeUsageError(f"no container {container_id!r}") from None

    def subscribe(self) -> asyncio.Queue[ContainerChange]:
        """A queue that receives every later ``ContainerChange``."""
        queue: asyncio.Queue[ContainerChange] = asyncio.Queue()
        self._subscribers.append(queue)
        return queue

    @property
    def unrepaired(self) -> frozenset[str]:
        """Running containers whose task kept a stale cpuset from their start and got no update since."""
        return frozenset(self._unrepaired)

    def applied(self, container_id: str) -> tuple[CPUSet | None, CPUSet | None] | None:
        """The (cpus, mems) the container's task runs with; None before its task exists."""
        return self._task.get(container_id)

    def _set_task(self, ctr: Container) -> None:
        """The task (its cgroup) takes the container's current cpus and mems."""
        values = cpus_and_mems(ctr)
        self._task[ctr.id] = values
        ended = self._unrepaired.pop(ctr.id, None)
        if ended is not None:
            self.repair_delays.append(time.monotonic() - ended)
        if self.cgroup_root is None or not ctr.cgroups_path:
            return
        directory = self.cgroup_root / ctr.cgroups_path.lstrip("/")
        directory.mkdir(parents=True, exist_ok=True)
        for name, value in zip(("cpuset.cpus", "cpuset.mems"), values, strict=True):
            (directory / name).write_text(f"{value or ''}\n")

    def _drop_task(self, ctr: Container) -> None:
        self._task.pop(ctr.id, None)
        self._unrepaired.pop(ctr.id, None)
        if self.cgroup_root is None or not ctr.cgroups_path:
            return
        directory = self.cgroup_root / ctr.cgroups_path.lstrip("/")
        for name in ("cpuset.cpus", "cpuset.mems"):
            with contextlib.suppress(FileNotFoundError):
                (directory / name).unlink()
        with contextlib.suppress(OSError):
            directory.rmdir()

    def _set_container(self, new: Container, *, source: str, plugin: str | None) -> None:
        old = self._containers.get(new.id)
        self._containers[new.id] = new
        if new.id in self._task:
            if new.id in self._starting:
                if cpus_and_mems(new) != self._task[new.id]:
                    self._note(f"container {new.id} is starting: update stored in its spec, not applied to its task",
                               logging.WARNING)
                    self.lost_updates.append(ContainerUpdate(new.id, cpus=new.cpus, mems=new.mems))
            elif new.state == ContainerState.RUNNING:
                self._set_task(new)
        before = cpus_and_mems(old) if old is not None else (None, None)
        after = cpus_and_mems(new)
        if before != after:
            change = ContainerChange(new.id, after[0], after[1], before[0], before[1], source, plugin)
            for queue in self._subscribers:
                queue.put_nowait(change)
            if self.on_change is not None:
                self.on_change(change)

    def _check_sets(self, cpus: CPUSet | None, mems: CPUSet | None) -> str | None:
        if cpus is not None and self.online_cpus is not None and not cpus <= self.online_cpus:
            return f"cpuset.cpus {cpus}: CPUs {cpus - self.online_cpus} are not online ({self.online_cpus})"
        if mems is not None and self.online_mems is not None and not mems <= self.online_mems:
            return f"cpuset.mems {mems}: nodes {mems - self.online_mems} are not online ({self.online_mems})"
        return None

    def _apply_updates(
        self, updates: Iterable[ContainerUpdate], *, source: str, plugin: str | None
    ) -> list[ContainerUpdate]:
        """Apply updates to stored containers; returns the failed ones (ignore_failure ones excluded)."""
        failed: list[ContainerUpdate] = []
        for update in updates:
            ctr = self._containers.get(update.container_id)
            problem = None
            if ctr is None:
                problem = "no such container"
            elif ctr.state == ContainerState.STOPPED:
                problem = f"container {ctr.id} is not running (stopped)"
            elif update.container_id in self.fail_updates:
                problem = "update failed (fail_updates)"
            else:
                problem = self._check_sets(update.cpus, update.mems)
            if problem is not None:
                self._note(f"failed to update container {update.container_id}: {problem}", logging.WARNING)
                if not update.ignore_failure:
                    failed.append(update)
                continue
            assert ctr is not None
            self._set_container(apply_update(ctr, update), source=source, plugin=plugin)
        return failed

    # ---------------------------------------------------------------- pod operations
    async def run_pod_sandbox(self, pod: Pod) -> EventResult:
        """Add a pod sandbox (RunPodSandbox)."""
        if pod.id in self._pods:
            raise RuntimeUsageError(f"pod sandbox {pod.id!r} already exists")
        async with self._locks.lifecycle(f"RunPodSandbox {pod.id}"):
            self._pods[pod.id] = pod
            dropped: list[str] = []
            error = await self._notify(Event.RUN_POD_SANDBOX, pod, None, dropped)
            return EventResult("RunPodSandbox", pod=pod, error=error, dropped=tuple(dropped), plugins=self._ids())

    add_pod_sandbox = run_pod_sandbox

    async def update_pod_sandbox(
        self, pod_id: str, resources: LinuxResources | None, overhead: LinuxResources | None = None
    ) -> EventResult:
        """UpdatePodSandbox + PostUpdatePodSandbox (NRI v0.10+; older runtimes send nothing)."""
        pod = self.pod(pod_id)
        async with self._locks.lifecycle(f"UpdatePodSandbox {pod_id}"):
            pod = dataclasses.replace(pod, resources=resources or pod.resources, overhead=overhead or pod.overhead)
            self._pods[pod_id] = pod
            dropped: list[str] = []
            if self.version < _V0_10:
                return EventResult("UpdatePodSandbox", pod=pod)
            for plugin in self._subscribed(Event.UPDATE_POD_SANDBOX):
                req = api_pb2.UpdatePodSandboxRequest(pod=convert.pod_to_proto(pod))
                if resources is not None:
                    convert.resources_to_proto(resources, req.linux_resources)
                if overhead is not None:
                    convert.resources_to_proto(overhead, req.overhead_linux_resources)
                try:
                    await self._send(plugin, Event.UPDATE_POD_SANDBOX, "UpdatePodSandbox", req,
                                     api_pb2.UpdatePodSandboxResponse, dropped)
                except RpcError as exc:
                    return EventResult("UpdatePodSandbox", pod=pod, error=f"plugin {plugin.id}: {_reason(exc)}")
            error = await self._notify(Event.POST_UPDATE_POD_SANDBOX, pod, None, dropped)
            return EventResult("UpdatePodSandbox", pod=pod, error=error, dropped=tuple(dropped), plugins=self._ids())

    async def stop_pod_sandbox(self, pod_id: str) -> EventResult:
        pod = self.pod(pod_id)
        async with self._locks.lifecycle(f"StopPodSandbox {pod_id}"):
            dropped: list[str] = []
            error = await self._notify(Event.STOP_POD_SANDBOX, pod, None, dropped)
            return EventResult("StopPodSandbox", pod=pod, error=error, dropped=tuple(dropped), plugins=self._ids())

    async def remove_pod_sandbox(self, pod_id: str) -> EventResult:
        pod = self.pod(pod_id)
        if any(c.pod_sandbox_id == pod_id for c in self._containers.values()):
            raise RuntimeUsageError(f"pod sandbox {pod_id!r} still has containers")
        async with self._locks.lifecycle(f"RemovePodSandbox {pod_id}"):
            dropped: list[str] = []
            error = await self._notify(Event.REMOVE_POD_SANDBOX, pod, None, dropped)
            del self._pods[pod_id]
            return EventResult("RemovePodSandbox", pod=pod, error=error, dropped=tuple(dropped), plugins=self._ids())

    def _ids(self) -> tuple[str, ...]:
        return tuple(p.id for p in self._plugins if not p.closed)

    # ---------------------------------------------------------------- container operations
    async def create_container(self, container: Container) -> EventResult:
        """CreateContainer (+ validation) then PostCreateContainer; the error fails the creation."""
        pod = self.pod(container.pod_sandbox_id)
        if container.id in self._containers:
            raise RuntimeUsageError(f"container {container.id!r} already exists")
        self._pid += 1
        ctr = dataclasses.replace(container, state=ContainerState.CREATED, created_at=time.time_ns(), pid=self._pid)
        async with self._locks.lifecycle(f"CreateContainer {container.id}"):
            result = await self._create(pod, ctr)
            if result.error is not None or result.container is None:
                return result
            dropped = list(result.dropped)
            error = await self._notify(Event.POST_CREATE_CONTAINER, pod, result.container, dropped)
            return dataclasses.replace(result, error=error, dropped=tuple(dropped))

    async def _create(self, pod: Pod, ctr: Container) -> EventResult:
        owners = Owners()
        merged: ContainerAdjustment | None = None
        updates: dict[str, ContainerUpdate] = {}
        dropped: list[str] = []
        called = list(self._plugins)
        req = api_pb2.CreateContainerRequest(pod=convert.pod_to_proto(pod), container=convert.container_to_proto(ctr))

        def failed(error: str) -> EventResult:
            return EventResult("CreateContainer", pod=pod, error=error, dropped=tuple(dropped), plugins=self._ids())

        for plugin in self._subscribed(Event.CREATE_CONTAINER):
            try:
                reply = await self._send(plugin, Event.CREATE_CONTAINER, "CreateContainer", req,
                                         api_pb2.CreateContainerResponse, dropped)
            except RpcError as exc:
                return failed(_reason(exc))
            if reply is None:
                continue
            assert isinstance(reply, api_pb2.CreateContainerResponse)
            try:
                if reply.HasField("adjust"):
                    adj = convert.adjustment_from_proto(reply.adjust, f"adjustment from {plugin.id}")
                    merged = merge_adjustment(merged, adj, ctr.id, plugin.id, owners)
                for pb in reply.update:
                    update = convert.update_from_proto(pb)
                    if update.container_id == ctr.id:
                        return failed(f'plugin "{plugin.id}" asked update of "{ctr.id}" during creation')
                    merge_update(updates, update, plugin.id, owners)
            except (ConversionError, OwnershipConflict) as exc:
                return failed(str(exc))
            if reply.evict:
                self._note(f"plugin {plugin.id} asked for evictions, which NRI never applies", logging.WARNING)
        created = apply_adjustment(ctr, merged) if merged is not None else ctr
        problem = self._check_sets(created.cpus, created.mems)
        if problem is not None:
            return failed(f"failed to create container {ctr.id}: {problem}")
        error = await self._validate(pod, ctr, merged, list(updates.values()), owners, called, dropped)
        if error is not None:
            return failed(error)
        cpus_owner = owners.simple.get((ctr.id, "CPUSetCPUs")) or owners.simple.get((ctr.id, "CPUSetMems"))
        self._set_container(created, source="adjustment" if cpus_owner else "create", plugin=cpus_owner)
        failures = self._apply_updates(updates.values(), source="update", plugin=None)  # containerd only logs these
        return EventResult(
            "CreateContainer",
            pod=pod,
            container=created,
            adjustment=merged,
            updates=tuple(updates.values()),
            failed_updates=tuple(failures),
            dropped=tuple(dropped),
            plugins=self._ids(),
        )

    async def _validate(
        self,
        pod: Pod,
        ctr: Container,
        merged: ContainerAdjustment | None,
        updates: list[ContainerUpdate],
        owners: Owners,
        called: list[_Plugin],
        dropped: list[str],
    ) -> str | None:
        validators = self._subscribed(Event.VALIDATE_CONTAINER_ADJUSTMENT) if self.version >= _V0_10 else []
        if not validators:
            return None
        req = api_pb2.ValidateContainerAdjustmentRequest(
            pod=convert.pod_to_proto(pod), container=convert.container_to_proto(ctr)
        )
        if merged is not None:
            convert.adjustment_to_proto(merged, req.adjust)
        for update in updates:
            convert.update_to_proto(update, req.update.add())
        owners.to_proto(req.owners)
        for plugin in called:
            req.plugins.add(name=plugin.name, index=plugin.idx)

        async def one(plugin: _Plugin) -> str | None:
            try:
                reply = await self._send(plugin, Event.VALIDATE_CONTAINER_ADJUSTMENT, "ValidateContainerAdjustment",
                                         req, api_pb2.ValidateContainerAdjustmentResponse, dropped)
            except RpcError as exc:
                return f"validator plugin {plugin.id} failed: {_reason(exc)}"
            if reply is None:
                return f"validator plugin {plugin.id} failed: closed"
            assert isinstance(reply, api_pb2.ValidateContainerAdjustmentResponse)
            if reply.reject:
                reason = reply.reason or "unknown rejection reason"
                return f'validator "{plugin.id}" rejected container adjustment, reason: {reason}'
            return None

        results = await asyncio.gather(*(one(p) for p in validators))
        return next((r for r in results if r is not None), None)

    async def start_container(self, container_id: str) -> EventResult:
        """StartContainer: create the task from the spec, StartContainer event, start the task
        (``start_delay``: updates in this window reach the spec only), PostStartContainer."""
        ctr = self.container(container_id)
        pod = self.pod(ctr.pod_sandbox_id)
        if ctr.state != ContainerState.CREATED:
            raise RuntimeUsageError(f"container {container_id!r} is {ctr.state.name.lower()}, not created")
        dropped: list[str] = []
        self._starting.add(container_id)
        try:
            self._set_task(ctr)  # NewTask: the cgroup gets the spec as it is now
            # Until the task runs, the container stays CREATED (what Synchronize reports), as in CRI.
            started = dataclasses.replace(ctr, state=ContainerState.RUNNING, started_at=time.time_ns())
            async with self._locks.lifecycle(f"StartContainer {container_id}"):
                error = await self._notify(Event.START_CONTAINER, pod, started, dropped)
            if error is None:
                if self.start_gate is not None:
                    await self.start_gate(container_id)
                elif self.start_delay > 0:
                    await asyncio.sleep(self.start_delay)
        finally:
            self._starting.discard(container_id)
        current = self._containers.get(container_id)
        if current is None or current.state != ContainerState.CREATED:
            return EventResult("StartContainer", pod=pod, error=f"container {container_id} was stopped while starting")
        # The task runs: from now on updates reach it (the state change moves no CPU: no notification).
        ctr = dataclasses.replace(current, state=ContainerState.RUNNING, started_at=started.started_at)
        self._containers[container_id] = ctr
        if container_id in self._task and cpus_and_mems(ctr) != self._task[container_id]:
            self._unrepaired[container_id] = time.monotonic()  # the task runs on a stale cpuset
        if error is None:
            async with self._locks.lifecycle(f"PostStartContainer {container_id}"):
                error = await self._notify(Event.POST_START_CONTAINER, pod, ctr, dropped)
        return EventResult("StartContainer", pod=pod, container=ctr, error=error, dropped=tuple(dropped),
                           plugins=self._ids())

    async def update_container(self, container_id: str, resources: LinuxResources) -> EventResult:
        """A CRI UpdateContainerResources: UpdateContainer then PostUpdateContainer.

        A plugin's update of this same container overrides the requested
        resources field by field (that is how a cpuset survives ``crictl update``).
        """
        ctr = self.container(container_id)
        pod = self.pod(ctr.pod_sandbox_id)
        async with self._locks.lifecycle(f"UpdateContainer {container_id}"):
            owners = Owners()
            updates: dict[str, ContainerUpdate] = {}
            dropped: list[str] = []
            req = api_pb2.UpdateContainerRequest(pod=convert.pod_to_proto(pod), container=convert.container_to_proto(ctr))
            convert.resources_to_proto(resources, req.linux_resources)
            for plugin in self._subscribed(Event.UPDATE_CONTAINER):
                try:
                    reply = await self._send(plugin, Event.UPDATE_CONTAINER, "UpdateContainer", req,
                                             api_pb2.UpdateContainerResponse, dropped)
                except RpcError as exc:
                    return EventResult("UpdateContainer", pod=pod, container=ctr, error=_reason(exc))
                if reply is None:
                    continue
                assert isinstance(reply, api_pb2.UpdateContainerResponse)
                try:
                    for pb in reply.update:
                        merge_update(updates, convert.update_from_proto(pb), plugin.id, owners)
                except (ConversionError, OwnershipConflict) as exc:
                    return EventResult("UpdateContainer", pod=pod, container=ctr, error=str(exc))
            own = updates.pop(container_id, None)
            requested = dataclasses.replace(ctr, resources=resources)
            target = apply_update(requested, own) if own is not None else requested
            problem = self._check_sets(target.cpus, target.mems)
            if problem is not None:
                return EventResult("UpdateContainer", pod=pod, container=ctr, error=problem)
            self._set_container(target, source="update", plugin=None)
            failures = self._apply_updates(updates.values(), source="update", plugin=None)
            required = [u for u in failures if not u.ignore_failure]
            error = f"failed to update containers {', '.join(u.container_id for u in required)}" if required else None
            if error is None:
                error = await self._notify(Event.POST_UPDATE_CONTAINER, pod, target, dropped)
            applied = (*((own,) if own is not None else ()), *updates.values())
            return EventResult("UpdateContainer", pod=pod, container=target, updates=applied,
                               failed_updates=tuple(failures), error=error, dropped=tuple(dropped), plugins=self._ids())

    async def stop_container(self, container_id: str) -> EventResult:
        """StopContainer; the plugins' updates (e.g. CPUs given back to others) are applied."""
        ctr = self.container(container_id)
        pod = self.pod(ctr.pod_sandbox_id)
        async with self._locks.lifecycle(f"StopContainer {container_id}"):
            ctr = dataclasses.replace(ctr, state=ContainerState.STOPPED, finished_at=time.time_ns())
            self._set_container(ctr, source="stop", plugin=None)
            owners = Owners()
            updates: dict[str, ContainerUpdate] = {}
            dropped: list[str] = []
            req = api_pb2.StopContainerRequest(pod=convert.pod_to_proto(pod), container=convert.container_to_proto(ctr))
            for plugin in self._subscribed(Event.STOP_CONTAINER):
                try:
                    reply = await self._send(plugin, Event.STOP_CONTAINER, "StopContainer", req,
                                             api_pb2.StopContainerResponse, dropped)
                except RpcError as exc:
                    return EventResult("StopContainer", pod=pod, container=ctr, error=_reason(exc))
                if reply is None:
                    continue
                assert isinstance(reply, api_pb2.StopContainerResponse)
                try:
                    for pb in reply.update:
                        merge_update(updates, convert.update_from_proto(pb), plugin.id, owners)
                except (ConversionError, OwnershipConflict) as exc:
                    return EventResult("StopContainer", pod=pod, container=ctr, error=str(exc))
            failures = self._apply_updates(updates.values(), source="update", plugin=None)
            required = [u for u in failures if not u.ignore_failure]
            error = f"failed to update containers {', '.join(u.container_id for u in required)}" if required else None
            return EventResult("StopContainer", pod=pod, container=ctr, updates=tuple(updates.values()),
                               failed_updates=tuple(failures), error=error, dropped=tuple(dropped), plugins=self._ids())

    def exit_container(self, container_id: str) -> None:
        """The container's process exits on its own: stopped, task and cgroup gone, no NRI event yet
        (containerd tells plugins later, with StopContainer from its exit handler or the kubelet)."""
        ctr = self.container(container_id)
        self._containers[container_id] = dataclasses.replace(ctr, state=ContainerState.STOPPED,
                                                             finished_at=time.time_ns())
        self._drop_task(ctr)

    async def remove_container(self, container_id: str) -> EventResult:
        ctr = self.container(container_id)
        pod = self.pod(ctr.pod_sandbox_id)
        async with self._locks.lifecycle(f"RemoveContainer {container_id}"):
            dropped: list[str] = []
            error = await self._notify(Event.REMOVE_CONTAINER, pod, ctr, dropped)
            del self._containers[container_id]
            self._drop_task(ctr)
            return EventResult("RemoveContainer", pod=pod, container=ctr, error=error, dropped=tuple(dropped),
                               plugins=self._ids())


class _Refused(_Fatal):
    """Registration refused: answered with an error, the connection is left open."""


def _reason(exc: BaseException) -> str:
    if isinstance(exc, RpcError):
        return f"rpc error: code = {code_name(exc.code)} desc = {exc.message}"
    return str(exc)


def _shrink(pods: int, ctrs: int, exc: OversizedMessageError) -> tuple[int, int]:
    """containerd's rule for the next Synchronize chunk after an oversized attempt."""
    if pods + ctrs <= _MIN_SYNC_OBJECTS:
        raise _Fatal("failed to synchronize plugin with split messages")
    if exc.length <= exc.limit:
        raise _Fatal("failed to synchronize plugin with split messages")
    factor = min(exc.limit / exc.length, 0.9)
    pods, ctrs = int(pods * factor), int(ctrs * factor)
    if pods + ctrs < _MIN_SYNC_OBJECTS:
        pods = ctrs = _MIN_SYNC_OBJECTS // 2
    return pods, ctrs
