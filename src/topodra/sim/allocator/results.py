"""What an Allocate call returns and reads: errors, the Filter budget, allocation results, the
devices in use in the cluster and the counted work of one call.

The records mirror the scheduler API's (``status.allocation``); ``AllocatedState`` plays the
part of the scheduler's ``AllocatedState`` (allocated devices, shared allocations and their
aggregated consumed capacity).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from topodra.dra.allocation import AllocatedResult, AllocationFormatError, parse_allocation
from topodra.sim.objects import DeviceID, ObjectError

__all__ = [
    "ObjectError",
    "AllocationError",
    "SearchAborted",
    "TIMEOUT_MESSAGE",
    "FilterTimeout",
    "FilterBudget",
    "AllocatedState",
    "DeviceResult",
    "ClaimAllocation",
    "SearchStats",
    "INVALID_POOLS_MESSAGE",
    "InvalidPools",
    "write_allocation",
    "share_id",
    "allocation_of_claim",
]

_SHARE_NS = uuid.UUID("6f1d3c1e-8a7b-4e55-9a43-7d0c2b1e5f10")


class AllocationError(Exception):
    """The scheduler would report an error (not "unschedulable") for this node."""


#: The allocator's words when no allocation was found and some pool is invalid (``Allocate``).
INVALID_POOLS_MESSAGE = "invalid resource pools were encountered"


class InvalidPools(AllocationError):
    """No allocation on this node while some of its pools are invalid: the allocator wraps
    ``ErrFailedAllocationOnNode``, so Filter answers Unschedulable for this node with the message
    (other nodes may still fit), not an error (``Allocate`` in allocator_incubating.go,
    ``Filter`` in dynamicresources.go)."""

    def __init__(self) -> None:
        super().__init__(INVALID_POOLS_MESSAGE)


class SearchAborted(AllocationError):
    """Our own search exceeded its effort cap before the scheduler's Filter timeout was reached."""


#: kube-scheduler's words when Filter abandons the allocator at its timeout (it prefixes "node NAME: ").
TIMEOUT_MESSAGE = "timed out trying to allocate devices"


class FilterTimeout(AllocationError):
    """kube-scheduler would abandon this Filter call at its timeout (``DRASchedulerFilterTimeout``)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(TIMEOUT_MESSAGE)
        self.seconds = seconds


@dataclass(frozen=True, slots=True)
class FilterBudget:
    """The Filter timeout in counted work: the cost model's price of each step and the limit.

    The search stops, as kube-scheduler's does at its deadline, as soon as the
    work it has counted so far is priced above ``timeout_s``.
    """

    timeout_s: float
    per_node_s: float
    per_device_s: float
    per_call_s: float
    per_visit_s: float
    per_check_s: float
    per_cel_eval_s: float

    def seconds(self, s: SearchStats) -> float:
        return (
            self.per_node_s
            + self.per_device_s * s.devices
            + self.per_call_s * s.calls
            + self.per_visit_s * s.visits
            + self.per_check_s * s.checks
            + self.per_cel_eval_s * s.cel_evals
        )


#: One entry of ``status.allocation.devices.results``: the same record the DRA driver parses.
DeviceResult = AllocatedResult


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    """What the scheduler writes to ``status.allocation`` of one claim."""

    claim: str  # namespace/name
    results: tuple[DeviceResult, ...]
    config: tuple[Mapping[str, Any], ...] = ()
    node_selector: Mapping[str, Any] | None = None

    def to_api(self) -> dict[str, Any]:
        devices: dict[str, Any] = {"results": [r.to_api() for r in self.results]}
        if self.config:
            devices["config"] = [dict(c) for c in self.config]
        out: dict[str, Any] = {"devices": devices}
        if self.node_selector is not None:
            out["nodeSelector"] = self.node_selector
        return out


def write_allocation(
    claim: Mapping[str, Any], allocation: ClaimAllocation, pod: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A copy of ``claim`` with ``status.allocation`` set as the scheduler's PreBind writes it.

    With ``pod`` the pod is appended to ``status.reservedFor`` and the
    ``resource.kubernetes.io/delete-protection`` finalizer is added.
    """
    out = dict(claim)
    meta = dict(out.get("metadata") or {})
    status = dict(out.get("status") or {})
    status["allocation"] = allocation.to_api()
    if pod is not None:
        fin = list(meta.get("finalizers") or [])
        if "resource.kubernetes.io/delete-protection" not in fin:
            fin.append("resource.kubernetes.io/delete-protection")
        meta["finalizers"] = fin
        pmeta = pod.get("metadata") or {}
        ref = {"resource": "pods", "name": pmeta.get("name", ""), "uid": pmeta.get("uid", "")}
        reserved = [r for r in status.get("reservedFor") or [] if r.get("uid") != ref["uid"]]
        status["reservedFor"] = [*reserved, ref]
    out["metadata"] = meta
    out["status"] = status
    return out


def share_id(claim_uid: str, request: str, device: DeviceID, index: int) -> str:
    """Deterministic stand-in for the scheduler's random shareID UID."""
    return str(uuid.uuid5(_SHARE_NS, f"{claim_uid}/{request}/{'/'.join(device)}/{index}"))


class AllocatedState:
    """Devices in use in the cluster: exclusive ones, shared allocations and consumed capacity."""

    def __init__(self) -> None:
        self.devices: set[DeviceID] = set()
        self.shared: dict[DeviceID, set[str]] = {}
        self.capacity: dict[DeviceID, dict[str, Fraction]] = {}
        self.version = 0  # bumped on every change (cheap cache key)

    def add(self, allocation: ClaimAllocation) -> None:
        for r in allocation.results:
            if r.admin_access:
                continue
            if r.share_id is not None:
                self.shared.setdefault(r.id, set()).add(r.share_id)
                agg = self.capacity.setdefault(r.id, {})
                for k, q in (r.consumed_capacity or {}).items():
                    agg[k] = agg.get(k, Fraction(0)) + q.amount
            else:
                self.devices.add(r.id)
        self.version += 1

    def remove(self, allocation: ClaimAllocation) -> None:
        for r in allocation.results:
            if r.admin_access:
                continue
            if r.share_id is not None:
                shares = self.shared.get(r.id, set())
                shares.discard(r.share_id)
                agg = self.capacity.get(r.id)
                if agg is not None:
                    for k, q in (r.consumed_capacity or {}).items():
                        agg[k] = agg.get(k, Fraction(0)) - q.amount
                if not shares:
                    self.shared.pop(r.id, None)
                    self.capacity.pop(r.id, None)
            else:
                self.devices.discard(r.id)
        self.version += 1

    def is_allocated(self, device_id: DeviceID) -> bool:
        return device_id in self.devices or device_id in self.capacity or device_id in self.shared

    @classmethod
    def from_claims(cls, claims: Iterable[Mapping[str, Any]]) -> AllocatedState:
        """The state implied by the ``status.allocation`` of existing claims."""
        st = cls()
        for c in claims:
            a = allocation_of_claim(c)
            if a is not None:
                st.add(a)
        return st


def allocation_of_claim(claim: Mapping[str, Any]) -> ClaimAllocation | None:
    """The ``status.allocation`` of a claim dict as a ``ClaimAllocation`` (None if unallocated)."""
    meta = claim.get("metadata") or {}
    try:
        allocation = parse_allocation(claim)
    except AllocationFormatError as e:
        raise ObjectError(f"ResourceClaim {meta.get('name')}: {e}") from None
    if allocation is None:
        return None
    ns, name = meta.get("namespace") or "", meta.get("name") or ""
    return ClaimAllocation(f"{ns}/{name}" if ns else str(name), allocation.results, allocation.config, allocation.node_selector)


@dataclass(slots=True)
class SearchStats:
    """What kube-scheduler's own search does for one Allocate call (plus our own effort)."""

    calls: int = 0  # allocateOne invocations
    visits: int = 0  # candidate devices looked at in the search loops
    checks: int = 0  # allocateDevice attempts (availability, counters, taints, constraints)
    cel_evals: int = 0  # selector evaluations (memoised per device and request inside one call)
    devices: int = 0  # devices in usable pools for the node
    pruned: int = 0  # subtrees we decided by counting
    our_calls: int = 0  # allocateOne-equivalents we actually executed
    engine_evals: int = 0  # CEL evaluations we actually ran (cross-call cache misses)

    def add(self, o: SearchStats) -> None:
        self.calls += o.calls
        self.visits += o.visits
        self.checks += o.checks
        self.cel_evals += o.cel_evals
        self.devices += o.devices
        self.pruned += o.pruned
        self.our_calls += o.our_calls
        self.engine_evals += o.engine_evals
