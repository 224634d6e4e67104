"""The record of a replay: one ``Step`` per scheduling decision or deletion.

Claims appear as the API shows them (``status.allocation`` in the ResourceClaim
status shape, ``reservedFor`` as pod names), so a step can be read, diffed or
dumped as YAML without knowing the replay's internals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ClaimState", "Step"]


@dataclass
class ClaimState:
    """One claim as a pod sees it in a step (``state`` only in delete steps)."""

    pod_claim: str
    claim: str
    generated: bool
    allocation: dict[str, Any] | None  # status.allocation as the API writes it
    reserved_for: list[str]
    state: str | None = None  # delete: deallocated | still-allocated | deleted | unallocated

    @property
    def devices(self) -> list[str]:
        return [r["device"] for r in (self.allocation or {}).get("devices", {}).get("results", [])]


@dataclass
class Step:
    """One scheduling decision or deletion."""

    op: str  # create | bound | scheduled-later | delete | still-pending
    pod: str
    namespace: str
    source: str = ""
    node: str | None = None
    failure: str | None = None  # kube-scheduler's message when the pod stays pending
    claims: list[ClaimState] = field(default_factory=list)
    feasible: list[str] = field(default_factory=list)
    scores: dict[str, int] = field(default_factory=dict)  # total per node
    plugin_scores: dict[str, dict[str, int]] = field(default_factory=dict)  # node -> plugin -> weighted score
    top: list[str] = field(default_factory=list)  # best-scoring nodes when several tie
    followed_hint: bool = False  # a tie resolved by the ``prefer`` hint
    #: pools ("driver/pool") whose completeness depended on the scheduler's listing order when
    #: this pod was scheduled (their slices disagree on resourceSliceCount)
    random_pools: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)  # still-pending: pods that stayed pending
    #: the pod's status.nodeAllocatableResourceClaimStatuses once bound (DRANodeAllocatableResources)
    node_allocatable: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"op": self.op}
        if self.op == "still-pending":
            out["after"] = self.pod
            out["pods"] = self.pending
            return out
        out["pod"] = self.pod
        out["namespace"] = self.namespace
        if self.op != "delete":
            out["node"] = self.node
        if self.failure is not None:
            out["failure"] = self.failure
        claims = []
        for c in self.claims:
            entry: dict[str, Any] = {"podClaimName": c.pod_claim, "claimName": c.claim, "generated": c.generated}
            if c.state is not None:
                entry["state"] = c.state
                entry["reservedForAfter"] = c.reserved_for
            else:
                entry["allocation"] = c.allocation
                entry["reservedFor"] = c.reserved_for
            claims.append(entry)
        if claims:
            out["claims"] = claims
        if self.node_allocatable:
            out["nodeAllocatableResourceClaimStatuses"] = self.node_allocatable
        if len(self.feasible) > 1:
            out["feasibleNodes"] = self.feasible
            out["scores"] = {n: {"plugins": self.plugin_scores.get(n, {}), "total": t} for n, t in self.scores.items()}
        if len(self.top) > 1:
            out["tie"] = self.top
        if self.source:
            out["source"] = self.source
        return out
