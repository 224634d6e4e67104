"""The node agent: policy + NRI plugin + DRA kubelet plugin + slices + metrics, one event loop.

Ordering rules (why the code looks like this):
- Every policy operation runs under one ``asyncio.Lock`` (shared with the DRA
  driver), so operations are serialized and each returns its ``Changes``.
- Changes caused by an NRI event travel in that event's reply (adjustment of
  the container being created, updates of the others). Changes caused by
  anything else (claim prepared or released, configuration reload, restart
  corrections) are pushed at once with an unsolicited UpdateContainers by the
  ``UpdatePusher``, which the NRI stub only sends when no event reply is
  outstanding (containerd holds its lock while delivering events).
- Start-up: take every local resource first (listen ports and the /state
  socket, directories, the checkpoint restored into the policy), then serve
  the kubelet, then connect to the runtime, whose Synchronize rebuilds
  container placement (``Policy.sync``). Nothing registers before all of
  it is held.
- The machine may change under the agent (CPU/NUMA hotplug, the isolated set):
  ``MachineWatcher`` notices, ``follow_machine`` re-reads it and runs
  ``Policy.follow`` under the lock; the moved containers are pushed at once,
  the slices republished without the offline CPUs, device health updated.
- Agreement with the node and the scheduler (docs/agent.md): updates that
  overlapped a container's start are sent again after PostStartContainer;
  cgroups are checked against the assignments (``DriftChecker``); the slices
  offer every device CPU but exclusive grants and a shared floor, recomputed
  right after each placement change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

from topodra.agent.config import AgentConfig, ConfigError, load_config
from topodra.agent.config_check import check_on_machine
from topodra.agent.container_request import container_request
from topodra.agent.delivery import CgroupWriter, Delivery, DeliveryChoice, ReplyDelivery, choose_delivery
from topodra.agent.drift import CgroupReader, DriftChecker
from topodra.agent.http import HttpEndpoint, Route, json_route, parse_listen
from topodra.agent.metrics import AgentMetrics
from topodra.agent.pusher import UpdatePusher
from topodra.cpuset import CPUSet
from topodra.dra.devices import (
    Device,
    build_devices,
    follow_devices,
    offer_devices,
    offered_cpus,
    ordered_cpus,
)
from topodra.dra.driver import (
    ClaimCheckError,
    ClaimEnvError,
    ClaimRef,
    Driver,
    PrepareResult,
    UnprepareResult,
)
from topodra.dra.health import DeviceHealth, device_health
from topodra.faults import crash_point
from topodra.nri.plugin import Plugin
from topodra.nri.types import (
    Container,
    ContainerState,
    ContainerUpdate,
    CreateContainerResult,
    Event,
    LinuxResources,
    Placement,
    PlacementUpdates,
    Pod,
    placement_adjustment,
    placement_update,
)
from topodra.nri.version import RuntimeInfo
from topodra.policy.api import Assignment, Changes, ContainerRequest, PolicyError
from topodra.topology.follow import carry_numbers
from topodra.topology.model import CoreType, CPUInfo, Topology

__all__ = ["Agent", "AgentError", "load_topology"]

log = logging.getLogger(__name__)

#: Seconds a claim's decided-but-unpushed change keeps the drift check off its containers (the
#: checkpoint write between them takes milliseconds).
UNPUSHED_GRACE: Final = 5.0

#: Events the agent subscribes to (all exist in every NRI version; the
#: notification ones arrive as StateChange on runtimes before v0.12).
#: PostStartContainer closes the start window: an update that reached a
#: container while it was starting may never have reached its task.
EVENTS = frozenset(
    {
        Event.RUN_POD_SANDBOX,
        Event.STOP_POD_SANDBOX,
        Event.REMOVE_POD_SANDBOX,
        Event.CREATE_CONTAINER,
        Event.POST_START_CONTAINER,
        Event.UPDATE_CONTAINER,
        Event.STOP_CONTAINER,
        Event.REMOVE_CONTAINER,
    }
)


class AgentError(RuntimeError):
    """The agent cannot start (bad topology, config, sockets...)."""


def load_topology(config: AgentConfig) -> Topology:
    """The machine to manage: sysfs under ``sysfsRoot``, or the machine ``topology`` names."""
    from topodra.topology.errors import TopologyError
    from topodra.topology.machine import load_machine

    try:
        return load_machine(config.topology, host_root=config.sysfs_root)
    except TopologyError as err:
        raise AgentError(f"cannot read the topology ({config.topology or config.sysfs_root}): {err}") from err


class _MeteredDriver(Driver):
    """The DRA driver with Prepare/Unprepare counts and latency recorded."""

    metrics: AgentMetrics

    async def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        t0 = time.perf_counter()
        out = await super().prepare(claims)
        self.metrics.prepare_seconds.observe(time.perf_counter() - t0)
        for r in out.values():
            self.metrics.prepare_total.labels("error" if r.error else "ok").inc()
        return out

    async def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, UnprepareResult]:
        t0 = time.perf_counter()
        out = await super().unprepare(claims)
        self.metrics.unprepare_seconds.observe(time.perf_counter() - t0)
        for r in out.values():
            self.metrics.unprepare_total.labels("error" if r.error else "ok").inc()
        return out


class _OfferedPicks:
    """The policy as the DRA driver sees it: grouped devices pick among the offered CPUs first
    (the shared floor and exclusive grants are not for claims), all of the device when the
    offer cannot hold the claim (an allocation made from older slices)."""

    def __init__(self, agent: Agent) -> None:
        self._agent = agent

    def claim(self, claim_id: str, cpus: CPUSet) -> Changes:
        # Restoring after a restart: a claim's CPUs may be offline now (kept for it, reported).
        return self._agent.decided(self._agent.policy.claim(claim_id, cpus, keep_offline=self._agent.restoring))

    def release(self, claim_id: str) -> Changes:
        return self._agent.decided(self._agent.policy.release(claim_id))

    def claimed(self, claim_id: str) -> CPUSet | None:
        return self._agent.policy.claimed(claim_id)

    def pick(self, count: int, within: CPUSet, *, prefer: CoreType | None = None) -> CPUSet:
        policy = self._agent.policy
        try:
            return policy.pick(count, within & self._agent.offer, prefer=prefer)
        except PolicyError:
            return policy.pick(count, within, prefer=prefer)


class _AgentPlugin(Plugin):
    """NRI handlers: each takes the policy lock, runs one policy operation, answers its changes."""

    refusals = (ClaimEnvError, ClaimCheckError, PolicyError)  # the reason is logged, no traceback

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    async def configure(self, config: str, runtime: RuntimeInfo) -> frozenset[Event]:
        self.agent.runtime_connected(runtime)
        return EVENTS

    async def synchronize(self, pods: Sequence[Pod], containers: Sequence[Container]) -> list[ContainerUpdate]:
        return await self.agent.synchronize(pods, containers)

    async def run_pod_sandbox(self, pod: Pod) -> None:
        self.agent.pods[pod.id] = pod

    async def stop_pod_sandbox(self, pod: Pod) -> None:
        self.agent.pods[pod.id] = pod

    async def remove_pod_sandbox(self, pod: Pod) -> None:
        self.agent.pods.pop(pod.id, None)

    async def create_container(self, pod: Pod, container: Container) -> CreateContainerResult:
        return await self.agent.create_container(pod, container)

    async def update_container(
        self, pod: Pod, container: Container, resources: LinuxResources | None
    ) -> list[ContainerUpdate]:
        return await self.agent.update_container(pod, container, resources)

    async def post_start_container(self, pod: Pod, container: Container) -> None:
        self.agent.post_start_container(container)

    async def stop_container(self, pod: Pod, container: Container) -> list[ContainerUpdate]:
        return await self.agent.stop_container(pod, container)

    async def remove_container(self, pod: Pod, container: Container) -> None:
        await self.agent.remove_container(pod, container)


#: Notable events kept for ``Agent.events``.
_NOTES_KEPT: Final = 200


class _Note:
    """A notable event, formatted when first read: off the reply path of the event behind it."""

    __slots__ = ("_args", "_line", "_text", "at")

    def __init__(self, at: float, text: str, args: tuple[object, ...]) -> None:
        self.at = at
        self._text = text
        self._args: tuple[object, ...] | None = args or None
        self._line: str | None = None

    @property
    def text(self) -> str:
        if self._args is not None:
            self._text, self._args = self._text % self._args, None
        return self._text

    @property
    def line(self) -> str:
        if self._line is None:
            self._line = f"{time.strftime('%H:%M:%S', time.localtime(self.at))} {self.text}"
        return self._line


class Agent:
    """One node's topodra; ``await agent.start()``, then ``await agent.stop()``."""

    def __init__(
        self,
        config: AgentConfig,
        *,
        config_path: Path | None = None,
        topology: Topology | None = None,
        kube: Any | None = None,
        reload_interval: float = 2.0,
        drift_interval: float = 30.0,
        cgroup_root: Path | None = None,
        watch_machine: bool | None = None,
    ) -> None:
        """``cgroup_root``: where the host's cgroups are (default ``<sysfsRoot>/sys/fs/cgroup``);
        ``drift_interval``: seconds between full cpuset drift checks; ``watch_machine``: follow
        CPU hotplug (``hotplug`` config; default: only when the agent reads the machine itself,
        not for a ``topology`` handed in by a test or the playground)."""
        self.config = config
        self.config_path = config_path
        self._watch_machine = topology is None if watch_machine is None else watch_machine
        self.topology = topology or load_topology(config)
        try:
            checked = check_on_machine(config, self.topology, str(config_path or "the configuration"))
        except ConfigError as err:
            raise AgentError(str(err)) from None
        self.policy = checked.policy
        self.lock = asyncio.Lock()
        self.metrics = AgentMetrics()
        self._create_seconds = self.metrics.nri_event_seconds.labels("CreateContainer")  # looked up once
        self._create_times: list[float] = []  # observed after the reply (``_after_step``)
        self._after_pending = False
        self.pods: dict[str, Pod] = {}
        self.containers: dict[str, Container] = {}
        self.devices: list[Device] = checked.devices
        self._kube = kube
        self._own_kube = False
        self.driver: Driver | None = None
        self.claim_status: Any | None = None  # dra.status.ClaimStatus: status.devices of prepared claims
        self.kubelet_plugin: Any | None = None
        self.reconciler: Any | None = None
        self.stub: Any | None = None
        self.http: HttpEndpoint | None = None
        self.state_http: HttpEndpoint | None = None
        self.pusher: UpdatePusher | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._stop = asyncio.Event()
        self._reload_interval = reload_interval
        self._config_mtime = self._mtime()
        self.started = asyncio.Event()
        self.log = log  # notes and offers (a scratch agent's logger is silent: agent/warmup.py)
        self._notes: list[_Note] = []  # recent notable events, newest last (``events``)
        self._log_backlog: list[_Note] = []  # notes not logged yet (written after the current step)
        self._deferred: set[str] = set()  # changes held for the next event reply (delivery "replies")
        #: how changes outside events reach containers: decided again at every Configure
        self.delivery: DeliveryChoice = choose_delivery(config.nri.delivery, None)
        self.reply_delivery: ReplyDelivery | None = None
        self._show_delivery()
        # Start window: created, PostStartContainer not seen yet. An update reaching such a
        # container may be stored in its spec only (containerd), so it is sent again after the start.
        self._starting: set[str] = set()
        #: containers a claim moved whose push waits for the claim's checkpoint (not drift meanwhile):
        #: container -> monotonic time decided
        self._unpushed: dict[str, float] = {}
        self._overlapped: set[str] = set()
        self.drift: DriftChecker | None = None
        self._drift_interval = drift_interval
        self._cgroup_root = cgroup_root if cgroup_root is not None else config.sysfs_root / "sys" / "fs" / "cgroup"
        # What the slices offer: every device CPU but exclusive grants and the shared floor.
        self._exclusive_grants: dict[str, int] = {}  # container -> exclusive CPU mask, at the last offer
        self._exclusive_union = 0  # the union of those masks
        self._offer_touched: set[str] = set()  # containers whose grant may have changed since
        self._offer_full = True  # re-read every grant (start, Synchronize, reconfiguration)
        self.offer: CPUSet = self._offered()
        self._offer_pending = False
        self._homes: tuple[list[Device], Topology, CPUSet, list[Device]] | None = None  # home_devices' list, from what
        self._placed = asyncio.Event()  # the first Synchronize is done: exclusive grants are known
        # Every CPU seen online since the start, as last seen: group numbers stay stable across hotplug.
        self._seen_cpus: dict[int, CPUInfo] = dict(self.topology.cpus)
        self.watcher: Any | None = None
        self.restoring = False  # the driver is restoring prepared claims (Prepare-time checks relaxed)

    # --- construction helpers -------------------------------------------------------------------
    def _mtime(self) -> float | None:
        if self.config_path is None:
            return None
        try:
            return self.config_path.stat().st_mtime
        except OSError:
            return None

    def _note(self, text: str, *args: object) -> None:
        """Record a notable event: ``text``, or ``text % args`` formatted only when read or logged.
        Its log line is written right after the current step: a CreateContainer reply goes out
        before the formatting (sets, the time of day) and the writing."""
        notes = self._notes
        note = _Note(time.time(), text, args)
        notes.append(note)
        if len(notes) > 2 * _NOTES_KEPT:
            del notes[:-_NOTES_KEPT]
        self._log_backlog.append(note)
        if not self._soon():  # no loop: write it now
            self._flush_notes()

    def _soon(self) -> bool:
        """Run ``_after_step`` right after the current step (once per burst); False without a loop."""
        if self._after_pending:
            return True
        try:
            asyncio.get_running_loop().call_soon(self._after_step)
        except RuntimeError:
            return False
        self._after_pending = True
        return True

    def _after_step(self) -> None:
        """What a step leaves for after its reply: the offer, the notes' log lines, the
        CreateContainer latencies (one callback for all of them)."""
        self._after_pending = False
        if self._offer_pending:
            self.refresh_offer()
        if self._log_backlog:
            self._flush_notes()
        if self._create_times:
            self._observe_creates()

    def _observe_creates(self) -> None:
        times, self._create_times = self._create_times, []
        for seconds in times:
            self._create_seconds.observe(seconds)

    def _flush_notes(self) -> None:
        backlog, self._log_backlog = self._log_backlog, []
        for note in backlog:
            self.log.info("%s", note.text)

    @property
    def events(self) -> list[str]:
        """The recent notable events, oldest first, each as "HH:MM:SS text" (UI, /state)."""
        return self.recent_events(_NOTES_KEPT)

    def recent_events(self, count: int) -> list[str]:
        """The last ``count`` notable events, oldest first."""
        return [n.line for n in self._notes[-count:]] if count > 0 else []

    # --- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        """Acquire every local resource (ports, sockets, directories, checkpoint) first, then
        register with the kubelet and the runtime: a node resource that is taken fails the start
        before any peer has seen the agent. A failed start releases what it took."""
        cfg = self.config
        if cfg.nri.enabled:
            await self._warm_up()
        try:
            await self._start_http()
            if cfg.dra.enabled:
                await self._start_dra()
            if cfg.nri.enabled:
                self._start_nri()
        except BaseException:
            await self.stop()
            raise
        if self.config_path is not None:
            self._spawn(self._watch_config(), "config-watch")
        self._start_watcher()
        self.started.set()
        self._note(f"agent started on node {cfg.node_name} ({len(self.topology.cpus)} CPUs, {len(self.devices)} devices)")

    async def _warm_up(self) -> None:
        """The create path run on a scratch copy of this node first (agent/warmup.py): the first
        containers after a start are answered as fast as the later ones."""
        from topodra.agent.warmup import warm_up

        try:
            scratch = Agent(self.config, topology=self.topology, watch_machine=False)
        except AgentError as err:  # it holds for this agent: only a bug gets here
            log.warning("NRI warm-up skipped: %s", err)
            return
        await warm_up(scratch)

    async def _start_http(self) -> None:
        """/metrics and the probes on ``metricsAddress``; /state on ``stateAddress`` (a unix
        socket in ``stateDir`` by default); one listener when both name the same address."""
        cfg = self.config
        listeners: dict[str, dict[str, Route]] = {}
        if cfg.metrics_address:
            listeners.setdefault(cfg.metrics_address, {}).update(self._routes())
        if cfg.state_listen:
            listeners.setdefault(cfg.state_listen, {}).update(self._state_routes())
            if not parse_listen(cfg.state_listen).is_local:
                log.warning("/state (claims, containers, CPU sets) is served without authentication on %s", cfg.state_listen)
        for address, routes in listeners.items():
            endpoint = HttpEndpoint(routes)
            try:
                await endpoint.start(address)
            except OSError as err:
                what = ", ".join(sorted({"/" + r.split("/")[1] for r in routes}))  # /state, not each sub-path
                why = os.strerror(err.errno) if err.errno else str(err)
                raise AgentError(f"cannot listen on {address} for {what}: {why}") from None
            if address == cfg.metrics_address:
                self.http = endpoint
            if address == cfg.state_listen:
                self.state_http = endpoint

    async def _start_dra(self) -> None:
        from topodra.dra.kubeletplugin import KubeletPlugin, PluginPaths
        from topodra.kube.client import RESOURCE_CLAIMS, KubeClient

        cfg = self.config
        if self._kube is None:
            try:
                if cfg.kube.server:
                    token = cfg.kube.token_file.read_text().strip() if cfg.kube.token_file else "topodra"
                    self._kube = KubeClient.for_url(cfg.kube.server, token=token)
                else:
                    self._kube = KubeClient.from_environment(str(cfg.kube.kubeconfig) if cfg.kube.kubeconfig else None)
            except Exception as err:  # lightkube's ConfigError, a missing token file, ...
                why = f"{err.strerror}: {err.filename}" if isinstance(err, OSError) and err.strerror else str(err)
                raise AgentError(f"cannot set up the Kubernetes API client (kube section): {why}") from None
            self._own_kube = True
        kube = self._kube

        async def fetch(namespace: str, name: str) -> dict[str, Any]:
            result: dict[str, Any] = await kube.get(RESOURCE_CLAIMS, name, namespace)
            return result

        async def list_claims() -> list[dict[str, Any]]:  # only to repair a damaged checkpoint
            items: list[dict[str, Any]] = (await kube.list(RESOURCE_CLAIMS, chunk_size=500))[0]
            return items

        for directory in (cfg.state_dir, cfg.cdi_dir):
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise AgentError(f"cannot create {directory}: {err.strerror or err}") from None
        from topodra.dra.status import kube_claim_status

        node_of = {c: info.node for c, info in self._seen_cpus.items()}
        self.claim_status = kube_claim_status(
            kube, node_of=node_of, online=self.topology.online, observe=self.metrics.claim_status_written
        )
        self._spawn(self.claim_status.writer.run(self._stop), "claim-status")
        self.driver = driver = _MeteredDriver(
            policy=self.claim_view(),
            lock=self.lock,
            fetch_claim=fetch,
            list_claims=list_claims,
            cdi_dir=cfg.cdi_dir,
            checkpoint_path=cfg.checkpoint_path,
            devices=self.devices,
            pool=cfg.node_name,
            on_changes=self._on_driver_changes,
            status=self.claim_status,
        )
        driver.metrics = self.metrics
        self.restoring = True
        try:
            report = await self.driver.restore()
        except Exception as err:
            raise AgentError(f"cannot restore prepared claims from {cfg.checkpoint_path}: {err}") from err
        finally:
            self.restoring = False
        if report.recovery:
            self.metrics.checkpoint_recoveries.labels(report.recovery).inc()
            self._note(f"checkpoint damaged, repaired ({report.recovery}): {'; '.join(report.problems)}")
        if report.restored:
            self._note(f"restored {len(report.restored)} prepared claim(s) from the checkpoint")
        self.kubelet_plugin = KubeletPlugin(
            self.driver, PluginPaths(kubelet_root=cfg.kubelet_root), health=self.device_health
        )
        await self.kubelet_plugin.start()
        if cfg.dra.publish_slices:
            from topodra.dra.reconciler import SliceReconciler

            self.reconciler = SliceReconciler(
                kube, cfg.node_name, self.offered_devices(), publish_delay=cfg.dra.publish_delay, homes=self.home_devices
            )
            self._spawn(self._publish(self.reconciler), "slices")

    def _start_nri(self) -> None:
        from topodra.nri.stub import Stub

        cfg = self.config
        self.stub = Stub(
            _AgentPlugin(self),
            socket_path=str(cfg.nri.socket),
            name=cfg.nri.plugin_name,
            idx=cfg.nri.plugin_index,
        )
        stub = self.stub

        replies = ReplyDelivery(
            CgroupWriter(self._cgroup_root, proc_root=cfg.sysfs_root / "proc"),
            locate=self._cgroup_of,
            defer=self._deferred.update,
        )
        self.reply_delivery = replies

        def send(updates: list[ContainerUpdate]) -> asyncio.Future[list[ContainerUpdate]]:
            if self.delivery.mode is Delivery.REPLIES:
                return asyncio.ensure_future(replies.send(updates))
            fut: asyncio.Future[list[ContainerUpdate]] = stub.update_containers(updates)
            return fut

        self.drift = DriftChecker(
            CgroupReader(self._cgroup_root, proc_root=cfg.sysfs_root / "proc"),
            lookup=self._pushable,
            locate=self._cgroup_of,
            all_ids=lambda: list(self.containers),
            repair=self._repair_drift,
            counted=self.metrics.cpuset_drift.inc,
            settled=self._push_settled,
            unpushed=self._awaits_push,
            interval=self._drift_interval,
        )
        self.pusher = UpdatePusher(
            send=send,
            lookup=self._pushable,
            lock=self.lock,
            on_sent=self._count_pushed,
            on_sending=self._mark_overlap,
            unapplied=self.drift.unapplied,
        )
        self._spawn(self.pusher.run(), "pusher")
        self._spawn(self.drift.run(self._stop), "drift")
        self._spawn(stub.run(), "nri")

    def _pushable(self, container_id: str) -> Assignment | None:
        # Only containers the runtime told us about (and that still run) can be updated.
        if container_id not in self.containers:
            return None
        return self.policy.assignment(container_id)

    def _count_pushed(self, sent: int, failed: int) -> None:
        if self.delivery.mode is Delivery.REPLIES:
            self.metrics.cgroup_writes.labels("written").inc(sent)
            self.metrics.cgroup_writes.labels("failed").inc(failed)
        else:
            self.metrics.updates_sent.inc(sent)
            self.metrics.updates_failed.inc(failed)

    def _show_delivery(self) -> None:
        for mode in Delivery:
            self.metrics.delivery.labels(mode.value).set(1 if mode is self.delivery.mode else 0)

    def runtime_connected(self, runtime: RuntimeInfo) -> None:
        """Configure: decide how changes outside events reach this runtime, and say so once."""
        self.delivery = choose_delivery(self.config.nri.delivery, runtime)
        self._show_delivery()
        line = self.delivery.line()
        warn = self.delivery.mode is Delivery.UNSOLICITED and not runtime.unsolicited_updates_safe
        writer = self.reply_delivery.writer if self.reply_delivery is not None else None
        if self.delivery.mode is Delivery.REPLIES and writer is not None and not writer.writable:
            line += f"; {writer.root} is not writable, so they wait for the next event reply"
            warn = True
        (log.warning if warn else log.info)("%s", line)

    # --- start window and drift ---------------------------------------------------------------------
    def _mark_overlap(self, container_ids: Iterable[str]) -> None:
        """Updates for these containers go out now: those still starting get them again after the start."""
        if self._starting:
            self._overlapped |= self._starting.intersection(container_ids)

    def post_start_container(self, container: Container) -> None:
        """The start is over: re-send what may have missed the task, then check the cgroup."""
        cid = container.id
        self._starting.discard(cid)
        if cid in self._overlapped:
            self._overlapped.discard(cid)
            self.metrics.start_repushes.inc()
            log.info("container %s got an update while starting: sending its assignment again", cid)
            self._push([cid])
        if self.drift is not None:
            self.drift.check_soon([cid])

    def _forget_start(self, container_id: str) -> None:
        self._starting.discard(container_id)
        self._overlapped.discard(container_id)

    def _cgroup_of(self, container_id: str) -> tuple[str, int] | None:
        c = self.containers.get(container_id)
        if c is None or container_id in self._starting:
            return None  # not ours, or its task is not running yet
        return c.cgroups_path, c.pid

    def _repair_drift(self, container_ids: list[str]) -> None:
        self._note("cpuset drift repaired: " + ", ".join(container_ids))
        self._push(container_ids)

    async def _push_settled(self) -> None:
        if self.pusher is not None:
            with contextlib.suppress(TimeoutError):
                await self.pusher.wait_idle(5.0)

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.create_task(coro, name=f"topodra-{name}")
        task.add_done_callback(self._task_done)
        self._tasks.append(task)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("agent task %s failed: %r", task.get_name(), exc, exc_info=exc)

    async def stop(self) -> None:
        self._stop.set()
        self._flush_notes()
        self._observe_creates()
        if self.stub is not None:
            with contextlib.suppress(Exception):
                await self.stub.stop()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
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

    # --- applying changes ------------------------------------------------------------------------
    def record(self, changes: Changes, *, subject: str | None = None, full: bool = False) -> None:
        """Note a policy operation's changes (``subject``: a container it removed; ``full``: it may
        have changed any grant)."""
        if self.pusher is not None:
            self.pusher.bump(changes)
        self._offer_touched.update(changes)
        if subject is not None:
            self._offer_touched.add(subject)
        self._offer_full |= full
        self._offer_soon()

    # --- what the slices offer ------------------------------------------------------------------------
    def _offered(self) -> CPUSet:
        """The offer from the exclusive grants (kept up to date from the touched containers only:
        this runs after every placement) and the root pool's free shared CPUs."""
        policy = self.policy
        grants = self._exclusive_grants
        if self._offer_full:
            grants = self._exclusive_grants = {c: g.exclusive for c, g in policy.grants().items() if g.exclusive}
            self._root_pool = next(p.name for p in policy.pools if p.parent < 0)
            self._device_order = tuple(ordered_cpus(self.topology, self.topology.online, self.config.devices.order))
            self._candidates = policy.available_cpus - policy.reserved_cpus  # a new machine or config: full
            self._offer_full = False
            stale = True
        else:
            # A new grant adds its CPUs to the union; one that shrank or went has it recomputed
            # (another grant may hold some of its CPUs too). A placement adds one grant, or none.
            stale = False
            for cid in self._offer_touched:
                g = policy.grant(cid)
                new = g.exclusive if g is not None else 0
                old = grants.get(cid, 0)
                if new == old:
                    continue
                if new:
                    grants[cid] = new
                else:
                    del grants[cid]
                if old:
                    stale = True
                else:
                    self._exclusive_union |= new
        self._offer_touched.clear()
        if stale:
            union = 0
            for mask in grants.values():
                union |= mask
            self._exclusive_union = union
        return offered_cpus(
            self.topology,
            self.config.devices,
            candidates=self._candidates,
            shared_free=policy.shared_cpus(self._root_pool),
            exclusive=CPUSet.from_mask(self._exclusive_union),
            order=self._device_order,
        )

    def claim_view(self) -> _OfferedPicks:
        """The policy as the DRA driver uses it (grouped devices pick among offered CPUs)."""
        return _OfferedPicks(self)

    def offered_devices(self) -> list[Device]:
        # never an offline CPU, even before the offer has been recomputed for a machine change
        return offer_devices(self.topology, self.config.devices, self.devices, self.offer & self.topology.online)

    def home_devices(self) -> list[Device]:
        """The devices the slices offer with nothing withdrawn (no exclusive grant, no shared floor):
        each device's home slice comes from this list, so a withdrawn device leaves a hole in its
        slice instead of moving every later one (one slice written per grant, not all). The same
        list object until the devices, the machine or the candidate CPUs change: the reconciler
        re-computes the homes only then."""
        policy = self.policy
        candidates = (policy.available_cpus - policy.reserved_cpus) & self.topology.online
        cached = self._homes
        if cached is None or cached[0] is not self.devices or cached[1] is not self.topology or cached[2] != candidates:
            homes = offer_devices(self.topology, self.config.devices, self.devices, candidates)
            cached = self._homes = (self.devices, self.topology, candidates, homes)
        return cached[3]

    def _offer_soon(self) -> None:
        """Recompute the offer right after the current operation (once per burst), off its reply path."""
        if self._offer_pending:
            return
        self._offer_pending = True
        if not self._soon():  # no loop (construction): computed at start
            self._offer_pending = False

    def refresh_offer(self, *, full: bool = False) -> None:
        """Recompute the offer now (``full``: from every grant) and republish it if it changed."""
        self._offer_full |= full
        self._offer_pending = False
        offer = self._offered()
        if offer == self.offer:
            return
        withdrawn, returned = self.offer - offer, offer - self.offer
        self.offer = offer
        self.metrics.offer_changes.inc()
        self.log.info("slices offer %s (withdrawn %s, offered again %s)", offer, withdrawn or "-", returned or "-")
        if self.reconciler is not None:
            # built when the reconciler writes (at most once per dra.publishDelay), from the latest offer
            self.reconciler.set_devices(self.offered_devices)

    async def settle_offer(self, timeout: float = 10.0) -> None:
        """Until the slices carry the current offer: recomputed now, then written (the publish
        delay included). For tests and tools that read the slices after a grant."""
        self.refresh_offer()
        if self.reconciler is not None:
            await self.reconciler.wait_written(timeout)

    async def _publish(self, reconciler: Any, wait: float = 10.0) -> None:
        """Publish once the runtime's containers are known (their exclusive CPUs are not offered)."""
        if self.config.nri.enabled:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._placed.wait(), wait)
            reconciler.set_devices(self.offered_devices())
        await reconciler.run(self._stop)

    def decided(self, changes: Changes) -> Changes:
        """A claim's changes, decided before its checkpoint is written and they are pushed: until
        then their cgroups still hold the old sets, which the drift check must not repair."""
        now = time.monotonic()
        if len(self._unpushed) > 1024:  # left by pushes that never came
            self._unpushed = {c: t for c, t in self._unpushed.items() if now - t < UNPUSHED_GRACE}
        self._unpushed.update(dict.fromkeys(changes, now))
        return changes

    def _awaits_push(self, container_id: str) -> bool:
        """Decided by a claim moments ago and not pushed yet. Bounded, so that a push that
        never comes (a checkpoint write that hangs) leaves the set to the drift check."""
        decided = self._unpushed.get(container_id)
        return decided is not None and time.monotonic() - decided < UNPUSHED_GRACE

    async def _on_driver_changes(self, changes: Changes) -> None:
        """Claim prepared/released/restored: push the moved containers now."""
        for cid in changes:
            self._unpushed.pop(cid, None)
        moved = [
            c for c, mask in self._exclusive_grants.items()
            if c in changes and (g := self.policy.grant(c)) is not None and g.exclusive != mask
        ]
        if moved:
            # The publication race: the claim was allocated from slices published before these
            # exclusive grants were withdrawn. The policy moved them; count and say so.
            self.metrics.exclusive_moved.inc(len(moved))
            self._note("claim took exclusive CPUs of " + ", ".join(sorted(moved)) + ": moved them")
        self.record(changes)
        if changes:
            self._note("claim change moves " + ", ".join(f"{c}->{a.cpus}" for c, a in sorted(changes.items())))
        self._push(changes)

    def _push(self, container_ids: Iterable[str]) -> None:
        """Deliver these containers' current assignments now, the way ``self.delivery`` says
        (``agent/delivery.py``); without an NRI connection, with the next event reply."""
        if self.pusher is not None:
            self.pusher.push(container_ids)
        else:
            self._deferred.update(container_ids)

    def _with_deferred(self, placements: list[Placement], exclude: str) -> list[Placement]:
        """``placements`` and the changes held for this reply (unsolicited updates off)."""
        if not self._deferred:
            return placements
        have = {p[0] for p in placements} | {exclude}
        for cid in sorted(self._deferred - have):
            a = self._pushable(cid)
            if a is not None:
                placements.append((cid, a.cpus, a.mems or None))
                self._mark_overlap([cid])
        self._deferred.clear()
        return placements

    def _placements(self, changes: Changes, *, exclude: str | None = None) -> list[Placement]:
        """The updates ``changes`` make of the runtime's containers, by id, as (id, cpus, mems or
        None). Followers moved together share one ``Assignment``: its sets are read once, and
        the same objects let the reply writer reuse their bytes."""
        containers = self.containers
        out: list[Placement] = []
        last: Assignment | None = None
        cpus: CPUSet | None = None
        mems: CPUSet | None = None
        for cid, a in sorted(changes.items()):
            if cid == exclude or cid not in containers:
                continue
            if a is not last:
                last, cpus, mems = a, a.cpus, a.mems or None
            assert cpus is not None
            out.append((cid, cpus, mems))
        if out and self._starting:  # event replies reach starting tasks no better
            self._mark_overlap([p[0] for p in out])
        return out

    def _updates(self, changes: Changes, *, exclude: str | None = None) -> list[ContainerUpdate]:
        return [placement_update(*p) for p in self._placements(changes, exclude=exclude)]

    def _claims_of(self, pod: Pod, container: Container) -> tuple[str, ...]:
        """Verified claim UIDs of a container's ``DRA_CPUSET_<uid>`` variables (errors refuse it)."""
        if self.driver is None:
            return ()
        return tuple(sorted(self.driver.container_claims(pod.uid, container.env)))

    # --- NRI events --------------------------------------------------------------------------------
    async def synchronize(self, pods: Sequence[Pod], containers: Sequence[Container]) -> list[ContainerUpdate]:
        t0 = time.perf_counter()
        self.pods = {p.id: p for p in pods}
        by_pod = self.pods
        entries: list[tuple[ContainerRequest, Assignment | None]] = []
        live: dict[str, Container] = {}
        for c in containers:
            if c.state not in (ContainerState.CREATED, ContainerState.RUNNING, ContainerState.PAUSED):
                continue
            pod = by_pod.get(c.pod_sandbox_id) or Pod(id=c.pod_sandbox_id)
            try:
                claims = self._claims_of(pod, c)
            except (ClaimEnvError, ClaimCheckError) as err:
                # Already running: we cannot refuse it any more; place it as an ordinary container.
                log.error("container %s: %s; placing it without its claim", c.id, err)
                claims = ()
            current = None
            res = c.resources
            if res is not None and res.cpus:
                current = Assignment(res.cpus, res.mems or CPUSet())
            entries.append((container_request(pod, c, claims), current))
            live[c.id] = c
        async with self.lock:
            self.containers = live
            self._starting = {c.id for c in live.values() if c.state == ContainerState.CREATED}
            self._overlapped &= self._starting
            try:
                changes = self.policy.sync(entries)
            except PolicyError as err:
                log.error("synchronize: %s", err)
                raise
            self.record(changes, full=True)
        self.metrics.nri_event_seconds.labels("Synchronize").observe(time.perf_counter() - t0)
        self._placed.set()
        self._note(f"synchronized {len(live)} container(s), {len(changes)} corrected")
        if self.drift is not None:
            self.drift.check_soon(live)  # Synchronize reports specs; the cgroups may say otherwise
        return self._updates(changes)

    async def create_container(self, pod: Pod, container: Container) -> CreateContainerResult:
        t0 = time.perf_counter()
        self.pods.setdefault(pod.id, pod)
        try:
            claims = self._claims_of(pod, container)
            req = container_request(pod, container, claims)
            async with self.lock:
                changes = self.policy.add(req)
                self.containers[container.id] = container
                self._starting.add(container.id)
                self.record(changes)
            crash_point("create.placed")
        except (ClaimEnvError, ClaimCheckError, PolicyError) as err:
            self.metrics.nri_errors.labels("CreateContainer").inc()
            self._note(f"refused container {pod.namespace}/{pod.name}/{container.name}: {err}")
            raise
        cid = container.id
        mine = changes.get(cid)
        updates = PlacementUpdates(self._with_deferred(self._placements(changes, exclude=cid), cid))
        self._create_times.append(time.perf_counter() - t0)
        self._soon()
        if mine is None:
            return CreateContainerResult(updates=updates)
        if updates:
            self._note(
                "placed %s/%s/%s on CPUs %s (+%d moved)", pod.namespace, pod.name, container.name, mine.cpus, len(updates)
            )
        else:
            self._note("placed %s/%s/%s on CPUs %s", pod.namespace, pod.name, container.name, mine.cpus)
        return CreateContainerResult(adjust=placement_adjustment(mine.cpus, mine.mems or None), updates=updates)

    async def update_container(
        self, pod: Pod, container: Container, resources: LinuxResources | None
    ) -> list[ContainerUpdate]:
        t0 = time.perf_counter()
        if resources is not None:
            container = replace(container, resources=resources)
        try:
            claims = self._claims_of(pod, container)
            req = container_request(pod, container, claims)
            async with self.lock:
                if self.policy.assignment(container.id) is None:
                    changes = self.policy.add(req)
                else:
                    changes = self.policy.update(req)
                self.containers[container.id] = container
                self.record(changes)
                # Re-apply our values even when unchanged, so a CRI update keeps our pinning.
                mine = self.policy.assignment(container.id)
        except (ClaimEnvError, ClaimCheckError, PolicyError) as err:
            self.metrics.nri_errors.labels("UpdateContainer").inc()
            self._note(f"refused update of {container.id}: {err}")
            raise
        placements = self._with_deferred(self._placements(changes, exclude=container.id), container.id)
        if mine is not None:
            placements.insert(0, (container.id, mine.cpus, mine.mems or None))
        updates = [placement_update(*p) for p in placements]
        self.metrics.nri_event_seconds.labels("UpdateContainer").observe(time.perf_counter() - t0)
        return updates

    async def stop_container(self, pod: Pod, container: Container) -> list[ContainerUpdate]:
        t0 = time.perf_counter()
        async with self.lock:
            self.containers.pop(container.id, None)
            changes = self.policy.remove(container.id)
            self.record(changes, subject=container.id)
        crash_point("stop.removed")
        if self.pusher is not None:
            self.pusher.forget(container.id)
        self._forget_start(container.id)
        self.metrics.nri_event_seconds.labels("StopContainer").observe(time.perf_counter() - t0)
        self._deferred.discard(container.id)
        placements = self._with_deferred(self._placements(changes, exclude=container.id), container.id)
        updates = [placement_update(*p) for p in placements]
        if updates:
            self._note("stopped %s: %d container(s) widened", container.id, len(updates))
        return updates

    async def remove_container(self, pod: Pod, container: Container) -> None:
        # Normally StopContainer released it already; if not, push what it frees now.
        async with self.lock:
            self.containers.pop(container.id, None)
            changes = self.policy.remove(container.id)
            self.record(changes, subject=container.id)
        if self.pusher is not None:
            self.pusher.forget(container.id)
        self._forget_start(container.id)
        self._deferred.discard(container.id)
        self._push(c for c in changes if c != container.id)

    # --- the machine changing (hotplug) ------------------------------------------------------------
    def _start_watcher(self) -> None:
        from topodra.agent.hotplug import MachineWatcher, watch_root

        cfg = self.config
        root = watch_root(cfg.topology, cfg.sysfs_root) if cfg.hotplug.enabled and self._watch_machine else None
        if root is None:
            return
        self.watcher = MachineWatcher(root, cfg.hotplug.interval, self._machine_changed)
        self._spawn(self.watcher.run(self._stop), "hotplug")

    async def _machine_changed(self) -> bool:
        """The hotplug files changed: re-read the machine (off the loop) and follow it."""
        try:
            topology = await asyncio.to_thread(load_topology, self.config)
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
        async with self.lock:
            carried = carry_numbers(self._seen_cpus, topology)
            before = self.topology
            try:
                changes = self.policy.follow(carried)
            except (PolicyError, ValueError) as err:
                self.metrics.machine_changes.labels("refused").inc()
                self._note(f"machine changed (online CPUs {carried.online}) but no placement fits it: {err}")
                return None
            self.topology = carried
            self._seen_cpus.update(carried.cpus)
            reserved = self.policy.reserved_cpus
            self.record(changes, full=True)
            self.metrics.machine_changes.labels("applied").inc()
        self._push(changes)  # moved containers first: the devices can wait (Prepare refuses offline CPUs)
        try:  # ~0.1 s on a 512-CPU node: off the loop
            fresh = await asyncio.to_thread(build_devices, carried, self.config.devices, exclude=reserved)
        except ValueError as err:  # an attribute hook failing on the new machine: keep what we had
            log.error("devices after the machine change: %s; keeping the previous ones", err)
            fresh = []
        async with self.lock:
            if self.topology is not carried:  # a newer change got here first: it builds its own
                return changes
            devices = follow_devices(self.devices, fresh, carried.online)
            devices_changed = [d.to_api() for d in devices] != [d.to_api() for d in self.devices] or [
                d.cpus for d in devices
            ] != [d.cpus for d in self.devices]
            self.devices = devices
            if self.driver is not None:
                self.driver.set_devices(devices)
            if self.claim_status is not None:  # claims on offline CPUs turn Ready=False, and back
                self.claim_status.follow(carried.online, {c: info.node for c, info in self._seen_cpus.items()})
        gone, back = before.online - carried.online, carried.online - before.online
        self._note(
            f"machine changed: CPUs offline {gone or '-'}, back online {back or '-'}, isolated {carried.isolated or '-'}; "
            f"{len(changes)} container(s) moved"
        )
        for uid, cpus in self.policy.offline_claims().items():
            self._note(f"claim {uid} holds offline CPUs {cpus}: its containers run on the rest until they return")
        offer = self.offer
        self.refresh_offer(full=True)
        if devices_changed and self.offer == offer and self.reconciler is not None:
            self.reconciler.set_devices(self.offered_devices())
        if self.kubelet_plugin is not None:
            self.kubelet_plugin.health_changed()
        return changes

    def device_health(self) -> list[DeviceHealth]:
        """Each device's health (the kubelet's DRAResourceHealth stream and /state)."""
        return device_health(self.devices, self.topology.online, self.policy.offline_claims())

    # --- configuration reload ------------------------------------------------------------------------
    async def _watch_config(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self._reload_interval)
            mtime = self._mtime()
            if mtime is not None and mtime != self._config_mtime:
                self._config_mtime = mtime
                await self.reload()

    async def reload(self, new: AgentConfig | None = None) -> Changes:
        """Apply a changed configuration file (or ``new``); one that a fresh start would refuse
        (``check_on_machine``, the same checks as ``--check``) is logged and ignored."""
        try:
            if new is None:
                assert self.config_path is not None
                new = load_config(self.config_path)
            checked = check_on_machine(new, self.topology, str(self.config_path or "the configuration"))
        except ConfigError as err:
            self.metrics.config_reloads.labels("invalid").inc()
            log.error("configuration reload ignored: %s", err)
            self._note("configuration reload ignored (invalid): see the log")
            return {}
        old = self.config
        changes: Changes = {}
        if new.policy != old.policy:
            async with self.lock:
                try:
                    changes = self.policy.reconfigure(new.policy)
                except (PolicyError, ValueError) as err:
                    self.metrics.config_reloads.labels("refused").inc()
                    log.error("configuration reload refused by the policy: %s", err)
                    self._note(f"configuration reload refused: {err}")
                    return {}
                self.record(changes, full=True)
        if new.devices != old.devices or new.policy != old.policy:
            devices = checked.devices
            if (new.devices.model, new.devices.group_by) == (old.devices.model, old.devices.group_by):
                devices = follow_devices(self.devices, devices, self.topology.online)  # offline ones stay listed
            if [d.to_api() for d in devices] != [d.to_api() for d in self.devices]:
                self.devices = devices
                self.offer = self._offered()
                if self.reconciler is not None:
                    self.reconciler.set_devices(self.offered_devices())
                if self.driver is not None and hasattr(self.driver, "set_devices"):
                    self.driver.set_devices(devices)
        restart_only = {
            k
            for k in (
                "nri", "dra", "kube", "kubelet_root", "cdi_dir", "state_dir", "metrics_address", "state_address",
                "node_name",
            )
            if getattr(new, k) != getattr(old, k)
        }
        if restart_only:
            log.warning("configuration fields %s change only at restart", ", ".join(sorted(restart_only)))
            new = new.model_copy(update={k: getattr(old, k) for k in restart_only})
        self.config = new
        self._offer_full = True  # a new shared floor, order or device model changes what the slices offer
        self._offer_soon()
        self.metrics.config_reloads.labels("applied").inc()
        self._note(f"configuration reloaded: {len(changes)} container(s) moved")
        self._push(changes)
        return changes

    # --- observability ---------------------------------------------------------------------------------
    def _refresh_gauges(self) -> None:
        stats = self.policy.stats()
        m = self.metrics
        m.cpus.clear()
        for pool in stats.pools:
            u = pool.usage
            for use, cpus in (
                ("exclusive", u.allocated),
                ("shared", u.shared),
                ("claimed", u.claimed),
                ("reserved", u.reserved),
                ("isolated", u.isolated),
                ("free", u.free),
            ):
                for kind in self.topology.core_types():
                    m.cpus.labels(pool.name, kind.value, use).set(len(cpus & self.topology.cpus_of_type(kind)))
        m.containers.clear()
        for placement, n in stats.containers.items():
            m.containers.labels(placement).set(n)
        m.claims.set(len(self.policy.claims()))
        m.offline_cpus.set(len(self.topology.offline))
        m.offline_claims.set(len(self.policy.offline_claims()))
        m.unhealthy_devices.set(sum(1 for h in self.device_health() if not h.healthy))

    def _metrics_route(self) -> tuple[int, str, bytes]:
        self._refresh_gauges()
        return 200, "text/plain; version=0.0.4; charset=utf-8", self.metrics.render()

    def healthy(self) -> tuple[bool, str]:
        problems = []
        for task in self._tasks:
            if task.done() and not task.cancelled():
                problems.append(f"task {task.get_name()} ended")
        return (not problems, "; ".join(problems) or "ok")

    def ready(self) -> tuple[bool, str]:
        problems = []
        if self.config.nri.enabled and (self.stub is None or not self.stub.synchronized):
            problems.append("NRI runtime not synchronized")
        if self.kubelet_plugin is not None and not self.kubelet_plugin.registered.is_set():
            problems.append("kubelet has not registered the DRA plugin")
        return (not problems, "; ".join(problems) or "ok")

    def state(self) -> dict[str, Any]:
        """A JSON view of everything placed (``/state`` and the playground)."""
        return {
            "node": self.config.node_name,
            "reserved": str(self.policy.reserved_cpus),
            "claims": {uid: str(c) for uid, c in sorted(self.policy.claims().items())},
            "containers": {
                cid: {"cpus": str(a.cpus), "mems": str(a.mems)} for cid, a in sorted(self.policy.assignments().items())
            },
            "offline_cpus": str(self.topology.offline),
            "offline_claims": {uid: str(c) for uid, c in self.policy.offline_claims().items()},
            "unhealthy_devices": {h.name: h.message for h in self.device_health() if not h.healthy},
            "delivery": self.delivery.as_dict(),
            "pending_pushes": sorted(self.pusher.pending) if self.pusher is not None else [],
            "push_idle": self.pusher.idle if self.pusher is not None else True,
            "events": self.recent_events(50),
        }

    def _routes(self) -> dict[str, Route]:
        def probe(check: Callable[[], tuple[bool, str]]) -> Route:
            def handler() -> tuple[int, str, bytes]:
                ok, why = check()
                return (200 if ok else 503), "text/plain", (why + "\n").encode()

            return Route(handler)

        return {
            "/metrics": Route(self._metrics_route),
            "/healthz": probe(self.healthy),
            "/readyz": probe(self.ready),
        }

    def _state_routes(self) -> dict[str, Route]:
        """Claim UIDs, container ids and CPU sets: served on ``stateAddress`` only."""
        return {"/state": json_route(self.state), "/state/nri": json_route(self.nri_timings)}

    def nri_timings(self) -> dict[str, Any]:
        """The NRI stub's own time per answered call, latest last (``/state/nri``): what the
        benchmark sets beside the runtime's round trip."""
        out: dict[str, list[float]] = {}
        if self.stub is not None:
            for method, seconds in self.stub.handler_times:
                out.setdefault(method, []).append(seconds)
        return {"handler_seconds": out}
