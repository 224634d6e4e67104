"""The one path from the node's devices and offer to the DRA driver, the slices and the kubelet.

New devices (a reload, a machine change) and a new offer (a placement, claim or
reconfiguration changed an exclusive grant or the shared CPUs) reach the slices only through
``DevicePublisher``: ``set_devices`` for the first, ``touched``/``refresh_offer`` for the second.
The offer is recomputed right after the step that changed it (``AfterStep``), off its reply path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from topodra.agent.metrics import AgentMetrics
from topodra.agent.observe import AfterStep
from topodra.agent.offer import OfferTracker
from topodra.agent.state import NodeState
from topodra.agent.taint_times import TaintTimes
from topodra.cpuset import CPUSet
from topodra.dra.devices import Device, offer_devices
from topodra.dra.health import DeviceHealth, device_health
from topodra.kube.errors import ApiError

if TYPE_CHECKING:
    from topodra.dra.driver import Driver
    from topodra.dra.kubeletplugin import KubeletPlugin
    from topodra.dra.reconciler import SliceReconciler

__all__ = ["DevicePublisher"]


class DevicePublisher:
    """The devices and the offer, published. ``driver``, ``reconciler``, ``kubelet_plugin``:
    set once the DRA side is up (None without it)."""

    def __init__(self, state: NodeState, metrics: AgentMetrics, after: AfterStep, logger: logging.Logger) -> None:
        self.state = state
        self.metrics = metrics
        self.logger = logger
        self.tracker = OfferTracker()
        self.taint_times = TaintTimes()
        self.driver: Driver | None = None
        self.reconciler: SliceReconciler | None = None
        self.kubelet_plugin: KubeletPlugin | None = None
        self._after = after
        self._pending = False
        #: False: the API server drops ``nodeAllocatableResourceMappings`` (the start's probe,
        #: ``dra.nodealloc``): with ``devices.nodeAllocatable: auto`` the slices go without them
        #: (the driver keeps the full devices).
        self.node_allocatable = True
        self._keeping = True
        self.offer: CPUSet = self._compute()
        after.add(self._after_step)

    def _compute(self) -> CPUSet:
        state = self.state
        return self.tracker.compute(state.policy, state.topology, state.config.devices)

    def touched(self, container_ids: Iterable[str], *, subject: str | None = None, full: bool = False) -> None:
        """A policy operation's changes: the offer is recomputed right after the current step."""
        self.tracker.touch(container_ids, subject=subject, full=full)
        if not self._pending:
            self._pending = self._after.soon()  # no loop (construction): computed at start

    def _after_step(self) -> None:
        if self._pending:
            self.refresh_offer()

    def refresh_offer(self, *, full: bool = False) -> None:
        """Recompute the offer now (``full``: from every grant) and republish it if it changed."""
        if full:
            self.tracker.touch((), full=True)
        self._pending = False
        offer = self._compute()
        if offer == self.offer:
            return
        withdrawn, returned = self.offer - offer, offer - self.offer
        self.offer = offer
        self.metrics.offer_changes.inc()
        self.logger.info("slices offer %s (withdrawn %s, offered again %s)", offer, withdrawn or "-", returned or "-")
        if self.reconciler is not None:
            # built when the reconciler writes (at most once per dra.publishDelay), from the latest offer
            self.reconciler.set_devices(self.offered_devices)

    def set_devices(self, devices: list[Device]) -> None:
        """New devices, or the same ones on a new machine or configuration: the driver, the slices
        and the offer follow (the offer from every grant)."""
        state = self.state
        changed = devices is not state.devices and (
            [d.to_api() for d in devices] != [d.to_api() for d in state.devices]
            or [d.cpus for d in devices] != [d.cpus for d in state.devices]
        )
        if changed:
            state.devices = devices
            if self.driver is not None:
                self.driver.set_devices(devices)
        offer, keeping = self.offer, self._keeping
        self._keeping = self._keep_mappings()  # a reload may switch devices.nodeAllocatable
        self.refresh_offer(full=True)
        if (changed or keeping != self._keeping) and self.offer == offer and self.reconciler is not None:
            self.reconciler.set_devices(self.offered_devices())

    def offered_devices(self) -> list[Device]:
        # an offline CPU only tainted, even before the offer has been recomputed for a machine change
        state = self.state
        offered = offer_devices(
            state.topology,
            state.config.devices,
            state.devices,
            self.offer & state.topology.online,
            reserved=state.policy.reserved_cpus,
        )
        return self._published(self.taint_times.stamp(offered))

    def home_devices(self) -> list[Device]:
        """The devices with nothing withdrawn, for the slices' homes (``OfferTracker.home_devices``)."""
        state = self.state
        return self._published(self.tracker.home_devices(state.policy, state.topology, state.config.devices, state.devices))

    def probed(self, kept: bool) -> None:
        """The start's probe: whether the API server keeps the mappings (before the first write)."""
        self.node_allocatable = kept
        self._keeping = self._keep_mappings()

    def _keep_mappings(self) -> bool:
        """Whether the slices carry the devices' mappings: ``on``, or ``auto`` and the probe found
        the API server keeps them (``off``: the devices have none)."""
        return self.node_allocatable or self.state.config.devices.node_allocatable != "auto"

    def _published(self, devices: list[Device]) -> list[Device]:
        """``devices`` as the slices carry them (without the mappings a server would drop)."""
        return devices if self._keep_mappings() else [d.without_node_allocatable for d in devices]

    def device_health(self) -> list[DeviceHealth]:
        """Each device's health (the kubelet's DRAResourceHealth stream and /state)."""
        state = self.state
        return device_health(state.devices, state.topology.online, state.policy.offline_claims())

    def health_changed(self) -> None:
        if self.kubelet_plugin is not None:
            self.kubelet_plugin.health_changed()

    async def settle(self, timeout: float = 10.0) -> None:
        """Until the slices carry the current offer: recomputed now, then written (the publish
        delay included)."""
        self.refresh_offer()
        if self.reconciler is not None:
            await self.reconciler.wait_written(timeout)

    async def publish(self, reconciler: SliceReconciler, placed: asyncio.Event | None, stop: asyncio.Event) -> None:
        """Publish once the runtime's containers are known (``placed``: their exclusive CPUs are
        not offered; None without NRI), then keep the slices written. The taints' times already
        published (by this agent before a restart) are kept."""
        try:
            self.taint_times.seed(await reconciler.published_devices())
        except ApiError as exc:
            self.logger.info("cannot read the published slices (%s): device taints get new times", exc)
        if placed is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(placed.wait(), 10.0)
            reconciler.set_devices(self.offered_devices())
        await reconciler.run(stop)
