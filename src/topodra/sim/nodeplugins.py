"""The plugins of kube-scheduler 1.36's default profile other than DynamicResources, for
``sim run``'s scheduler: which nodes a pod passes before DynamicResources' Filter runs, why the
others fail, and which feasible node it is bound to.

What they read: each node's ``status.allocatable`` (cpu, memory, pods), taints, labels and
images, and what the pods bound to it request (``podfit.NodeUsage``, the one accounting of a
node's pods); each pod's containers, tolerations and node affinity (``podfit.parse_pod``).
Filter is ``podfit.filter_reasons`` (NodeUnschedulable, TaintToleration, NodeAffinity,
NodeResourcesFit, in the profile's order); Score is ``scoring.score_nodes`` and the choice
among the best ``scoring.select_host``. ``NodePlugins(fast=False)`` asks them node by node;
the default answers the same from arrays (``topodra.sim.fastscore``), which
tests/sim/test_fastscore.py and tests/sim/test_largest_shape.py check equal.

A pod the default profile would score with inputs ``sim run`` does not carry (spread
constraints, pod affinity) is refused with ``Unmodelled``.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

import numpy as np

from topodra.sim.fastscore import FastNodes, KindArrays
from topodra.sim.nodetree import node_tree_order
from topodra.sim.objects import Node, ObjectError, parse_node
from topodra.sim.podfit import (
    NodeUsage,
    NodeView,
    PodView,
    filter_reasons,
    node_inputs,
    parse_node_view,
    parse_pod,
    pod_inputs,
)
from topodra.sim.scoring import PodInputs, Unmodelled, score_nodes, select_host

__all__ = ["Choice", "NodePlugins", "PodKind", "unschedulable_message"]

#: The usage of a node without pods (shared: never changed).
_NO_PODS = NodeUsage()

#: A pod without a spec: one container without requests (scheduler_perf's pause pod).
_PAUSE_SPEC: Mapping[str, Any] = {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10.1"}]}


def unschedulable_message(nodes: int, reasons: Mapping[str, int]) -> str:
    """FitError.Error() without the preemption summary: the reasons' counts sorted as strings."""
    hist = ", ".join(sorted(f"{n} {r}" for r, n in reasons.items()))
    return f"0/{nodes} nodes are available: {hist}."


@dataclass(frozen=True)
class PodKind:
    """A kind of pod (the workload entry many pods come from), parsed once."""

    kid: int  # index into the per-kind caches
    view: PodView
    inputs: PodInputs

    @functools.cached_property
    def _fields(self) -> dict[str, Any]:
        return {f.name: getattr(self.view, f.name) for f in fields(self.view)}

    def instance(self, name: str, namespace: str) -> PodView:
        """The view of one pod of this kind (NodeUsage counts pods by name): what
        ``dataclasses.replace`` makes, without its introspection per call."""
        return PodView(**{**self._fields, "name": name, "namespace": namespace})


class Choice(NamedTuple):
    """Where a pod goes among its feasible nodes: the position in their list and how many nodes
    share the best total (1: no tie; 0: not scored, a single feasible node)."""

    position: int
    tied: int


class NodePlugins:
    """The nodes as the non-DRA plugins see them, and the pods bound to them."""

    def __init__(self, nodes: Sequence[Mapping[str, Any] | Node | str], *, fast: bool = True) -> None:
        views = _views(nodes)
        self.views = [views[i] for i in node_tree_order([v.node.labels for v in views])]  # the scheduler's node list
        self._usage: dict[int, NodeUsage] = {}  # nodes with pods bound; the others read _NO_PODS
        self.fast = fast
        self._kinds: dict[int, tuple[Any, PodKind]] = {}  # id of a pod object -> (it, its kind)
        self._sizes: dict[str, int] = {}  # image name -> size in the scheduler's cache (first node's)
        self._spread: dict[str, int] = {}  # image name -> nodes that have it
        for v in self.views:
            for name, size in v.images.items():
                self._sizes.setdefault(name, size)
                self._spread[name] = self._spread.get(name, 0) + 1
        self.arrays = FastNodes(self.views, self._sizes, self._spread)

    # ---- pods
    def kind(self, obj: Mapping[str, Any] | None, name: str) -> PodKind:
        """The kind of a pod made from the Pod object ``obj`` (None: a pod with one container
        and no requests); parsed once per object. ``Unmodelled`` for what sim run cannot score."""
        hit = self._kinds.get(id(obj))
        if hit is not None and hit[0] is obj:
            return hit[1]
        spec = _PAUSE_SPEC if obj is None else obj.get("spec") or {}
        try:
            view = parse_pod({"metadata": {"name": name}, "spec": spec} if obj is None else obj)
        except ObjectError as e:
            raise ValueError(str(e)) from None
        if view.spread_constraints:
            raise Unmodelled(f"Pod {view.name}: PodTopologySpread: topologySpreadConstraints are not modelled by sim run")
        if view.pod_affinity is not None or view.pod_anti_affinity is not None:
            raise Unmodelled(f"Pod {view.name}: InterPodAffinity: pod affinity and anti-affinity are not modelled by sim run")
        kind = PodKind(len(self._kinds), view, pod_inputs(view))
        self._kinds[id(obj)] = (obj, kind)
        self.arrays.add_kind(kind.kid, view, kind.inputs)
        return kind

    def usage(self, node: int) -> NodeUsage:
        """The pods bound to ``node`` and what they request (read only)."""
        return self._usage.get(node, _NO_PODS)

    def bind(self, node: int, pod: PodView) -> None:
        usage = self._usage.get(node)
        if usage is None:
            usage = self._usage[node] = NodeUsage()
        usage.add(pod)
        self.arrays.update(node, usage)

    def unbind(self, node: int, pod: PodView) -> None:
        usage = self.usage(node)
        usage.remove(pod)
        self.arrays.update(node, usage)

    # ---- Filter
    def passes_all(self, kind: PodKind) -> bool:
        """Whether every node passes the plugins before DynamicResources, known without looking
        at each (False: ask ``passes``)."""
        return self.fast and self.arrays.passes_all(self._arrays(kind))

    def passes(self, kind: PodKind, nodes: np.ndarray[Any, np.dtype[np.int64]]) -> np.ndarray[Any, np.dtype[np.bool_]] | None:
        """Which of ``nodes`` pass every plugin before DynamicResources (None: all of them)."""
        if self.fast:
            return self.arrays.passes(self._arrays(kind), nodes)
        ok = np.fromiter((not self._reasons(kind, i) for i in nodes.tolist()), dtype=np.bool_, count=len(nodes))
        return None if ok.all() else ok

    def reasons(self, kind: PodKind, nodes: np.ndarray[Any, np.dtype[np.int64]]) -> Counter[str]:
        """The Filter reasons of those of ``nodes`` that do not pass, counted."""
        if self.fast:
            return self.arrays.reasons(self._arrays(kind), nodes)
        out: Counter[str] = Counter()
        for i in nodes.tolist():
            out.update(self._reasons(kind, i))
        return out

    def _reasons(self, kind: PodKind, i: int) -> list[str]:
        return filter_reasons(kind.view, self.views[i], self.usage(i))

    # ---- Score
    def choose(self, kind: PodKind, nodes: np.ndarray[Any, np.dtype[np.int64]], dra: np.ndarray[Any, Any] | None) -> Choice:
        """Where the pod goes among the feasible ``nodes`` (in the order Filter found them), with
        DynamicResources' Score per node (None: 0 everywhere). A single feasible node is taken
        without scoring, as schedulePod does."""
        if len(nodes) == 1:
            return Choice(0, 0)
        if self.fast:
            position, tied = self.arrays.choose(self._arrays(kind), nodes, dra)
            return Choice(position, tied)
        at = nodes.tolist()
        raw = None if dra is None else dict(zip((self.views[i].name for i in at), (int(s) for s in dra.tolist()), strict=True))
        per_plugin = score_nodes(
            kind.inputs,
            [node_inputs(self.views[i], self.usage(i), self._sizes) for i in at],
            dra=raw,
            image_spread=self._spread,
            total_nodes=len(self.views),
        )
        totals = [sum(per_plugin[self.views[i].name].values()) for i in at]
        return Choice(select_host(totals), totals.count(max(totals)))

    def _arrays(self, kind: PodKind) -> KindArrays:
        return self.arrays.kinds[kind.kid]


def _views(nodes: Sequence[Mapping[str, Any] | Node | str]) -> list[NodeView]:
    """The nodes as the plugins read them. Nodes that share their ``status`` and ``spec``
    objects (a synthetic cluster's nodes of one machine share one status) are parsed once and
    take their own name and labels."""
    shared: dict[tuple[int, int], NodeView] = {}
    out = []
    for n in nodes:
        if not isinstance(n, Mapping):
            out.append(_view(n))
            continue
        key = (id(n.get("status")), id(n.get("spec")))  # the objects live as long as ``nodes``
        first = shared.get(key)
        if first is None:
            out.append(shared.setdefault(key, _view(n)))
            continue
        try:
            node = parse_node(n)
        except ObjectError as e:
            raise ValueError(str(e)) from None
        out.append(NodeView(node, first.taints, first.unschedulable, first.allocatable, first.max_pods, first.images))
    return out


def _view(node: Mapping[str, Any] | Node | str) -> NodeView:
    """A node as the plugins read it; a bare name or ``Node`` reports no allocatable (unlimited)."""
    if isinstance(node, Mapping):
        try:
            return parse_node_view(node)
        except ObjectError as e:
            raise ValueError(str(e)) from None
    n = node if isinstance(node, Node) else parse_node(node)
    return NodeView(node=n, taints=(), unschedulable=False, allocatable=None, max_pods=None)
