"""Replay what happened in a cluster: Kubernetes objects in order, scheduled as kube-scheduler 1.36 does.

Objects come as ``kubectl get -o yaml`` writes them (``kind: List`` too): Nodes,
DeviceClasses, ResourceSlices, ResourceClaimTemplates, ResourceClaims and Pods,
plus deletions ``{op: delete, kind: Pod, name: NAME[, namespace: NS]}``. A Pod is
scheduled when it arrives: the resourceclaim controller's part (a claim per
template, named ``<pod>-<claim>-<5 letters>``; pre-created claims shared, their
``reservedFor`` growing and shrinking, deallocated when the last user goes) and
the scheduler's (Filter: the plugins of ``podfit`` then DynamicResources with the
simulator's one allocator; Score; bind). A Pod that cannot be scheduled stays
pending and is tried again, in arrival order, after every event that can free
or add devices or nodes, as the scheduling queue does. A Pod that arrives with
``spec.nodeName`` is bound there without scheduling: its allocated claims are
reserved for it, and unallocated ones are allocated on that node.

With ``DRANodeAllocatableResources`` on (``gates``), what a pod's new claims take of the
node through their devices' ``nodeAllocatableResourceMappings`` is checked with its
container requests by DynamicResources, written to the pod's
``status.nodeAllocatableResourceClaimStatuses`` at binding and counted in the node's
requests from then on (``sim.nodealloc``); a claim such a pod holds is refused to
another pod on that node. Off (1.36's default), those statuses are dropped as the API
server drops them.

Device taints: a ResourceSlice written again replaces the one of that name, each taint stamped
with the replay's clock (the API server sets ``timeAdded`` to the write's time); ``{op: wait,
seconds: N}`` moves the clock and records every pod created so far (an ``observe`` step).
After every object the device taint eviction controller's rule (``sim/taintevict.py``) evicts
the pods of claims whose devices carry a ``NoExecute`` taint they do not tolerate (an
``evicted`` step). DeviceTaintRules are kept but taint nothing: the 1.36.2 scheduler drops their
events (its slice tracker reads them from a v1beta2 informer as v1alpha3 objects), as recorded in
``tests/data/sched-recorded/v8-device-taint-rules``.

Every scheduling decision is a ``Step``: the node, each claim's
``status.allocation`` (the API's shape) and ``reservedFor``, the pod's
``nodeAllocatableResourceClaimStatuses``, or kube-scheduler's
message (the part before its preemption summary). Ties between the best nodes
go to the first in scan order (kube-scheduler picks one at random) unless a
``prefer`` hint names one of them (``sim diff`` follows a recording that way).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from topodra.gates import LIST_TYPE_ATTRIBUTES, NODE_ALLOCATABLE, feature_gates
from topodra.quantity import Quantity
from topodra.sim.allocator import (
    INVALID_POOLS_MESSAGE,
    AllocatedState,
    AllocationError,
    Allocator,
    ClaimAllocation,
    InvalidPools,
    allocation_of_claim,
)
from topodra.sim.costmodel import num_feasible_nodes_to_find
from topodra.sim.nodealloc import ClaimAccounting
from topodra.sim.objects import Claim, ObjectError, node_selector_matches, parse_claim
from topodra.sim.podfit import (
    ClaimResources,
    NodeUsage,
    NodeView,
    PodView,
    filter_reasons,
    node_inputs,
    parse_node_view,
    parse_pod,
    pod_inputs,
)
from topodra.sim.replaysteps import ClaimState, Step
from topodra.sim.scoring import (
    ClaimScoreInput,
    Unmodelled,
    dynamic_resources_score,
    existing_affinity_scores,
    score_nodes,
)
from topodra.sim.taintevict import DeviceTaints

__all__ = ["ClaimState", "Step", "Replay", "ReplayError", "replay"]

KINDS = ("Node", "DeviceClass", "ResourceSlice", "ResourceClaimTemplate", "ResourceClaim", "Pod", "DeviceTaintRule")
RESERVED_FOR_MAX = 256  # ResourceClaimReservedForMaxSize
CANNOT_ALLOCATE = "cannot allocate all claims"
NOT_AVAILABLE = "resourceclaim not available on the node"
_NAME_LETTERS = "bcdfghjklmnpqrstvwxz2456789"  # the API server's generateName alphabet


#: A memoised Filter answer: fits, DRA score, the allocator's error, the Unschedulable reason (None:
#: "cannot allocate all claims"), each new claim's mapped resources.
_Hit = tuple[bool, int, str | None, str | None, tuple[dict[str, Quantity] | None, ...]]


class ReplayError(ValueError):
    """An object or deletion the replay cannot apply; the message names it and where it came from."""


@dataclass
class _Claim:
    obj: Mapping[str, Any]
    name: str
    namespace: str
    owner: str | None  # pod key of a generated claim
    allocation: ClaimAllocation | None = None
    reserved_for: list[str] = field(default_factory=list)  # pod names
    deleting: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class _Pod:
    view: PodView
    claims: dict[str, str | None]  # pod claim name -> claim key (None: no claim needed)
    node: str | None = None
    failure: str | None = None


def _meta(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("name") or ""), str(meta.get("namespace") or "default")


def _gone(table: dict[str, Any], key: str, kind: str, source: str) -> None:
    """Remove ``key`` from ``table``; ReplayError when there is no such object."""
    if table.pop(key, None) is None:
        raise ReplayError(f"{source}: delete {kind} {key}: no such object")


def _find(table: Mapping[str, Any], name: str, ns: Any, kind: str, source: str) -> str:
    """The key of the object a deletion names (namespace optional when the name is unique)."""
    if ns:
        key = f"{ns}/{name}"
        if key in table:
            return key
    else:
        found = [k for k in table if k.split("/", 1)[1] == name]
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise ReplayError(f"{source}: delete {kind} {name}: in several namespaces ({', '.join(found)}), give namespace")
    raise ReplayError(f"{source}: delete {kind} {name}: no such object")


def _generated_claim(pod: PodView, pod_claim: str, template: Mapping[str, Any]) -> _Claim:
    """The claim the resourceclaim controller makes for ``pod_claim`` from ``template``
    (its name suffix derived from the pod and claim names, so a replay is repeatable)."""
    digest = hashlib.blake2b(f"{pod.key}/{pod_claim}".encode(), digest_size=8).digest()
    suffix = "".join(_NAME_LETTERS[b % len(_NAME_LETTERS)] for b in digest[:5])
    name = f"{pod.name}-{pod_claim}-{suffix}"
    tspec = template.get("spec") or {}
    obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": pod.namespace,
            "uid": f"uid-{pod.namespace}-{name}",
            "annotations": {"resource.kubernetes.io/pod-claim-name": pod_claim},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid, "controller": True}],
            **({"labels": dict((tspec.get("metadata") or {}).get("labels") or {})} if (tspec.get("metadata") or {}).get("labels") else {}),
        },
        "spec": tspec.get("spec") or {},
    }
    return _Claim(obj, name, pod.namespace, pod.key)


def _for_node(allocation: ClaimAllocation, node: NodeView) -> bool:
    """Whether a claim allocated so may be used on ``node`` (its nodeSelector)."""
    sel = allocation.node_selector
    return sel is None or node_selector_matches(sel, node.node)


def _claims_of(pod: _Pod, claims: Mapping[str, _Claim]) -> list[tuple[str, _Claim]]:
    """The pod's claims that exist, by its reference name, each once."""
    out = []
    seen = set()
    for ref in pod.view.claims:
        key = pod.claims.get(ref.name)
        if key is not None and key in claims and key not in seen:
            seen.add(key)
            out.append((ref.name, claims[key]))
    return out


class _PoolNodes:
    """Every pool's node when every slice is node-local, else None; worked out when first asked
    after the slices changed, so a dump's thousands of slices cost one pass, not one each."""

    def __init__(self, slices: Mapping[str, Mapping[str, Any]]) -> None:
        self._slices = slices
        self._nodes: dict[tuple[str, str], str] | None = None
        self._stale = False

    def changed(self) -> None:
        self._stale = True

    def nodes(self) -> dict[tuple[str, str], str] | None:
        if self._stale:
            self._stale = False
            local = all((s.get("spec") or {}).get("nodeName") for s in self._slices.values())
            self._nodes = (
                {(str(s["spec"].get("driver")), str((s["spec"].get("pool") or {}).get("name"))): str(s["spec"]["nodeName"]) for s in self._slices.values()}
                if local
                else None
            )
        return self._nodes


class Replay:
    """The cluster as objects arrive; ``apply`` returns the steps each object causes."""

    def __init__(
        self,
        *,
        prefer: Callable[[str], str | None] | None = None,
        percentage_of_nodes_to_score: int | None = None,
        memo: bool = True,
        evictions: bool = True,
        gates: Mapping[str, bool] | None = None,
    ) -> None:
        """``evictions``: kube-controller-manager runs its device-taint-eviction-controller (on by
        default in 1.36)."""
        self.prefer = prefer
        self.evictions = evictions
        #: DRANodeAllocatableResources (``topodra.gates``; 1.36's default: off)
        self.accounting = ClaimAccounting(feature_gates(gates)[NODE_ALLOCATABLE])
        #: DRAListTypeAttributes: the scheduler's CEL sees list attributes
        self.list_type_attributes = feature_gates(gates)[LIST_TYPE_ATTRIBUTES]
        self.memo = memo
        self.percentage = percentage_of_nodes_to_score
        self.nodes: dict[str, NodeView] = {}
        self.usage: dict[str, NodeUsage] = {}
        self.classes: dict[str, Mapping[str, Any]] = {}
        self.slices: dict[str, Mapping[str, Any]] = {}
        self.templates: dict[str, Mapping[str, Any]] = {}
        self.claims: dict[str, _Claim] = {}
        self.pods: dict[str, _Pod] = {}
        self.pending: list[str] = []  # pod keys, in the order they became pending
        self.state = AllocatedState()
        self.steps: list[Step] = []
        self._allocator: Allocator | None = None
        self._next_start = 0
        # Filter memo: (node, node version, claim specs) -> (fits, DRA score, allocation error, the
        # Unschedulable reason when not "cannot allocate all claims", what each claim maps to of the
        # node's resources). A node's version changes with every allocation on its devices, so a
        # hit is exact.
        self._memo: dict[tuple[str, int, str], _Hit] = {}
        self._version: dict[str, int] = {}
        self._pools = _PoolNodes(self.slices)
        self.memo_hits = 0
        self.rules: dict[str, Mapping[str, Any]] = {}  # DeviceTaintRules: kept, not applied (see above)
        self.clock = 0.0  # seconds: ``wait`` documents move it
        self.taints = DeviceTaints()
        self.created: list[tuple[str, str]] = []  # (name, namespace) of every pod, in order

    # ---- objects in
    def apply(self, obj: Any, source: str = "") -> list[Step]:
        """Apply one object or deletion; the steps it caused (also appended to ``steps``)."""
        if not isinstance(obj, Mapping):
            raise ReplayError(f"{source}: expected a Kubernetes object, got {type(obj).__name__}")
        first = len(self.steps)
        try:
            op = obj.get("op")
            if op is None:
                self._create(obj, source)
            else:
                self._op(obj, source)
            # the device taint eviction controller, after every event (a wait moved the clock)
            for key in self.taints.doomed(self.claims.values(), self.clock) if self.evictions else ():
                if key in self.pods:
                    self._delete_pod(key, source, "evicted")
            if op == "wait":
                self.steps += _observed(self, source)
        except ObjectError as e:
            raise ReplayError(f"{source}: {e}" if source else str(e)) from None
        return self.steps[first:]

    def _create(self, obj: Mapping[str, Any], source: str) -> None:
        kind = obj.get("kind")
        name, ns = _meta(obj)
        if kind not in KINDS:
            raise ReplayError(f"{source}: kind {kind!r} is not replayed (expected one of {', '.join(KINDS)}, an op: delete or an op: wait document)")
        if not name:
            raise ReplayError(f"{source}: {kind} has no metadata.name")
        if kind == "Node":
            view = parse_node_view(obj)
            self.nodes[name] = view
            self._bump(name)
            self.usage.setdefault(name, NodeUsage())
            self._changed(source)
        elif kind == "DeviceClass":
            self.classes[name] = obj
            self._reset()
            self._changed(source)
        elif kind == "ResourceSlice":
            self.slices[name] = obj
            self.taints.write(name, obj, self.clock)
            self._reset()
            self._changed(source)
        elif kind == "DeviceTaintRule":
            self.rules[name] = obj
        elif kind == "ResourceClaimTemplate":
            self.templates[f"{ns}/{name}"] = obj
            self._changed(source, lambda p: any(r.template_name == name for r in p.view.claims) and p.view.namespace == ns)
        elif kind == "ResourceClaim":
            freed = self._add_claim(obj, name, ns)
            self._changed(source, None if freed else lambda p: f"{ns}/{name}" in p.claims.values())
        else:
            self._add_pod(obj, source)

    def _add_claim(self, obj: Mapping[str, Any], name: str, ns: str) -> bool:
        """Store a claim (replacing one of that name); whether devices were freed."""
        key = f"{ns}/{name}"
        old = self.claims.get(key)
        freed = old is not None and old.allocation is not None
        if old is not None and old.allocation is not None:
            self._release(old.allocation)
        meta = obj.get("metadata") or {}
        owner = None
        for ref in meta.get("ownerReferences") or ():
            if ref.get("kind") == "Pod" and ref.get("controller"):
                owner = f"{ns}/{ref.get('name')}"
        allocation = allocation_of_claim(obj)
        reserved = [str(r.get("name")) for r in (obj.get("status") or {}).get("reservedFor") or () if r.get("resource") == "pods"]
        claim = _Claim(obj, name, ns, owner, allocation, reserved)
        if allocation is not None:
            self._hold(allocation)
        self.claims[key] = claim
        return freed

    def _add_pod(self, obj: Mapping[str, Any], source: str) -> None:
        view = parse_pod(obj)
        if not self.accounting.enabled and view.claim_resources:
            view = replace(view, claim_resources=())  # the API server drops the field
        if view.key in self.pods:
            raise ReplayError(f"{source}: Pod {view.key} already exists (delete it first)")
        pod = _Pod(view, {})
        self.pods[view.key] = pod
        self.created.append((view.name, view.namespace))
        missing = self._claims_for(pod)
        if view.node_name:
            self.steps.append(self._bind_given(pod, source, missing))
            return
        step = self._schedule(pod, "create", source, missing)
        self.steps.append(step)
        if step.node is None:
            self.pending.append(view.key)

    def _claims_for(self, pod: _Pod) -> str | None:
        """Find or generate the pod's claims (the resourceclaim controller); why one is missing."""
        view = pod.view
        for ref in view.claims:
            if pod.claims.get(ref.name):
                continue
            if ref.claim_name:
                pod.claims[ref.name] = f"{view.namespace}/{ref.claim_name}"
            elif ref.template_name:
                given = view.claim_statuses.get(ref.name)
                if given and f"{view.namespace}/{given}" in self.claims:
                    pod.claims[ref.name] = f"{view.namespace}/{given}"
                    continue
                template = self.templates.get(f"{view.namespace}/{ref.template_name}")
                if template is None:
                    pod.claims[ref.name] = None
                    return f'resourceclaimtemplate.resource.k8s.io "{ref.template_name}" not found'
                claim = _generated_claim(view, ref.name, template)
                self.claims[claim.key] = claim
                pod.claims[ref.name] = claim.key
            else:
                pod.claims[ref.name] = None
        for ref in view.claims:
            key = pod.claims.get(ref.name)
            if key is None and ref.template_name:
                return f"pod {view.key}: ResourceClaim not created yet"
            if key is not None and key not in self.claims:
                return f'resourceclaim.resource.k8s.io "{key.split("/", 1)[1]}" not found'
            if key is not None and self.claims[key].deleting:
                return f'resourceclaim "{key.split("/", 1)[1]}" is being deleted'
        return None

    # ---- scheduling
    def _allocator_now(self) -> Allocator:
        if self._allocator is None:
            self._allocator = Allocator(
                list(self.slices.values()), list(self.classes.values()), self.state, list_type_attributes=self.list_type_attributes
            )
        return self._allocator

    def _reset(self) -> None:
        """Slices or classes changed: a new allocator, no memoised Filter result holds."""
        self._allocator = None
        self.accounting.reset()
        self._memo.clear()
        self._pools.changed()

    def _bump(self, node: str) -> None:
        self._version[node] = self._version.get(node, 0) + 1

    def _touch(self, allocation: ClaimAllocation) -> None:
        pools = self._pools.nodes()
        for r in allocation.results:
            node = pools.get((r.driver, r.pool)) if pools is not None else None
            if node is None:
                self._memo.clear()
                return
            self._bump(node)

    def _hold(self, allocation: ClaimAllocation) -> None:
        self.state.add(allocation)
        self._touch(allocation)

    def _release(self, allocation: ClaimAllocation) -> None:
        self.state.remove(allocation)
        self._touch(allocation)

    def _schedule(self, pod: _Pod, op: str, source: str, missing: str | None) -> Step:
        view = pod.view
        step = Step(op, view.name, view.namespace, source)
        if missing is not None:
            return self._fail(pod, step, missing)
        if view.scheduler_name != "default-scheduler":
            return self._fail(pod, step, f"left to scheduler {view.scheduler_name!r} (only default-scheduler is replayed)")
        claims = _claims_of(pod, self.claims)
        to_allocate: list[_Claim] = []
        for _, c in claims:
            if c.allocation is not None:
                if len(c.reserved_for) >= RESERVED_FOR_MAX and view.name not in c.reserved_for:
                    return self._fail(pod, step, f"0/{len(self.nodes)} nodes are available: resourceclaim in use.")
            else:
                to_allocate.append(c)
        parsed: list[Claim] = []
        for c in to_allocate:
            parsed.append(parse_claim(c.obj))
            for req in parsed[-1].requests:
                for spec in (req.exactly,) if req.exactly else req.first_available:
                    if spec is not None and spec.class_name not in self.classes:
                        name = f"{req.name}/{spec.name}" if req.first_available else req.name
                        return self._fail(pod, step, f"0/{len(self.nodes)} nodes are available: request {name}: device class {spec.class_name} does not exist.")
        names = list(self.nodes)
        if not names:
            return self._fail(pod, step, "0/0 nodes are available: no nodes available to schedule pods")
        want = num_feasible_nodes_to_find(len(names), self.percentage)
        start = self._next_start % len(names)
        reasons: dict[str, int] = {}
        feasible: list[str] = []
        dra_scores: dict[str, int] = {}
        statuses: dict[str, list[ClaimResources]] = {}  # node -> the pod's nodeAllocatableResourceClaimStatuses
        signature = json.dumps([c.obj.get("spec") for c in to_allocate], sort_keys=True, default=str)
        processed = 0
        for k in range(len(names)):
            node = self.nodes[names[(start + k) % len(names)]]
            processed += 1
            why = filter_reasons(view, node, self.usage[node.name])
            if not why:
                try:
                    why = self._dra_filter(node, pod, claims, (to_allocate, parsed, signature), dra_scores, statuses)
                except AllocationError as e:
                    self._next_start = (start + processed) % len(names)
                    return self._fail(pod, step, f'running "DynamicResources" filter plugin: {e}')
            if why:
                for r in why:
                    reasons[r] = reasons.get(r, 0) + 1
                continue
            feasible.append(node.name)
            if len(feasible) >= want:
                break
        self._next_start = (start + processed) % len(names)
        if not feasible:
            hist = ", ".join(sorted(f"{n} {r}" for r, n in reasons.items()))
            return self._fail(pod, step, f"0/{len(names)} nodes are available: {hist}.")
        chosen = feasible[0]
        if len(feasible) > 1:
            chosen = self._choose(pod, step, feasible, _with_allocated(claims, dra_scores) if to_allocate else {}, source)
        step.feasible = feasible
        allocations: list[ClaimAllocation] = []
        if to_allocate:
            fresh = self._allocator_now().allocate(self.nodes[chosen].node, parsed)
            assert fresh is not None, "a node that passed Filter has no allocation"
            allocations = fresh
        self._bind(pod, chosen, to_allocate, allocations, statuses.get(chosen, []))
        step.node = chosen
        step.claims = self._claim_states(pod)
        step.node_allocatable = [c.to_api() for c in pod.view.claim_resources]
        return step

    def _dra_filter(
        self,
        node: NodeView,
        pod: _Pod,
        claims: list[tuple[str, _Claim]],
        new: tuple[list[_Claim], list[Claim], str],
        scores: dict[str, int],
        statuses: dict[str, list[ClaimResources]],
    ) -> list[str]:
        """DynamicResources' Filter on ``node``: a node-allocatable claim held by another pod, the
        allocation of the ``new`` claims (to allocate, parsed, their signature), what they take of
        the node, claims allocated for other nodes."""
        to_allocate, parsed, signature = new
        allocated = sum(c.allocation is not None for _, c in claims)
        here = [c for _, c in claims if c.allocation is not None and _for_node(c.allocation, node)]
        held = self.accounting.held_elsewhere(pod.view, self.usage[node.name], (c.name for c in here))
        if held is not None:
            return [held]
        if to_allocate:
            key = (node.name, self._version.get(node.name, 0), signature)
            use_memo = self.memo and self._pools.nodes() is not None
            hit = self._memo.get(key) if use_memo else None
            if hit is None:
                try:
                    result = self._allocator_now().allocate(node.node, parsed)
                    mapped = () if result is None else self.accounting.mapped(self.slices.values(), [c.key for c in to_allocate], result)
                    hit = (result is not None, _dra_score(parsed, result) if result is not None else 0, None, None, mapped)
                except InvalidPools:  # Unschedulable on this node, with the allocator's words
                    hit = (False, 0, None, INVALID_POOLS_MESSAGE, ())
                except AllocationError as e:
                    hit = (False, 0, str(e), None, ())
                if use_memo:
                    self._memo[key] = hit
            else:
                self.memo_hits += 1
            if hit[2] is not None:
                raise AllocationError(hit[2])
            if not hit[0]:
                return [hit[3] or CANNOT_ALLOCATE]
            scores[node.name] = hit[1]
            counted = [(c.key, c.name, m) for c, m in zip(to_allocate, hit[4], strict=False) if m is not None]
            if counted:
                reasons, mine = self.accounting.check(pod.view, pod.claims, counted, node, self.usage[node.name])
                if reasons:
                    return reasons
                statuses[node.name] = mine
        if len(here) < allocated:  # a claim allocated for other nodes
            return [NOT_AVAILABLE]
        return []

    def _choose(self, pod: _Pod, step: Step, feasible: list[str], dra_scores: Mapping[str, int], source: str) -> str:
        view = pod.view
        sizes: dict[str, int] = {}
        spread: dict[str, int] = {}
        for n in self.nodes.values():  # the scheduler cache's image states: first size seen, nodes per name
            for name, size in n.images.items():
                sizes.setdefault(name, size)
                spread[name] = spread.get(name, 0) + 1
        bound = (
            (p.view.namespace, p.view.pod_affinity, p.view.pod_anti_affinity)
            for p in self.pods.values()
            if p.node is not None and (p.view.pod_affinity is not None or p.view.pod_anti_affinity is not None)
        )
        try:
            per_plugin = score_nodes(
                pod_inputs(view),
                [node_inputs(self.nodes[n], self.usage[n], sizes) for n in feasible],
                dra=dra_scores,
                image_spread=spread,
                total_nodes=len(self.nodes),
                pods_with_affinity=existing_affinity_scores(bound, view.namespace, view.labels),
            )
        except Unmodelled as e:
            raise ReplayError(f"{source}: Pod {view.key}: {e}") from None
        totals = {n: sum(per_plugin[n].values()) for n in feasible}
        step.scores = totals
        step.plugin_scores = per_plugin
        best = max(totals.values())
        top = [n for n in feasible if totals[n] == best]
        if len(top) > 1:
            step.top = top
            hint = self.prefer(pod.view.name) if self.prefer is not None else None
            if hint in top:
                step.followed_hint = True
                return str(hint)
        return top[0]

    def _fail(self, pod: _Pod, step: Step, message: str) -> Step:
        pod.failure = message
        step.failure = message
        step.claims = self._claim_states(pod)
        return step

    def _bind(
        self, pod: _Pod, node: str, to_allocate: list[_Claim], allocations: list[ClaimAllocation], statuses: list[ClaimResources]
    ) -> None:
        if self.accounting.enabled:  # the assumed pod's status: the Filter's statuses for this node
            pod.view = replace(pod.view, claim_resources=tuple(statuses))
        for c, a in zip(to_allocate, allocations, strict=True):
            c.allocation = a
            self._hold(a)
        for _, c in _claims_of(pod, self.claims):
            if pod.view.name not in c.reserved_for:
                c.reserved_for.append(pod.view.name)
        pod.node = node
        pod.failure = None
        self.usage.setdefault(node, NodeUsage()).add(pod.view)

    def _bind_given(self, pod: _Pod, source: str, missing: str | None) -> Step:
        """A pod that arrives with spec.nodeName: bound there, its claims allocated on that node."""
        view = pod.view
        step = Step("bound", view.name, view.namespace, source, node=view.node_name)
        claims = _claims_of(pod, self.claims)
        to_allocate = [c for _, c in claims if c.allocation is None]
        node = self.nodes.get(view.node_name)
        if missing is not None:
            step.failure = missing
        elif to_allocate and node is None:
            step.failure = f"node {view.node_name} does not exist: its claims cannot be allocated"
        elif to_allocate:
            assert node is not None
            reason = CANNOT_ALLOCATE
            try:
                result = self._allocator_now().allocate(node.node, [parse_claim(c.obj) for c in to_allocate])
            except InvalidPools:
                result, reason = None, INVALID_POOLS_MESSAGE
            except AllocationError as e:
                result, step.failure = None, f'running "DynamicResources" filter plugin: {e}'
            if result is None:
                step.failure = step.failure or f"0/1 nodes are available: 1 {reason}."
                to_allocate, result = [], []
            for c, a in zip(to_allocate, result, strict=True):
                c.allocation = a
                self._hold(a)
        for _, c in claims:
            if c.allocation is not None and view.name not in c.reserved_for:
                c.reserved_for.append(view.name)
        pod.node = view.node_name
        pod.failure = step.failure
        self.usage.setdefault(view.node_name, NodeUsage()).add(view)
        step.claims = self._claim_states(pod)
        step.node_allocatable = [c.to_api() for c in view.claim_resources]
        return step

    def _claim_states(self, pod: _Pod) -> list[ClaimState]:
        out = []
        for ref in pod.view.claims:
            key = pod.claims.get(ref.name)
            c = self.claims.get(key) if key else None
            if c is None:
                continue
            out.append(
                ClaimState(ref.name, c.name, c.owner is not None, c.allocation.to_api() if c.allocation else None, list(c.reserved_for))
            )
        return out

    def _retry(self, source: str, only: Callable[[_Pod], bool] | None = None) -> list[str]:
        """Try the pending pods again (those ``only`` selects), in order; the pods still pending."""
        still = []
        for key in list(self.pending):
            pod = self.pods.get(key)
            if pod is None:
                continue
            if only is not None and not only(pod):
                still.append(key)
                continue
            step = self._schedule(pod, "scheduled-later", source, self._claims_for(pod))
            if step.node is not None:
                self.steps.append(step)
            else:
                still.append(key)
        self.pending = still
        return still

    def _changed(self, source: str, only: Callable[[_Pod], bool] | None = None) -> None:
        """A new object that can make pending pods schedulable (all, or those ``only`` selects):
        the scheduling queue's events for nodes, classes and slices, and a claim or template a
        pod waits for."""
        if self.pending:
            self._retry(source, only)

    # ---- deletions
    def _op(self, doc: Mapping[str, Any], source: str) -> None:
        """``op: delete``, or ``{op: wait, seconds: N}``: the clock moves on (``apply`` then
        records every pod created so far)."""
        if doc.get("op") == "wait":
            seconds = doc.get("seconds")
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
                raise ReplayError(f"{source}: a wait needs seconds >= 0, got {seconds!r}")
            self.clock += float(seconds)
            return
        if doc.get("op") != "delete":
            raise ReplayError(f"{source}: unknown op {doc.get('op')!r} (op: delete or op: wait)")
        kind, name = doc.get("kind"), doc.get("name")
        if not isinstance(name, str) or not name or kind not in KINDS:
            raise ReplayError(f"{source}: a deletion needs kind (one of {', '.join(KINDS)}) and name, got kind={kind!r} name={name!r}")
        ns = doc.get("namespace")
        if kind == "Pod":
            self._delete_pod(_find(self.pods, name, ns, "Pod", source), source)
            return
        if kind == "ResourceClaim":
            key = _find(self.claims, name, ns, "ResourceClaim", source)
            claim = self.claims[key]
            if claim.reserved_for:
                claim.deleting = True  # the finalizer keeps it until the last user goes
            else:
                self._drop_claim(claim)
        elif kind == "Node":
            _gone(self.nodes, name, kind, source)
        elif kind == "DeviceClass":
            _gone(self.classes, name, kind, source)
            self._reset()
        elif kind == "ResourceSlice":
            _gone(self.slices, name, kind, source)
            self.taints.drop(name)
            self._reset()
        elif kind == "DeviceTaintRule":
            _gone(self.rules, name, kind, source)
            return
        else:
            _gone(self.templates, _find(self.templates, name, ns, kind, source), kind, source)
        self._changed(source)

    def _drop_claim(self, claim: _Claim) -> None:
        if claim.allocation is not None:
            self._release(claim.allocation)
            claim.allocation = None
        self.claims.pop(claim.key, None)

    def _delete_pod(self, key: str, source: str, op: str = "delete") -> None:
        pod = self.pods.pop(key)
        view = pod.view
        if key in self.pending:
            self.pending.remove(key)
        if pod.node is not None:
            self.usage.setdefault(pod.node, NodeUsage()).remove(view)
        step = Step(op, view.name, view.namespace, source)
        for ref in view.claims:
            ckey = pod.claims.get(ref.name)
            claim = self.claims.get(ckey) if ckey else None
            if claim is None:
                continue
            if view.name in claim.reserved_for:
                claim.reserved_for.remove(view.name)
            generated = claim.owner == key
            if generated:
                state = "deallocated" if claim.allocation is not None else "deleted"
                self._drop_claim(claim)
            elif claim.reserved_for:
                state = "still-allocated" if claim.allocation is not None else "unallocated"
            elif claim.allocation is not None:
                self._release(claim.allocation)
                claim.allocation = None
                state = "deallocated"
                if claim.deleting:
                    self._drop_claim(claim)
            else:
                state = "unallocated"
            step.claims.append(ClaimState(ref.name, claim.name, generated, None, list(claim.reserved_for), state))
        self.steps.append(step)
        if self.pending:
            still = self._retry(source)
            if still:
                self.steps.append(Step("still-pending", view.name, view.namespace, source, pending=[self.pods[k].view.name for k in still]))

    # ---- final state
    def final_pods(self) -> dict[str, Step]:
        """Every pod still in the cluster as a step-shaped record of its current state (by name)."""
        out = {}
        for pod in self.pods.values():
            view = pod.view
            step = Step("state", view.name, view.namespace, node=pod.node, failure=pod.failure if pod.node is None else None)
            step.claims = self._claim_states(pod)
            step.node_allocatable = [c.to_api() for c in view.claim_resources] if pod.node is not None else []
            out[view.name] = step
        return out


def _observed(r: Replay, source: str) -> list[Step]:
    """After a wait: every pod created so far as it is now (gone: failure ``gone``)."""
    out = []
    for name, ns in r.created:
        pod = r.pods.get(f"{ns}/{name}")
        step = Step("observe", name, ns, source)
        if pod is None:
            step.failure = "gone"
        else:
            step.node, step.failure = pod.node, pod.failure if pod.node is None else None
            step.claims = r._claim_states(pod)
        out.append(step)
    return out


def _with_allocated(claims: list[tuple[str, _Claim]], scores: Mapping[str, int]) -> dict[str, int]:
    """DynamicResources' Score per node: the claims allocated on the node plus those allocated
    already (computeScore counts every claim of the pod once Filter allocated some)."""
    done = [
        ClaimScoreInput(parse_claim(c.obj), frozenset(r.request for r in c.allocation.results))
        for _, c in claims
        if c.allocation is not None
    ]
    extra = dynamic_resources_score(done)
    return {n: v + extra for n, v in scores.items()}


def _dra_score(claims: list[Claim], allocations: list[ClaimAllocation]) -> int:
    """DynamicResources' Score of the claims Filter allocated on a node."""
    return dynamic_resources_score(
        ClaimScoreInput(c, frozenset(r.request for r in a.results)) for c, a in zip(claims, allocations, strict=True)
    )


def replay(
    objects: Iterable[tuple[Any, str]],
    *,
    prefer: Callable[[str], str | None] | None = None,
    percentage_of_nodes_to_score: int | None = None,
    evictions: bool = True,
    gates: Mapping[str, bool] | None = None,
) -> Replay:
    """Replay ``(object, source)`` pairs in order; the finished ``Replay`` (its ``steps``, its state)."""
    r = Replay(prefer=prefer, percentage_of_nodes_to_score=percentage_of_nodes_to_score, evictions=evictions, gates=gates)
    for obj, source in objects:
        r.apply(obj, source)
    return r
