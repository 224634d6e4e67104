"""Fields of a disabled feature gate, dropped before validation as a real API server's registry
strategies drop them (``PrepareForCreate``/``PrepareForUpdate``): silently, and kept on an update
when the stored object already uses the field (so turning a gate off breaks no object).

Kubernetes v1.36.2: ``dropDisabledDRANodeAllocatableResourcesFields``
(pkg/registry/resource/resourceslice/strategy.go) and ``dropPodNodeAllocatableResourceStatus``
(pkg/api/pod/util.go).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from topodra.gates import NODE_ALLOCATABLE

__all__ = ["drop_disabled_fields"]

_MAPPINGS = "nodeAllocatableResourceMappings"
_STATUSES = "nodeAllocatableResourceClaimStatuses"


def _devices(obj: Mapping[str, Any] | None) -> list[Any]:
    spec = (obj or {}).get("spec")
    devices = spec.get("devices") if isinstance(spec, Mapping) else None
    return devices if isinstance(devices, list) else []


def _mappings_in_use(old: Mapping[str, Any] | None) -> bool:
    return any(isinstance(d, Mapping) and d.get(_MAPPINGS) for d in _devices(old))


def _statuses_in_use(old: Mapping[str, Any] | None) -> bool:
    status = (old or {}).get("status")
    return isinstance(status, Mapping) and bool(status.get(_STATUSES))


def drop_disabled_fields(gates: Mapping[str, bool], plural: str, new: dict[str, Any], old: Mapping[str, Any] | None) -> None:
    """Drop from ``new`` (in place) what a disabled gate's field holds, unless ``old`` uses it."""
    if gates.get(NODE_ALLOCATABLE, False):
        return
    if plural == "resourceslices" and not _mappings_in_use(old):
        for d in _devices(new):
            if isinstance(d, dict):
                d.pop(_MAPPINGS, None)
    elif plural == "pods" and not _statuses_in_use(old):
        status = new.get("status")
        if isinstance(status, dict):
            status.pop(_STATUSES, None)
