"""ResourceSlices for one node: the pool of ``native.cpu`` devices, chunked by the API limits.

Pure: devices in, ResourceSlice JSON out. One pool per node (pool name = node
name, so device ids never collide across nodes, unlike the prototype's
``pool0``), slices named ``<node>-native.cpu-<index>`` so a re-publish
updates the same objects, every slice carrying the pool's generation and
slice count.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Final

from topodra.dra.attributes import is_dns_subdomain
from topodra.dra.devices import DRIVER, Device

__all__ = [
    "MAX_DEVICES_PER_SLICE",
    "MAX_DEVICES_PER_SLICE_ADVANCED",
    "build_slices",
    "chunk_devices",
    "slice_name",
]

MAX_DEVICES_PER_SLICE: Final = 128
#: Limit for a slice holding a device with taints, counters or list attributes.
MAX_DEVICES_PER_SLICE_ADVANCED: Final = 64
_MAX_NAME: Final = 253


def slice_name(node_name: str, index: int, driver: str = DRIVER) -> str:
    """Stable slice name; node names too long for the 253-character limit are shortened with a hash."""
    name = f"{node_name}-{driver}-{index}"
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(node_name.encode()).hexdigest()[:10]
    tail = f"-{digest}-{driver}-{index}"
    head = node_name[: _MAX_NAME - len(tail)].rstrip(".-")
    return head + tail


def chunk_devices(devices: Sequence[Device]) -> list[list[Device]]:
    """Split devices into slices in order: 128 per slice, 64 in a slice holding an advanced device."""
    chunks: list[list[Device]] = []
    current: list[Device] = []
    advanced = False
    for device in devices:
        adv = advanced or device.uses_advanced_features
        limit = MAX_DEVICES_PER_SLICE_ADVANCED if adv else MAX_DEVICES_PER_SLICE
        if len(current) + 1 > limit:
            chunks.append(current)
            current, adv = [], device.uses_advanced_features
        current.append(device)
        advanced = adv
    if current or not chunks:
        chunks.append(current)
    return chunks


def build_slices(
    node_name: str,
    devices: Sequence[Device],
    *,
    generation: int = 1,
    node_uid: str | None = None,
    driver: str = DRIVER,
) -> list[dict[str, Any]]:
    """The ResourceSlice objects (resource.k8s.io/v1) publishing ``devices`` for ``node_name``.

    A node with no devices still gets one empty slice, so the pool exists and
    is complete. Raises ValueError for a bad node name, generation or
    duplicate device name.
    """
    if not is_dns_subdomain(node_name):
        raise ValueError(f"node name {node_name!r} is not a DNS subdomain")
    if generation < 1:
        raise ValueError(f"pool generation must be positive, got {generation}")
    seen: set[str] = set()
    for d in devices:
        if d.name in seen:
            raise ValueError(f"device name {d.name!r} appears twice in pool {node_name!r}")
        seen.add(d.name)
    chunks = chunk_devices(devices)
    owner: list[dict[str, Any]] = []
    if node_uid:
        owner = [
            {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid, "controller": True}
        ]
    out: list[dict[str, Any]] = []
    for index, chunk in enumerate(chunks):
        metadata: dict[str, Any] = {"name": slice_name(node_name, index, driver)}
        if owner:
            metadata["ownerReferences"] = [dict(o) for o in owner]
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": metadata,
                "spec": {
                    "driver": driver,
                    "nodeName": node_name,
                    "pool": {"name": node_name, "generation": generation, "resourceSliceCount": len(chunks)},
                    "devices": [d.to_api() for d in chunk],
                },
            }
        )
    return out
