"""Does the API server keep ``nodeAllocatableResourceMappings``? One dry-run create, at start.

A 1.36 API server with the gate ``DRANodeAllocatableResources`` off (its default: alpha) does not
refuse the field, it drops it silently; an older one drops it as an unknown field. So the probe
creates, with ``dryRun=All`` (nothing is stored), a slice of this node holding one device with its
mappings and reads the answer: the mappings are published (``devices.nodeAllocatable: auto``) only
if the answer still has them. The agent logs the outcome in one line.
"""

from __future__ import annotations

from dataclasses import dataclass

from topodra.dra.devices import DRIVER, Device
from topodra.kube.client import RESOURCE_SLICES, KubeClient
from topodra.kube.errors import ApiError

__all__ = ["ProbeResult", "probe_node_allocatable"]

_FIELD = "nodeAllocatableResourceMappings"


@dataclass(frozen=True)
class ProbeResult:
    """Whether to publish the mappings, and the line that says why."""

    publish: bool
    line: str


#: The device the probe sends: any device with a mapping does.
_PROBE_DEVICE = Device(name="probe", attributes={}, node_allocatable={"cpu": {"allocationMultiplier": "1"}})


def _probe_slice(node_name: str, device: Device) -> dict[str, object]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        # generateName: never the name of a slice already published (a dry run still says AlreadyExists)
        "metadata": {"generateName": f"{node_name}-{DRIVER}-probe-"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 0, "resourceSliceCount": 1},
            "devices": [device.to_api()],
        },
    }


async def probe_node_allocatable(kube: KubeClient, node_name: str) -> ProbeResult:
    """Dry-run create a slice of ``node_name`` holding a device with a mapping and see whether the
    server kept it. An error answers "publish": the field is harmless to a server that drops it,
    and the slice writes report a dropped field."""
    try:
        answer = await kube.create(RESOURCE_SLICES, _probe_slice(node_name, _PROBE_DEVICE), dry_run=True)
    except ApiError as err:
        return ProbeResult(
            True,
            f"nodeAllocatableResourceMappings: published; the dry-run probe failed ({err.code} {err.reason}: "
            f"{err.message}), so whether the API server keeps them is not known",
        )
    devices = (answer.get("spec") or {}).get("devices") or []
    kept = bool(devices) and bool(devices[0].get(_FIELD))
    if kept:
        return ProbeResult(
            True,
            "nodeAllocatableResourceMappings: published; the API server keeps them (DRANodeAllocatableResources on): "
            "the scheduler counts claimed CPUs against the node's cpu",
        )
    return ProbeResult(
        False,
        "nodeAllocatableResourceMappings: not published; the API server drops them (DRANodeAllocatableResources off): "
        "the scheduler counts claimed CPUs as free node cpu (docs/dra.md, node CPU accounting)",
    )
