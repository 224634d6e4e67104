"""kube-scheduler's plugins around DRA, for replaying a real cluster: where a pod may run and
how a node scores.

Filter, in the default profile's order: NodeUnschedulable, TaintToleration,
NodeAffinity (``nodeSelector`` and required node affinity), NodeResourcesFit
(requests against ``status.allocatable``); DynamicResources comes after them
(``topodra.sim.replay``). Scoring is ``topodra.sim.scoring``'s; ``score_inputs`` gives it
what it reads from a pod and a node. The reasons are kube-scheduler's own strings, so a
failure reads as the scheduler writes it. Pure.

With ``DRANodeAllocatableResources`` a bound pod's claimed node resources
(``status.nodeAllocatableResourceClaimStatuses``, ``ClaimResources``) count in the node's
requests as its container requests do (``NodeUsage``), and DynamicResources checks the pod's
container requests plus what its new claims map to against the node (``claim_fit_reasons``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from topodra.quantity import Quantity, QuantityError, parse_quantity
from topodra.sim.objects import Node, ObjectError, node_selector_matches
from topodra.sim.podscores import BoundPod, Unmodelled, affinity_terms, spread_constraints
from topodra.sim.scoring import NodeInputs, PodInputs, tolerates

__all__ = [
    "ClaimResources",
    "claim_fit_reasons",
    "NodeView",
    "PodView",
    "NodeUsage",
    "bound_pod",
    "filter_reasons",
    "unmodelled_filters",
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
class ClaimResources:
    """One entry of a pod's ``status.nodeAllocatableResourceClaimStatuses``: the node-allocatable
    resources one of its claims was allocated (resource name -> quantity) and the containers
    that reference the claim."""

    claim: str  # resourceClaimName: the ResourceClaim's own name
    containers: tuple[str, ...]
    resources: Mapping[str, Quantity]

    @property
    def requests(self) -> Resources:
        """What it adds to the pod's requests (component-helpers' PodRequests)."""
        cpu, mem = self.resources.get("cpu"), self.resources.get("memory")
        return Resources(
            math.ceil(cpu.amount * 1000) if cpu is not None else 0, math.ceil(mem.amount) if mem is not None else 0
        )

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {"resourceClaimName": self.claim}
        if self.containers:
            out["containers"] = list(self.containers)
        out["resources"] = {k: str(self.resources[k]) for k in sorted(self.resources)}
        return out


def _claimed(statuses: Sequence[ClaimResources]) -> Resources:
    total = Resources()
    for s in statuses:
        total += s.requests
    return total


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
    topology_spread: tuple[Mapping[str, Any], ...] = ()  # spec.topologySpreadConstraints
    volumes: bool = False  # a PersistentVolumeClaim or ephemeral volume (VolumeBinding's)
    deleting: bool = False  # metadata.deletionTimestamp set
    pod_affinity: Mapping[str, Any] | None = None  # spec.affinity.podAffinity
    pod_anti_affinity: Mapping[str, Any] | None = None  # spec.affinity.podAntiAffinity
    #: (container, the pod claims it references): init containers first, as the scheduler walks them
    container_claims: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: status.nodeAllocatableResourceClaimStatuses (counted only with DRANodeAllocatableResources)
    claim_resources: tuple[ClaimResources, ...] = ()
    #: pod-level requests (``spec.resources``, PodLevelResources: beta, on): "cpu" in milli-CPU,
    #: "memory" in bytes; they stand for the pod's whole request of that resource
    pod_level: Mapping[str, int] = field(default_factory=dict)
    #: the containers' requests (init containers' maximum), whatever the pod level says
    container_requests: Resources | None = None
    #: what the node's non-zero sum counts of the pod when it differs from ``nonzero`` (pod-level
    #: requests: the defaults only for a resource no container requests, CalculateResource)
    node_nonzero: Resources | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def claimed(self) -> Resources:
        """What the pod's claims add to its requests on its node."""
        return _claimed(self.claim_resources)

    def plus_claims(self, base: Resources, claims: Resources) -> Resources:
        """``base`` with what claims map to added (PodRequests with the claim statuses): not for a
        resource requested at the pod level, whose request covers them."""
        cpu = 0 if "cpu" in self.pod_level else claims.milli_cpu
        mem = 0 if "memory" in self.pod_level else claims.memory
        return Resources(base.milli_cpu + cpu, base.memory + mem)


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
    """The pods bound to a node and what they request: their containers' requests plus what their
    claims were allocated of the node's resources (NodeInfo.update with
    ``UseDRANodeAllocatableResourceClaimStatus``), and who uses each such claim
    (``NodeAllocatableDRAClaimStates``: "namespace/claim" -> pod keys)."""

    pods: set[str] = field(default_factory=set)
    requested: Resources = field(default_factory=Resources)
    nonzero: Resources = field(default_factory=Resources)
    claim_users: dict[str, set[str]] = field(default_factory=dict)

    def add(self, pod: PodView) -> None:
        if pod.key not in self.pods:
            self.pods.add(pod.key)
            claimed = pod.claimed
            self.requested += pod.plus_claims(pod.requests, claimed)
            self.nonzero += pod.plus_claims(pod.node_nonzero or pod.nonzero, claimed)
            for s in pod.claim_resources:
                self.claim_users.setdefault(f"{pod.namespace}/{s.claim}", set()).add(pod.key)

    def remove(self, pod: PodView) -> None:
        if pod.key in self.pods:
            self.pods.discard(pod.key)
            claimed = pod.claimed
            self.requested -= pod.plus_claims(pod.requests, claimed)
            self.nonzero -= pod.plus_claims(pod.node_nonzero or pod.nonzero, claimed)
            for s in pod.claim_resources:
                users = self.claim_users.get(f"{pod.namespace}/{s.claim}")
                if users is not None:
                    users.discard(pod.key)
                    if not users:
                        del self.claim_users[f"{pod.namespace}/{s.claim}"]


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


def _declared(spec: Mapping[str, Any]) -> set[str]:
    """The resources some container (init too) requests, limits copied into missing requests."""
    out: set[str] = set()
    for c in [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]:
        res = c.get("resources") or {}
        out.update(res.get("limits") or {}, res.get("requests") or {})
    return out


def _pod_level(spec: Mapping[str, Any], containers: Resources, where: str) -> dict[str, int]:
    """The pod-level requests of cpu and memory, defaulted as the API server does when pod-level
    limits are set (``defaultPodRequests``, pkg/apis/core/v1/defaults.go, v1.36.2): from what the
    containers request, else from the pod-level limit."""
    res = spec.get("resources") or {}
    requests, limits = dict(res.get("requests") or {}), res.get("limits") or {}
    out: dict[str, int] = {}
    declared = _declared(spec) if limits else set()
    for key, container_total in (("cpu", containers.milli_cpu), ("memory", containers.memory)):
        if key in requests:
            value = requests[key]
        elif key in declared:  # an overcommittable resource the containers request
            out[key] = container_total
            continue
        elif key in limits:
            value = limits[key]
        else:
            continue
        at = f"{where}.resources.requests.{key}"
        out[key] = _milli(value, at) if key == "cpu" else _bytes(value, at)
    return out


def _max(a: Resources, b: Resources) -> Resources:
    return Resources(max(a.milli_cpu, b.milli_cpu), max(a.memory, b.memory))


def _container_claims(spec: Mapping[str, Any]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Each container's ``resources.claims`` names, init containers first."""
    out = []
    for c in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]:
        names = tuple(str(r.get("name")) for r in (c.get("resources") or {}).get("claims") or () if r.get("name"))
        out.append((str(c.get("name") or ""), names))
    return tuple(out)


def _claim_resources(status: Mapping[str, Any], where: str) -> tuple[ClaimResources, ...]:
    """``status.nodeAllocatableResourceClaimStatuses``."""
    out = []
    for i, s in enumerate(status.get("nodeAllocatableResourceClaimStatuses") or ()):
        at = f"{where}.nodeAllocatableResourceClaimStatuses[{i}]"
        resources = {}
        for name, value in (s.get("resources") or {}).items():
            try:
                resources[str(name)] = parse_quantity(value)
            except QuantityError as e:
                raise ObjectError(f"{at}.resources[{name}]: {e}") from None
        out.append(ClaimResources(str(s.get("resourceClaimName") or ""), tuple(map(str, s.get("containers") or ())), resources))
    return tuple(out)


@dataclass(frozen=True)
class _Requests:
    requests: Resources
    nonzero: Resources
    containers: Resources
    pod_level: dict[str, int]
    node_nonzero: Resources | None


def _pod_requests(spec: Mapping[str, Any], where: str) -> _Requests:
    """PodRequests: the containers' requests (init containers' maximum), with the scheduler's
    defaults for those without one (``nonzero``); pod-level requests stand for the pod's whole
    request of a resource."""
    requests = nonzero = Resources()
    for i, c in enumerate(spec.get("containers") or ()):
        a, n = _container_requests(c, f"{where}.containers[{i}]")
        requests, nonzero = requests + a, nonzero + n
    for i, c in enumerate(spec.get("initContainers") or ()):
        a, n = _container_requests(c, f"{where}.initContainers[{i}]")
        requests, nonzero = _max(requests, a), _max(nonzero, n)
    pod_level = _pod_level(spec, requests, where)
    if not pod_level:
        return _Requests(requests, nonzero, requests, pod_level, None)
    declared = _declared(spec)
    node_nonzero = Resources(  # CalculateResource: defaults only for what no container requests
        pod_level.get("cpu", requests.milli_cpu if "cpu" in declared else nonzero.milli_cpu),
        pod_level.get("memory", requests.memory if "memory" in declared else nonzero.memory),
    )
    return _Requests(
        Resources(pod_level.get("cpu", requests.milli_cpu), pod_level.get("memory", requests.memory)),
        Resources(pod_level.get("cpu", nonzero.milli_cpu), pod_level.get("memory", nonzero.memory)),
        requests,
        pod_level,
        node_nonzero,
    )


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
        req = _pod_requests(spec, where)
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
            requests=req.requests,
            nonzero=req.nonzero,
            claims=tuple(claims),
            claim_statuses=statuses,
            scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
            labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
            images=tuple(images),
            containers=len(containers),
            spread_constraints=bool(spec.get("topologySpreadConstraints")),
            topology_spread=tuple(spec.get("topologySpreadConstraints") or ()),
            volumes=any(v.get("persistentVolumeClaim") is not None or v.get("ephemeral") is not None for v in spec.get("volumes") or ()),
            deleting=bool(meta.get("deletionTimestamp")),
            pod_affinity=affinity_all.get("podAffinity"),
            pod_anti_affinity=affinity_all.get("podAntiAffinity"),
            container_claims=_container_claims(spec),
            claim_resources=_claim_resources(obj.get("status") or {}, f"Pod {name}: status"),
            pod_level=req.pod_level,
            container_requests=req.containers,
            node_nonzero=req.node_nonzero,
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


def claim_fit_reasons(pod: PodView, claimed: Sequence[ClaimResources], node: NodeView, usage: NodeUsage) -> list[str]:
    """DynamicResources' check of a pod whose new claims map to node resources
    (pkg/scheduler/framework/plugins/dynamicresources/nodeallocatabledynamicresources.go, v1.36.2):
    pod-level requests must cover the containers' requests plus ``claimed`` (cpu checked first:
    Go walks the map in random order), then the pod's requests plus ``claimed``
    (nodeFitsResources) must fit what the node has left."""
    claims = _claimed(claimed)
    total = (pod.container_requests or pod.requests) + claims
    for name, have in (("cpu", total.milli_cpu), ("memory", total.memory)):  # validatePodLevelRequestsCoverDRA
        if name in pod.pod_level and have > pod.pod_level[name]:
            return [f"pod level request for {name} is insufficient to cover the aggregated container and node-allocatable DRA requests"]
    if node.allocatable is None:
        return []
    demand = pod.plus_claims(pod.requests, claims)
    free = node.allocatable - usage.requested
    reasons = []
    if demand.milli_cpu > 0 and demand.milli_cpu > free.milli_cpu:
        reasons.append("Insufficient cpu")
    if demand.memory > 0 and demand.memory > free.memory:
        reasons.append("Insufficient memory")
    return reasons


# --- what scoring reads -------------------------------------------------------------------------


def pod_inputs(pod: PodView) -> PodInputs:
    """The pod as ``topodra.sim.scoring`` reads it (``Unmodelled``: a term or constraint the
    replay cannot score)."""
    _, preferred, avoided, _ = affinity_terms(pod.pod_affinity, pod.pod_anti_affinity, pod.namespace)
    return PodInputs(
        tolerations=pod.tolerations,
        preferred=pod.preferred,
        requests=(pod.requests.milli_cpu, pod.requests.memory),
        nonzero=(pod.nonzero.milli_cpu, pod.nonzero.memory),
        images=pod.images,
        containers=pod.containers,
        has_claims=bool(pod.claims),
        namespace=pod.namespace,
        labels=pod.labels,
        node_selector=pod.node_selector,
        required=pod.required,
        spread=spread_constraints(pod.topology_spread, pod.labels),
        preferred_affinity=preferred,
        preferred_anti_affinity=avoided,
        volumes=pod.volumes,
    )


def unmodelled_filters(pod: PodView, bound: Iterable[PodView]) -> None:
    """``Unmodelled`` when a Filter the replay does not run could reject a node for ``pod``:
    PodTopologySpread with a ``DoNotSchedule`` constraint, InterPodAffinity with the pod's
    required (anti-)affinity terms or a bound pod's required anti-affinity term selecting it."""
    if any(c.get("whenUnsatisfiable") == "DoNotSchedule" for c in pod.topology_spread):
        raise Unmodelled("PodTopologySpread: whenUnsatisfiable DoNotSchedule (a Filter) is not replayed")
    required, _, _, forbidden = affinity_terms(pod.pod_affinity, pod.pod_anti_affinity, pod.namespace)
    if required or forbidden:
        raise Unmodelled("InterPodAffinity: required pod affinity and anti-affinity (a Filter) are not replayed")
    for other in bound:
        if other.pod_anti_affinity and any(t.matches(pod.namespace, pod.labels) for t in affinity_terms(None, other.pod_anti_affinity, other.namespace)[3]):
            raise Unmodelled(f"InterPodAffinity: the required anti-affinity of pod {other.key} (a Filter) is not replayed")


def bound_pod(pod: PodView) -> BoundPod:
    """A pod bound to a node as PodTopologySpread and InterPodAffinity read it."""
    required, preferred, avoided, _ = affinity_terms(pod.pod_affinity, pod.pod_anti_affinity, pod.namespace)
    return BoundPod(pod.namespace, pod.labels, required, preferred, avoided, pod.deleting)


def node_inputs(node: NodeView, usage: NodeUsage, image_sizes: Mapping[str, int], pods: tuple[BoundPod, ...] = ()) -> NodeInputs:
    """A node and its bound pods as ``topodra.sim.scoring`` reads them (``image_sizes``: the
    size the scheduler's cache keeps per image name, the first node's that reported it;
    ``pods``: the pods bound there, for the plugins that read them)."""
    alloc = node.allocatable
    return NodeInputs(
        node=node.node,
        taints=node.taints,
        allocatable=(alloc.milli_cpu, alloc.memory) if alloc is not None else (0, 0),
        requested=(usage.requested.milli_cpu, usage.requested.memory),
        nonzero=(usage.nonzero.milli_cpu, usage.nonzero.memory),
        images={name: image_sizes.get(name, size) for name, size in node.images.items()},
        pods=pods,
    )
