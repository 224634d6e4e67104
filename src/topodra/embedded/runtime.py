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

``EmbeddedRuntime`` holds the settings and wires components with one job each:

* ``runtime_store.ContainerStore``: pods, containers, tasks, start-window records,
  cgroup files and change subscribers;
* ``runtime_plugins.PluginHost``: accepting and launching plugins, registration,
  Configure and Synchronize; ``runtime_plugins.RuntimeService`` serves the
  plugin's Runtime service (RegisterPlugin, UpdateContainers);
* ``runtime_events.EventDelivery``: sending events to the subscribed plugins;
* ``runtime_cri.CRIOperations``: the CRI calls (pod sandboxes and containers),
  which use the store and the plugins;
* ``nrilocks.NRILocks``: containerd's two NRI locks;
* ``runtime_types``: what they share (records, settings, the log).
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from pathlib import Path

from topodra import __version__
from topodra.cpuset import CPUSet
from topodra.embedded.nrilocks import NRILocks
from topodra.embedded.runtime_cri import CRIOperations
from topodra.embedded.runtime_events import EventDelivery
from topodra.embedded.runtime_plugins import PluginHost
from topodra.embedded.runtime_store import ContainerStore
from topodra.embedded.runtime_types import (
    V0_12_1,
    ContainerChange,
    EventResult,
    PluginInfo,
    RuntimeJournal,
    RuntimeUsageError,
)
from topodra.nri.types import Container, ContainerUpdate, LinuxResources, Pod
from topodra.nri.version import NRIVersion

__all__ = ["ContainerChange", "EmbeddedRuntime", "EventResult", "PluginInfo", "RuntimeUsageError"]


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

        The settings stay plain attributes the components read when they act, so a
        test may change them while the runtime runs (``online_cpus``, ``start_gate``...).
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
        journal = RuntimeJournal()
        #: human-readable record of what happened, like a runtime's log
        self.log: list[str] = journal.lines
        #: pods, containers and their tasks as this runtime holds them (``pods()``, ``container(id)``,
        #: ``applied(id)``, ``subscribe()``...)
        self.store = ContainerStore(self, journal)
        #: updates stored in a starting container's spec that its task never got
        self.lost_updates: list[ContainerUpdate] = self.store.lost_updates
        #: seconds from the end of a start whose update was lost to the next update of its task
        self.repair_delays: list[float] = self.store.repair_delays
        #: containerd's local NRI lock and the NRI adaptation's, in this NRI version's order
        #: (tests watch who waits)
        self.nri_locks = NRILocks(
            inverted_updates=self.version < V0_12_1, serialize_updates=containerd_lock, between=between_locks
        )
        self._host = PluginHost(self, self.store, self.nri_locks, journal)
        self._cri = CRIOperations(
            self, self.store, EventDelivery(self, self._host, journal), self.nri_locks, journal
        )

    @property
    def deadlocks(self) -> list[str]:
        """The lock inversions that hung this runtime (empty: it never hung)."""
        return list(self.nri_locks.deadlocks)

    @property
    def unrepaired(self) -> frozenset[str]:
        """Running containers whose task kept a stale cpuset from their start and got no update since."""
        return self.store.unrepaired

    # ---------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Launch pre-installed plugins (``plugin_dir``), then listen on ``socket_path``."""
        await self._host.start()

    async def stop(self) -> None:
        """Stop listening, close every plugin (launched ones are killed)."""
        await self._host.stop()

    async def __aenter__(self) -> EmbeddedRuntime:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ---------------------------------------------------------------- plugins
    @property
    def plugins(self) -> list[PluginInfo]:
        """Synchronized, connected plugins in invocation (index) order."""
        return self._host.plugins

    def all_plugins(self) -> list[PluginInfo]:
        """Every plugin connection ever accepted, including closed and refused ones."""
        return self._host.all_plugins()

    async def wait_for_plugins(self, count: int = 1, *, timeout: float = 5.0) -> list[PluginInfo]:
        """Wait until ``count`` plugins are connected and synchronized."""
        return await self._host.wait_for_plugins(count, timeout=timeout)

    async def wait_for_plugin_gone(self, plugin_id: str, *, timeout: float = 5.0) -> PluginInfo:
        """Wait until the plugin ``NN-name`` is closed; returns its final info."""
        return await self._host.wait_for_plugin_gone(plugin_id, timeout=timeout)

    async def attach(self, sock: socket.socket, *, name: str, idx: str) -> None:
        """Serve a pre-connected plugin socket (what a runtime-launched plugin gets on fd 3)."""
        await self._host.attach(sock, name=name, idx=idx)

    async def launch_plugin(
        self, argv: Sequence[str], *, name: str, idx: str, stderr: int | None = None
    ) -> asyncio.subprocess.Process:
        """Exec ``argv`` as a launched plugin: a socketpair end and exactly three NRI variables.

        The runtime's end is served like containerd serves ``NN-name`` plugins
        from its plugin directory; returns once the plugin is synchronized (or
        has failed to start). Launched plugins are killed by ``stop()``.
        """
        return await self._host.launch_plugin(argv, name=name, idx=idx, stderr=stderr)

    # ---------------------------------------------------------------- CRI operations
    async def run_pod_sandbox(self, pod: Pod) -> EventResult:
        """Add a pod sandbox (RunPodSandbox)."""
        return await self._cri.run_pod_sandbox(pod)

    add_pod_sandbox = run_pod_sandbox

    async def update_pod_sandbox(
        self, pod_id: str, resources: LinuxResources | None, overhead: LinuxResources | None = None
    ) -> EventResult:
        """UpdatePodSandbox + PostUpdatePodSandbox (NRI v0.10+; older runtimes send nothing)."""
        return await self._cri.update_pod_sandbox(pod_id, resources, overhead)

    async def stop_pod_sandbox(self, pod_id: str) -> EventResult:
        return await self._cri.stop_pod_sandbox(pod_id)

    async def remove_pod_sandbox(self, pod_id: str) -> EventResult:
        return await self._cri.remove_pod_sandbox(pod_id)

    async def create_container(self, container: Container) -> EventResult:
        """CreateContainer (+ validation) then PostCreateContainer; the error fails the creation."""
        return await self._cri.create_container(container)

    async def start_container(self, container_id: str) -> EventResult:
        """StartContainer: create the task from the spec, StartContainer event, start the task
        (``start_delay``: updates in this window reach the spec only), PostStartContainer."""
        return await self._cri.start_container(container_id)

    async def update_container(self, container_id: str, resources: LinuxResources) -> EventResult:
        """A CRI UpdateContainerResources: UpdateContainer then PostUpdateContainer.

        A plugin's update of this same container overrides the requested
        resources field by field (that is how a cpuset survives ``crictl update``).
        """
        return await self._cri.update_container(container_id, resources)

    async def stop_container(self, container_id: str) -> EventResult:
        """StopContainer; the plugins' updates (e.g. CPUs given back to others) are applied."""
        return await self._cri.stop_container(container_id)

    def exit_container(self, container_id: str) -> None:
        """The container's process exits on its own: stopped, task and cgroup gone, no NRI event yet
        (containerd tells plugins later, with StopContainer from its exit handler or the kubelet)."""
        self._cri.exit_container(container_id)

    async def remove_container(self, container_id: str) -> EventResult:
        return await self._cri.remove_container(container_id)
