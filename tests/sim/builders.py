"""Compact builders for resource.k8s.io/v1 objects used by the simulator tests (our own test data)."""

from __future__ import annotations

from typing import Any

DRIVER = "dra.example.com"


def attrs(**values: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in values.items():
        if isinstance(v, bool):
            out[k] = {"bool": v}
        elif isinstance(v, int):
            out[k] = {"int": v}
        else:
            out[k] = {"string": v}
    return out


def device(name: str, attributes: dict[str, Any] | None = None, capacity: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"name": name}
    if attributes:
        d["attributes"] = attributes
    if capacity:
        d["capacity"] = {k: (v if isinstance(v, dict) else {"value": str(v)}) for k, v in capacity.items()}
    d.update(extra)
    return d


def slice_(
    name: str,
    node: str | None,
    devices: list[dict[str, Any]],
    *,
    driver: str = DRIVER,
    pool: str | None = None,
    generation: int = 1,
    count: int = 1,
    **spec: Any,
) -> dict[str, Any]:
    s: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": pool or node or name, "generation": generation, "resourceSliceCount": count},
        "devices": devices,
    }
    if node:
        s["nodeName"] = node
    s.update(spec)
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": s}


def dclass(name: str, *exprs: str, config: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": e}} for e in exprs]}
    if config:
        spec["config"] = config
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def req(name: str, cls: str = "cls", count: int | None = 1, *selectors: str, **extra: Any) -> dict[str, Any]:
    ex: dict[str, Any] = {"deviceClassName": cls}
    if count is not None:
        ex["count"] = count
    if selectors:
        ex["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    ex.update(extra)
    return {"name": name, "exactly": ex}


def sub(name: str, cls: str = "cls", count: int = 1, *selectors: str, **extra: Any) -> dict[str, Any]:
    s: dict[str, Any] = {"name": name, "deviceClassName": cls, "count": count}
    if selectors:
        s["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    s.update(extra)
    return s


def first_available(name: str, *subs: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "firstAvailable": list(subs)}


def claim(
    name: str,
    *requests: dict[str, Any],
    constraints: list[dict[str, Any]] | None = None,
    config: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    if config:
        devices["config"] = config
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"devices": devices},
    }


def picked(allocs: list[Any] | None) -> list[list[tuple[str, str]]] | None:
    """[(request, device), ...] per claim, or None."""
    if allocs is None:
        return None
    return [[(r.request, r.device) for r in a.results] for a in allocs]
