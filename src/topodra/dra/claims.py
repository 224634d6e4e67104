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
from topodra.dra.params import STEERING, CpuConfig, request_config
from topodra.quantity import QuantityError
from topodra.quantity import parse_quantity as _parse_quantity
from topodra.topology.model import Topology

__all__ = [
    "AllocatedDevice",
    "ClaimError",
    "ClaimRef",
    "allocated_devices",
    "check_uid",
    "claim_configs",
    "claim_memory",
    "core_siblings",
    "parse_quantity",
    "pod_consumers",
    "Pick",
    "check_request",
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
    subrequest: str | None = None  # ``sub`` of a ``req/sub`` result

    @property
    def request_name(self) -> str:
        """The result's request as the allocation names it (``req`` or ``req/sub``)."""
        return self.request if self.subrequest is None else f"{self.request}/{self.subrequest}"


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
        main, _, sub = result.request.partition("/")
        out.append(AllocatedDevice(main, result.pool, result.device, result.share_id, cpus, sub or None))
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


def claim_configs(
    claim: Mapping[str, Any], ref: ClaimRef, allocated: Sequence[AllocatedDevice], *, driver: str = DRIVER
) -> dict[str, CpuConfig]:
    """The merged ``CpuConfig`` of each request of ours (``req`` or ``req/sub``), from the
    allocation's config (class entries first, the claim's win). ClaimError lists every problem."""
    entries = _get(claim, "status", "allocation", "devices", "config")
    if not entries:
        return {}
    try:
        allocation = parse_allocation(claim)
    except AllocationFormatError as exc:  # pragma: no cover - allocated_devices parsed it first
        raise ClaimError(f"claim {ref}: {exc}") from None
    config = allocation.config if allocation is not None else ()
    out: dict[str, CpuConfig] = {}
    problems: list[str] = []
    for name in dict.fromkeys(a.request_name for a in allocated):
        merged, found = request_config(config, name, driver=driver)
        problems.extend(map(str, found))
        if not merged.is_empty:
            out[name] = merged
    if problems:
        raise ClaimError(f"claim {ref}: invalid {driver} parameters: " + "; ".join(problems))
    return out


def core_siblings(topology: Topology, cpus: CPUSet) -> CPUSet:
    """Every online thread of the cores that hold ``cpus``."""
    out = CPUSet()
    for c in cpus:
        info = topology.cpus.get(c)
        out |= CPUSet([c]) if info is None else topology.cpus_of_core(info.core)
    return out & topology.online | cpus


def claim_memory(configs: Mapping[str, CpuConfig]) -> str:
    """The claim's memory nodes: ``all`` when any request asks for all, else ``local``."""
    return "all" if any(c.memory_nodes == "all" for c in configs.values()) else "local"


#: ``pick(count, within, config)``: ``count`` CPUs of ``within`` for a grouped device, as ``config`` steers.
Pick = Callable[[int, CPUSet, CpuConfig], CPUSet]
_NO_CONFIG: Final = CpuConfig()


def resolve_cpus(
    ref: ClaimRef,
    allocated: Sequence[AllocatedDevice],
    devices: Mapping[str, Device],
    *,
    pick: Pick,
    taken: CPUSet,
    configs: Mapping[str, CpuConfig] | None = None,
    siblings: Callable[[CPUSet], CPUSet] | None = None,
) -> list[CPUSet]:
    """The CPUs behind each allocated device, in order.

    Exclusive devices stand for their own CPUs: the scheduler chose them. For a
    multi-allocatable (grouped) device, topodra chooses ``a.cpus`` CPUs among the
    device's CPUs that are not ``taken`` (nor picked earlier in this claim): the
    request's ``cpuset`` if set, else ``pick(count, free, config)``; without a
    consumed capacity the whole device is meant (the scheduler's view when
    consumable capacity is off). ``configs`` (per request, ``claim_configs``) are
    then checked per request (``check_request``); ``siblings(cpus)`` is every online
    thread of the cores of ``cpus``, for ``wholeCores``.
    """
    configs = configs or {}
    out: list[CPUSet] = []
    used = CPUSet()
    for a in allocated:
        device = devices.get(a.device)
        if device is None:
            raise ClaimError(f"claim {ref}: device {a.device!r} is not a {DRIVER} device of this node")
        config = configs.get(a.request_name, _NO_CONFIG)
        if device.allow_multiple_allocations and a.cpus is not None:
            cpus = _share(ref, a, device, device.cpus - taken - used, config, pick)
        else:
            _only_checks(ref, a, config)
            cpus = device.cpus
            if cpus & used:
                raise ClaimError(f"claim {ref}: device {a.device} is allocated twice in this claim")
        used |= cpus
        out.append(cpus)
    for name, config in configs.items():
        mine = CPUSet()
        for a, cpus in zip(allocated, out, strict=True):
            if a.request_name == name:
                mine |= cpus
        check_request(ref, name, mine, config, siblings)
    return out


def _share(ref: ClaimRef, a: AllocatedDevice, device: Device, free: CPUSet, config: CpuConfig, pick: Pick) -> CPUSet:
    """The CPUs of a share of a grouped device: the request's cpuset there, or topodra's pick."""
    assert a.cpus is not None
    if config.cpuset is not None:
        cpus = config.cpuset & device.cpus
        if len(cpus) != a.cpus or not cpus <= free:
            busy = cpus - free
            raise ClaimError(
                f"claim {ref}: request {a.request_name!r}: cpuset {config.cpuset} holds {len(cpus)} CPUs of device "
                f"{a.device}, {a.cpus} were allocated" + (f"; CPUs {busy} are in use" if busy else "")
            )
        return cpus
    if a.cpus > len(free):
        raise ClaimError(f"claim {ref}: device {a.device} has {len(free)} free CPUs, {a.cpus} were allocated")
    cpus = pick(a.cpus, free, config)
    if len(cpus) != a.cpus or not cpus <= free:
        raise ClaimError(f"claim {ref}: the policy picked {cpus} for {a.cpus} CPUs of {a.device} (free: {free})")
    return cpus


def _only_checks(ref: ClaimRef, a: AllocatedDevice, config: CpuConfig) -> None:
    """The scheduler chose this device's CPUs: fields that steer topodra's pick do not apply."""
    for key, value in (("numaPlacement", config.numa_placement), ("preferredCoreType", config.preferred_core_type)):
        if value is not None:
            raise ClaimError(
                f"claim {ref}: request {a.request_name!r}: {key}: {value} steers the CPUs topodra picks in a grouped "
                f"device, but the scheduler chose device {a.device}'s CPUs; use {STEERING[key]} instead"
            )


def check_request(
    ref: ClaimRef, request: str, cpus: CPUSet, config: CpuConfig, siblings: Callable[[CPUSet], CPUSet] | None
) -> None:
    """The request's CPUs against its ``cpuset`` and ``wholeCores`` (ClaimError naming the CPUs)."""
    if config.cpuset is not None and cpus != config.cpuset:
        raise ClaimError(
            f"claim {ref}: request {request!r}: cpuset is {config.cpuset} but the request holds CPUs {cpus}"
            + (f" (not allocated: {config.cpuset - cpus})" if config.cpuset - cpus else "")
        )
    if config.whole_cores and siblings is not None:
        missing = siblings(cpus) - cpus
        if missing:
            raise ClaimError(
                f"claim {ref}: request {request!r}: wholeCores: CPUs {cpus} are not whole cores: "
                f"their cores also hold CPUs {missing}"
            )
