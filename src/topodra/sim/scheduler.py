"""kube-scheduler's DRA scheduling loop over a simulated cluster.

Per pod: filter nodes from a rotating start index until
``numFeasibleNodesToFind`` feasible nodes are found (every node Filter runs
the allocator), score ``firstAvailable`` choices, pick the best node (ties:
the first in scan order, where kube-scheduler picks one at random), bind
(the allocation joins the cluster state) -- or record why the pod failed.
Pods can be deleted, which frees exactly what their claims held.

The scheduler's cost for every filtered node is predicted from the counted
search steps (``costmodel``); a node whose predicted Filter exceeds the 10 s
timeout makes the pod fail with an error, as kube-scheduler 1.36 does.

Speed: nodes whose pools look the same (same device shapes in the same
order) and that hold the same allocations (by position) give the same
answer, so Filter results are memoised per (node layout, node allocations,
claim specs). The chosen node is always allocated for real. The memo is off
when any slice is shared between nodes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from topodra.sim.allocator import (
    TIMEOUT_MESSAGE,
    AllocatedState,
    AllocationError,
    Allocator,
    ClaimAllocation,
    FilterTimeout,
    SearchAborted,
    SearchStats,
    share_id,
)
from topodra.sim.api import Claim, DeviceID, Node, parse_claim, parse_node
from topodra.sim.costmodel import DEFAULT_COSTS, CostModel, num_feasible_nodes_to_find

__all__ = ["Pod", "PodResult", "Scheduler"]

#: How to choose among feasible nodes after the DRA score: "least-allocated" (the free
#: share of the node's devices, as NodeResourcesFit's default strategy spreads pods) or
#: "first" (the first node in scan order). Remaining ties go to the first in scan order.
SCORINGS = ("least-allocated", "first")

#: Up to this many distinct node classes the scan evaluates every class once and runs in
#: numpy; beyond it, nodes are evaluated one by one (memoised) only as far as the scan goes.
VECTOR_CLASSES = 64


@dataclass(frozen=True)
class Pod:
    """A pod to schedule: its name and the ResourceClaims (dicts) it needs allocated."""

    name: str
    claims: tuple[Mapping[str, Any], ...]
    namespace: str = "default"
    template: str = ""  # the workload entry it came from (for reports)


@dataclass
class PodResult:
    pod: str
    template: str
    node: str | None
    allocations: list[ClaimAllocation]
    failure: str | None  # None when bound
    failure_kind: str | None  # "unschedulable" | "timeout" | "error" | "aborted"
    nodes_filtered: int
    feasible_found: int
    calls: int
    visits: int
    checks: int
    cel_evals: int
    filter_cpu_s: float  # predicted: sum over filtered nodes
    slowest_node_s: float
    predicted_s: float  # predicted kube-scheduler time for this pod (filter wall + per-pod)
    timeouts: int


@dataclass(slots=True)
class _Entry:
    feasible: bool
    seconds: float
    calls: int
    visits: int
    checks: int
    cel_evals: int
    score: int = 0
    error: str | None = None
    kind: str | None = None
    plan: tuple[int, list[ClaimAllocation]] | None = None  # (node it was found on, its allocation)


@dataclass
class _Bound:
    node: int
    allocations: list[ClaimAllocation]
    claims: list[Mapping[str, Any]] = field(default_factory=list)


def _claim_signature(claims: Sequence[Mapping[str, Any]]) -> str:
    specs = [c.get("spec") for c in claims]
    return hashlib.blake2b(json.dumps(specs, sort_keys=True, default=str).encode(), digest_size=12).hexdigest()


class Scheduler:
    """Schedules pods one at a time onto ``nodes`` using ``slices`` and ``classes`` (API dicts)."""

    def __init__(
        self,
        nodes: Iterable[Mapping[str, Any] | Node | str],
        slices: Iterable[Mapping[str, Any]],
        classes: Iterable[Mapping[str, Any]],
        *,
        costs: CostModel = DEFAULT_COSTS,
        percentage_of_nodes_to_score: int | None = None,
        memo: bool = True,
        max_calls: int = 2_000_000,
        scoring: str = "least-allocated",
    ) -> None:
        self.nodes = [n if isinstance(n, Node) else parse_node(n) for n in nodes]
        if not self.nodes:
            raise ValueError("a cluster needs at least one node")
        if scoring not in SCORINGS:
            raise ValueError(f"scoring must be one of {', '.join(SCORINGS)}, got {scoring!r}")
        self.scoring = scoring
        #: fraction of each node's device capacity still free (the least-allocated score)
        self._free = np.ones(len(self.nodes))
        self.state = AllocatedState()
        self.allocator = Allocator(slices, classes, self.state, max_calls=max_calls, budget=costs.budget())
        self.costs = costs
        self.want = num_feasible_nodes_to_find(len(self.nodes), percentage_of_nodes_to_score)
        self.next_start = 0
        self.memo_enabled = memo and all(s.node_name for s in self.allocator.slices)
        self._memo: dict[str, dict[int, _Entry]] = {}  # claim signature -> node key id -> entry
        self._bound: dict[str, _Bound] = {}
        # node layouts: device positions, template ids and allocation keys
        self._templates: dict[Any, int] = {}
        self._template_of: list[int] = []
        self._where: dict[DeviceID, tuple[int, int]] = {}
        self._node_key: list[tuple[Any, ...]] = []
        self._held: dict[int, dict[int, DeviceID]] = {}
        self._ids: list[list[DeviceID]] = []  # node -> device ids by position
        self._capacity_of: dict[DeviceID, dict[str, Any]] = {}  # shared devices: capacity totals
        self._spec_cache: dict[tuple[int, ...], tuple[list[Any], list[Claim], str]] = {}  # node -> position -> device in use
        self.memo_hits = 0
        self.memo_misses = 0
        for i, node in enumerate(self.nodes):
            pools = self.allocator.pools_for(node)
            layout: list[Any] = []
            ids: list[DeviceID] = []
            self._ids.append(ids)
            pos = 0
            for p in pools:
                if not p.usable:
                    layout.append((p.driver, "incomplete" if p.incomplete else "invalid"))
                    continue
                shapes = []
                for s in p.slices:
                    shapes.append((s.per_device_node_selection, bool(s.node_name), tuple(d.shape for d in s.devices)))
                    for d in s.devices:
                        self._where[(p.driver, p.name, d.name)] = (i, pos)
                        ids.append((p.driver, p.name, d.name))
                        if d.allow_multiple and d.capacity:
                            self._capacity_of[(p.driver, p.name, d.name)] = {k: c.value.amount for k, c in d.capacity.items()}
                        pos += 1
                counters = json.dumps({k: {c: str(q) for c, q in v.items()} for k, v in p.counter_sets.items()}, sort_keys=True)
                layout.append((p.driver, tuple(shapes), counters))
            key = tuple(layout)
            self._template_of.append(self._templates.setdefault(key, len(self._templates)))
            self._node_key.append((self._template_of[i], ()))
        self._key_ids: dict[tuple[Any, ...], int] = {}
        self._kid = np.array([self._key_id(k) for k in self._node_key], dtype=np.int64)
        # live node classes: key id -> number of nodes, and one node that has it
        self._class_size: dict[int, int] = {}
        self._class_rep: dict[int, int] = {}
        for i, kid in enumerate(self._kid.tolist()):
            self._class_size[kid] = self._class_size.get(kid, 0) + 1
            self._class_rep.setdefault(kid, i)
        self._lut = np.zeros(max(16, 2 * len(self._key_ids)), dtype=np.int64)

    # ---- public API
    @property
    def node_count(self) -> int:
        return len(self.nodes)

    def _parse(self, pod: Pod) -> tuple[list[Claim], str]:
        """Parsed claims and their signature; specs shared between pods are parsed once."""
        key = tuple(id(c.get("spec")) for c in pod.claims)
        hit = self._spec_cache.get(key)
        if hit is None or any(a is not b for a, b in zip(hit[0], (c.get("spec") for c in pod.claims), strict=True)):
            parsed = [parse_claim(c) for c in pod.claims]
            hit = ([c.get("spec") for c in pod.claims], parsed, _claim_signature(pod.claims))
            if len(self._spec_cache) > 1000:
                self._spec_cache.clear()
            self._spec_cache[key] = hit
            return parsed, hit[2]
        claims = []
        for proto, raw in zip(hit[1], pod.claims, strict=True):
            meta = raw.get("metadata") or {}
            name = str(meta.get("name") or proto.name)
            ns = str(meta.get("namespace") or "")
            claims.append(replace(proto, name=name, namespace=ns, uid=str(meta.get("uid") or f"uid-{ns}-{name}"), raw=raw))
        return claims, hit[2]

    def schedule(self, pod: Pod) -> PodResult:
        claims, sig = self._parse(pod)
        if self.memo_enabled and len(self._class_size) <= VECTOR_CLASSES:
            return self._finish(pod, claims, *self._filter_vectorised(claims, sig))
        # many distinct nodes (or no memo): evaluate node by node, only as far as the scan goes
        return self._finish(pod, claims, *self._filter_loop(claims, sig))

    def _filter_vectorised(self, claims: list[Claim], sig: str) -> tuple[Any, ...]:
        """The filter loop over node classes: one evaluation per distinct node key, numpy for the scan."""
        N = len(self.nodes)
        live = list(self._class_size)
        self._lut[live] = np.arange(len(live))
        inverse = self._lut[self._kid]
        kids = live
        entries = [self._evaluate(self._class_rep[k], claims, sig) for k in live]
        feas = np.array([e.feasible for e in entries], dtype=bool)
        # A Filter error -- a CEL error, or a node past the filter timeout -- ends the attempt.
        timed_out = np.array([e.kind == "timeout" or e.seconds > self.costs.timeout_s for e in entries], dtype=bool)
        errs = np.array([e.error is not None and e.kind != "invalid-pool" for e in entries], dtype=bool) | timed_out
        start = self.next_start
        rot = np.concatenate((inverse[start:], inverse[:start]))
        f = feas[rot]
        stop = N  # processed nodes
        c = np.cumsum(f)
        reach = int(np.searchsorted(c, self.want))  # first index where the count reaches ``want``
        if reach < N:
            stop = reach + 1
        err_at = np.flatnonzero(errs[rot][:stop])
        if err_at.size:
            stop = int(err_at[0]) + 1
        seen = rot[:stop]
        counts = np.bincount(seen, minlength=len(kids))
        total_s = slowest = 0.0
        calls = visits = checks = evals = timeouts = 0
        failure: tuple[str, str] | None = None
        invalid_only = True
        for u in np.flatnonzero(counts):
            e, n = entries[u], int(counts[u])
            total_s += e.seconds * n
            slowest = max(slowest, e.seconds)
            calls += e.calls * n
            visits += e.visits * n
            checks += e.checks * n
            evals += e.cel_evals * n
            if e.kind == "timeout" or e.seconds > self.costs.timeout_s:
                timeouts += n
            if not (e.error is not None and e.kind == "invalid-pool"):
                invalid_only = False
        if err_at.size:
            j = int(err_at[0])
            e = entries[seen[j]]
            name = self.nodes[(start + j) % N].name
            if e.kind == "timeout" or e.seconds > self.costs.timeout_s:
                failure = ("timeout", f"node {name}: {TIMEOUT_MESSAGE}")
            else:
                failure = (e.kind or "error", f"node {name}: {e.error}")
        feasible: list[tuple[int, _Entry]] = []
        if failure is None:
            fidx = np.flatnonzero(f[:stop])
            if fidx.size:
                scores = np.array([e.score for e in entries], dtype=float)[rot[fidx]] * 2.0
                if self.scoring == "least-allocated":
                    scores = scores + self._free[(start + fidx) % N]
                best = int(fidx[int(np.argmax(scores))])
                feasible = [((start + best) % N, entries[rot[best]])]
            found = int(fidx.size)
        else:
            found = int(np.count_nonzero(f[:stop]))
        self.next_start = (start + stop) % N
        return feasible, found, stop, total_s, slowest, calls, visits, checks, evals, timeouts, failure, invalid_only

    def _filter_loop(self, claims: list[Claim], sig: str) -> tuple[Any, ...]:
        """The filter loop node by node (used when slices are shared between nodes)."""
        N = len(self.nodes)
        feasible: list[tuple[int, _Entry]] = []
        processed = 0
        total_s = slowest = 0.0
        calls = visits = checks = evals = 0
        timeouts = 0
        failure: tuple[str, str] | None = None
        invalid_only = True
        start = self.next_start
        for k in range(N):
            i = start + k
            if i >= N:
                i -= N
            e = self._evaluate(i, claims, sig)
            processed += 1
            total_s += e.seconds
            if e.seconds > slowest:
                slowest = e.seconds
            calls += e.calls
            visits += e.visits
            checks += e.checks
            evals += e.cel_evals
            if e.kind == "timeout" or e.seconds > self.costs.timeout_s:
                timeouts += 1
                if failure is None:
                    failure = ("timeout", f"node {self.nodes[i].name}: {TIMEOUT_MESSAGE}")
                break
            if e.error is not None:
                if e.kind == "invalid-pool":
                    continue
                invalid_only = False
                if failure is None:
                    failure = (e.kind or "error", f"node {self.nodes[i].name}: {e.error}")
                break
            if e.feasible:
                invalid_only = False
                feasible.append((i, e))
                if len(feasible) >= self.want:
                    break
        self.next_start = (start + processed) % N
        return feasible, len(feasible), processed, total_s, slowest, calls, visits, checks, evals, timeouts, failure, invalid_only

    def _finish(
        self,
        pod: Pod,
        claims: list[Claim],
        feasible: list[tuple[int, _Entry]],
        found: int,
        processed: int,
        total_s: float,
        slowest: float,
        calls: int,
        visits: int,
        checks: int,
        evals: int,
        timeouts: int,
        failure: tuple[str, str] | None,
        invalid_only: bool,
    ) -> PodResult:
        N = len(self.nodes)
        result = PodResult(
            pod=pod.name,
            template=pod.template,
            node=None,
            allocations=[],
            failure=None,
            failure_kind=None,
            nodes_filtered=processed,
            feasible_found=found,
            calls=calls,
            visits=visits,
            checks=checks,
            cel_evals=evals,
            filter_cpu_s=total_s,
            slowest_node_s=slowest,
            predicted_s=self.costs.pod_seconds(total_s, slowest),
            timeouts=timeouts,
        )
        if failure is not None:
            result.failure_kind, result.failure = failure
            return result
        if not feasible:
            result.failure_kind = "unschedulable"
            why = "invalid resource pools on every node" if invalid_only and processed else "no node can allocate the claims"
            result.failure = f"0/{N} nodes are available: {why}"
            return result
        least = self.scoring == "least-allocated"
        # max keeps the first of equal scores
        best_i, best = max(feasible, key=lambda t: t[1].score * 2.0 + (float(self._free[t[0]]) if least else 0.0))
        allocs = self._replay(best, best_i, claims) if self.memo_enabled else None
        if allocs is None:
            allocs = self.allocator.allocate(self.nodes[best_i], claims)
        assert allocs is not None, "memoised feasibility disagrees with a fresh allocation"
        for a in allocs:
            self.state.add(a)
        self._touch(allocs)
        self._bound[pod.name] = _Bound(best_i, allocs, list(pod.claims))
        result.node = self.nodes[best_i].name
        result.allocations = allocs
        return result

    def preallocate(self, allocations: Iterable[ClaimAllocation]) -> None:
        """Add allocations made outside this run (background pods) to the cluster state."""
        allocs = list(allocations)
        for a in allocs:
            self.state.add(a)
        self._touch(allocs)

    def delete(self, pod_name: str) -> bool:
        """Delete a bound pod: its claims are deallocated. False if it is not bound."""
        bound = self._bound.pop(pod_name, None)
        if bound is None:
            return False
        for a in bound.allocations:
            self.state.remove(a)
        self._touch(bound.allocations)
        return True

    def _replay(self, entry: _Entry, node: int, claims: list[Claim]) -> list[ClaimAllocation] | None:
        """The memoised allocation moved to an equivalent node (same positions, that node's names)."""
        if entry.plan is None:
            return None
        _, allocs = entry.plan
        ids = self._ids[node]
        name = self.nodes[node].name
        out = []
        for claim, a in zip(claims, allocs, strict=True):
            results = []
            for n, r in enumerate(a.results):
                did = ids[self._where[r.id][1]]
                results.append(
                    replace(
                        r,
                        driver=did[0],
                        pool=did[1],
                        device=did[2],
                        share_id=share_id(claim.uid, r.request, did, n) if r.share_id is not None else None,
                    )
                )
            sel = a.node_selector
            if sel is not None:
                sel = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}]}
            out.append(ClaimAllocation(claim.key, tuple(results), a.config, sel))
        return out

    def bound_pods(self) -> list[str]:
        return list(self._bound)

    def allocated_devices(self) -> int:
        return len(self.state.devices) + sum(len(v) for v in self.state.shared.values())

    # ---- internals
    def _touch(self, allocs: Iterable[ClaimAllocation]) -> None:
        """Refresh the allocation keys of the nodes whose devices changed."""
        touched: dict[int, list[tuple[int, DeviceID]]] = {}
        for a in allocs:
            for r in a.results:
                w = self._where.get(r.id)
                if w is not None:
                    touched.setdefault(w[0], []).append((w[1], r.id))
        for i, devices in touched.items():
            held = self._held.setdefault(i, {})
            for pos, did in devices:
                if did in self.state.devices or did in self.state.shared or did in self.state.capacity:
                    held[pos] = did
                else:
                    held.pop(pos, None)
            self._node_key[i] = self._alloc_key(i)
            self._move(i, self._key_id(self._node_key[i]))
            self._free[i] = self._free_share(i)

    def _move(self, i: int, new: int) -> None:
        """Node ``i`` changes class: keep class sizes and representatives current."""
        old = int(self._kid[i])
        if old == new:
            return
        self._kid[i] = new
        self._class_size[old] -= 1
        if self._class_size[old] == 0:
            del self._class_size[old]
            del self._class_rep[old]
        elif self._class_rep[old] == i:
            self._class_rep[old] = int(np.flatnonzero(self._kid == old)[0])
        self._class_size[new] = self._class_size.get(new, 0) + 1
        self._class_rep.setdefault(new, i)
        if new >= len(self._lut):
            self._lut = np.zeros(2 * new + 16, dtype=np.int64)

    def _key_id(self, key: tuple[Any, ...]) -> int:
        kid = self._key_ids.get(key)
        if kid is None:
            kid = self._key_ids[key] = len(self._key_ids)
        return kid

    def _free_share(self, i: int) -> float:
        """Share of node ``i``'s devices still free; shared devices count by consumed capacity."""
        total = len(self._ids[i])
        if not total:
            return 0.0
        used = 0.0
        for _, did in self._held.get(i, {}).items():
            if did in self.state.devices:
                used += 1.0
                continue
            consumed = self.state.capacity.get(did, {})
            cap = self._capacity_of.get(did, {})
            fractions = [float(v / cap[k]) for k, v in consumed.items() if cap.get(k)]
            used += max(fractions, default=1.0)
        return max(0.0, 1.0 - used / total)

    def _alloc_key(self, i: int) -> tuple[Any, ...]:
        parts: list[tuple[Any, ...]] = []
        for pos, did in sorted(self._held.get(i, {}).items()):
            if did in self.state.devices:
                parts.append((pos,))
            else:
                amounts = self.state.capacity.get(did, {})
                parts.append((pos, tuple(sorted((k, str(v)) for k, v in amounts.items())), len(self.state.shared.get(did, ()))))
        return (self._template_of[i], tuple(parts))

    def _evaluate(self, i: int, claims: list[Claim], sig: str) -> _Entry:
        memo = self._memo.get(sig) if self.memo_enabled else None
        if memo is not None:
            hit = memo.get(int(self._kid[i]))
            if hit is not None:
                self.memo_hits += 1
                return hit
        self.memo_misses += 1
        node = self.nodes[i]
        try:
            res, stats = self.allocator.allocate_with_stats(node, claims)
        except FilterTimeout as e:
            stats = self.allocator.last_stats
            entry = self._entry(False, stats, error=str(e), kind="timeout")
        except SearchAborted as e:
            stats = self.allocator.last_stats
            entry = self._entry(False, stats, error=str(e), kind="aborted")
        except AllocationError as e:
            stats = self.allocator.last_stats
            kind = "invalid-pool" if "invalid resource pools" in str(e) else "error"
            entry = self._entry(False, stats, error=str(e), kind=kind)
        else:
            entry = self._entry(res is not None, stats, score=_score(claims, res) if res is not None else 0)
            if res is not None:
                entry.plan = (i, res)
        if self.memo_enabled:
            if sum(len(m) for m in self._memo.values()) > 200_000:
                self._memo.clear()
            self._memo.setdefault(sig, {})[int(self._kid[i])] = entry
        return entry

    def _entry(self, feasible: bool, s: SearchStats, *, score: int = 0, error: str | None = None, kind: str | None = None) -> _Entry:
        return _Entry(feasible, self.costs.node_seconds(s), s.calls, s.visits, s.checks, s.cel_evals, score, error, kind)


def _score(claims: Sequence[Claim], allocs: Sequence[ClaimAllocation]) -> int:
    """The DynamicResources score: 8 - (index of the chosen subrequest) per firstAvailable request."""
    total = 0
    for claim, alloc in zip(claims, allocs, strict=True):
        chosen = {r.request for r in alloc.results}
        for req in claim.requests:
            if not req.first_available:
                continue
            for idx, sub in enumerate(req.first_available):
                if f"{req.name}/{sub.name}" in chosen:
                    total += 8 - idx
                    break
    return total
