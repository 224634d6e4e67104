"""From a ResourceClaim's allocation to physical CPUs: the pure part of Prepare.

The kubelet hands over only namespace/name/UID; the driver fetches the claim
and must check it itself (right object, allocated, our driver, our pool)
before trusting any device name in it. Everything here is plain data in,
plain data or ``ClaimError`` out: no I/O, no policy state.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

from topodra.cpuset import CPUSet
from topodra.dra.allocation import AllocationFormatError, parse_allocation
from topodra.dra.devices import CAPACITY_CPU, DRIVER, Device
from topodra.quantity import QuantityError
from topodra.quantity import parse_quantity as _parse_quantity

__all__ = [
    "AllocatedDevice",
    "ClaimError",
    "ClaimRef",
    "allocated_devices",
    "check_uid",
    "parse_quantity",
    "pod_consumers",
    "resolve_cpus",
    "whole_cpus",
]

_UID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,127}\Z")


class ClaimError(Exception):
    """A claim this node cannot prepare; the message names the claim and the reason."""


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """What the kubelet sends for a claim."""

    namespace: str
    uid: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} ({self.uid})"


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One allocation result of our driver.

    ``request`` is the base request name (``req`` of ``req/sub``); ``cpus``
    is the consumed ``cpu`` capacity of a multi-allocatable device, None when
    the whole device is allocated.
    """

    request: str
    pool: str
    device: str
    share_id: str | None = None
    cpus: int | None = None


def check_uid(uid: str) -> None:
    """Claim UIDs name files and environment variables: refuse anything but [A-Za-z0-9-]."""
    if not _UID.match(uid or ""):
        raise ClaimError(f"claim UID {uid!r} is not a valid UID (letters, digits and '-', at most 128)")


def parse_quantity(text: object) -> Fraction:
    """A Kubernetes resource.Quantity ("4", "500m", "2Ki", "1e3") as an exact fraction."""
    if isinstance(text, float):
        raise ValueError(f"quantity {text!r} is not a string")
    try:
        return _parse_quantity(text).amount
    except QuantityError:
        raise ValueError(f"invalid quantity {text!r}") from None


def whole_cpus(text: object, *, what: str) -> int:
    """A quantity of CPUs that must be a positive whole number."""
    try:
        value = parse_quantity(text)
    except ValueError as exc:
        raise ClaimError(f"{what}: {exc}") from None
    return _whole(value, what=what, text=text)


def _whole(value: Fraction, *, what: str, text: object = None) -> int:
    if value.denominator != 1 or value <= 0:
        raise ClaimError(f"{what}: {str(value) if text is None else repr(text)} is not a positive whole number of CPUs")
    return int(value)


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def allocated_devices(claim: Mapping[str, Any], ref: ClaimRef, *, pool: str, driver: str = DRIVER) -> list[AllocatedDevice]:
    """Our results in a fetched ResourceClaim, after checking it is the claim the kubelet meant.

    Raises ClaimError for a UID mismatch, an unallocated claim, a result of
    ours from another pool, or a malformed result. Results of other drivers
    are skipped (the kubelet sends the claim to every driver in it).
    """
    uid = _get(claim, "metadata", "uid")
    if uid != ref.uid:
        raise ClaimError(f"claim {ref}: the API server has UID {uid!r} (claim was re-created?)")
    if not isinstance(_get(claim, "status", "allocation"), Mapping):
        raise ClaimError(f"claim {ref} is not allocated")
    try:
        allocation = parse_allocation(claim)
    except AllocationFormatError as exc:
        raise ClaimError(f"claim {ref}: {exc}") from None
    out: list[AllocatedDevice] = []
    for i, result in enumerate(allocation.results if allocation is not None else ()):
        where = f"claim {ref}: status.allocation.devices.results[{i}]"
        if result.driver != driver:
            continue
        if result.pool != pool:
            raise ClaimError(f"{where}: device {result.pool}/{result.device} belongs to another pool than this node's {pool!r}")
        if result.admin_access:
            # Admin access shares devices already in use; a CPU claim is exclusive by nature, and
            # pinning a monitoring container onto someone else's claimed CPUs is never what is meant.
            raise ClaimError(f"{where}: adminAccess is not supported for {driver} devices")
        cpus: int | None = None
        for key in (CAPACITY_CPU, f"{driver}/{CAPACITY_CPU}"):
            consumed = (result.consumed_capacity or {}).get(key)
            if consumed is not None:
                cpus = _whole(consumed.amount, what=f"{where}.consumedCapacity[{key!r}]")
        out.append(AllocatedDevice(result.request.split("/", 1)[0], result.pool, result.device, result.share_id, cpus))
    return out


def pod_consumers(claim: Mapping[str, Any]) -> tuple[str, ...]:
    """UIDs of the pods in ``status.reservedFor``."""
    reserved = _get(claim, "status", "reservedFor") or []
    out: list[str] = []
    if isinstance(reserved, list):
        for entry in reserved:
            if (
                isinstance(entry, Mapping)
                and entry.get("resource") == "pods"
                and entry.get("apiGroup", "") in ("", None)
                and isinstance(entry.get("uid"), str)
            ):
                out.append(entry["uid"])
    return tuple(sorted(set(out)))


def resolve_cpus(
    ref: ClaimRef,
    allocated: Sequence[AllocatedDevice],
    devices: Mapping[str, Device],
    *,
    pick: Callable[[int, CPUSet], CPUSet],
    taken: CPUSet,
) -> list[CPUSet]:
    """The CPUs behind each allocated device, in order.

    Exclusive devices stand for their own CPUs. For a multi-allocatable
    (grouped) device, ``pick(count, within)`` chooses ``count`` CPUs among
    the device's CPUs that are not ``taken`` (nor picked earlier in this
    claim); without a consumed capacity the whole device is meant (the
    scheduler's view when consumable capacity is off).
    """
    out: list[CPUSet] = []
    used = CPUSet()
    for a in allocated:
        device = devices.get(a.device)
        if device is None:
            raise ClaimError(f"claim {ref}: device {a.device!r} is not a {DRIVER} device of this node")
        if device.allow_multiple_allocations and a.cpus is not None:
            free = device.cpus - taken - used
            if a.cpus > len(free):
                raise ClaimError(
                    f"claim {ref}: device {a.device} has {len(free)} free CPUs, {a.cpus} were allocated"
                )
            cpus = pick(a.cpus, free)
            if len(cpus) != a.cpus or not cpus <= free:
                raise ClaimError(
                    f"claim {ref}: the policy picked {cpus} for {a.cpus} CPUs of {a.device} (free: {free})"
                )
        else:
            cpus = device.cpus
            if cpus & used:
                raise ClaimError(f"claim {ref}: device {a.device} is allocated twice in this claim")
        used |= cpus
        out.append(cpus)
    return out
