"""A ResourceClaim's ``status.allocation``, parsed once for everyone who reads it.

The node agent (Prepare) and the simulator (claims allocated before a run, a
replayed or recorded cluster) read the same API field; this is its one parser.
Any shape the API would never return is an ``AllocationFormatError`` naming the
field, never a ``KeyError`` or ``TypeError``. Pure: plain data in, plain data out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from topodra.quantity import Quantity, QuantityError, parse_quantity

__all__ = ["AllocationFormatError", "AllocatedResult", "Allocation", "parse_allocation"]


class AllocationFormatError(ValueError):
    """``status.allocation`` is not shaped as the API writes it; the message names the field."""


@dataclass(frozen=True, slots=True)
class AllocatedResult:
    """One entry of ``status.allocation.devices.results``: parsed by the driver, written by the simulator."""

    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool = False
    tolerations: tuple[Mapping[str, Any], ...] = ()
    binding_conditions: tuple[str, ...] | None = None
    binding_failure_conditions: tuple[str, ...] | None = None
    share_id: str | None = None
    consumed_capacity: Mapping[str, Quantity] | None = None

    @property
    def id(self) -> tuple[str, str, str]:
        """(driver, pool, device): what the allocator keys devices by."""
        return (self.driver, self.pool, self.device)

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {"request": self.request, "driver": self.driver, "pool": self.pool, "device": self.device}
        if self.admin_access:
            out["adminAccess"] = True
        if self.tolerations:
            out["tolerations"] = [dict(t) for t in self.tolerations]
        if self.binding_conditions:
            out["bindingConditions"] = list(self.binding_conditions)
        if self.binding_failure_conditions:
            out["bindingFailureConditions"] = list(self.binding_failure_conditions)
        if self.share_id is not None:
            out["shareID"] = self.share_id
        if self.consumed_capacity:
            out["consumedCapacity"] = {k: str(v) for k, v in sorted(self.consumed_capacity.items())}
        return out


@dataclass(frozen=True, slots=True)
class Allocation:
    """``status.allocation``: the device results, their config and where they can be used."""

    results: tuple[AllocatedResult, ...]
    config: tuple[Mapping[str, Any], ...] = ()
    node_selector: Mapping[str, Any] | None = None


def parse_allocation(claim: Mapping[str, Any], where: str = "status.allocation") -> Allocation | None:
    """The allocation of a ResourceClaim dict, None when it has none (or no results)."""
    status = claim.get("status") if isinstance(claim, Mapping) else None
    if status is None:
        return None
    if not isinstance(status, Mapping):
        raise AllocationFormatError(f"{where.rsplit('.', 1)[0]} is not an object")
    raw = status.get("allocation")
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise AllocationFormatError(f"{where} is not an object")
    devices = raw.get("devices") or {}
    if not isinstance(devices, Mapping):
        raise AllocationFormatError(f"{where}.devices is not an object")
    items = devices.get("results")
    if items is None:
        items = []
    if not isinstance(items, list):
        raise AllocationFormatError(f"{where}.devices.results is not a list")
    results = tuple(_result(r, f"{where}.devices.results[{i}]") for i, r in enumerate(items))
    if not results:
        return None
    config = devices.get("config") or []
    if not isinstance(config, list) or not all(isinstance(c, Mapping) for c in config):
        raise AllocationFormatError(f"{where}.devices.config is not a list of objects")
    selector = raw.get("nodeSelector")
    if selector is not None and not isinstance(selector, Mapping):
        raise AllocationFormatError(f"{where}.nodeSelector is not an object")
    return Allocation(results, tuple(config), selector)


def _text(result: Mapping[str, Any], key: str, where: str) -> str:
    value = result.get(key)
    if not isinstance(value, str) or not value:
        raise AllocationFormatError(f"{where}.{key} is missing")
    return value


def _strings(result: Mapping[str, Any], key: str, where: str) -> tuple[str, ...] | None:
    value = result.get(key)
    if not value:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise AllocationFormatError(f"{where}.{key} is not a list of strings")
    return tuple(value)


def _result(raw: Any, where: str) -> AllocatedResult:
    if not isinstance(raw, Mapping):
        raise AllocationFormatError(f"{where} is not an object")
    share = raw.get("shareID")
    if share is not None and not isinstance(share, str):
        raise AllocationFormatError(f"{where}.shareID is not a string")
    tolerations = raw.get("tolerations") or []
    if not isinstance(tolerations, list) or not all(isinstance(t, Mapping) for t in tolerations):
        raise AllocationFormatError(f"{where}.tolerations is not a list of objects")
    consumed_raw = raw.get("consumedCapacity")
    consumed: dict[str, Quantity] | None = None
    if consumed_raw is not None:
        if not isinstance(consumed_raw, Mapping):
            raise AllocationFormatError(f"{where}.consumedCapacity is not an object")
        consumed = {}
        for key, text in consumed_raw.items():
            try:
                consumed[str(key)] = parse_quantity(text)
            except QuantityError as e:
                raise AllocationFormatError(f"{where}.consumedCapacity[{key!r}]: invalid quantity {text!r} ({e})") from None
    return AllocatedResult(
        request=_text(raw, "request", where),
        driver=_text(raw, "driver", where),
        pool=_text(raw, "pool", where),
        device=_text(raw, "device", where),
        admin_access=bool(raw.get("adminAccess")),
        tolerations=tuple(tolerations),
        binding_conditions=_strings(raw, "bindingConditions", where),
        binding_failure_conditions=_strings(raw, "bindingFailureConditions", where),
        share_id=share or None,
        consumed_capacity=consumed or None,
    )
