"""The node agent: policy + NRI plugin + DRA kubelet plugin + slices + metrics, one event loop.

``Agent`` builds the components (docs/architecture.md, "The agent's components") and supervises
them; it decides nothing itself. Ordering rules (why the code looks like this):
- Every policy operation runs under one ``asyncio.Lock`` (``NodeState.lock``, shared with the
  DRA driver), so operations are serialized and each returns its ``Changes``.
- The ``ChangeRouter`` alone decides how a change reaches the runtime: in the reply of the NRI
  event that caused it, or (claims prepared or released, reloads, machine changes, repairs)
  handed to the ``UpdatePusher`` at once, which delivers it the way the runtime's NRI version
  allows (``agent/delivery.py``): an unsolicited UpdateContainers, or the cgroup written at once
  and the update carried in the next event reply.
- Start-up: take every local resource first (listen ports and the /state socket, directories,
  the checkpoint restored into the policy), then serve the kubelet, then connect to the runtime,
  whose Synchronize rebuilds container placement (``Policy.sync``). Nothing registers before all
  of it is held.
- The machine may change under the agent (CPU/NUMA hotplug, the isolated set):
  ``MachineWatcher`` notices, ``MachineFollower`` re-places the containers (pushed at once) and
  rebuilds the devices, which the ``DevicePublisher`` publishes without the offline CPUs.
- Agreement with the node and the scheduler (docs/agent.md): updates that overlapped a
  container's start are sent again after PostStartContainer (``StartWindow``); cgroups are
  checked against the assignments (``DriftChecker``); the slices offer every device CPU but
  exclusive grants and a shared floor, recomputed right after each placement change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from topodra.agent.claims import MeteredDriver, claim_fetchers, kube_client
from topodra.agent.config import AgentConfig
from topodra.agent.cpumanager import CPUManagerError, check_cpu_manager
from topodra.agent.delivery import CgroupWriter, ReplyDelivery
from topodra.agent.drift import CgroupReader, DriftChecker
from topodra.agent.hotplug import MachineFollower
from topodra.agent.http import HttpEndpoint, json_route
from topodra.agent.observe import probe_routes, refresh_gauges, start_endpoints
from topodra.agent.parts import NodeParts
from topodra.agent.pusher import UpdatePusher
from topodra.agent.reload import ConfigReloader
from topodra.agent.state import AgentError, NodeState, load_topology
from topodra.agent.tasks import Tasks
from topodra.policy import Policy
from topodra.policy.api import Changes
from topodra.topology.model import Topology

if TYPE_CHECKING:
    from topodra.agent.hotplug import MachineWatcher
    from topodra.dra.kubeletplugin import KubeletPlugin
    from topodra.dra.status import ClaimStatus
    from topodra.kube.client import KubeClient
    from topodra.nri.stub import Stub

__all__ = ["Agent", "AgentError", "load_topology"]

log = logging.getLogger(__name__)


def check_kubelet(cfg: AgentConfig) -> None:
    """Refuse to start beside a kubelet whose CPU manager pins CPUs itself (agent/cpumanager.py)."""
    try:
        check_cpu_manager(cfg.kubelet_config_file, cfg.cpu_manager_state)
    except CPUManagerError as err:
        raise AgentError(str(err)) from None


class Agent:
    """One node's topodra; ``await agent.start()``, then ``await agent.stop()``.

    Its components, each with one job: ``node`` (the state and the lock), ``nri`` (the NRI
    handlers), ``router`` (reply or push), ``publisher`` (devices and offer), ``claims`` (the
    DRA driver's view), ``follower`` (hotplug), ``reloader`` (configuration), ``notes`` (events),
    ``metrics``; ``drift`` and the runtime connection ``stub`` once started."""

    def __init__(
        self,
        config: AgentConfig,
        *,
        config_path: Path | None = None,
        topology: Topology | None = None,
        kube: KubeClient | None = None,
        reload_interval: float = 2.0,
        drift_interval: float = 30.0,
        cgroup_root: Path | None = None,
        watch_machine: bool | None = None,
    ) -> None:
        """``cgroup_root``: where the host's cgroups are (default ``<sysfsRoot>/sys/fs/cgroup``);
        ``drift_interval``: seconds between full cpuset drift checks; ``watch_machine``: follow
        CPU hotplug (``hotplug`` config; default: only when the agent reads the machine itself,
        not for a ``topology`` handed in by a test or the playground)."""
        self._watch_machine = topology is None if watch_machine is None else watch_machine
        self.node = NodeState.build(config, topology or load_topology(config), str(config_path or "the configuration"))
        parts = self.parts = NodeParts.build(self.node)
        self.metrics, self.notes, self.nri = parts.metrics, parts.notes, parts.nri
        self.router, self.publisher, self.claims = parts.router, parts.publisher, parts.claims
        self.reloader = ConfigReloader(self.node, config_path, self.metrics, self.notes)
        self.follower = MachineFollower(self.node, self.metrics, self.notes)
        self.tasks = Tasks()
        self._kube = kube
        self._own_kube = False
        self.claim_status: ClaimStatus | None = None  # status.devices of prepared claims
        self.kubelet_plugin: KubeletPlugin | None = None
        self.stub: Stub | None = None
        self.drift: DriftChecker | None = None
        self.watcher: MachineWatcher | None = None
        self.http: HttpEndpoint | None = None
        self.state_http: HttpEndpoint | None = None
        self._stop = asyncio.Event()
        self._reload_interval = reload_interval
        self._drift_interval = drift_interval
        self._cgroup_root = cgroup_root if cgroup_root is not None else config.sysfs_root / "sys" / "fs" / "cgroup"
        self.started = asyncio.Event()

    @property
    def policy(self) -> Policy:
        return self.node.policy

    @property
    def events(self) -> list[str]:
        """The recent notable events, oldest first, each as "HH:MM:SS text" (UI, /state)."""
        return self.notes.events

    # --- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        """Acquire every local resource (ports, sockets, directories, checkpoint) first, then
        register with the kubelet and the runtime: a node resource that is taken fails the start
        before any peer has seen the agent. A failed start releases what it took."""
        cfg = self.node.config
        check_kubelet(cfg)
        if cfg.nri.enabled:
            await self._warm_up()
        try:
            state_routes = {"/state": json_route(self.state), "/state/nri": json_route(self.nri_timings)}
            routes = probe_routes(self.metrics_page, self.healthy, self.ready)
            self.http, self.state_http = await start_endpoints(cfg, routes, state_routes)
            if cfg.dra.enabled:
                await self._start_dra()
            if cfg.nri.enabled:
                self._start_nri()
        except BaseException:
            await self.stop()
            raise
        if self.reloader.path is not None:
            self.tasks.spawn(self.reloader.watch(self._stop, self._reload_interval, self.reload), "config-watch")
        self._start_watcher()
        self.started.set()
        self.notes.note(
            f"agent started on node {cfg.node_name} ({len(self.node.topology.cpus)} CPUs, {len(self.node.devices)} devices)"
        )

    async def _warm_up(self) -> None:
        """The create path run on a scratch node first (agent/warmup.py): the first containers
        after a start are answered as fast as the later ones."""
        from topodra.agent.warmup import scratch_node, warm_up

        try:
            scratch = scratch_node(self.node.config, self.node.topology)
        except AgentError as err:  # it holds for this agent: only a bug gets here
            log.warning("NRI warm-up skipped: %s", err)
            return
        await warm_up(scratch)

    async def _start_dra(self) -> None:
        from topodra.dra.kubeletplugin import KubeletPlugin, PluginPaths
        from topodra.dra.status import kube_claim_status

        cfg, node = self.node.config, self.node
        if self._kube is None:
            self._kube, self._own_kube = kube_client(cfg), True
        kube = self._kube
        fetch, list_claims = claim_fetchers(kube)
        for directory in (cfg.state_dir, cfg.cdi_dir):
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise AgentError(f"cannot create {directory}: {err.strerror or err}") from None
        self.claim_status = self.follower.claim_status = kube_claim_status(
            kube, node_of=node.node_of(), online=node.topology.online, observe=self.metrics.claim_status_written
        )
        self.tasks.spawn(self.claim_status.writer.run(self._stop), "claim-status")
        driver = MeteredDriver(
            policy=self.claims, lock=node.lock, fetch_claim=fetch, list_claims=list_claims, cdi_dir=cfg.cdi_dir,
            checkpoint_path=cfg.checkpoint_path, devices=node.devices, pool=cfg.node_name,
            on_changes=self.claims.changed, status=self.claim_status,
        )
        driver.metrics = self.metrics
        self.claims.driver = self.publisher.driver = driver
        await self._restore(driver)
        self.kubelet_plugin = KubeletPlugin(driver, PluginPaths(kubelet_root=cfg.kubelet_root), health=self.publisher.device_health)
        self.publisher.kubelet_plugin = self.kubelet_plugin
        await self.kubelet_plugin.start()
        if cfg.dra.publish_slices:
            from topodra.dra.reconciler import SliceReconciler

            await self._node_allocatable(kube)
            reconciler = SliceReconciler(
                kube, cfg.node_name, self.publisher.offered_devices(), publish_delay=cfg.dra.publish_delay,
                homes=self.publisher.home_devices,
            )
            self.publisher.reconciler = reconciler
            placed = self.nri.placed if cfg.nri.enabled else None
            self.tasks.spawn(self.publisher.publish(reconciler, placed, self._stop), "slices")

    async def _node_allocatable(self, kube: KubeClient) -> None:
        """Whether the slices carry ``nodeAllocatableResourceMappings`` (``devices.nodeAllocatable``;
        ``auto``: a dry-run probe of the API server), said in one line."""
        from topodra.dra.nodealloc import probe_node_allocatable

        switch = self.node.config.devices.node_allocatable
        if switch == "auto":
            result = await probe_node_allocatable(kube, self.node.config.node_name)
            self.publisher.probed(result.publish)
            self.notes.note(result.line)
        else:
            self.notes.note(f"nodeAllocatableResourceMappings: {'published' if switch == 'on' else 'not published'} (devices.nodeAllocatable: {switch})")

    async def _restore(self, driver: MeteredDriver) -> None:
        """The prepared claims from the checkpoint, back in the policy (checks relaxed meanwhile)."""
        self.node.restoring = True
        try:
            report = await driver.restore()
        except Exception as err:
            raise AgentError(f"cannot restore prepared claims from {self.node.config.checkpoint_path}: {err}") from err
        finally:
            self.node.restoring = False
        if report.recovery:
            self.metrics.checkpoint_recoveries.labels(report.recovery).inc()
            self.notes.note(f"checkpoint damaged, repaired ({report.recovery}): {'; '.join(report.problems)}")
        if report.restored:
            self.notes.note(f"restored {len(report.restored)} prepared claim(s) from the checkpoint")

    def _start_nri(self) -> None:
        from topodra.nri.stub import Stub

        cfg = self.node.config
        self.stub = stub = Stub(self.nri, socket_path=str(cfg.nri.socket), name=cfg.nri.plugin_name, idx=cfg.nri.plugin_index)
        router, proc = self.router, cfg.sysfs_root / "proc"
        replies = ReplyDelivery(CgroupWriter(self._cgroup_root, proc_root=proc), locate=router.cgroup_of, defer=router.hold)
        self.drift = DriftChecker(CgroupReader(self._cgroup_root, proc_root=proc), router, interval=self._drift_interval)
        pusher = UpdatePusher(
            send=router.send, lookup=self.node.pushable, lock=self.node.lock, on_sent=router.counted,
            on_sending=router.sending, unapplied=self.drift.unapplied,
        )
        router.attach(stub, pusher, self.drift, replies)
        self.tasks.spawn(pusher.run(), "pusher")
        self.tasks.spawn(self.drift.run(self._stop), "drift")
        self.tasks.spawn(stub.run(), "nri")

    def _start_watcher(self) -> None:
        from topodra.agent.hotplug import MachineWatcher, watch_root

        cfg = self.node.config
        root = watch_root(cfg.topology, cfg.sysfs_root) if cfg.hotplug.enabled and self._watch_machine else None
        if root is None:
            return
        self.watcher = MachineWatcher(root, cfg.hotplug.interval, self._machine_changed)
        self.tasks.spawn(self.watcher.run(self._stop), "hotplug")

    async def stop(self) -> None:
        self._stop.set()
        self.parts.after.run()  # the notes' log lines and the latencies left
        if self.stub is not None:
            with contextlib.suppress(Exception):
                await self.stub.stop()
        await self.tasks.cancel()
        if self.kubelet_plugin is not None:
            await self.kubelet_plugin.stop()
        for endpoint in {id(e): e for e in (self.http, self.state_http) if e is not None}.values():
            await endpoint.stop()
        self.http = self.state_http = None
        if self._own_kube and self._kube is not None:
            with contextlib.suppress(Exception):
                await self._kube.close()

    async def run_forever(self) -> None:
        await self.start()
        try:
            await self._stop.wait()
        finally:
            await self.stop()

    def request_stop(self) -> None:
        self._stop.set()

    # --- the machine and the configuration changing ------------------------------------------------
    async def _machine_changed(self) -> bool:
        """The hotplug files changed: re-read the machine (off the loop) and follow it."""
        try:
            topology = await asyncio.to_thread(load_topology, self.node.config)
        except AgentError as err:  # a tree caught half-way through a change: the next poll retries
            log.warning("the machine changed but cannot be read yet: %s", err)
            return False
        await self.follow_machine(topology)
        return True

    async def follow_machine(self, topology: Topology) -> Changes | None:
        """Follow a re-read machine: the policy re-places every container (pushed at once), the
        devices of offline CPUs are withdrawn from the slices and reported Unhealthy, claims
        holding an offline CPU are reported. None when no policy fits the new machine (the
        agent then keeps the old one and says so)."""
        placed = await self.follower.place(topology)
        if placed is None:
            return None
        before, changes = placed
        self.router.record(changes, full=True)
        self.router.push(changes)  # moved containers first: the devices can wait (Prepare refuses offline CPUs)
        devices = await self.follower.devices(before, len(changes))
        if devices is not None:
            self.publisher.set_devices(devices)
            self.publisher.health_changed()
        return changes

    async def reload(self, new: AgentConfig | None = None) -> Changes:
        """Apply a changed configuration file (or ``new``); one that a fresh start would refuse
        (``check_on_machine``, the same checks as ``--check``) is logged and ignored."""
        reloaded = await self.reloader.reload(new)
        if reloaded is None:
            return {}
        self.router.record(reloaded.changes, full=True)
        self.publisher.set_devices(reloaded.devices)
        self.router.push(reloaded.changes)
        return reloaded.changes

    # --- observability ---------------------------------------------------------------------------------
    def metrics_page(self) -> tuple[int, str, bytes]:
        """/metrics: the gauges refreshed, every metric rendered."""
        node = self.node
        refresh_gauges(self.metrics, node.policy, node.topology, self.publisher.device_health())
        return 200, "text/plain; version=0.0.4; charset=utf-8", self.metrics.render()

    def healthy(self) -> tuple[bool, str]:
        problems = self.tasks.problems()
        return (not problems, "; ".join(problems) or "ok")

    def ready(self) -> tuple[bool, str]:
        problems = []
        if self.node.config.nri.enabled and (self.stub is None or not self.stub.synchronized):
            problems.append("NRI runtime not synchronized")
        if self.kubelet_plugin is not None and not self.kubelet_plugin.registered.is_set():
            problems.append("kubelet has not registered the DRA plugin")
        return (not problems, "; ".join(problems) or "ok")

    def state(self) -> dict[str, Any]:
        """A JSON view of everything placed (``/state`` and the playground)."""
        node, policy, pusher = self.node, self.node.policy, self.router.pusher
        return {
            "node": node.config.node_name,
            "reserved": str(policy.reserved_cpus),
            "claims": {uid: str(c) for uid, c in sorted(policy.claims().items())},
            "containers": {cid: {"cpus": str(a.cpus), "mems": str(a.mems)} for cid, a in sorted(policy.assignments().items())},
            "offline_cpus": str(node.topology.offline),
            "offline_claims": {uid: str(c) for uid, c in policy.offline_claims().items()},
            "offer": str(self.publisher.offer),
            "unhealthy_devices": {h.name: h.message for h in self.publisher.device_health() if not h.healthy},
            "delivery": self.router.delivery.as_dict(),
            "pending_pushes": sorted(pusher.pending) if pusher is not None else [],
            "push_idle": pusher.idle if pusher is not None else True,
            "events": self.notes.recent(50),
        }

    def nri_timings(self) -> dict[str, Any]:
        """The NRI stub's own time per answered call, latest last (``/state/nri``): what the
        benchmark sets beside the runtime's round trip."""
        out: dict[str, list[float]] = {}
        if self.stub is not None:
            for method, seconds in self.stub.handler_times:
                out.setdefault(method, []).append(seconds)
        return {"handler_seconds": out}
