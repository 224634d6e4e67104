"""What a real API server does to an object before validating it: its defaults (set when the
request is decoded), then the fields of a disabled feature gate dropped by the registry
strategies (``PrepareForCreate``/``PrepareForUpdate``): silently, and kept on an update when the
stored object already uses the field (so turning a gate off breaks no object).

Kubernetes v1.36.2: ``SetDefaults_Device``, ``SetDefaults_DeviceTaint`` (pkg/apis/resource/v1/defaults.go),
``dropDisabledDRANodeAllocatableResourcesFields`` and ``dropDisableDRAListTypeAttributesFields``
(pkg/registry/resource/resourceslice/strategy.go) and ``dropPodNodeAllocatableResourceStatus``
(pkg/api/pod/util.go).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from topodra.embedded.defaults import taint_defaults
from topodra.gates import LIST_TYPE_ATTRIBUTES, NODE_ALLOCATABLE

__all__ = ["drop_disabled_fields", "set_defaults"]

_MAPPINGS = "nodeAllocatableResourceMappings"
_LIST_MEMBERS = ("bools", "ints", "strings", "versions")
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


def set_defaults(plural: str, obj: dict[str, Any]) -> None:
    """The defaults the double models: a node-allocatable mapping's ``allocationMultiplier`` is 1;
    device taints' ``timeAdded`` and tolerations' ``operator`` (``embedded/defaults.py``)."""
    taint_defaults(plural, obj)
    if plural != "resourceslices":
        return
    for d in _devices(obj):
        mappings = d.get(_MAPPINGS) if isinstance(d, dict) else None
        if isinstance(mappings, dict):
            for m in mappings.values():
                if isinstance(m, dict) and m.get("allocationMultiplier") is None:
                    m["allocationMultiplier"] = "1"


def _attributes(obj: Mapping[str, Any] | None) -> list[Any]:
    return [a for d in _devices(obj) if isinstance(d, Mapping) for a in (d.get("attributes") or {}).values() if isinstance(a, Mapping)]


def _lists_in_use(old: Mapping[str, Any] | None) -> bool:
    return any(a.get(m) is not None for a in _attributes(old) for m in _LIST_MEMBERS)


def drop_disabled_fields(gates: Mapping[str, bool], plural: str, new: dict[str, Any], old: Mapping[str, Any] | None) -> None:
    """Drop from ``new`` (in place) what a disabled gate's field holds, unless ``old`` uses it."""
    if plural == "resourceslices" and not gates.get(LIST_TYPE_ATTRIBUTES, False) and not _lists_in_use(old):
        # an attribute left without a value is then refused ("exactly one value must be specified")
        for attr in _attributes(new):
            for member in _LIST_MEMBERS:
                if isinstance(attr, dict):
                    attr.pop(member, None)
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
