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
answer, so Filter results are memoised per (node class, claim specs) in
arrays indexed by class id, and the scan over the node -> class array runs in
numpy; a class is evaluated only where the scan first reaches it. Device
positions come from ``layout`` (tables per shared device list, not per
device) and the devices in use are a flat bitmap. The chosen node is always
allocated for real. The memo is off when any slice is shared between nodes.
Plain first-fit requests are answered from the in-use bitmap without the
allocator's search (``firstfit``), with the same result and counted work.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import numpy as np

from topodra.sim.allocator import (
    TIMEOUT_MESSAGE,
    AllocatedState,
    AllocationError,
    Allocator,
    ClaimAllocation,
    DeviceResult,
    FilterTimeout,
    InvalidPools,
    SearchAborted,
    SearchStats,
    share_id,
)
from topodra.sim.allocator.firstfit import FirstFit, Fit, plain_specs
from topodra.sim.costmodel import DEFAULT_COSTS, CostModel, num_feasible_nodes_to_find
from topodra.sim.layout import NodeLayouts
from topodra.sim.objects import Claim, DeviceID, Node, parse_claim, parse_node

__all__ = ["FilterScan", "Pod", "PodResult", "Scheduler"]

#: How to choose among feasible nodes after the DRA score: "least-allocated" (the free
#: share of the node's devices, as NodeResourcesFit's default strategy spreads pods) or
#: "first" (the first node in scan order). Remaining ties go to the first in scan order.
SCORINGS = ("least-allocated", "first")

#: Nodes the memoised scan looks at per numpy step (0: 1.25 x the feasible nodes wanted, plus 64).
SCAN_CHUNK = 0

#: Memoised Filter answers kept before the memo starts over (bounds memory on huge clusters).
MEMO_LIMIT = 500_000


@dataclass(frozen=True)
class Pod:
    """A pod to schedule: its name and the ResourceClaims (dicts) it needs allocated."""

    name: str
    claims: tuple[Mapping[str, Any], ...]
    namespace: str = "default"
    template: str = ""  # the workload entry it came from (for reports)


@dataclass
class PodResult:
    """One pod's outcome: its node and allocations, or why it failed."""

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
    """One node class's filter answer for a claim signature, with the work it took (kept in the memo for later pods)."""

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
    positions: list[list[int]] | None = None  # the plan's device positions per claim (filled on first use)
    fit: tuple[int, Fit] | None = None  # a first fit not yet built into ``plan``
    exclusive: bool = False  # the plan takes whole devices only (no admin access, no shares): see _touch_added


class FilterScan(NamedTuple):
    """What one pod's filter loop found: the nodes to choose from, how far it went, the
    counted work summed over the nodes it filtered, and why the pod fails, if it does."""

    feasible: list[tuple[int, _Entry]]  # (node, answer); one entry when the scan chose the node itself
    found: int  # feasible nodes found
    processed: int  # nodes filtered
    total_s: float  # predicted Filter seconds, summed
    slowest_s: float  # the slowest node's predicted Filter seconds
    calls: int
    visits: int
    checks: int
    cel_evals: int
    timeouts: int  # nodes at the Filter timeout
    failure: tuple[str, str] | None  # (kind, message) of the node error that ends the attempt
    invalid_only: bool  # every node filtered had only invalid pools


def _new_entry(
    costs: CostModel, feasible: bool, s: SearchStats, *, score: int = 0, error: str | None = None, kind: str | None = None
) -> _Entry:
    """A node class's filter answer from the search's stats, at ``costs``."""
    return _Entry(feasible, costs.node_seconds(s), s.calls, s.visits, s.checks, s.cel_evals, score, error, kind)


def _claim_signature(claims: Sequence[Mapping[str, Any]]) -> str:
    specs = [c.get("spec") for c in claims]
    return hashlib.blake2b(json.dumps(specs, sort_keys=True, default=str).encode(), digest_size=12).hexdigest()


class _PlanMover:
    """Moves a memoised allocation to an equivalent node: the plan's device positions, that
    node's device names and its node selector."""

    def __init__(self, layout: NodeLayouts, nodes: Sequence[Node]) -> None:
        self._layout = layout
        self._nodes = nodes
        self._selectors: dict[int, Mapping[str, Any]] = {}  # node -> the node selector of its allocations

    def move(self, entry: _Entry, node: int, claims: list[Claim]) -> list[ClaimAllocation] | None:
        """The memoised allocation moved to node ``node`` (same positions, that node's names);
        None when ``entry`` holds no plan."""
        if entry.plan is None and entry.fit is not None:
            made_on, fit = entry.fit
            entry.fit = None
            allocs = fit.build(claims)
            entry.plan, entry.positions = (made_on, allocs), fit.positions()
            entry.exclusive = _exclusive(allocs)
            if made_on == node:  # the usual case: built for this node and these claims already
                return allocs
        if entry.plan is None:
            return None
        _, allocs = entry.plan
        layout = self._layout
        positions = entry.positions
        if positions is None:  # where the plan's devices sit: the same for every node it moves to
            positions = entry.positions = []
            for a in allocs:
                at = []
                for r in a.results:
                    w = layout.where(r.id)
                    assert w is not None, f"memoised device {r.id} is on no node"
                    at.append(w[1])
                positions.append(at)
            entry.exclusive = _exclusive(allocs)
        out = []
        device_at = layout.device_at
        for claim, a, at in zip(claims, allocs, positions, strict=True):
            if len(at) == 1 and a.results[0].share_id is None:  # one whole device (the usual claim): no loop
                r = a.results[0]
                driver, pool, device = device_at(node, at[0])
                one = DeviceResult(
                    r.request, driver, pool, device, r.admin_access, r.tolerations, r.binding_conditions, r.binding_failure_conditions, None, r.consumed_capacity
                )
                out.append(ClaimAllocation(claim.key, (one,), a.config, None if a.node_selector is None else self.node_selector(node)))
                continue
            results = []
            for n, (r, pos) in enumerate(zip(a.results, at, strict=True)):
                driver, pool, device = did = device_at(node, pos)
                results.append(
                    DeviceResult(
                        r.request,
                        driver,
                        pool,
                        device,
                        r.admin_access,
                        r.tolerations,
                        r.binding_conditions,
                        r.binding_failure_conditions,
                        share_id(claim.uid, r.request, did, n) if r.share_id is not None else None,
                        r.consumed_capacity,
                    )
                )
            out.append(ClaimAllocation(claim.key, tuple(results), a.config, None if a.node_selector is None else self.node_selector(node)))
        return out

    def node_selector(self, node: int) -> Mapping[str, Any]:
        """The node selector of an allocation on node-local devices, one per node: allocations
        hold it read-only, and five containers fewer per bound pod is less for the cyclic
        collector to trace."""
        sel = self._selectors.get(node)
        if sel is None:
            name = self._nodes[node].name
            sel = self._selectors[node] = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}]}
        return sel


class Scheduler:
    """Schedules pods one at a time onto ``nodes`` using ``slices`` and ``classes`` (API dicts)."""

    #: Take the per-pod fast scan when it applies (False: every pod takes the general memoised
    #: scan; the benchmark and the tests compare the two).
    fast_scan: bool = True
    #: Answer plain requests (first fit, no constraints) from the in-use bitmap instead of an
    #: allocator call (``firstfit``; False: always the allocator, for tests and benchmarks).
    first_fit: bool = True
    #: After binding whole devices on a node without shareable devices, take the node's new
    #: class and free share from the (class, positions taken) step seen before
    #: (``_touch_added``; False: rescan the node's bitmap every time, for tests and benchmarks).
    fast_bind: bool = True

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
        list_type_attributes: bool = False,
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
        self.allocator = Allocator(
            slices, classes, self.state, max_calls=max_calls, budget=costs.budget(), list_type_attributes=list_type_attributes
        )
        self.costs = costs
        self.want = num_feasible_nodes_to_find(len(self.nodes), percentage_of_nodes_to_score)
        self.next_start = 0
        self.memo_enabled = memo and all(s.node_name for s in self.allocator.slices)
        self._memo: dict[str, _SigMemo] = {}  # claim signature -> results per node class
        self._memo_size = 0
        self._bound: dict[str, list[ClaimAllocation]] = {}  # bound pod -> its allocations (what delete frees)
        self._spec_cache: dict[tuple[int, ...], tuple[list[Any], list[Claim], str]] = {}
        self.memo_hits = 0
        self.memo_misses = 0
        self._layout = NodeLayouts(self.allocator, self.nodes)
        self._mover = _PlanMover(self._layout, self.nodes)
        self._template_of = self._layout.template_of
        self._key_ids: dict[tuple[Any, ...], int] = {}
        for t in range(self._layout.template_count):
            self._key_id((t, ()))  # a node with nothing allocated: key id = template id
        self._kid = np.asarray(self._template_of, dtype=np.int64)  # node -> class (template + allocations)
        counts = [self._layout.device_count(i) for i in range(len(self.nodes))]
        self._offset = np.concatenate(([0], np.cumsum(counts, dtype=np.int64)))  # node -> first flat position
        self._held = np.zeros(int(self._offset[-1]), dtype=bool)  # flat position -> device in use
        self._offset_at: list[int] = self._offset.tolist()  # the same as Python ints (no numpy scalar per lookup)
        #: nodes whose class follows from their positions in use alone (no shareable devices) and
        #: whose pools no other node lists: _touch_added may update them
        self._plain_node = [not self._layout.multi_positions(i) for i in range(len(self.nodes))]
        owner: dict[tuple[str, str], str] = {}
        shared: set[tuple[str, str]] = set()
        for sl in self.allocator.slices:
            if owner.setdefault((sl.driver, sl.pool), sl.node_name) != sl.node_name:
                shared.add((sl.driver, sl.pool))
        for pool in shared:  # a device name there names a device on each node: _touch decides which
            for n, _, _ in self._layout.pool_positions(pool):
                self._plain_node[n] = False
        self._steps: dict[tuple[int, ...], tuple[int, float]] = {}  # (class, positions taken) -> (class, free share)
        self._held_order: dict[int, dict[int, DeviceID]] = {}  # nodes with shareable devices: position -> device
        self._pool_nodes: dict[tuple[str, str], list[tuple[int, int, dict[tuple[int, str], int]]]] = {}  # pool_positions, looked up once
        self._sums_kept = 0  # window sums kept by the fast scan, over all signatures
        self._firstfit = FirstFit(self.allocator)
        #: claim signature -> [plain requests per claim, allocation config per claim (from the
        #: first allocator answer)], or None when some request is not plain
        self._plain: dict[str, list[Any] | None] = {}

    # ---- public API
    @property
    def node_count(self) -> int:
        return len(self.nodes)

    def _parse(self, pod: Pod) -> tuple[list[Claim], str]:
        """Parsed claims and their signature; specs shared between pods are parsed once."""
        specs = [c.get("spec") for c in pod.claims]
        key = tuple(map(id, specs))
        hit = self._spec_cache.get(key)
        if hit is None or hit[0] != specs:  # ids can be reused; equal specs parse alike
            parsed = [parse_claim(c) for c in pod.claims]
            hit = (specs, parsed, _claim_signature(pod.claims))
            if len(self._spec_cache) > 1000:
                self._spec_cache.clear()
            self._spec_cache[key] = hit
            return parsed, hit[2]
        claims = []
        for proto, raw in zip(hit[1], pod.claims, strict=True):
            meta = raw.get("metadata") or {}
            name = str(meta.get("name") or proto.name)
            ns = str(meta.get("namespace") or "")
            uid = str(meta.get("uid") or f"uid-{ns}-{name}")
            # the prototype with this claim's identity (what dataclasses.replace does, without its introspection)
            claims.append(Claim(name, ns, uid, proto.requests, proto.constraints, proto.config, raw))
        return claims, hit[2]

    def schedule(self, pod: Pod) -> PodResult:
        claims, sig = self._parse(pod)
        if self.memo_enabled:
            scan = self._quick_scan(sig) if self.fast_scan else None
            return self._finish(pod, claims, scan or self._filter_scan(claims, sig))
        return self._finish(pod, claims, self._filter_loop(claims, sig))

    def _quick_scan(self, sig: str) -> FilterScan | None:
        """The memoised scan when no evaluation is needed: None unless every class the scan
        reaches before ``want`` feasible nodes (or the whole rotation) has an answer, none of
        them a Filter error, and at least one node is feasible; the general scan takes the rest.

        Same answer as ``_filter_scan`` (same node, same sums to the last bit) with a handful of
        numpy calls. The usual case (the first ``want`` nodes all feasible) is decided on their
        class histogram alone; otherwise one gather of the statuses over a window and C-level
        byte searches find the first class without an answer, the first error and the feasible
        nodes. The per-class sums are computed as the general scan does them and kept per class
        histogram (windows of different nodes often hold the same classes the same number of
        times).
        """
        memo = self._memo.get(sig)
        if memo is None:
            return None
        N = len(self.nodes)
        if len(self._key_ids) > len(memo.entries):
            memo.grow(len(self._key_ids))
        start = self.next_start
        want = self.want
        n_classes = len(memo.entries)
        if n_classes <= 4 * want + 1024:
            # The usual case, tested on the class histogram of the first ``want`` nodes (which
            # the sums are kept by anyway): every class there known feasible. A histogram seen
            # before was all feasible then and is now (a class's answer never changes), so a
            # repeat costs one bincount and a dictionary lookup.
            end = start + want
            seen = self._kid[start:end] if end <= N else self._rotated(start, want)
            counts = np.bincount(seen, minlength=n_classes)
            key = b"u" + counts.tobytes() if n_classes <= _SUMS_CLASSES else b""  # "u": not a key of the window sums below
            sums = memo.sums.get(key) if key else None
            if sums is None and not counts @ memo.bad:
                sums = self._kept_sums(memo, counts, key)
            if sums is not None:
                return self._quick_answer(memo, seen, sums, start, want, None)
        window = self._quick_window(memo, start, want)
        if window is None:
            return None
        seen, stop, feas = window
        if len(memo.entries) <= 4 * stop + 1024:  # as _filter_scan sums, so the floats are the same
            counts = np.bincount(seen, minlength=len(memo.entries))
            key = counts.tobytes() if len(memo.entries) <= _SUMS_CLASSES else b""
            sums = memo.sums.get(key) if key else None
            if sums is None:
                sums = self._kept_sums(memo, counts, key)
        else:
            sums = _sums(np.ones(stop, dtype=np.int64), np.take(memo.stats, seen, axis=0))
        # no error in the window, and a node at the timeout is an error: no timeouts
        return self._quick_answer(memo, seen, sums, start, stop, feas)

    def _quick_window(
        self, memo: _SigMemo, start: int, want: int
    ) -> tuple[np.ndarray[Any, np.dtype[np.int64]], int, np.ndarray[Any, np.dtype[np.intp]] | None] | None:
        """The nodes ``_quick_scan`` takes from ``start``: their classes, how many (``stop``) and
        the offsets of the feasible ones (None: all ``stop`` of them). None when a class without
        an answer or a Filter error comes first, or when no node is feasible.

        One gather of the statuses over a window, then C-level byte searches; the window grows
        to the whole rotation when it holds too few feasible nodes.
        """
        N = len(self.nodes)
        size = min(N, SCAN_CHUNK or want + want // 4 + 64)
        feas: np.ndarray[Any, np.dtype[np.intp]] | None = None  # None: the first ``stop`` nodes, all feasible
        while True:
            kids = self._kid[start : start + size] if start + size <= N else self._rotated(start, size)
            status = memo.status[kids]
            raw = status.tobytes()
            bad = raw.find(_UNKNOWN_BYTE)
            err = raw.find(_ERROR_BYTE)
            if err >= 0 and (bad < 0 or err < bad):
                bad = err
            if bad < 0:
                bad = size
            if want <= bad and raw.count(_FEASIBLE_BYTE, 0, want) == want:  # the usual case
                stop = want
                feas = None
                break
            feas = (status == _FEASIBLE).nonzero()[0]
            if feas.size >= want and feas[want - 1] < bad:
                feas = feas[:want]
                stop = int(feas[-1]) + 1
                break
            if bad < size:
                return None  # a class to evaluate or an error comes first
            if size == N:
                if not feas.size:
                    return None  # nothing feasible: the general scan words the failure
                stop = N
                break
            size = N
        return kids[:stop], stop, feas

    def _kept_sums(self, memo: _SigMemo, counts: np.ndarray[Any, np.dtype[np.int64]], key: bytes) -> tuple[float, int, int, int, int, float]:
        """The window sums from its class histogram (``_class_sums``, as the general scan
        sums), kept under ``key`` (unless empty) within ``_SUMS_LIMIT``."""
        total_s, calls, visits, checks, evals, slowest, _ = _class_sums(memo, counts, self.costs.timeout_s)
        sums = (total_s, calls, visits, checks, evals, slowest)
        if key:
            if self._sums_kept >= _SUMS_LIMIT:  # bound the memory over every claim signature
                for m in self._memo.values():
                    m.sums.clear()
                self._sums_kept = 0
            memo.sums[key] = sums
            self._sums_kept += 1
        return sums

    def _quick_answer(
        self,
        memo: _SigMemo,
        seen: np.ndarray[Any, np.dtype[np.int64]],
        sums: tuple[float, int, int, int, int, float],
        start: int,
        stop: int,
        feas: np.ndarray[Any, np.dtype[np.intp]] | None,
    ) -> FilterScan:
        """``_quick_scan``'s answer for the first ``stop`` nodes from ``start`` (classes ``seen``),
        those at offsets ``feas`` feasible (None: all of them): the choice exactly as the general
        scan makes it."""
        N = len(self.nodes)
        least = self.scoring == "least-allocated"
        if memo.scored:
            fidx = np.arange(stop) if feas is None else feas
            scores = memo.scores[seen if feas is None else seen[feas]] * 2.0
            if least:
                scores = scores + self._free[(start + fidx) % N]
            best = int(fidx[int(np.argmax(scores))])
        elif least:  # every score 0: 0 * 2 + free == free, and argmax keeps the first of equals
            end = start + stop
            free = self._free[start:end] if end <= N else self._free[(start + np.arange(stop)) % N]
            best = int(free.argmax()) if feas is None else int(feas[int(free[feas].argmax())])
        else:
            best = 0 if feas is None else int(feas[0])
        entry = memo.entries[int(seen[best])]
        assert entry is not None
        self.memo_hits += stop
        self.next_start = (start + stop) % N
        found = stop if feas is None else int(feas.size)
        total_s, calls, visits, checks, evals, slowest = sums
        return FilterScan([((start + best) % N, entry)], found, stop, total_s, slowest, calls, visits, checks, evals, 0, None, False)

    def _filter_scan(self, claims: list[Claim], sig: str) -> FilterScan:
        """The filter loop over node classes: numpy for the scan, one evaluation per class not yet seen.

        Nodes are taken in scan order in chunks; a class without an answer for these claims is
        evaluated on the first node of it the scan reaches (only nodes the scan must reach:
        at most as many as feasible nodes are still wanted, and none past a Filter error).
        """
        N = len(self.nodes)
        memo = self._memo.get(sig)
        if memo is None:
            memo = self._memo[sig] = _SigMemo()
        memo.grow(len(self._key_ids))
        start = self.next_start
        found, stop, err_at, evaluated, statuses = self._scan_classes(memo, claims, sig, start)
        self.memo_hits += stop - min(stop, evaluated)  # nodes answered from the memo
        self._memo_size += evaluated
        seen = self._rotated(start, stop)
        total_s, calls, visits, checks, evals, slowest, timeouts = _window_totals(memo, seen, stop, self.costs.timeout_s)
        seen_status = statuses[0] if len(statuses) == 1 else np.concatenate(statuses) if statuses else memo.status[seen]
        invalid_only = bool(stop) and bool((seen_status == _INVALID).all())
        failure: tuple[str, str] | None = None
        feasible: list[tuple[int, _Entry]] = []
        if err_at >= 0:
            e = memo.entries[int(seen[err_at])]
            assert e is not None
            name = self.nodes[(start + err_at) % N].name
            if e.kind == "timeout" or e.seconds >= self.costs.timeout_s:
                failure = ("timeout", f"node {name}: {TIMEOUT_MESSAGE}")
            else:
                failure = (e.kind or "error", f"node {name}: {e.error}")
        else:
            fidx = (seen_status == _FEASIBLE).nonzero()[0]
            if fidx.size:
                scores = memo.scores[seen[fidx]] * 2.0
                if self.scoring == "least-allocated":
                    scores = scores + self._free[(start + fidx) % N]
                best = int(fidx[int(np.argmax(scores))])
                entry = memo.entries[int(seen[best])]
                assert entry is not None
                feasible = [((start + best) % N, entry)]
        self.next_start = (start + stop) % N
        if self._memo_size > MEMO_LIMIT:
            self._memo.clear()
            self._memo_size = 0
        return FilterScan(feasible, found, stop, total_s, slowest, int(calls), int(visits), int(checks), int(evals), timeouts, failure, invalid_only)

    def _scan_classes(
        self, memo: _SigMemo, claims: list[Claim], sig: str, start: int
    ) -> tuple[int, int, int, int, list[np.ndarray[Any, np.dtype[np.int8]]]]:
        """The scan from ``start`` in chunks, evaluating each class without an answer on the
        first node of it the scan must reach: (feasible nodes found, nodes processed, offset of
        the node whose Filter error ends the attempt or -1, evaluations, statuses per chunk)."""
        N = len(self.nodes)
        want = self.want
        found = 0
        stop = 0  # nodes processed so far
        err_at = -1  # scan offset of the node whose Filter error ends the attempt
        evaluated = 0
        statuses: list[np.ndarray[Any, np.dtype[np.int8]]] = []
        chunk = min(N, SCAN_CHUNK or want + want // 4 + 64)
        while stop < N:
            size = min(chunk, N - stop)
            kids = self._rotated(start + stop, size)
            status = memo.status[kids]
            while True:
                unknown = (status == _UNKNOWN).nonzero()[0]
                upto = int(unknown[0]) if unknown.size else size
                # inside the known prefix the attempt ends at the first error or where ``want`` is met
                known = status[:upto]
                feas = (known == _FEASIBLE).nonzero()[0]  # offsets of the feasible nodes
                have = int(feas.size)
                errs = (known == _ERROR).nonzero()[0]
                end = int(errs[0]) if errs.size else upto
                if have >= want - found:
                    end = min(end, int(feas[want - found - 1]))
                if end < upto:
                    found += int(np.searchsorted(feas, end, side="right"))
                    if status[end] == _ERROR:
                        err_at = stop + end
                    stop += end + 1
                    statuses.append(status[: end + 1])
                    break
                if upto == size:
                    found += have
                    stop += size
                    statuses.append(status)
                    break
                # evaluate the classes of the next nodes the scan must reach, in scan order
                # (only the positions without an answer: with every node its own class, the
                # range is mostly answered nodes and a Python step per node cost more than
                # the evaluations)
                hi = min(size, upto + max(1, want - found - have))
                for j in (upto + (status[upto:hi] == _UNKNOWN).nonzero()[0]).tolist():
                    if status[j] != _UNKNOWN:  # answered by an evaluation of the same class just now
                        continue
                    k = int(kids[j])
                    code = memo.put(k, self._evaluate((start + stop + j) % N, claims, sig), self.costs.timeout_s)
                    evaluated += 1
                    status[kids == k] = code
                    if code == _ERROR:
                        break
            if err_at >= 0 or found >= want:
                break
        return found, stop, err_at, evaluated, statuses

    def _rotated(self, begin: int, size: int) -> np.ndarray[Any, np.dtype[np.int64]]:
        """The class ids of ``size`` nodes in scan order from node ``begin`` (wrapping around)."""
        N = len(self.nodes)
        begin %= N
        end = begin + size
        if end <= N:
            return self._kid[begin:end]
        return np.concatenate((self._kid[begin:], self._kid[: end - N]))

    def _filter_loop(self, claims: list[Claim], sig: str) -> FilterScan:
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
            e = self._evaluate(i, claims)
            processed += 1
            total_s += e.seconds
            if e.seconds > slowest:
                slowest = e.seconds
            calls += e.calls
            visits += e.visits
            checks += e.checks
            evals += e.cel_evals
            if e.kind == "timeout" or e.seconds >= self.costs.timeout_s:
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
        return FilterScan(feasible, len(feasible), processed, total_s, slowest, calls, visits, checks, evals, timeouts, failure, invalid_only)

    def _finish(self, pod: Pod, claims: list[Claim], scan: FilterScan) -> PodResult:
        N = len(self.nodes)
        feasible, processed, failure = scan.feasible, scan.processed, scan.failure
        # positional: a keyword call of 16 fields is a measurable share of a fast-scan pod
        result = PodResult(
            pod.name, pod.template, None, [], None, None, processed, scan.found, scan.calls, scan.visits, scan.checks, scan.cel_evals,
            scan.total_s, scan.slowest_s, self.costs.pod_seconds(scan.total_s, scan.slowest_s), scan.timeouts,
        )
        if failure is not None:
            result.failure_kind, result.failure = failure
            return result
        if not feasible:
            result.failure_kind = "unschedulable"
            why = "invalid resource pools on every node" if scan.invalid_only and processed else "no node can allocate the claims"
            result.failure = f"0/{N} nodes are available: {why}"
            return result
        if len(feasible) == 1:  # the memoised scans choose the node themselves
            best_i, best = feasible[0]
        else:
            least = self.scoring == "least-allocated"
            # max keeps the first of equal scores
            best_i, best = max(feasible, key=lambda t: t[1].score * 2.0 + (float(self._free[t[0]]) if least else 0.0))
        allocs = self._mover.move(best, best_i, claims) if self.memo_enabled else None
        moved = allocs is not None
        if allocs is None:
            allocs = self.allocator.allocate(self.nodes[best_i], claims)
        assert allocs is not None, "memoised feasibility disagrees with a fresh allocation"
        for a in allocs:
            self.state.add(a)
        if moved and best.exclusive and self.fast_bind and self._plain_node[best_i]:
            assert best.positions is not None
            self._touch_added(best_i, best.positions)
        else:
            self._touch(allocs)
        self._bound[pod.name] = allocs
        result.node = self.nodes[best_i].name
        result.allocations = allocs
        return result

    def preallocate(self, allocations: Iterable[ClaimAllocation]) -> None:
        """Add allocations made outside this run (background pods) to the cluster state."""
        allocs = list(allocations)
        for a in allocs:
            self.state.add(a)
        self._touch(allocs)

    def preallocate_positions(self, held: Iterable[tuple[int, Sequence[int] | np.ndarray[Any, Any]]]) -> None:
        """What ``preallocate`` does, in bulk, for whole devices given as (node, device positions):
        positions as ``position_of`` gives them. No allocation objects are made: filling every
        node of a 50,000-node cluster is 6.4 million devices. Nodes with devices that allow
        multiple allocations take ``preallocate`` (their usage is more than a position)."""
        layout = self._layout
        in_use = self.state.devices
        flat: list[np.ndarray[Any, np.dtype[np.int64]]] = []
        touched: dict[int, None] = {}
        for i, positions in held:
            pos = np.asarray(positions, dtype=np.int64)
            if not pos.size:
                continue
            if layout.multi_positions(i):
                raise ValueError(f"node {self.nodes[i].name} has devices that allow multiple allocations: use preallocate")
            off, end = int(self._offset[i]), int(self._offset[i + 1])
            if int(pos.min()) < 0 or int(pos.max()) >= end - off:
                raise ValueError(f"node {self.nodes[i].name}: device position out of range 0..{end - off - 1}")
            in_use.update(layout.device_ids(i, pos.tolist()))
            flat.append(off + pos)
            touched[i] = None
        if not touched:
            return
        self._held[np.concatenate(flat)] = True
        # every touched node's positions in use, from one pass over the bitmap: its class and free share
        nodes = np.fromiter(touched, dtype=np.int64, count=len(touched))
        in_use_at = np.flatnonzero(self._held)
        owner = np.searchsorted(self._offset, in_use_at, side="right") - 1
        local = (in_use_at - self._offset[owner]).astype(np.uint32)
        lo, hi = np.searchsorted(owner, nodes, side="left"), np.searchsorted(owner, nodes, side="right")
        for i, a, b in zip(nodes.tolist(), lo.tolist(), hi.tolist(), strict=True):
            self._kid[i] = self._key_id((self._template_of[i], local[a:b].tobytes(), ()))  # = _alloc_key(i, held, [])
        total = (self._offset[nodes + 1] - self._offset[nodes]).astype(np.float64)
        self._free[nodes] = np.maximum(0.0, 1.0 - (hi - lo) / total)  # = _free_share without shared devices
        self.state.version += 1

    def position_of(self, node: int, device: DeviceID) -> int | None:
        """Where ``device`` sits among node ``node``'s devices (None: not one of them)."""
        for n, pidx, position in self._layout.pool_positions((device[0], device[1])):
            if n == node:
                return position.get((pidx, device[2]))
        return None

    def delete(self, pod_name: str) -> bool:
        """Delete a bound pod: its claims are deallocated. False if it is not bound."""
        bound = self._bound.pop(pod_name, None)
        if bound is None:
            return False
        for a in bound:
            self.state.remove(a)
        self._touch(bound)
        return True

    def bound_pods(self) -> list[str]:
        return list(self._bound)

    def allocated_devices(self) -> int:
        return len(self.state.devices) + sum(len(v) for v in self.state.shared.values())

    # ---- internals
    def _touch(self, allocs: Iterable[ClaimAllocation]) -> None:
        """Refresh the held flags, class and free share of the nodes whose devices changed."""
        touched: dict[int, list[tuple[int, DeviceID]]] = {}
        pool_nodes = self._pool_nodes
        for a in allocs:
            for r in a.results:
                key = (r.driver, r.pool)
                found = pool_nodes.get(key)
                if found is None:  # the layout never changes: look a pool up once
                    found = pool_nodes[key] = self._layout.pool_positions(key)
                for node, pidx, position in found:  # usually one node
                    pos = position.get((pidx, r.device))
                    if pos is not None:
                        touched.setdefault(node, []).append((pos, (r.driver, r.pool, r.device)))
                        break
        st = self.state
        layout = self._layout
        bitmap = self._held
        for i, devices in touched.items():
            off = int(self._offset[i])
            multi = layout.multi_positions(i)
            ordered = self._held_order.setdefault(i, {}) if multi else None
            for pos, did in devices:  # a repeated device has the same flag each time
                flag = did in st.devices or did in st.shared or did in st.capacity
                bitmap[off + pos] = flag
                if ordered is not None:  # shareable devices: the devices in use in the order they were taken
                    if flag:
                        ordered[pos] = did
                    else:
                        ordered.pop(pos, None)
            held = bitmap[off : int(self._offset[i + 1])].nonzero()[0]
            if multi:
                shared = [(p, layout.device_at(i, p)) for p in held.tolist() if p in multi]
                self._kid[i] = self._key_id(self._alloc_key(i, held, shared))
                self._free[i] = self._free_share(i, held)
                continue
            # no shareable devices (the usual case): _alloc_key and _free_share inlined
            t = self._template_of[i]
            cls: tuple[Any, ...] = (t, held.astype(np.uint32).tobytes(), ()) if held.size else (t, ())
            kid = self._key_ids.get(cls)
            if kid is None:
                kid = self._key_ids[cls] = len(self._key_ids)
            self._kid[i] = kid
            total = layout.device_count(i)
            self._free[i] = max(0.0, 1.0 - float(held.size) / total) if total else 0.0

    def _touch_added(self, i: int, positions: list[list[int]]) -> None:
        """What ``_touch`` does after whole devices at ``positions`` of node ``i`` were taken, on a
        node without shareable devices whose pools no other node lists (``_plain_node``).

        Such a node's class is its template and the positions in use, so the class after the
        change and the free share follow from the class before and the positions taken: both
        are kept per (class, positions), and a repeat costs a dictionary lookup instead of a
        scan of the node's bitmap."""
        off = self._offset_at[i]
        bitmap = self._held
        if len(positions) == 1:
            taken = positions[0]
        else:
            taken = []
            for at in positions:
                taken.extend(at)
        for p in taken:
            bitmap[off + p] = True
        key = (int(self._kid[i]), *taken)
        step = self._steps.get(key)
        if step is None:
            held = bitmap[off : self._offset_at[i + 1]].nonzero()[0]
            t = self._template_of[i]
            cls: tuple[Any, ...] = (t, held.astype(np.uint32).tobytes(), ()) if held.size else (t, ())
            total = self._layout.device_count(i)
            step = (self._key_id(cls), max(0.0, 1.0 - float(held.size) / total) if total else 0.0)
            if len(self._steps) >= _STEPS_LIMIT:
                self._steps.clear()
            self._steps[key] = step
        self._kid[i], self._free[i] = step

    def _key_id(self, key: tuple[Any, ...]) -> int:
        kid = self._key_ids.get(key)
        if kid is None:
            kid = self._key_ids[key] = len(self._key_ids)
        return kid

    def _free_share(self, i: int, held: np.ndarray[Any, np.dtype[np.intp]]) -> float:
        """Share of node ``i``'s devices still free; shared devices count by consumed capacity.

        Summed in the order the devices were taken, so the float is the same whatever path
        updated the node (ties between nodes are broken on it).
        """
        total = self._layout.device_count(i)
        if not total:
            return 0.0
        ordered = self._held_order.get(i)
        if ordered is None:
            return max(0.0, 1.0 - float(held.size) / total)
        used = 0.0
        for pos, did in ordered.items():
            if did in self.state.devices:
                used += 1.0
                continue
            consumed = self.state.capacity.get(did, {})
            cap = self._layout.capacity_of(i, pos)
            fractions = [float(v / cap[k]) for k, v in consumed.items() if cap.get(k)]
            used += max(fractions, default=1.0)
        return max(0.0, 1.0 - used / total)

    def _alloc_key(self, i: int, held: np.ndarray[Any, np.dtype[np.intp]], shared: list[tuple[int, DeviceID]]) -> tuple[Any, ...]:
        """The node's class: its template, the positions in use, and how shared devices are used."""
        if not held.size:
            return (self._template_of[i], ())
        parts: list[tuple[Any, ...]] = []
        for pos, did in shared:
            if did not in self.state.devices:
                amounts = self.state.capacity.get(did, {})
                parts.append((pos, tuple(sorted((k, str(v)) for k, v in amounts.items())), len(self.state.shared.get(did, ()))))
        return (self._template_of[i], held.astype(np.uint32).tobytes(), tuple(parts))

    def _evaluate(self, i: int, claims: list[Claim], sig: str | None = None) -> _Entry:
        """Filter on node ``i`` for real: the allocator's answer and the predicted cost.
        With the claims' signature (memoised scan), plain requests take ``firstfit``."""
        self.memo_misses += 1
        node = self.nodes[i]
        plain = None
        if sig is not None and self.first_fit:
            plain = self._plain.get(sig, _UNSET)
            if plain is _UNSET:
                specs = plain_specs(claims, self.allocator.classes)
                plain = self._plain[sig] = None if specs is None else [specs, None]
            if plain is not None and plain[1] is not None:
                off, end = int(self._offset[i]), int(self._offset[i + 1])
                layout = self._layout
                got = self._firstfit.fit(
                    self._template_of[i], node, self._held[off:end], claims, plain[0], plain[1], lambda p: layout.device_at(i, p)
                )
                if got is not None:
                    fit, stats = got
                    entry = _new_entry(self.costs, fit is not None, stats)
                    if fit is not None:
                        entry.fit = (i, fit)  # built into ``plan`` if the node is chosen
                    return entry
        try:
            res, stats = self.allocator.allocate_with_stats(node, claims)
        except FilterTimeout as e:
            stats = self.allocator.last_stats
            # the scheduler abandons the node at the deadline: that is its Filter time
            entry = _new_entry(self.costs, False, stats, error=str(e), kind="timeout")
            entry = replace(entry, seconds=max(entry.seconds, self.costs.timeout_s))
        except SearchAborted as e:
            stats = self.allocator.last_stats
            entry = _new_entry(self.costs, False, stats, error=str(e), kind="aborted")
        except AllocationError as e:
            stats = self.allocator.last_stats
            kind = "invalid-pool" if isinstance(e, InvalidPools) else "error"
            entry = _new_entry(self.costs, False, stats, error=str(e), kind=kind)
        else:
            entry = _new_entry(self.costs, res is not None, stats, score=_score(claims, res) if res is not None else 0)
            if res is not None and self.memo_enabled:
                entry.plan = (i, res)
            if res is not None and plain is not None and plain[1] is None:
                plain[1] = tuple(a.config for a in res)  # the config depends on the claim specs only
        return entry



_UNKNOWN, _FEASIBLE, _INFEASIBLE, _ERROR, _INVALID = 0, 1, 2, 3, 4
_UNSET: Any = object()
_UNKNOWN_BYTE, _FEASIBLE_BYTE, _ERROR_BYTE = bytes([_UNKNOWN]), bytes([_FEASIBLE]), bytes([_ERROR])
_SUMS_LIMIT = 4096  # window sums kept (over all claim signatures)
_SUMS_CLASSES = 512  # ... while a signature has answers for at most this many classes (keys of <= 4 KiB)
_LOOP_CLASSES = 16  # _class_sums sums up to this many classes in Python
_STEPS_LIMIT = 200_000  # class changes kept by _touch_added


def _class_sums(memo: _SigMemo, counts: np.ndarray[Any, np.dtype[np.int64]], timeout_s: float) -> tuple[float, int, int, int, int, float, int]:
    """Seconds, calls, visits, checks and CEL evaluations over a window, its slowest node and
    the nodes at the timeout, from the window's class histogram ``counts``: every scan sums a
    window this way, so a window gives the same floats whichever scan took it.

    Up to ``_LOOP_CLASSES`` classes are summed in Python in class order (a window usually
    holds two or three classes: a numpy gather and product cost three times as much there),
    more with one product."""
    classes = counts.nonzero()[0]
    if classes.size <= _LOOP_CLASSES:
        entries = memo.entries
        total_s, calls, visits, checks, evals, timeouts = 0.0, 0, 0, 0, 0, 0
        slowest = -math.inf
        for k, m in zip(classes.tolist(), counts[classes].tolist(), strict=True):
            e = entries[k]
            assert e is not None
            secs = e.seconds
            total_s += m * secs
            calls += m * e.calls
            visits += m * e.visits
            checks += m * e.checks
            evals += m * e.cel_evals
            if secs > slowest:
                slowest = secs
            if secs >= timeout_s:
                timeouts += m
        return total_s, calls, visits, checks, evals, slowest, timeouts
    per, rows = counts[classes], memo.stats[classes]
    total, c, v, ch, ev = (per @ rows).tolist()
    col = rows[:, 0]
    return total, int(c), int(v), int(ch), int(ev), float(col.max()), int(per[col >= timeout_s].sum())


def _window_totals(
    memo: _SigMemo, seen: np.ndarray[Any, np.dtype[np.int64]], stop: int, timeout_s: float
) -> tuple[float, Any, Any, Any, Any, float, int]:
    """The general scan's sums over the ``stop`` nodes of classes ``seen``: seconds, calls,
    visits, checks, CEL evaluations, the slowest node and the nodes at the timeout."""
    if not stop:
        return 0.0, 0, 0, 0, 0, 0.0, 0
    if len(memo.entries) <= 4 * stop + 1024:  # few classes: sum per class
        counts = np.bincount(seen, minlength=len(memo.entries))
        return _class_sums(memo, counts, timeout_s)
    per, rows = np.ones(stop, dtype=np.int64), np.take(memo.stats, seen, axis=0)
    total_s, calls, visits, checks, evals = (per @ rows).tolist()
    secs = rows[:, 0]
    return total_s, calls, visits, checks, evals, float(secs.max()), int(per[secs >= timeout_s].sum())


def _sums(per: np.ndarray[Any, Any], rows: np.ndarray[Any, Any]) -> tuple[float, int, int, int, int, float]:
    """Seconds, calls, visits, checks and CEL evaluations over a window, and its slowest node:
    ``per`` nodes of each ``rows`` answer (computed exactly as the general scan does)."""
    total_s, calls, visits, checks, evals = (per @ rows).tolist()
    return total_s, int(calls), int(visits), int(checks), int(evals), float(rows[:, 0].max())


class _SigMemo:
    """Filter answers for one claim signature, per node class id, as arrays the scan can index."""

    def __init__(self) -> None:
        self.entries: list[_Entry | None] = []
        self.status = np.zeros(0, dtype=np.int8)
        self.stats = np.zeros((0, 5))  # seconds, calls, visits, checks, CEL evaluations
        self.scores = np.zeros(0)
        self.bad = np.zeros(0, dtype=np.int64)  # 1 where a class is not known feasible (the fast scan's test)
        self.scored = False  # some answer has a non-zero score
        self.sums: dict[bytes, tuple[float, int, int, int, int, float]] = {}  # class histogram -> window sums

    def grow(self, classes: int) -> None:
        if classes <= len(self.entries):
            return
        extra = max(classes, 2 * len(self.entries), 64) - len(self.entries)
        self.entries.extend([None] * extra)
        self.status = np.concatenate((self.status, np.zeros(extra, dtype=np.int8)))
        self.stats = np.concatenate((self.stats, np.zeros((extra, 5))))
        self.scores = np.concatenate((self.scores, np.zeros(extra)))
        self.bad = np.concatenate((self.bad, np.ones(extra, dtype=np.int64)))

    def put(self, kid: int, e: _Entry, timeout_s: float) -> int:
        """Store the answer of class ``kid``; returns its status code."""
        if e.kind == "timeout" or e.seconds >= timeout_s or (e.error is not None and e.kind != "invalid-pool"):
            code = _ERROR
        elif e.error is not None:
            code = _INVALID
        else:
            code = _FEASIBLE if e.feasible else _INFEASIBLE
        self.entries[kid] = e
        self.status[kid] = code
        self.stats[kid] = (e.seconds, e.calls, e.visits, e.checks, e.cel_evals)
        self.scores[kid] = e.score
        self.bad[kid] = code != _FEASIBLE
        self.scored = self.scored or e.score != 0
        return code


def _exclusive(allocs: Sequence[ClaimAllocation]) -> bool:
    """Every result takes its device whole: the device is in use after the allocation is added."""
    return all(not r.admin_access and r.share_id is None for a in allocs for r in a.results)


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
