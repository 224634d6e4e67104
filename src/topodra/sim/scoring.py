"""Score and NormalizeScore of kube-scheduler 1.36's default profile, integer arithmetic included.

The one place where topodra scores nodes: ``sim replay`` and ``sim diff`` call ``score_nodes``
on the nodes that passed Filter and ``select_host`` on their totals; ``sim run``'s scheduler
does the same through ``nodeplugins`` (whose array form, ``fastscore``, takes a node's score
from ``fit_score`` and ``balanced_score`` here and is tested equal to ``score_nodes`` and
``select_host``). Upstream, Kubernetes v1.36.2:

- the profile and weights: ``pkg/scheduler/apis/config/v1/default_plugins.go``; how scores,
  NormalizeScore and weights combine: ``pkg/scheduler/framework/runtime/framework.go``
  (``RunPreScorePlugins``: a plugin whose PreScore says Skip gives no score at all;
  ``RunScorePlugins``: Score per node, NormalizeScore per plugin, then times the weight);
- ``pkg/scheduler/framework/plugins/``: ``tainttoleration``, ``nodeaffinity``, ``noderesources``
  (``fit.go``, ``resource_allocation.go``, ``least_allocated.go``, ``balanced_allocation.go``),
  ``volumebinding``, ``podtopologyspread``, ``interpodaffinity``, ``dynamicresources``,
  ``imagelocality``; ``helper/normalize_score.go``.

PodTopologySpread and InterPodAffinity read the pods already bound: ``topodra.sim.podscores``.
VolumeBinding's PreScore skips unless StorageCapacityScoring (alpha, off) is on or the pod has
statically bound PVCs; with the gate on it scores 0 on every node for a pod without volumes.
Pods for which a plugin would score from inputs the replay does not carry raise ``Unmodelled``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from topodra.sim.objects import Claim, Node, node_selector_matches
from topodra.sim.podscores import (
    AffinityPod,
    AffinityTerm,
    BoundPod,
    SpreadConstraint,
    SpreadPod,
    Unmodelled,
    inter_pod_affinity_scores,
    pod_topology_spread_scores,
)

__all__ = [
    "MAX_NODE_SCORE",
    "WEIGHTS",
    "ClaimScoreInput",
    "NodeInputs",
    "PodInputs",
    "Unmodelled",
    "balanced_allocation",
    "balanced_score",
    "default_normalize",
    "fit_score",
    "dynamic_resources_score",
    "image_locality",
    "least_allocated",
    "normalized_image_name",
    "score_nodes",
    "select_host",
    "tolerates",
    "total",
]

MAX_NODE_SCORE = 100

#: Score plugins of the default profile in their order, with their weights (default_plugins.go;
#: DynamicResources comes before DefaultPreemption when DRA is on; VolumeBinding has weight 1).
WEIGHTS: Mapping[str, int] = {
    "TaintToleration": 3,
    "NodeAffinity": 2,
    "NodeResourcesFit": 1,
    "VolumeBinding": 1,
    "PodTopologySpread": 2,
    "InterPodAffinity": 2,
    "DynamicResources": 2,
    "NodeResourcesBalancedAllocation": 1,
    "ImageLocality": 1,
}

#: imagelocality.go: the size range an image's score is scaled over.
_MB = 1024 * 1024
_MIN_THRESHOLD = 23 * _MB
_MAX_CONTAINER_THRESHOLD = 1000 * _MB

#: resourceapi.FirstAvailableDeviceRequestMaxSize
FIRST_AVAILABLE_MAX = 8


@dataclass(frozen=True)
class PodInputs:
    """What scoring reads from the pod being scheduled."""

    tolerations: tuple[Mapping[str, Any], ...] = ()
    preferred: tuple[tuple[int, Mapping[str, Any]], ...] = ()  # nodeAffinity preferred terms
    requests: tuple[int, int] = (0, 0)  # (milli CPU, memory bytes) as requested
    nonzero: tuple[int, int] = (0, 0)  # the same with kube-scheduler's defaults for containers without
    images: tuple[str, ...] = ()  # init containers, containers, image volumes, in that order
    containers: int = 1  # init containers + containers
    has_claims: bool = False
    namespace: str = "default"
    labels: Mapping[str, str] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    required: Mapping[str, Any] | None = None  # required node affinity
    spread: tuple[SpreadConstraint, ...] = ()  # ScheduleAnyway topology spread constraints
    preferred_affinity: tuple[AffinityTerm, ...] = ()  # preferred pod affinity terms
    preferred_anti_affinity: tuple[AffinityTerm, ...] = ()  # preferred pod anti-affinity terms
    volumes: bool = False  # PersistentVolumeClaims or ephemeral volumes


@dataclass(frozen=True)
class NodeInputs:
    """What scoring reads from one feasible node and the pods bound to it."""

    node: Node
    taints: tuple[Mapping[str, Any], ...] = ()
    allocatable: tuple[int, int] = (0, 0)  # (milli CPU, memory bytes); 0: not reported
    requested: tuple[int, int] = (0, 0)  # sum of the bound pods' requests
    nonzero: tuple[int, int] = (0, 0)  # sum of the bound pods' non-zero requests
    images: Mapping[str, int] = field(default_factory=dict)  # image name -> size in bytes
    pods: tuple[BoundPod, ...] = ()  # the pods bound to it (PodTopologySpread, InterPodAffinity)


# --- helpers ------------------------------------------------------------------------------------


def default_normalize(scores: Sequence[int], reverse: bool) -> list[int]:
    """helper.DefaultNormalizeScore(MaxNodeScore, reverse, scores)."""
    max_count = max(scores, default=0)
    if max_count <= 0:
        return [MAX_NODE_SCORE] * len(scores) if reverse else list(scores)
    out = []
    for score in scores:
        score = _div(MAX_NODE_SCORE * score, max_count)
        out.append(MAX_NODE_SCORE - score if reverse else score)
    return out


def _div(a: int, b: int) -> int:
    """Go's integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


# --- TaintToleration ----------------------------------------------------------------------------


def tolerates(tol: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Toleration.ToleratesTaint (staging/src/k8s.io/api/core/v1/toleration.go), with the alpha
    TaintTolerationComparisonOperators off: Lt and Gt tolerate nothing."""
    effect = tol.get("effect") or ""
    if effect and effect != (taint.get("effect") or ""):
        return False
    key = tol.get("key") or ""
    if key and key != (taint.get("key") or ""):
        return False
    op = tol.get("operator") or ""
    if op in ("", "Equal"):
        return (tol.get("value") or "") == (taint.get("value") or "")
    return op == "Exists"


def intolerable_prefer_no_schedule(tolerations: Sequence[Mapping[str, Any]], taints: Iterable[Mapping[str, Any]]) -> int:
    """countIntolerableTaintsPreferNoSchedule, with the tolerations PreScore keeps (effect empty or
    PreferNoSchedule)."""
    kept = [t for t in tolerations if (t.get("effect") or "") in ("", "PreferNoSchedule")]
    return sum(
        1 for taint in taints if taint.get("effect") == "PreferNoSchedule" and not any(tolerates(t, taint) for t in kept)
    )


# --- NodeAffinity -------------------------------------------------------------------------------


def preferred_affinity_score(preferred: Sequence[tuple[int, Mapping[str, Any]]], node: Node) -> int:
    """PreferredSchedulingTerms.Score: the weights of the matching terms (terms of weight 0 or
    with neither expressions nor fields are dropped when parsed)."""
    score = 0
    for weight, term in preferred:
        if weight == 0 or not (term.get("matchExpressions") or term.get("matchFields")):
            continue
        if node_selector_matches({"nodeSelectorTerms": [term]}, node):
            score += weight
    return score


# --- NodeResourcesFit and NodeResourcesBalancedAllocation ---------------------------------------


def least_requested_score(requested: int, capacity: int) -> int:
    """leastRequestedScore (least_allocated.go)."""
    if capacity == 0 or requested > capacity:
        return 0
    return _div((capacity - requested) * MAX_NODE_SCORE, capacity)


def least_allocated(requested: Sequence[int], allocatable: Sequence[int], weights: Sequence[int] = (1, 1)) -> int:
    """leastResourceScorer: the weighted mean of the per-resource scores, resources the node does
    not report (allocatable 0) left out."""
    node_score = weight_sum = 0
    for req, alloc, weight in zip(requested, allocatable, weights, strict=True):
        if alloc == 0:
            continue
        node_score += least_requested_score(req, alloc) * weight
        weight_sum += weight
    return _div(node_score, weight_sum) if weight_sum else 0


def balanced_resource_score(requested: Sequence[int], allocatable: Sequence[int]) -> int:
    """balancedResourceScore: 100 * (1 - the standard deviation of the used fractions), truncated."""
    fractions = []
    for req, alloc in zip(requested, allocatable, strict=True):
        if alloc == 0:
            continue
        fractions.append(min(1.0, float(req) / float(alloc)))
    std = 0.0
    if len(fractions) == 2:
        std = abs((fractions[0] - fractions[1]) / 2)
    elif len(fractions) > 2:
        mean = sum(fractions) / len(fractions)
        std = math.sqrt(sum((f - mean) * (f - mean) for f in fractions) / len(fractions))
    return int((1 - std) * float(MAX_NODE_SCORE))


def balanced_allocation(requested: Sequence[int], allocated: Sequence[int], allocatable: Sequence[int]) -> int:
    """balancedResourceScorer (1.36): how much the pod improves the balance, centred on 50."""
    with_pod = balanced_resource_score(requested, allocatable)
    without_pod = balanced_resource_score(allocated, allocatable)
    return MAX_NODE_SCORE // 2 + _div(MAX_NODE_SCORE // 2 + with_pod - without_pod, 2)


def fit_score(pod: PodInputs, node: NodeInputs) -> int:
    """NodeResourcesFit's Score (LeastAllocated over cpu and memory, non-zero requests)."""
    requested, _, alloc = _node_request(pod.nonzero, node.nonzero, node.allocatable)
    return least_allocated(requested, alloc)


def balanced_score(pod: PodInputs, node: NodeInputs) -> int:
    """NodeResourcesBalancedAllocation's Score (the pod's own requests; PreScore skips a pod
    without any, which ``score_nodes`` checks)."""
    requested, allocated, alloc = _node_request(pod.requests, node.requested, node.allocatable)
    return balanced_allocation(requested, allocated, alloc)


def _node_request(pod: Sequence[int], node_used: Sequence[int], allocatable: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
    """calculateNodeAllocatableRequest for cpu and memory: (requested, allocated, allocatable),
    zeros for a resource the node does not report."""
    requested, allocated, alloc = [], [], []
    for p, used, a in zip(pod, node_used, allocatable, strict=True):
        if a == 0:
            requested.append(0)
            allocated.append(0)
            alloc.append(0)
            continue
        requested.append(used + p)
        allocated.append(used)
        alloc.append(a)
    return requested, allocated, alloc


# --- ImageLocality -------------------------------------------------------------------------------


def normalized_image_name(name: str) -> str:
    """normalizedImageName: a name without a tag gets ``:latest``."""
    if name.rfind(":") <= name.rfind("/"):
        name = name + ":latest"
    return name


def image_locality(pod: PodInputs, node: NodeInputs, spread: Mapping[str, int], total_nodes: int) -> int:
    """ImageLocality's score: the images the node has, each scaled by how many nodes have it
    (``spread``: image name -> nodes with it, over every node of the cluster)."""
    total = 0
    for image in pod.images:
        name = normalized_image_name(image)
        size = node.images.get(name)
        if size is not None:
            total += int(float(size) * (float(spread.get(name, 0)) / float(total_nodes)))
    max_threshold = _MAX_CONTAINER_THRESHOLD * pod.containers
    if total < _MIN_THRESHOLD:
        total = _MIN_THRESHOLD
    elif total > max_threshold:
        total = max_threshold
    return _div(MAX_NODE_SCORE * (total - _MIN_THRESHOLD), max_threshold - _MIN_THRESHOLD)


# --- DynamicResources ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimScoreInput:
    """One of the pod's claims for computeScore: its requests and the subrequests its allocation
    chose (from status.allocation, or the one Filter found on the node)."""

    claim: Claim
    chosen: frozenset[str]  # the allocation results' request names ("request/subrequest")


def dynamic_resources_score(claims: Iterable[ClaimScoreInput]) -> int:
    """computeScore (dynamicresources.go): per ``firstAvailable`` request, 8 minus the index of
    each subrequest the allocation used, over all the pod's claims, allocated ones included."""
    score = 0
    for c in claims:
        for req in c.claim.requests:
            if req.exactly is not None:
                continue
            for i, sub in enumerate(req.first_available):
                if f"{req.name}/{sub.name}" in c.chosen:
                    score += FIRST_AVAILABLE_MAX - i
    return score


# --- the whole profile --------------------------------------------------------------------------


def score_nodes(
    pod: PodInputs,
    nodes: Sequence[NodeInputs],
    *,
    dra: Mapping[str, int] | None = None,
    image_spread: Mapping[str, int] | None = None,
    total_nodes: int | None = None,
    cluster: Sequence[NodeInputs] | None = None,
    storage_capacity_scoring: bool = False,
) -> dict[str, dict[str, int]]:
    """The weighted score of each plugin on each node (RunScorePlugins), plugins that PreScore
    skips left out. ``dra``: DynamicResources' Score per node (a node without one scores 0, as
    when Filter made no allocation there); ``image_spread``/``total_nodes``: for ImageLocality,
    over the whole cluster; ``cluster``: every node with its pods (PodTopologySpread,
    InterPodAffinity; default: ``nodes``); ``storage_capacity_scoring``: the gate."""
    everything = nodes if cluster is None else cluster
    raw: dict[str, list[int]] = {}
    raw["TaintToleration"] = default_normalize(
        [intolerable_prefer_no_schedule(pod.tolerations, n.taints) for n in nodes], reverse=True
    )
    if pod.preferred:  # PreScore: Skip without preferred terms
        raw["NodeAffinity"] = default_normalize([preferred_affinity_score(pod.preferred, n.node) for n in nodes], reverse=False)
    raw["NodeResourcesFit"] = [fit_score(pod, n) for n in nodes]
    if pod.volumes:
        raise Unmodelled("VolumeBinding: volumes are not replayed")
    if storage_capacity_scoring:  # PreScore scores; no volume of the pod on any node: 0
        raw["VolumeBinding"] = [0] * len(nodes)
    spread = pod_topology_spread_scores(SpreadPod(pod.namespace, pod.spread, pod.node_selector, pod.required, pod.tolerations), nodes, everything)
    if spread is not None:
        raw["PodTopologySpread"] = spread
    affinity = inter_pod_affinity_scores(AffinityPod(pod.namespace, pod.labels, pod.preferred_affinity, pod.preferred_anti_affinity), nodes, everything)
    if affinity is not None:
        raw["InterPodAffinity"] = affinity
    raw["DynamicResources"] = default_normalize([(dra or {}).get(n.node.name, 0) for n in nodes], reverse=False)
    if any(pod.requests):  # PreScore: Skip for best-effort pods
        raw["NodeResourcesBalancedAllocation"] = [balanced_score(pod, n) for n in nodes]
    spread_images = image_spread or {}
    count = total_nodes or len(nodes)
    raw["ImageLocality"] = [image_locality(pod, n, spread_images, count) for n in nodes]
    out: dict[str, dict[str, int]] = {n.node.name: {} for n in nodes}
    for plugin in WEIGHTS:
        scores = raw.get(plugin)
        if scores is None:
            continue
        for n, s in zip(nodes, scores, strict=True):
            out[n.node.name][plugin] = s * WEIGHTS[plugin]
    return out


def total(plugins: Mapping[str, int]) -> int:
    """A node's total score: the sum of its weighted plugin scores."""
    return sum(plugins.values())


def select_host(totals: Sequence[int]) -> int:
    """Where kube-scheduler 1.36 binds among the feasible nodes, in the order Filter found them,
    given their total scores: the position ``heap.Pop`` returns after ``heap.Init`` over
    ``nodeScoreHeap`` (schedule_one.go ``newSortedNodeScores``). Less is "higher total, or equal
    totals and a higher Randomizer", and Randomizer is set only when scheduler extenders score
    (``prioritizeNodes``): without them equal totals never swap, so a tie is decided by the
    heap's shape, not at random (container/heap's ``Init`` and ``down``, Go 1.27)."""
    h = list(range(len(totals)))
    if not h:
        raise ValueError("select_host: no feasible node")

    def less(i: int, j: int) -> bool:
        return totals[h[i]] > totals[h[j]]

    def down(i: int, n: int) -> None:
        while True:
            j1 = 2 * i + 1
            if j1 >= n:
                break
            j = j1  # left child
            j2 = j1 + 1
            if j2 < n and less(j2, j1):
                j = j2  # right child
            if not less(j, i):
                break
            h[i], h[j] = h[j], h[i]
            i = j

    n = len(h)
    for i in range(n // 2 - 1, -1, -1):  # heap.Init
        down(i, n)
    return h[0]  # heap.Pop swaps the root to the end, restores the rest and returns it
