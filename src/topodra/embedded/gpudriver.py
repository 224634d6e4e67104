"""The node side of the made-up ``gpu.example.com`` driver (``topodra.sim.gpus``), for the playground.

Served by the same ``KubeletPlugin`` as ``native.cpu``, so the embedded kubelet registers it and
calls NodePrepareResources for a pod's GPU claims over gRPC, as for any driver. Prepare checks
each claim as a real driver does (its UID, an allocation, this node's pool, devices it publishes)
and answers with the claim's GPUs; a made-up GPU has nothing to inject into a container, so the
answer names no CDI device. Unprepare forgets the claim.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from topodra.cpuset import CPUSet
from topodra.dra.checkpoint import PreparedClaim, PreparedDevice
from topodra.dra.claims import ClaimError, ClaimRef, allocated_devices
from topodra.dra.devices import Device
from topodra.dra.driver import ClaimFetcher, PrepareResult, UnprepareResult
from topodra.dra.kubeletplugin import KubeletPlugin, PluginPaths
from topodra.embedded.store import KINDS, Store
from topodra.sim.gpus import GPU_DRIVER, gpu_device_class, gpu_devices, gpu_slices
from topodra.topology.model import Topology

__all__ = ["FakeGpuDriver", "start_gpu_driver"]


class FakeGpuDriver:
    """Prepare and Unprepare of ``gpu.example.com`` claims on one node (a ``PluginDriver``)."""

    def __init__(self, devices: Sequence[Device], *, pool: str, fetch_claim: ClaimFetcher) -> None:
        self._devices = list(devices)
        self._pool = pool
        self._fetch = fetch_claim
        self.prepared: dict[str, PreparedClaim] = {}

    @property
    def driver_name(self) -> str:
        return GPU_DRIVER

    @property
    def pool(self) -> str:
        return self._pool

    @property
    def devices(self) -> Sequence[Device]:
        return self._devices

    async def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        out: dict[str, PrepareResult] = {}
        known = {d.name for d in self._devices}
        for ref in claims:
            try:
                claim = await self._fetch(ref.namespace, ref.name)
                mine = allocated_devices(claim, ref, pool=self._pool, driver=GPU_DRIVER)
                unknown = [d.device for d in mine if d.device not in known]
                if unknown:
                    raise ClaimError(f"claim {ref}: {GPU_DRIVER} has no device {unknown[0]!r} on this node")
            except ClaimError as exc:
                out[ref.uid] = PrepareResult(error=str(exc))
                continue
            except Exception as exc:  # the API server's answer: reported per claim, as the kubelet expects
                out[ref.uid] = PrepareResult(error=f"claim {ref}: cannot fetch it: {exc}")
                continue
            devices = tuple(PreparedDevice(d.request, d.pool, d.device, CPUSet(), d.share_id) for d in mine)
            prepared = PreparedClaim(ref.uid, ref.namespace, ref.name, CPUSet(), devices)
            self.prepared[ref.uid] = prepared
            out[ref.uid] = PrepareResult(claim=prepared)
        return out

    async def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, UnprepareResult]:
        for ref in claims:
            self.prepared.pop(ref.uid, None)
        return {ref.uid: UnprepareResult() for ref in claims}


async def start_gpu_driver(store: Store, topology: Topology, node: str, kubelet_root: Path) -> KubeletPlugin:
    """Put ``gpu.example.com`` on a node: its DeviceClass and slices into ``store``, and its kubelet
    plugin started below ``kubelet_root`` (stop it when done)."""
    store.create(KINDS[("resource.k8s.io", "deviceclasses")], None, gpu_device_class())
    for obj in gpu_slices(node, topology):
        store.create(KINDS[("resource.k8s.io", "resourceslices")], None, obj)

    async def fetch(namespace: str, name: str) -> Mapping[str, Any]:
        return store.get(KINDS[("resource.k8s.io", "resourceclaims")], namespace, name)

    driver = FakeGpuDriver(gpu_devices(topology), pool=node, fetch_claim=fetch)
    plugin = KubeletPlugin(driver, PluginPaths(kubelet_root, GPU_DRIVER))
    await plugin.start()
    return plugin
