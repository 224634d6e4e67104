"""The playground's scheduler and claim controller, on the simulator's allocator.

For a new pod it does what kube-scheduler's DynamicResources plugin and the
resourceclaim controller do together:
- creates the pod's ResourceClaims from their templates (name
  ``<pod>-<claim>-<suffix>``, annotation ``resource.kubernetes.io/pod-claim-name``)
  and records them in ``status.resourceClaimStatuses``;
- allocates every unallocated claim with ``topodra.sim.allocator.Allocator``
  (the one allocator of the project) over the published ResourceSlices and
  DeviceClasses, taking devices allocated to other claims as in use;
- writes ``status.allocation`` and ``status.reservedFor`` and binds the pod
  (``spec.nodeName``).
When the pod goes away it removes the reservation and deletes the claims
generated for it, which frees their devices.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from topodra.embedded.store import KINDS, Store
from topodra.kube.errors import ApiError
from topodra.sim.allocator import AllocatedState, AllocationError, Allocator, write_allocation

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


class EmbeddedScheduler:
    def __init__(self, store: Store, node_name: str, *, list_type_attributes: bool = False) -> None:
        """``list_type_attributes``: the gate ``DRAListTypeAttributes`` is on (the allocator's)."""
        self.store = store
        self.node_name = node_name
        self.list_type_attributes = list_type_attributes

    def _allocator(self, slices: list[dict[str, Any]], classes: list[dict[str, Any]], state: AllocatedState) -> Allocator:
        return Allocator(slices, classes, state, list_type_attributes=self.list_type_attributes)

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

    def schedule(self, pod: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Allocate and reserve the pod's claims and bind it to the node; returns its claims."""
        meta = pod["metadata"]
        ns = meta.get("namespace", "default")
        key = f"{ns}/{meta['name']}"
        claims = self.pod_claims(pod)
        pending = [c for c in claims if not (c.get("status") or {}).get("allocation")]
        if pending:
            slices = self.store.list(SLICES)["items"]
            classes = self.store.list(CLASSES)["items"]
            node = self.store.get(NODES, None, self.node_name)
            state = AllocatedState.from_claims(self._allocated_claims({c["metadata"]["uid"] for c in pending}))
            try:
                result = self._allocator(slices, classes, state).allocate(node, pending)
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
        fresh = self.store.get(PODS, ns, meta["name"])
        if (fresh.get("spec") or {}).get("nodeName") != self.node_name:
            fresh.setdefault("spec", {})["nodeName"] = self.node_name
            self.store.update(PODS, ns, meta["name"], fresh)
        return out

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
