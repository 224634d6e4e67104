"""The default profile's Score plugins that read the pods already bound, as kube-scheduler 1.36
computes them: PodTopologySpread and InterPodAffinity (Score, NormalizeScore, the PreScore
rules that skip them). ``scoring.score_nodes`` calls them; ``sim replay`` gives them every
node with its pods.

Upstream, Kubernetes v1.36.2, ``pkg/scheduler/framework/plugins/``:

- ``podtopologyspread/scoring.go`` and ``common.go``: the pod's ``ScheduleAnyway`` constraints
  (its ``DoNotSchedule`` ones are a Filter, not modelled: ``Unmodelled``), ``matchLabelKeys``
  merged into the selector, node inclusion policies (``nodeAffinityPolicy`` Honor and
  ``nodeTaintsPolicy`` Ignore by default; the gate is GA). Pods are counted per topology value
  over every node whose labels have all the constraints' keys (``requireAllTopologies``),
  per node for ``kubernetes.io/hostname``; a feasible node without a key scores 0. A pod without
  constraints gets the system defaults, whose selector comes from the Services, ReplicaSets and
  StatefulSets selecting it, which are not replayed: PreScore skips it, as it does when none
  selects the pod.
- ``interpodaffinity/scoring.go``: the pod's preferred affinity (+weight) and anti-affinity
  (-weight) terms against every bound pod, and every bound pod's required affinity terms
  (``hardPodAffinityWeight`` 1) and preferred terms against the pod; normalized to 0-100 over
  (max - min). Required terms of the pod are a Filter, not modelled (``Unmodelled``); a term's
  ``namespaceSelector`` other than ``{}`` needs Namespace objects (``Unmodelled``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from topodra.sim.objects import Node, node_selector_matches

__all__ = [
    "AffinityTerm",
    "BoundPod",
    "SpreadConstraint",
    "Unmodelled",
    "affinity_terms",
    "inter_pod_affinity_scores",
    "pod_topology_spread_scores",
    "spread_constraints",
]

MAX_NODE_SCORE = 100
HOSTNAME = "kubernetes.io/hostname"
HARD_POD_AFFINITY_WEIGHT = 1  # InterPodAffinityArgs' default


class Unmodelled(ValueError):
    """A pod for which a plugin would score from inputs the replay does not carry."""


# --- label selectors ------------------------------------------------------------------------


def _requirements(selector: Mapping[str, Any]) -> list[tuple[str, str, tuple[str, ...]]]:
    out: list[tuple[str, str, tuple[str, ...]]] = [(str(k), "In", (str(v),)) for k, v in (selector.get("matchLabels") or {}).items()]
    for r in selector.get("matchExpressions") or ():
        out.append((str(r.get("key", "")), str(r.get("operator", "")), tuple(str(v) for v in r.get("values") or ())))
    return out


def _matches(requirements: Sequence[tuple[str, str, tuple[str, ...]]], labels: Mapping[str, str]) -> bool:
    for key, op, values in requirements:
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


@dataclass(frozen=True)
class Selector:
    """A labels.Selector made from a metav1.LabelSelector: nil selects nothing, no requirements
    everything (``Empty``)."""

    requirements: tuple[tuple[str, str, tuple[str, ...]], ...] | None  # None: labels.Nothing()

    @staticmethod
    def of(selector: Mapping[str, Any] | None) -> Selector:
        return Selector(None if selector is None else tuple(_requirements(selector)))

    @property
    def empty(self) -> bool:
        return self.requirements is not None and not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        return self.requirements is not None and _matches(self.requirements, labels)


# --- inputs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpreadConstraint:
    """A ``ScheduleAnyway`` topology spread constraint as PodTopologySpread keeps it."""

    max_skew: int
    topology_key: str
    selector: Selector
    honor_affinity: bool  # nodeAffinityPolicy Honor (the default)
    honor_taints: bool  # nodeTaintsPolicy Honor (default Ignore)


@dataclass(frozen=True)
class AffinityTerm:
    """A pod (anti-)affinity term (framework.AffinityTerm), its weight for a weighted term."""

    selector: Selector
    namespaces: frozenset[str]
    all_namespaces: bool  # namespaceSelector {}
    topology_key: str
    weight: int = 0

    def matches(self, namespace: str, labels: Mapping[str, str]) -> bool:
        return (self.all_namespaces or namespace in self.namespaces) and self.selector.matches(labels)


@dataclass(frozen=True)
class BoundPod:
    """A pod on a node as these plugins read it."""

    namespace: str
    labels: Mapping[str, str]
    required_affinity: tuple[AffinityTerm, ...] = ()
    preferred_affinity: tuple[AffinityTerm, ...] = ()
    preferred_anti_affinity: tuple[AffinityTerm, ...] = ()
    deleting: bool = False

    @property
    def has_affinity(self) -> bool:
        return bool(self.required_affinity or self.preferred_affinity or self.preferred_anti_affinity)


def spread_constraints(constraints: Sequence[Mapping[str, Any]], pod_labels: Mapping[str, str]) -> tuple[SpreadConstraint, ...]:
    """filterTopologySpreadConstraints for ScheduleAnyway; a DoNotSchedule constraint is a Filter
    this replay does not run (``Unmodelled``)."""
    out = []
    for c in constraints:
        action = c.get("whenUnsatisfiable")
        if action == "DoNotSchedule":
            raise Unmodelled("PodTopologySpread: whenUnsatisfiable DoNotSchedule (a Filter) is not replayed")
        if action != "ScheduleAnyway":
            continue
        raw = c.get("labelSelector")
        selector = Selector.of(raw)
        extra = {k: pod_labels[k] for k in c.get("matchLabelKeys") or () if k in pod_labels}
        if extra and selector.requirements is not None:  # mergeLabelSetWithSelector (Nothing stays Nothing)
            selector = Selector(tuple((k, "In", (v,)) for k, v in extra.items()) + selector.requirements)
        out.append(
            SpreadConstraint(
                max_skew=int(c.get("maxSkew") or 0),
                topology_key=str(c.get("topologyKey") or ""),
                selector=selector,
                honor_affinity=(c.get("nodeAffinityPolicy") or "Honor") == "Honor",
                honor_taints=(c.get("nodeTaintsPolicy") or "Ignore") == "Honor",
            )
        )
    return tuple(out)


def _term(raw: Mapping[str, Any], owner_namespace: str, weight: int = 0) -> AffinityTerm:
    ns_selector = raw.get("namespaceSelector")
    if ns_selector is not None and (ns_selector.get("matchLabels") or ns_selector.get("matchExpressions")):
        raise Unmodelled("InterPodAffinity: a namespaceSelector needs Namespace objects, which are not replayed")
    namespaces = frozenset(str(n) for n in raw.get("namespaces") or ())
    if not namespaces and ns_selector is None:
        namespaces = frozenset({owner_namespace})
    return AffinityTerm(Selector.of(raw.get("labelSelector")), namespaces, ns_selector is not None, str(raw.get("topologyKey") or ""), weight)


def affinity_terms(
    affinity: Mapping[str, Any] | None, anti: Mapping[str, Any] | None, namespace: str
) -> tuple[tuple[AffinityTerm, ...], tuple[AffinityTerm, ...], tuple[AffinityTerm, ...], tuple[AffinityTerm, ...]]:
    """(required affinity, preferred affinity, preferred anti-affinity, required anti-affinity)
    terms of a pod (framework.NewPodInfo; terms of weight 0 kept as written)."""
    required = tuple(_term(t, namespace) for t in (affinity or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or ())
    preferred = tuple(
        _term(w.get("podAffinityTerm") or {}, namespace, int(w.get("weight") or 0))
        for w in (affinity or {}).get("preferredDuringSchedulingIgnoredDuringExecution") or ()
    )
    avoided = tuple(
        _term(w.get("podAffinityTerm") or {}, namespace, int(w.get("weight") or 0))
        for w in (anti or {}).get("preferredDuringSchedulingIgnoredDuringExecution") or ()
    )
    forbidden = tuple(_term(t, namespace) for t in (anti or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or ())
    return required, preferred, avoided, forbidden


# --- PodTopologySpread ----------------------------------------------------------------------


@dataclass(frozen=True)
class SpreadPod:
    """What PodTopologySpread reads of the pod being scheduled."""

    namespace: str
    constraints: tuple[SpreadConstraint, ...]
    node_selector: Mapping[str, str]
    required: Mapping[str, Any] | None  # required node affinity
    tolerations: tuple[Mapping[str, Any], ...]


class SpreadNode(Protocol):
    """A node as these plugins read it (``scoring.NodeInputs``): its labels, taints and bound pods."""

    @property
    def node(self) -> Node: ...
    @property
    def taints(self) -> tuple[Mapping[str, Any], ...]: ...
    @property
    def pods(self) -> tuple[BoundPod, ...]: ...


def _count(pods: Sequence[BoundPod], selector: Selector, namespace: str) -> int:
    """countPodsMatchSelector: an empty selector counts nothing."""
    if selector.empty:
        return 0
    return sum(1 for p in pods if not p.deleting and p.namespace == namespace and selector.matches(p.labels))


def _required_matches(pod: SpreadPod, node: Node) -> bool:
    """GetRequiredNodeAffinity(pod).Match: nodeSelector and required node affinity."""
    if any(node.labels.get(k) != v for k, v in pod.node_selector.items()):
        return False
    return pod.required is None or node_selector_matches(pod.required, node)


def _untolerated_hard_taint(pod: SpreadPod, node: SpreadNode) -> bool:
    from topodra.sim.scoring import tolerates  # scoring imports this module

    return any(
        t.get("effect") in ("NoSchedule", "NoExecute") and not any(tolerates(tol, t) for tol in pod.tolerations) for t in node.taints
    )


def pod_topology_spread_scores(pod: SpreadPod, feasible: Sequence[SpreadNode], cluster: Sequence[SpreadNode]) -> list[int] | None:
    """PreScore, Score and NormalizeScore over the feasible nodes (None: PreScore skips)."""
    constraints = pod.constraints
    if not constraints or not cluster:
        return None
    keys = [c.topology_key for c in constraints]
    ignored = {n.node.name for n in feasible if any(k not in n.node.labels for k in keys)}
    counts: list[dict[str, int]] = [{} for _ in constraints]
    sizes = [0] * len(constraints)
    for n in feasible:
        if n.node.name in ignored:
            continue
        for i, c in enumerate(constraints):
            if c.topology_key == HOSTNAME:
                continue
            value = n.node.labels[c.topology_key]
            if value not in counts[i]:
                counts[i][value] = 0
                sizes[i] += 1
    weights = []
    for i, c in enumerate(constraints):
        size = len(feasible) - len(ignored) if c.topology_key == HOSTNAME else sizes[i]
        weights.append(math.log(float(size + 2)))
    for n in cluster:  # processAllNode
        if any(k not in n.node.labels for k in keys):
            continue
        for i, c in enumerate(constraints):
            if c.honor_affinity and not _required_matches(pod, n.node):
                continue
            if c.honor_taints and _untolerated_hard_taint(pod, n):
                continue
            value = n.node.labels[c.topology_key]
            if value in counts[i]:
                counts[i][value] += _count(n.pods, c.selector, pod.namespace)
    raw: list[int | None] = []
    for n in feasible:
        if n.node.name in ignored:
            raw.append(None)
            continue
        score = 0.0
        for i, c in enumerate(constraints):
            tp = n.node.labels.get(c.topology_key)
            if tp is None:
                continue
            cnt = _count(n.pods, c.selector, pod.namespace) if c.topology_key == HOSTNAME else counts[i][tp]
            score += float(cnt) * weights[i] + float(c.max_skew - 1)
        raw.append(_go_round(score))
    return _spread_normalize(raw)


def _go_round(x: float) -> int:
    """math.Round: half away from zero (``a - floor(a)`` is exact, so halves are seen as such)."""
    a = abs(x)
    r = math.floor(a)
    if a - r >= 0.5:
        r += 1
    return r if x >= 0 else -r


def _spread_normalize(raw: Sequence[int | None]) -> list[int]:
    valid = [s for s in raw if s is not None]
    low = min(valid, default=0)
    high = max(valid, default=0)
    out = []
    for s in raw:
        if s is None:
            out.append(0)
        elif high == 0:
            out.append(MAX_NODE_SCORE)
        else:
            out.append(MAX_NODE_SCORE * (high + low - s) // high)  # non-negative: floor is Go's truncation
    return out


# --- InterPodAffinity -----------------------------------------------------------------------


@dataclass(frozen=True)
class AffinityPod:
    """What InterPodAffinity's Score reads of the pod being scheduled."""

    namespace: str
    labels: Mapping[str, str]
    preferred_affinity: tuple[AffinityTerm, ...]
    preferred_anti_affinity: tuple[AffinityTerm, ...]


def _add(scores: dict[str, dict[str, int]], term: AffinityTerm, weight: int, node: Node) -> None:
    value = node.labels.get(term.topology_key)
    if value is not None:
        per_key = scores.setdefault(term.topology_key, {})
        per_key[value] = per_key.get(value, 0) + weight


def inter_pod_affinity_scores(pod: AffinityPod, feasible: Sequence[SpreadNode], cluster: Sequence[SpreadNode]) -> list[int] | None:
    """PreScore, Score and NormalizeScore over the feasible nodes (None: PreScore skips)."""
    has_constraints = bool(pod.preferred_affinity or pod.preferred_anti_affinity)
    topology: dict[str, dict[str, int]] = {}
    processed = False  # some node's pods gave a score map (PreScore's index)
    for n in cluster:
        if not n.node.labels:
            continue
        pods = n.pods if has_constraints else tuple(p for p in n.pods if p.has_affinity)
        local: dict[str, dict[str, int]] = {}
        for existing in pods:  # processExistingPod
            for t in pod.preferred_affinity:
                if t.matches(existing.namespace, existing.labels):
                    _add(local, t, t.weight, n.node)
            for t in pod.preferred_anti_affinity:
                if t.matches(existing.namespace, existing.labels):
                    _add(local, t, -t.weight, n.node)
            for t in existing.required_affinity:
                if t.matches(pod.namespace, pod.labels):
                    _add(local, t, HARD_POD_AFFINITY_WEIGHT, n.node)
            for t in existing.preferred_affinity:
                if t.matches(pod.namespace, pod.labels):
                    _add(local, t, t.weight, n.node)
            for t in existing.preferred_anti_affinity:
                if t.matches(pod.namespace, pod.labels):
                    _add(local, t, -t.weight, n.node)
        if local:
            processed = True
            for key, values in local.items():
                merged = topology.setdefault(key, {})
                for v, s in values.items():
                    merged[v] = merged.get(v, 0) + s
    if not processed:
        return None
    raw = [sum(values.get(n.node.labels[key], 0) for key, values in topology.items() if key in n.node.labels) for n in feasible]
    if not topology:
        return raw
    low, high = min(raw), max(raw)
    if high - low <= 0:
        return [0] * len(raw)
    return [int(float(MAX_NODE_SCORE) * (float(s - low) / float(high - low))) for s in raw]
