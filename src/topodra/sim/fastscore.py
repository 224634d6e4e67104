"""The non-DRA plugins of ``nodeplugins`` over numpy arrays: the same answers as
``podfit.filter_reasons``, ``scoring.score_nodes`` and ``scoring.select_host`` node by node
(tests/sim/test_fastscore.py compares them on random nodes, pods and usages), for the few
thousand nodes a pod of a large cluster is filtered and scored on.

- Filter: NodeResourcesFit compares the pod's requests with what each node has left, as
  arrays; the plugins before it (NodeUnschedulable, TaintToleration, NodeAffinity) depend on
  the pod's kind and the node only, so their reason is worked out once per (kind, node) with
  ``filter_reasons`` itself, and only when some node or the pod makes it matter.
- Score: the plugins that need no normalization over the feasible nodes (NodeResourcesFit,
  NodeResourcesBalancedAllocation, ImageLocality, and TaintToleration when no node has a
  PreferNoSchedule taint) give a node a score that changes only when its pods change: it is
  kept per (kind, node), from ``scoring``'s own functions, once per distinct node state and
  again for a node when a pod is bound there or deleted. TaintToleration, NodeAffinity and
  DynamicResources are normalized over the feasible nodes as ``DefaultNormalizeScore`` does
  (Go's integer division).
- The choice among equal best totals: ``heap.Init`` keeps a parent over an equal child and a
  left child over an equal right one, so the root is the best node met first in a pre-order
  walk of the heap's tree (position i has children 2i+1, 2i+2): the best node of lowest
  pre-order rank. The first n positions of a larger heap's tree are the tree of n, in the
  same pre-order, so the ranks of the largest heap scored so far serve every smaller one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from topodra.sim.objects import Node
from topodra.sim.podfit import (
    REASON_AFFINITY,
    REASON_TAINT,
    REASON_UNSCHEDULABLE,
    NodeUsage,
    NodeView,
    PodView,
    filter_reasons,
)
from topodra.sim.scoring import (
    MAX_NODE_SCORE,
    WEIGHTS,
    NodeInputs,
    PodInputs,
    balanced_score,
    fit_score,
    image_locality,
    intolerable_prefer_no_schedule,
    preferred_affinity_score,
)

__all__ = ["FastNodes", "KindArrays", "preorder_ranks"]

Ints = np.ndarray[Any, np.dtype[np.int64]]

#: Scores kept per (kind, node state) before they are dropped (bounds memory).
_SCORES_KEPT = 100_000

#: Reasons of the plugins before NodeResourcesFit, by code (0: passes them).
_STATIC_REASONS = ("", REASON_UNSCHEDULABLE, REASON_TAINT, REASON_AFFINITY)
_NO_NODE = Node("", {})


def preorder_ranks(n: int) -> Ints:
    """Each heap position's rank in a pre-order walk (node, left subtree, right subtree)."""
    rank = np.zeros(n, dtype=np.int64)
    stack = [0] if n else []
    k = 0
    while stack:
        i = stack.pop()
        rank[i] = k
        k += 1
        if 2 * i + 2 < n:
            stack.append(2 * i + 2)
        if 2 * i + 1 < n:
            stack.append(2 * i + 1)
    return rank


def _normalize(raw: Ints, reverse: bool) -> Ints:
    """DefaultNormalizeScore over ``raw`` (non-negative)."""
    top = int(raw.max())
    if top <= 0:
        return np.full(raw.shape, MAX_NODE_SCORE, dtype=np.int64) if reverse else raw
    scaled = MAX_NODE_SCORE * raw // top  # non-negative: floor is Go's truncation
    return MAX_NODE_SCORE - scaled if reverse else scaled


@dataclass
class KindArrays:
    """What a kind of pod reads of every node."""

    pod: PodInputs
    cpu: int  # the pod's own requests (Filter)
    memory: int
    base: Ints  # per node: the score of the plugins that need no normalization
    static: Any  # per node: the code of the first plugin before NodeResourcesFit that rejects (None: none does)
    taints: Ints | None  # per node: intolerable PreferNoSchedule taints (None: no node has one)
    affinity: Ints | None  # per node: the weights of matching preferred terms (None: the pod has none)
    images: Ints | None  # per node: ImageLocality's score (None: 0 everywhere)


class FastNodes:
    """The nodes' allocatable and requests as arrays, and each kind's per-node scores."""

    def __init__(self, views: Sequence[NodeView], sizes: Mapping[str, int], spread: Mapping[str, int]) -> None:
        n = len(views)
        self.views = views
        self._sizes = sizes
        self._spread = spread
        self.reported = np.asarray([v.allocatable is not None for v in views], dtype=np.bool_)
        #: per node, one row each: allocatable cpu, memory; requested cpu, memory; non-zero
        #: requested cpu, memory (milli-CPU and bytes; allocatable 0 where not reported)
        self.state = np.zeros((6, n), dtype=np.int64)
        self.state[0:2] = np.asarray([(v.allocatable.milli_cpu, v.allocatable.memory) if v.allocatable else (0, 0) for v in views], dtype=np.int64).reshape(n, 2).T
        self.max_pods = np.asarray([v.max_pods or 0 for v in views], dtype=np.int64)
        self.pods = np.zeros(n, dtype=np.int64)
        # lower bounds of what the reported nodes have left (cpu, memory, pods): a pod within
        # all three fits everywhere (they only fall as pods are bound; deletes leave them low)
        left = self.state[0:2, self.reported]
        self._least = (int(left[0].min()), int(left[1].min()), int(self.max_pods[self.reported].min())) if left.size else None
        self._any_taint = any(t.get("effect") in ("NoSchedule", "NoExecute") for v in views for t in v.taints)
        self._prefer_taint = any(t.get("effect") == "PreferNoSchedule" for v in views for t in v.taints)
        self._unschedulable = any(v.unschedulable for v in views)
        self.kinds: dict[int, KindArrays] = {}
        self._ranks = preorder_ranks(0)  # pre-order ranks of a heap at least as large as any scored so far
        self._allocatable: list[tuple[int, int]] = [(int(c), int(m)) for c, m in self.state[0:2].T.tolist()]  # the same as Python ints
        self._max_pods: list[int] = self.max_pods.tolist()
        self._scores: dict[tuple[int, tuple[int, ...]], int] = {}  # (kind, node state) -> its score without images

    # ---- state
    def add_kind(self, kid: int, view: PodView, pod: PodInputs) -> None:
        n = len(self.views)
        static = None
        if self._any_taint or self._unschedulable or view.node_selector or view.required is not None:
            codes = [_STATIC_REASONS.index((filter_reasons(view, _static_only(v), NodeUsage()) or [""])[0]) for v in self.views]
            static = np.asarray(codes, dtype=np.int8) if any(codes) else None
        taints = np.asarray([intolerable_prefer_no_schedule(pod.tolerations, v.taints) for v in self.views], dtype=np.int64) if self._prefer_taint else None
        affinity = np.asarray([preferred_affinity_score(pod.preferred, v.node) for v in self.views], dtype=np.int64) if pod.preferred else None
        images = None
        if self._spread:
            images = np.asarray([image_locality(pod, self._image_inputs(v), self._spread, n) for v in self.views], dtype=np.int64)
        kind = KindArrays(pod, view.requests.milli_cpu, view.requests.memory, np.zeros(n, dtype=np.int64), static, taints, affinity, images)
        # nodes in the same state score alike: the plain functions once per distinct state
        rows, inverse = np.unique(self.state.T, axis=0, return_inverse=True)
        per_row = np.asarray([self._dynamic(pod, r) for r in rows.tolist()], dtype=np.int64)
        kind.base = per_row[inverse.reshape(-1)] + self._constant(kind)
        if images is not None:
            kind.base += images * WEIGHTS["ImageLocality"]
        self.kinds[kid] = kind

    def update(self, i: int, usage: NodeUsage) -> None:
        """Node ``i``'s pods changed: its requests and every kind's score there."""
        requested, nonzero = usage.requested, usage.nonzero
        pods = len(usage.pods)
        state = self.state
        state[2, i] = requested.milli_cpu
        state[3, i] = requested.memory
        state[4, i] = nonzero.milli_cpu
        state[5, i] = nonzero.memory
        self.pods[i] = pods
        cpu, memory = self._allocatable[i]
        if self._least is not None and self.reported[i]:
            least = self._least
            self._least = (min(least[0], cpu - requested.milli_cpu), min(least[1], memory - requested.memory), min(least[2], self._max_pods[i] - pods))
        row = (cpu, memory, requested.milli_cpu, requested.memory, nonzero.milli_cpu, nonzero.memory)
        for kid, kind in self.kinds.items():
            score = self._scores.get((kid, row))
            if score is None:
                if len(self._scores) >= _SCORES_KEPT:
                    self._scores.clear()
                score = self._scores[(kid, row)] = self._dynamic(kind.pod, row) + self._constant(kind)
            kind.base[i] = score + int(kind.images[i]) * WEIGHTS["ImageLocality"] if kind.images is not None else score

    def _dynamic(self, pod: PodInputs, row: Sequence[int]) -> int:
        """NodeResourcesFit and BalancedAllocation for a node in state ``row`` (allocatable,
        requested and non-zero requested of cpu and memory), weighted."""
        node = NodeInputs(_NO_NODE, allocatable=(row[0], row[1]), requested=(row[2], row[3]), nonzero=(row[4], row[5]))
        score = fit_score(pod, node) * WEIGHTS["NodeResourcesFit"]
        if any(pod.requests):  # PreScore: Skip for best-effort pods
            score += balanced_score(pod, node) * WEIGHTS["NodeResourcesBalancedAllocation"]
        return score

    def _image_inputs(self, view: NodeView) -> NodeInputs:
        """The node's images with the sizes the scheduler's cache keeps (``podfit.node_inputs``)."""
        return NodeInputs(view.node, images={name: self._sizes.get(name, size) for name, size in view.images.items()})

    def _constant(self, kind: KindArrays) -> int:
        """TaintToleration when no node has a PreferNoSchedule taint (every node normalizes to 100)."""
        return MAX_NODE_SCORE * WEIGHTS["TaintToleration"] if kind.taints is None else 0

    # ---- Filter
    def passes_all(self, kind: KindArrays) -> bool:
        """Whether every node passes the plugins before DynamicResources (without looking at each)."""
        least = self._least
        return kind.static is None and (least is None or (kind.cpu <= least[0] and kind.memory <= least[1] and least[2] >= 1))

    def passes(self, kind: KindArrays, nodes: Ints) -> np.ndarray[Any, np.dtype[np.bool_]] | None:
        ok = None if kind.static is None else kind.static[nodes] == 0
        least = self._least
        if least is not None and not (kind.cpu <= least[0] and kind.memory <= least[1] and least[2] >= 1):
            cpu, mem, pods = self._misfit(kind, nodes)
            fits = ~(cpu | mem | pods)
            ok = fits if ok is None else ok & fits
        if ok is None or ok.all():
            return None
        out: np.ndarray[Any, np.dtype[np.bool_]] = ok
        return out

    def _misfit(self, kind: KindArrays, nodes: Ints) -> tuple[Any, Any, Any]:
        """NodeResourcesFit's three reasons on ``nodes`` (cpu, memory, pods), as masks."""
        reported = self.reported[nodes]
        state = self.state[0:4, nodes]
        left = state[0:2] - state[2:4]
        cpu = reported & (kind.cpu > 0) & (kind.cpu > left[0])
        mem = reported & (kind.memory > 0) & (kind.memory > left[1])
        pods = reported & (self.pods[nodes] + 1 > self.max_pods[nodes])
        return cpu, mem, pods

    def reasons(self, kind: KindArrays, nodes: Ints) -> Counter[str]:
        out: Counter[str] = Counter()
        fit_checked = np.ones(len(nodes), dtype=np.bool_)
        if kind.static is not None:
            codes = kind.static[nodes]
            for code, count in enumerate(np.bincount(codes, minlength=len(_STATIC_REASONS)).tolist()):
                if code and count:
                    out[_STATIC_REASONS[code]] = count
            fit_checked = codes == 0
        cpu, mem, pods = self._misfit(kind, nodes)
        for reason, mask in (("Too many pods", pods), ("Insufficient cpu", cpu), ("Insufficient memory", mem)):
            count = int((mask & fit_checked).sum())
            if count:
                out[reason] = count
        return out

    # ---- Score
    def choose(self, kind: KindArrays, nodes: Ints, dra: np.ndarray[Any, Any] | None) -> tuple[int, int]:
        """(position among ``nodes`` the pod goes to, nodes sharing the best total)."""
        first_node = int(nodes[0])
        if int(nodes[-1]) - first_node == len(nodes) - 1:  # consecutive nodes (scan order never repeats one): a view
            totals = kind.base[first_node : first_node + len(nodes)]
        else:
            totals = kind.base[nodes]
        if kind.taints is not None:
            totals = totals + WEIGHTS["TaintToleration"] * _normalize(kind.taints[nodes], reverse=True)
        if kind.affinity is not None:
            totals = totals + WEIGHTS["NodeAffinity"] * _normalize(kind.affinity[nodes], reverse=False)
        if dra is not None:
            totals = totals + WEIGHTS["DynamicResources"] * _normalize(dra.astype(np.int64), reverse=False)
        first = int(totals.argmax())
        best = totals == totals[first]
        tied = int(np.count_nonzero(best))
        if tied == 1 or first == 0:  # the one best node, or the best at the root of the heap's pre-order
            return first, tied
        at = np.flatnonzero(best)
        if len(nodes) > len(self._ranks):
            self._ranks = preorder_ranks(max(len(nodes), 2 * len(self._ranks)))
        return int(at[int(np.argmin(self._ranks[at]))]), tied


def _static_only(view: NodeView) -> NodeView:
    """The node without allocatable: what the plugins before NodeResourcesFit see."""
    return NodeView(node=view.node, taints=view.taints, unschedulable=view.unschedulable, allocatable=None, max_pods=None)
