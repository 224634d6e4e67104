"""What a pod's claims take of its node's resources (KEP-5517, ``DRANodeAllocatableResources``):
the ``status.nodeAllocatableResourceClaimStatuses`` kube-scheduler 1.36 writes, from the allocated
devices' ``nodeAllocatableResourceMappings``.

Reproduces ``buildNodeAllocatableDRAInfo`` and the claim selection of
``calculateAndCheckNodeAllocatableResources``
(pkg/scheduler/framework/plugins/dynamicresources/nodeallocatabledynamicresources.go, Kubernetes
v1.36.2): a device found by pool and device name (the driver is not compared); a mapping with
``capacityKey`` takes the claim's consumed capacity of that key (times ``allocationMultiplier``),
one without takes ``allocationMultiplier`` per allocated device; a claim counts when one of its
devices has mappings; each status lists the containers that reference the claim (init
containers first) and the statuses are sorted by claim name. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from topodra.quantity import Quantity, QuantityError, parse_quantity
from topodra.sim.allocator import AllocationError, ClaimAllocation
from topodra.sim.objects import ObjectError
from topodra.sim.podfit import ClaimResources, NodeUsage, NodeView, PodView, claim_fit_reasons

__all__ = ["ClaimAccounting", "MappingIndex", "claim_statuses", "mapped_resources", "unreferenced_reason"]

Mappings = Mapping[str, Mapping[str, Any]]


class MappingIndex:
    """The ``nodeAllocatableResourceMappings`` of every device, by (pool, device name), from the
    slices in order (the first slice of a pool listing the name is the one found)."""

    def __init__(self, slices: Iterable[Mapping[str, Any]]) -> None:
        self._known: set[tuple[str, str]] = set()
        self._mappings: dict[tuple[str, str], Mappings] = {}
        for s in slices:
            spec = s.get("spec") or {}
            pool = str((spec.get("pool") or {}).get("name") or "")
            for d in spec.get("devices") or ():
                key = (pool, str(d.get("name")))
                if key in self._known:
                    continue
                self._known.add(key)
                if d.get("nodeAllocatableResourceMappings"):
                    self._mappings[key] = d["nodeAllocatableResourceMappings"]

    def __bool__(self) -> bool:
        """Whether any device has mappings (without any, nothing here changes a decision)."""
        return bool(self._mappings)

    def get(self, pool: str, device: str) -> Mappings | None:
        return self._mappings.get((pool, device))


def _quantity(value: Any, what: str) -> Quantity:
    try:
        return parse_quantity(value)
    except QuantityError as e:
        raise ObjectError(f"{what}: {e}") from None


def mapped_resources(claim: str, allocation: ClaimAllocation, index: MappingIndex) -> dict[str, Quantity] | None:
    """What ``claim`` (namespace/name) takes of the node through its devices' mappings; None when
    none of its devices has mappings (the claim does not count). ``AllocationError`` (the
    scheduler's error for the node) for a ``capacityKey`` mapping of a result without consumed
    capacity."""
    total: dict[str, Quantity] = {}
    counted = False
    for r in allocation.results:
        mappings = index.get(r.pool, r.device)
        if not mappings:
            continue
        counted = True
        for name, m in mappings.items():
            # an allocationMultiplier left out is 1: the API server's default (SetDefaults_Device)
            key, multiplier = m.get("capacityKey"), m.get("allocationMultiplier")
            multiplier = "1" if multiplier is None else multiplier
            factor = _quantity(multiplier, f"device {r.device}: nodeAllocatableResourceMappings[{name}]")
            if key:
                if r.consumed_capacity is None:
                    raise AllocationError(
                        f"claim {claim}, device {r.device}: ConsumedCapacity is nil, but Capacity key '{key}' is set "
                        f"in NodeAllocatableResourceMappings for resource {name}"
                    )
                consumed = r.consumed_capacity.get(str(key))
                if consumed is None:
                    continue  # this allocation does not consume that capacity
                quantity = Quantity(consumed.amount * factor.amount, consumed.format)
            else:
                quantity = factor
            total[name] = total[name] + quantity if name in total else quantity
    return total if counted else None


def claim_statuses(
    pod: PodView, refs: Mapping[str, str | None], claims: Sequence[tuple[str, str, dict[str, Quantity]]]
) -> list[ClaimResources]:
    """The pod's ``nodeAllocatableResourceClaimStatuses`` for ``claims`` ((claim key, claim name,
    its mapped resources), only claims that count); ``refs``: the pod's claim names -> claim key."""
    containers: dict[str, list[str]] = {key: [] for key, _, resources in claims if resources}
    for container, names in pod.container_claims:
        for n in names:
            key = refs.get(n)
            if key is not None and key in containers:
                containers[key].append(container)
    out = [ClaimResources(name, tuple(containers[key]), resources) for key, name, resources in claims if resources]
    return sorted(out, key=lambda s: s.claim)


def unreferenced_reason(statuses: Sequence[ClaimResources]) -> str | None:
    """The scheduler's refusal of a claim no container references (the first, by name), or None."""
    for s in statuses:
        if not s.containers:
            return f"claim {s.claim}: node-allocatable resource claim not referenced by any container within the pod"
    return None


class ClaimAccounting:
    """A scheduler's part of ``DRANodeAllocatableResources``: what new claims map to (from the
    slices' mappings, read again after ``reset``), the DynamicResources checks of a pod on a node
    and the statuses it writes. ``enabled`` False (the gate off): nothing counts."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._index: MappingIndex | None = None

    def reset(self) -> None:
        """The slices changed."""
        self._index = None

    def mapped(
        self, slices: Iterable[Mapping[str, Any]], claims: Sequence[str], allocations: Sequence[ClaimAllocation]
    ) -> tuple[dict[str, Quantity] | None, ...]:
        """Per claim (namespace/name) of a fresh allocation, what it maps to (None: no mapped device);
        empty with the gate off or no mapping anywhere."""
        if not self.enabled:
            return ()
        if self._index is None:
            self._index = MappingIndex(slices)
        if not self._index:
            return ()
        return tuple(mapped_resources(c, a, self._index) for c, a in zip(claims, allocations, strict=True))

    def held_elsewhere(self, pod: PodView, usage: NodeUsage, allocated_here: Iterable[str]) -> str | None:
        """validateNodeAllocatableDRAClaimSharing: of the pod's claims allocated for this node (their
        names), the first another pod on the node holds as node-allocatable."""
        if not self.enabled:
            return None
        for name in allocated_here:
            users = usage.claim_users.get(f"{pod.namespace}/{name}")
            if users and len(users) > 1:
                return f"node allocatable resource claim {name} shared by multiple pods"
            if users and pod.key not in users:
                return f"node allocatable resource claim {name} is already used by another pod"
        return None

    @staticmethod
    def check(
        pod: PodView,
        refs: Mapping[str, str | None],
        counted: Sequence[tuple[str, str, dict[str, Quantity]]],
        node: NodeView,
        usage: NodeUsage,
    ) -> tuple[list[str], list[ClaimResources]]:
        """The pod's statuses for the ``counted`` claims on ``node`` and why it does not fit there
        (empty: it fits): a claim no container references, then the node's resources."""
        mine = claim_statuses(pod, refs, counted)
        why = unreferenced_reason(mine)
        return ([why] if why is not None else claim_fit_reasons(pod, mine, node, usage)), mine
