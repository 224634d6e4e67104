"""The structured DRA allocator of Kubernetes 1.36, in Python.

``Allocator(slices, classes, state).allocate(node, claims)`` returns one ``ClaimAllocation`` per
claim, ``None`` when the node has no solution, or raises ``AllocationError`` (unknown class,
CEL error, more than 32 devices, "All" over an incomplete pool...). It searches exactly as
kube-scheduler does: depth-first over claims, requests and device slots; devices in pool,
slice and list order; combinations, not permutations, inside a request; ``firstAvailable``
subrequests in order; exact rollback; the 32-result early-prune rule. The first solution wins,
so the result is the scheduler's, and ``SearchStats`` counts the scheduler's work.

Upstream followed: ``staging/src/k8s.io/dynamic-resource-allocation/structured/`` of Kubernetes
v1.36.2, as vendored by openshift/microshift (``deps/github.com/openshift/kubernetes``,
openshift/kubernetes commit 98b35193b2ac7a23a673325f5e9b830ecd5ba406). ``allocator.go`` there
picks the first of the variants ``stable``, ``incubating``, ``experimental`` that supports every
enabled feature; with 1.36's default gates ``DRAConsumableCapacity`` and
``DRADeviceBindingConditions`` are on (beta), which ``stable`` lacks, and
``DRAListTypeAttributes`` (alpha, the only addition of ``experimental``) is off: the scheduler
runs ``internal/incubating``. It runs it with that gate on too: the scheduler passes the gate to
its CEL environment but not to the allocator (``AllocatorFeatures`` in
``pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go``), so ``experimental``
is never chosen in 1.36 (the recording ``v13-pcie-root`` shows it). This package follows
``incubating``, module by module:

- ``search``: ``internal/incubating/allocator_incubating.go`` (``Allocate``,
  ``validateDeviceRequest``, ``allocateOne``, ``isSelectable``, ``allocateDevice``,
  ``checkAvailableCounters``, ``createNodeSelector``), the plain search;
- ``constraints``: ``matchAttributeConstraint`` (``allocator_incubating.go``) and
  ``internal/incubating/constraint.go`` (``distinctAttributeConstraint``);
- ``capacity``: ``internal/incubating/consumable_capacity.go``;
- ``taints``: ``taintPreventsAllocation`` (``allocator_incubating.go``);
- ``resourcepools``: ``internal/incubating/pools_incubating.go`` (``GatherPools``, ``NodeMatches``);
- ``results``: the API records, ``AllocatedState`` (``internal/allocatedstate.go``), the
  counted work and the Filter timeout (``FilterBudget``).

The accelerations change only our own effort, never an answer or a counted figure. Each is one
module behind one interface (``hooks.Acceleration``): asked at each allocateOne call that looks
for a device, it answers what the plain search would answer (having counted the same work) or
declines, and then the plain search runs:

- ``solver``: the last request decided by dynamic programming;
- ``memo``: failing subtrees remembered by what the rest of the search can see;
- ``prune``: hopeless subtrees decided by counting;
- ``masks``: the device loop over bit masks (``bitsets``: the masks they share);
- ``firstfit``: a whole Allocate call of plain requests answered from the in-use bitmap; the
  scheduler asks it first and calls the allocator when it declines (None).

``Allocator(..., plain=True)`` runs the plain search alone.
"""

from topodra.sim.allocator.prune import hopeless_group_work
from topodra.sim.allocator.results import (
    INVALID_POOLS_MESSAGE,
    TIMEOUT_MESSAGE,
    AllocatedState,
    AllocationError,
    ClaimAllocation,
    DeviceResult,
    FilterBudget,
    FilterTimeout,
    InvalidPools,
    ObjectError,
    SearchAborted,
    SearchStats,
    allocation_of_claim,
    share_id,
    write_allocation,
)
from topodra.sim.allocator.search import Allocator, reads_only_driver

__all__ = [
    "ObjectError",
    "AllocationError",
    "SearchAborted",
    "InvalidPools",
    "INVALID_POOLS_MESSAGE",
    "TIMEOUT_MESSAGE",
    "FilterTimeout",
    "FilterBudget",
    "AllocatedState",
    "DeviceResult",
    "ClaimAllocation",
    "SearchStats",
    "Allocator",
    "write_allocation",
    "share_id",
    "allocation_of_claim",
    "hopeless_group_work",
    "reads_only_driver",
]
