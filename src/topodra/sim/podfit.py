"""kube-scheduler's plugins around DRA, for replaying a real cluster: where a pod may run and
how a node scores.

Filter, in the default profile's order: NodeUnschedulable, TaintToleration,
NodeAffinity (``nodeSelector`` and required node affinity), NodeResourcesFit
(requests against ``status.allocatable``); DynamicResources comes after them
(``topodra.sim.replay``). Scoring is ``topodra.sim.scoring``'s; ``score_inputs`` gives it
what it reads from a pod and a node. The reasons are kube-scheduler's own strings, so a
failure reads as the scheduler writes it. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from topodra.quantity import QuantityError, parse_quantity
from topodra.sim.objects import Node, ObjectError, node_selector_matches
from topodra.sim.scoring import NodeInputs, PodInputs, tolerates

__all__ = [
    "NodeView",
    "PodView",
    "NodeUsage",
    "filter_reasons",
    "parse_pod",
    "parse_node_view",
    "pod_inputs",
    "node_inputs",
]

DEFAULT_MILLI_CPU = 100  # the requests scoring assumes for a container without one
DEFAULT_MEMORY = 200 * 1024 * 1024

REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
REASON_TAINT = "node(s) had untolerated taint(s)"  # taint_toleration.go Filter (1.36)


@dataclass(frozen=True)
class Resources:
    milli_cpu: int = 0
    memory: int = 0

    def __add__(self, o: Resources) -> Resources:
        return Resources(self.milli_cpu + o.milli_cpu, self.memory + o.memory)

    def __sub__(self, o: Resources) -> Resources:
        return Resources(self.milli_cpu - o.milli_cpu, self.memory - o.memory)


@dataclass(frozen=True)
class PodClaimRef:
    """One entry of ``spec.resourceClaims``."""

    name: str
    claim_name: str | None
    template_name: str | None


@dataclass(frozen=True)
class PodView:
    """What scheduling reads from a Pod."""

    name: str
    namespace: str
    uid: str
    node_name: str
    node_selector: Mapping[str, str]
    required: Mapping[str, Any] | None  # requiredDuringSchedulingIgnoredDuringExecution
    preferred: tuple[tuple[int, Mapping[str, Any]], ...]  # (weight, preference term)
    tolerations: tuple[Mapping[str, Any], ...]
    requests: Resources
    nonzero: Resources  # requests with kube-scheduler's defaults for containers without one
    claims: tuple[PodClaimRef, ...]
    claim_statuses: Mapping[str, str]  # status.resourceClaimStatuses: pod claim -> generated claim
    scheduler_name: str = "default-scheduler"
    labels: Mapping[str, str] = field(default_factory=dict)
    images: tuple[str, ...] = ()  # init containers, containers, image volumes (ImageLocality's order)
    containers: int = 1  # init containers + containers
    spread_constraints: bool = False  # spec.topologySpreadConstraints given
    pod_affinity: Mapping[str, Any] | None = None  # spec.affinity.podAffinity
    pod_anti_affinity: Mapping[str, Any] | None = None  # spec.affinity.podAntiAffinity

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class NodeView:
    """What scheduling reads from a Node (``node`` is what the DRA allocator reads)."""

    node: Node
    taints: tuple[Mapping[str, Any], ...]
    unschedulable: bool
    allocatable: Resources | None  # None: no status.allocatable, treated as unlimited
    max_pods: int | None
    images: Mapping[str, int] = field(default_factory=dict)  # status.images: each name -> size in bytes

    @property
    def name(self) -> str:
        return self.node.name


@dataclass
class NodeUsage:
    """The pods bound to a node and what they request."""

    pods: set[str] = field(default_factory=set)
    requested: Resources = field(default_factory=Resources)
    nonzero: Resources = field(default_factory=Resources)

    def add(self, pod: PodView) -> None:
        if pod.key not in self.pods:
            self.pods.add(pod.key)
            self.requested += pod.requests
            self.nonzero += pod.nonzero

    def remove(self, pod: PodView) -> None:
        if pod.key in self.pods:
            self.pods.discard(pod.key)
            self.requested -= pod.requests
            self.nonzero -= pod.nonzero


# --- parsing --------------------------------------------------------------------------------


def _milli(value: Any, where: str) -> int:
    try:
        return math.ceil(parse_quantity(value).amount * 1000)
    except QuantityError as e:
        raise ObjectError(f"{where}: {e}") from None


def _bytes(value: Any, where: str) -> int:
    try:
        return math.ceil(parse_quantity(value).amount)
    except QuantityError as e:
        raise ObjectError(f"{where}: {e}") from None


def _container_requests(c: Mapping[str, Any], where: str) -> tuple[Resources, Resources]:
    res = c.get("resources") or {}
    # The API server copies limits into missing requests.
    values = {**(res.get("limits") or {}), **(res.get("requests") or {})}
    cpu = _milli(values["cpu"], f"{where}.resources.requests.cpu") if "cpu" in values else None
    mem = _bytes(values["memory"], f"{where}.resources.requests.memory") if "memory" in values else None
    actual = Resources(cpu or 0, mem or 0)
    nonzero = Resources(DEFAULT_MILLI_CPU if cpu is None else cpu, DEFAULT_MEMORY if mem is None else mem)
    return actual, nonzero


def _max(a: Resources, b: Resources) -> Resources:
    return Resources(max(a.milli_cpu, b.milli_cpu), max(a.memory, b.memory))


def parse_pod(obj: Mapping[str, Any]) -> PodView:
    """A Pod dict as a ``PodView``; ``ObjectError`` names the bad field."""
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ObjectError("Pod: metadata.name is missing")
    where = f"Pod {name}: spec"
    spec = obj.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise ObjectError(f"{where}: expected an object")
    try:
        requests = nonzero = Resources()
        for i, c in enumerate(spec.get("containers") or ()):
            a, n = _container_requests(c, f"{where}.containers[{i}]")
            requests, nonzero = requests + a, nonzero + n
        for i, c in enumerate(spec.get("initContainers") or ()):
            a, n = _container_requests(c, f"{where}.initContainers[{i}]")
            requests, nonzero = _max(requests, a), _max(nonzero, n)
        affinity = ((spec.get("affinity") or {}).get("nodeAffinity")) or {}
        preferred = tuple(
            (int(p.get("weight", 0)), p.get("preference") or {})
            for p in affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
        )
        claims = []
        for i, rc in enumerate(spec.get("resourceClaims") or ()):
            cname = rc.get("name")
            if not isinstance(cname, str) or not cname:
                raise ObjectError(f"{where}.resourceClaims[{i}].name: required field is missing")
            claims.append(
                PodClaimRef(
                    cname, rc.get("resourceClaimName") or None, rc.get("resourceClaimTemplateName") or None
                )
            )
        affinity_all = spec.get("affinity") or {}
        containers = [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
        images = [str(c.get("image") or "") for c in containers]
        images += [str((v.get("image") or {}).get("reference") or "") for v in spec.get("volumes") or () if v.get("image") is not None]
        statuses = {
            str(s.get("name")): str(s["resourceClaimName"])
            for s in (obj.get("status") or {}).get("resourceClaimStatuses") or ()
            if s.get("resourceClaimName")
        }
        return PodView(
            name=name,
            namespace=str(meta.get("namespace") or "default"),
            uid=str(meta.get("uid") or ""),
            node_name=str(spec.get("nodeName") or ""),
            node_selector={str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()},
            required=affinity.get("requiredDuringSchedulingIgnoredDuringExecution"),
            preferred=preferred,
            tolerations=tuple(spec.get("tolerations") or ()),
            requests=requests,
            nonzero=nonzero,
            claims=tuple(claims),
            claim_statuses=statuses,
            scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
            labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
            images=tuple(images),
            containers=len(containers),
            spread_constraints=bool(spec.get("topologySpreadConstraints")),
            pod_affinity=affinity_all.get("podAffinity"),
            pod_anti_affinity=affinity_all.get("podAntiAffinity"),
        )
    except (AttributeError, TypeError, ValueError, KeyError) as e:
        if isinstance(e, ObjectError):
            raise
        raise ObjectError(f"{where}: malformed ({type(e).__name__}: {e})") from None


def parse_node_view(obj: Mapping[str, Any]) -> NodeView:
    """A Node dict as a ``NodeView``."""
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ObjectError("Node: metadata.name is missing")
    try:
        spec = obj.get("spec") or {}
        alloc = (obj.get("status") or {}).get("allocatable")
        allocatable = max_pods = None
        if isinstance(alloc, Mapping) and alloc:
            where = f"Node {name}: status.allocatable"
            allocatable = Resources(
                _milli(alloc.get("cpu", 0), f"{where}.cpu"), _bytes(alloc.get("memory", 0), f"{where}.memory")
            )
            max_pods = _bytes(alloc.get("pods", 0), f"{where}.pods")
        return NodeView(
            node=Node(name, {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}),
            taints=tuple(spec.get("taints") or ()),
            unschedulable=bool(spec.get("unschedulable")),
            allocatable=allocatable,
            max_pods=max_pods,
            images={
                str(n): int(img.get("sizeBytes") or 0)
                for img in (obj.get("status") or {}).get("images") or ()
                for n in img.get("names") or ()
            },
        )
    except (AttributeError, TypeError, ValueError) as e:
        if isinstance(e, ObjectError):
            raise
        raise ObjectError(f"Node {name}: malformed ({type(e).__name__}: {e})") from None


# --- filters --------------------------------------------------------------------------------


def _untolerated(pod: PodView, node: NodeView, effects: Sequence[str]) -> list[Mapping[str, Any]]:
    return [
        t
        for t in node.taints
        if t.get("effect") in effects and not any(tolerates(tol, t) for tol in pod.tolerations)
    ]


def _affinity_matches(pod: PodView, node: NodeView) -> bool:
    labels = node.node.labels
    if any(labels.get(k) != v for k, v in pod.node_selector.items()):
        return False
    if pod.required is not None:
        return node_selector_matches(pod.required, node.node)
    return True


def filter_reasons(pod: PodView, node: NodeView, usage: NodeUsage) -> list[str]:
    """Why the non-DRA plugins reject ``node`` (empty: it passes), from the first failing plugin."""
    if node.unschedulable and not any(
        tolerates(t, {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
        for t in pod.tolerations
    ):
        return [REASON_UNSCHEDULABLE]
    bad = _untolerated(pod, node, ("NoSchedule", "NoExecute"))
    if bad:
        return [REASON_TAINT]
    if not _affinity_matches(pod, node):
        return [REASON_AFFINITY]
    reasons = []
    if node.max_pods is not None and len(usage.pods) + 1 > node.max_pods:
        reasons.append("Too many pods")
    if node.allocatable is not None:
        free = node.allocatable - usage.requested
        if pod.requests.milli_cpu > 0 and pod.requests.milli_cpu > free.milli_cpu:
            reasons.append("Insufficient cpu")
        if pod.requests.memory > 0 and pod.requests.memory > free.memory:
            reasons.append("Insufficient memory")
    return reasons


# --- what scoring reads -------------------------------------------------------------------------


def pod_inputs(pod: PodView) -> PodInputs:
    """The pod as ``topodra.sim.scoring`` reads it."""
    return PodInputs(
        tolerations=pod.tolerations,
        preferred=pod.preferred,
        requests=(pod.requests.milli_cpu, pod.requests.memory),
        nonzero=(pod.nonzero.milli_cpu, pod.nonzero.memory),
        images=pod.images,
        containers=pod.containers,
        has_claims=bool(pod.claims),
        spread_constraints=pod.spread_constraints,
        preferred_pod_affinity=bool(
            (pod.pod_affinity or {}).get("preferredDuringSchedulingIgnoredDuringExecution")
            or (pod.pod_anti_affinity or {}).get("preferredDuringSchedulingIgnoredDuringExecution")
        ),
    )


def node_inputs(node: NodeView, usage: NodeUsage, image_sizes: Mapping[str, int]) -> NodeInputs:
    """A node and its bound pods as ``topodra.sim.scoring`` reads them (``image_sizes``: the
    size the scheduler's cache keeps per image name, the first node's that reported it)."""
    alloc = node.allocatable
    return NodeInputs(
        node=node.node,
        taints=node.taints,
        allocatable=(alloc.milli_cpu, alloc.memory) if alloc is not None else (0, 0),
        requested=(usage.requested.milli_cpu, usage.requested.memory),
        nonzero=(usage.nonzero.milli_cpu, usage.nonzero.memory),
        images={name: image_sizes.get(name, size) for name, size in node.images.items()},
    )
