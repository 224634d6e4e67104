"""The playground's scheduler and claim controller, on the simulator's allocator.

For a new pod it does what kube-scheduler's NodeResourcesFit and DynamicResources
plugins and the resourceclaim controller do together (the checks are the simulator's:
``sim.podfit``, ``sim.nodealloc``):
- creates the pod's ResourceClaims from their templates (name
  ``<pod>-<claim>-<suffix>``, annotation ``resource.kubernetes.io/pod-claim-name``)
  and records them in ``status.resourceClaimStatuses``;
- checks the pod's requests against the node's ``status.allocatable`` less what the
  pods bound to it request (their claims' node-allocatable resources too, with the
  API server's ``DRANodeAllocatableResources`` gate on), in kube-scheduler's words
  (``0/1 nodes are available: 1 Insufficient cpu.``);
- allocates every unallocated claim with ``topodra.sim.allocator.Allocator``
  (the one allocator of the project) over the published ResourceSlices and
  DeviceClasses, taking devices allocated to other claims as in use; with the gate,
  what the new claims map to of the node's cpu is checked with the pod's requests;
- writes ``status.allocation`` and ``status.reservedFor``, the pod's
  ``status.nodeAllocatableResourceClaimStatuses`` (with the gate) and binds the pod
  (``spec.nodeName``).
When the pod goes away it removes the reservation and deletes the claims
generated for it, which frees their devices.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from topodra.embedded.store import KINDS, Store
from topodra.gates import LIST_TYPE_ATTRIBUTES, NODE_ALLOCATABLE
from topodra.kube.errors import ApiError
from topodra.sim.allocator import (
    AllocatedState,
    AllocationError,
    Allocator,
    ClaimAllocation,
    write_allocation,
)
from topodra.sim.nodealloc import ClaimAccounting
from topodra.sim.podfit import (
    ClaimResources,
    NodeUsage,
    NodeView,
    PodView,
    filter_reasons,
    parse_node_view,
    parse_pod,
)

__all__ = ["EmbeddedScheduler", "SchedulingError"]

PODS = KINDS[("", "pods")]
CLAIMS = KINDS[("resource.k8s.io", "resourceclaims")]
TEMPLATES = KINDS[("resource.k8s.io", "resourceclaimtemplates")]
SLICES = KINDS[("resource.k8s.io", "resourceslices")]
CLASSES = KINDS[("resource.k8s.io", "deviceclasses")]
NODES = KINDS[("", "nodes")]

POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"


class SchedulingError(RuntimeError):
    """The pod cannot be scheduled: a clear reason, never a hang."""


def _suffix(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:5]


def _unschedulable(reasons: list[str]) -> str:
    """kube-scheduler's message for a pod no node fits (the playground has one node)."""
    return "0/1 nodes are available: " + ", ".join(sorted(f"1 {r}" for r in reasons)) + "."


def _key(claim: Mapping[str, Any]) -> str:
    return f"{claim['metadata'].get('namespace', 'default')}/{claim['metadata']['name']}"


class EmbeddedScheduler:
    def __init__(self, store: Store, node_name: str) -> None:
        self.store = store
        self.node_name = node_name

    def _allocator(self, slices: list[dict[str, Any]], classes: list[dict[str, Any]], state: AllocatedState) -> Allocator:
        """The allocator with the scheduler's gates (``store.gates``: the CEL sees lists with
        ``DRAListTypeAttributes``)."""
        return Allocator(slices, classes, state, list_type_attributes=self.store.gates.get(LIST_TYPE_ATTRIBUTES, False))

    # --- claims of a pod ---------------------------------------------------------------------------
    def pod_claims(self, pod: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The pod's claims in ``spec.resourceClaims`` order, creating template claims as needed."""
        meta = pod["metadata"]
        ns = meta.get("namespace", "default")
        statuses = {s["name"]: s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
        out: list[dict[str, Any]] = []
        new_statuses: list[dict[str, Any]] = []
        for ref in (pod.get("spec") or {}).get("resourceClaims") or []:
            name = ref.get("name", "")
            if ref.get("resourceClaimName"):
                try:
                    out.append(self.store.get(CLAIMS, ns, ref["resourceClaimName"]))
                except ApiError as err:
                    raise SchedulingError(
                        f"pod {ns}/{meta['name']}: claim {ref['resourceClaimName']!r} (for {name!r}): {err}"
                    ) from None
                continue
            template = ref.get("resourceClaimTemplateName")
            if not template:
                raise SchedulingError(
                    f"pod {ns}/{meta['name']}: resourceClaims entry {name!r} needs resourceClaimName or "
                    "resourceClaimTemplateName"
                )
            claim_name = statuses.get(name) or f"{meta['name']}-{name}-{_suffix(meta['uid'], name)}"
            try:
                claim = self.store.get(CLAIMS, ns, claim_name)
            except ApiError as err:
                if not err.is_not_found:
                    raise
                try:
                    tmpl = self.store.get(TEMPLATES, ns, template)
                except ApiError:
                    raise SchedulingError(
                        f"pod {ns}/{meta['name']}: ResourceClaimTemplate {ns}/{template} (for claim {name!r}) does not exist"
                    ) from None
                tspec = tmpl.get("spec") or {}
                tmeta = tspec.get("metadata") or {}
                claim = self.store.create(
                    CLAIMS,
                    ns,
                    {
                        "apiVersion": "resource.k8s.io/v1",
                        "kind": "ResourceClaim",
                        "metadata": {
                            "name": claim_name,
                            "namespace": ns,
                            "labels": dict(tmeta.get("labels") or {}),
                            "annotations": {**(tmeta.get("annotations") or {}), POD_CLAIM_NAME: name},
                            "ownerReferences": [
                                {
                                    "apiVersion": "v1",
                                    "kind": "Pod",
                                    "name": meta["name"],
                                    "uid": meta["uid"],
                                    "controller": True,
                                    "blockOwnerDeletion": True,
                                }
                            ],
                        },
                        "spec": tspec.get("spec") or {},
                    },
                )
            new_statuses.append({"name": name, "resourceClaimName": claim_name})
            out.append(claim)
        if new_statuses and {s["name"]: s["resourceClaimName"] for s in new_statuses} != statuses:
            fresh = self.store.get(PODS, ns, meta["name"])
            status = dict(fresh.get("status") or {})
            status["resourceClaimStatuses"] = new_statuses
            fresh["status"] = status
            self.store.update(PODS, ns, meta["name"], fresh, subresource="status")
        return out

    # --- scheduling ------------------------------------------------------------------------------------
    def _allocated_claims(self, exclude: set[str]) -> list[dict[str, Any]]:
        items = self.store.list(CLAIMS)["items"]
        return [c for c in items if c["metadata"]["uid"] not in exclude and (c.get("status") or {}).get("allocation")]

    def _fit(self, pod: Mapping[str, Any], node: Mapping[str, Any]) -> tuple[PodView, NodeView, NodeUsage]:
        """NodeResourcesFit: the pod, the node and what the pods bound to it request; a
        ``SchedulingError`` in the scheduler's words when the pod does not fit."""
        view, node_view, usage = parse_pod(pod), parse_node_view(node), NodeUsage()
        uid = pod["metadata"]["uid"]
        for other in self.store.list(PODS)["items"]:
            if (other.get("spec") or {}).get("nodeName") == self.node_name and other["metadata"]["uid"] != uid:
                usage.add(parse_pod(other))
        reasons = filter_reasons(view, node_view, usage)
        if reasons:
            raise SchedulingError(_unschedulable(reasons))
        return view, node_view, usage

    def schedule(self, pod: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Allocate and reserve the pod's claims and bind it to the node; returns its claims."""
        meta = pod["metadata"]
        ns = meta.get("namespace", "default")
        key = f"{ns}/{meta['name']}"
        claims = self.pod_claims(pod)
        node = self.store.get(NODES, None, self.node_name)
        view, node_view, usage = self._fit(pod, node)
        accounting = ClaimAccounting(self.store.gates.get(NODE_ALLOCATABLE, False))
        held = accounting.held_elsewhere(view, usage, [c["metadata"]["name"] for c in claims if (c.get("status") or {}).get("allocation")])
        if held is not None:
            raise SchedulingError(_unschedulable([held]))
        pending = [c for c in claims if not (c.get("status") or {}).get("allocation")]
        statuses: list[ClaimResources] = []
        if pending:
            slices = self.store.list(SLICES)["items"]
            classes = self.store.list(CLASSES)["items"]
            state = AllocatedState.from_claims(self._allocated_claims({c["metadata"]["uid"] for c in pending}))
            try:
                allocator = self._allocator(slices, classes, state)
                result = allocator.allocate(node, pending)
                if result is not None:
                    statuses = self._claimed(accounting, (view, node_view, usage), pod, pending, (slices, result))
            except AllocationError as err:
                raise SchedulingError(f"pod {key}: cannot allocate its claims: {err}") from None
            except ValueError as err:
                raise SchedulingError(f"pod {key}: invalid claim or device data: {err}") from None
            if result is None:
                raise SchedulingError(self._explain(key, pending, slices, classes, node, state))
            allocated = {a.claim: a for a in result}
            for c in pending:
                cname = f"{c['metadata'].get('namespace', ns)}/{c['metadata']['name']}"
                alloc = allocated.get(cname) or allocated.get(c["metadata"]["name"])
                if alloc is None:
                    alloc = result[pending.index(c)]
                updated = write_allocation(c, alloc, pod)
                self.store.update(CLAIMS, ns, c["metadata"]["name"], updated, subresource="status")
        # Reserve already-allocated (shared) claims for this pod too.
        out = []
        for c in self.pod_claims(self.store.get(PODS, ns, meta["name"])):
            status = dict(c.get("status") or {})
            reserved = list(status.get("reservedFor") or [])
            if not any(r.get("uid") == meta["uid"] for r in reserved):
                if len(reserved) >= 256:
                    raise SchedulingError(f"pod {key}: claim {c['metadata']['name']} is reserved for 256 consumers already")
                reserved.append({"resource": "pods", "name": meta["name"], "uid": meta["uid"]})
                status["reservedFor"] = reserved
                c["status"] = status
                c = self.store.update(CLAIMS, ns, c["metadata"]["name"], c, subresource="status")
            out.append(c)
        if statuses:  # PreBind patches the pod's status, then the pod is bound
            fresh = self.store.get(PODS, ns, meta["name"])
            fresh["status"] = {**(fresh.get("status") or {}), "nodeAllocatableResourceClaimStatuses": [s.to_api() for s in statuses]}
            self.store.update(PODS, ns, meta["name"], fresh, subresource="status")
        fresh = self.store.get(PODS, ns, meta["name"])
        if (fresh.get("spec") or {}).get("nodeName") != self.node_name:
            fresh.setdefault("spec", {})["nodeName"] = self.node_name
            self.store.update(PODS, ns, meta["name"], fresh)
        return out

    def _claimed(
        self,
        accounting: ClaimAccounting,
        fit: tuple[PodView, NodeView, NodeUsage],
        pod: Mapping[str, Any],
        pending: list[dict[str, Any]],
        allocation: tuple[list[dict[str, Any]], list[ClaimAllocation]],
    ) -> list[ClaimResources]:
        """With DRANodeAllocatableResources: the pod's statuses for its new claims (what they map
        to of the node), or a ``SchedulingError`` when the pod and they do not fit the node."""
        view, node_view, usage = fit
        slices, result = allocation
        keys = [_key(c) for c in pending]
        mapped = accounting.mapped(slices, keys, result)
        counted = [(k, k.split("/", 1)[1], m) for k, m in zip(keys, mapped, strict=False) if m is not None]
        if not counted:
            return []
        ns = pod["metadata"].get("namespace", "default")
        fresh = self.store.get(PODS, ns, pod["metadata"]["name"])  # with the generated claims' names
        generated = {s["name"]: s.get("resourceClaimName") for s in (fresh.get("status") or {}).get("resourceClaimStatuses") or []}
        refs: dict[str, str | None] = {}
        for ref in (pod.get("spec") or {}).get("resourceClaims") or []:
            name = ref.get("resourceClaimName") or generated.get(ref.get("name"))
            refs[ref.get("name", "")] = f"{ns}/{name}" if name else None
        reasons, mine = accounting.check(view, refs, counted, node_view, usage)
        if reasons:
            raise SchedulingError(_unschedulable(reasons))
        return mine

    def _explain(
        self,
        key: str,
        pending: list[dict[str, Any]],
        slices: list[dict[str, Any]],
        classes: list[dict[str, Any]],
        node: Mapping[str, Any],
        state: AllocatedState,
    ) -> str:
        """Why no allocation exists: the first claim that fails on its own, with its requests."""
        for c in pending:
            alone = self._allocator(slices, classes, state).allocate(node, [c])
            if alone is None:
                reqs = []
                for r in ((c.get("spec") or {}).get("devices") or {}).get("requests") or []:
                    ex = r.get("exactly") or {}
                    sels = [s.get("cel", {}).get("expression", "") for s in ex.get("selectors") or []]
                    count = "all" if ex.get("allocationMode") == "All" else ex.get("count", 1)
                    what = f"{count} x {ex.get('deviceClassName', '?')}"
                    if ex.get("capacity"):
                        what += f" with capacity {ex['capacity'].get('requests')}"
                    if sels:
                        what += " where " + " && ".join(sels)
                    if r.get("firstAvailable"):
                        what = "first available of " + ", ".join(
                            f"{s.get('count', 1)} x {s.get('deviceClassName')}" for s in r["firstAvailable"]
                        )
                    reqs.append(f"{r.get('name')}: {what}")
                free = sum(
                    1
                    for s in slices
                    for d in (s.get("spec") or {}).get("devices") or []
                    if not state.is_allocated((s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"]))
                )
                return (
                    f"pod {key} is unschedulable: claim {c['metadata']['name']} cannot be satisfied on node "
                    f"{self.node_name} ({'; '.join(reqs) or 'no requests'}); {free} device(s) are free"
                    + self._constraints_note(c, slices, classes, node, state)
                )
        return f"pod {key} is unschedulable: its claims cannot be satisfied together on node {self.node_name}"

    def _constraints_note(
        self,
        claim: Mapping[str, Any],
        slices: list[dict[str, Any]],
        classes: list[dict[str, Any]],
        node: Mapping[str, Any],
        state: AllocatedState,
    ) -> str:
        """When the claim would fit without its constraints: which constraints no choice satisfies."""
        devices = dict((claim.get("spec") or {}).get("devices") or {})
        constraints = devices.pop("constraints", None)
        if not constraints:
            return ""
        loose = {**claim, "spec": {**(claim.get("spec") or {}), "devices": devices}}
        try:
            fits = self._allocator(slices, classes, state).allocate(node, [loose]) is not None
        except (AllocationError, ValueError):
            return ""
        if not fits:
            return ""
        named = [
            f"{k} {v}" for c in constraints if isinstance(c, Mapping) for k, v in c.items() if k in ("matchAttribute", "distinctAttribute")
        ]
        return f"; the devices exist, but no choice of them satisfies {' and '.join(named)}"

    # --- teardown --------------------------------------------------------------------------------------
    def release(self, pod: Mapping[str, Any]) -> None:
        """Un-reserve the pod's claims; delete the ones generated for it (deallocating them)."""
        meta = pod["metadata"]
        ns = meta.get("namespace", "default")
        for c in self.store.list(CLAIMS, ns)["items"]:
            status = dict(c.get("status") or {})
            reserved = [r for r in status.get("reservedFor") or [] if r.get("uid") != meta["uid"]]
            owned = any(o.get("uid") == meta["uid"] for o in c["metadata"].get("ownerReferences") or [])
            if reserved == list(status.get("reservedFor") or []) and not owned:
                continue
            name = c["metadata"]["name"]
            if owned:
                status.pop("allocation", None)
                status["reservedFor"] = reserved
                c["status"] = status
                c = self.store.update(CLAIMS, ns, name, c, subresource="status")
                if c["metadata"].get("finalizers"):
                    c["metadata"]["finalizers"] = []
                    c = self.store.update(CLAIMS, ns, name, c)
                self.store.delete(CLAIMS, ns, name)
            else:
                status["reservedFor"] = reserved
                if not reserved:
                    status.pop("allocation", None)  # the controller deallocates unused claims
                c["status"] = status
                self.store.update(CLAIMS, ns, name, c, subresource="status")
