"""The plain search: kube-scheduler's structured allocator, step for step.

Follows the incubating allocator of Kubernetes 1.36 (see the package docstring for the file and
commit), in its order: ``Allocator`` is upstream's ``Allocator`` / ``NewAllocator`` and
``allocate_with_stats`` its ``Allocate``; ``Search`` is the per-call ``allocator``: ``run`` (the
body of ``Allocate``: requests validated, constraints built, the search started, results built),
``validate_device_request``, ``allocate_one``, ``is_selectable``, ``cmp_request_over_capacity``,
``selectors_match``, ``allocate_device`` (with its rollback, ``deallocate``),
``check_available_counters``, ``device_in_use``,
``deallocate_counters_for_device`` and ``create_node_selector``. Constraints are in
``constraints``, consumable capacity in ``capacity``, ``taintPreventsAllocation`` in ``taints``,
pool gathering in ``resourcepools``.

What differs from upstream and why:

- the search counts kube-scheduler's work as it goes (``SearchStats``: allocateOne calls,
  devices visited, allocation checks, CEL evaluations) and stops, as the scheduler does at its
  Filter timeout, once that work is priced above the budget (``FilterBudget``);
- selector results are also cached across calls, per (expression, device content), so
  identical devices on many nodes are evaluated once; the per-call memo still decides which
  evaluations the scheduler would count;
- shareIDs are deterministic (``share_id``) instead of random UIDs;
- at each allocateOne call that looks for a device, the accelerations (``hooks``) may answer
  for the plain search; with ``Allocator(..., plain=True)`` there are none.

Upstream details kept on purpose (they change answers): counters charged by a device that a
taint, a constraint or its capacity then rejects stay charged for the rest of the call; a
constraint value stored before a capacity rejection stays stored; ``distinctAttribute``
remembers one value per request name.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from topodra.quantity import Quantity
from topodra.sim.allocator.bitsets import Bitsets
from topodra.sim.allocator.capacity import cmp_request_over_capacity, consumed_capacity
from topodra.sim.allocator.constraints import ClaimConstraint, Typed, lookup_attribute, make_constraint
from topodra.sim.allocator.hooks import Acceleration
from topodra.sim.allocator.masks import MaskScan
from topodra.sim.allocator.memo import DeadStateMemo
from topodra.sim.allocator.prune import Prune
from topodra.sim.allocator.resourcepools import Pool, gather_pools, node_matches
from topodra.sim.allocator.results import (
    AllocatedState,
    AllocationError,
    ClaimAllocation,
    DeviceResult,
    FilterBudget,
    FilterTimeout,
    InvalidPools,
    SearchAborted,
    SearchStats,
    share_id,
)
from topodra.sim.allocator.solver import LastRequestSolver
from topodra.sim.allocator.taints import taint_prevents_allocation
from topodra.sim.allocator.types import (
    Candidate,
    MaxSizeExceeded,
    PickedDevice,
    RequestData,
    RequestKey,
    Slot,
)
from topodra.sim.cel import CelCompileError, CelError, CelRuntimeError, compile_selector
from topodra.sim.objects import (
    MAX_RESULTS,
    Claim,
    Device,
    DeviceCache,
    DeviceClass,
    DeviceID,
    Node,
    RequestSpec,
    Slice,
    parse_claim,
    parse_class,
    parse_node,
    parse_slice,
)

__all__ = ["Allocator", "Search", "reads_only_driver"]

_ZERO = Fraction(0)


class Allocator:
    """Allocation for one pod's claims on one node at a time, over a fixed set of slices and classes.

    ``state`` is read live: add each result to it (``state.add``) once the pod is
    bound and remove it when the claim is deallocated.
    """

    def __init__(
        self,
        slices: Iterable[Mapping[str, Any] | Slice],
        classes: Iterable[Mapping[str, Any] | DeviceClass],
        state: AllocatedState | None = None,
        *,
        prune: bool = True,
        max_calls: int = 5_000_000,
        budget: FilterBudget | str | None = "default",
        fast: bool = True,
        fast_after: int = 16,
        solve_after: int | None = None,
        solve_on_backtrack: bool = True,
        plain: bool = False,
        list_type_attributes: bool = False,
    ) -> None:
        """``budget``: the Filter timeout in counted work (``"default"``: the default cost
        model's; ``None``: no timeout). ``plain``: the plain search alone, every acceleration off
        (the same as ``prune=False, fast=False``). ``prune`` (decide hopeless subtrees by
        counting) and ``fast`` (last-request solver, dead-state memo, mask scan) change only our
        own effort. ``max_calls`` caps our own effort (``SearchAborted``).
        ``fast_after``: executed calls of one Allocate before the mask scan and the dead-state
        memo start (a first-fit search ends sooner and skips their set-up; 16 rather than 64 saves
        a third of the walked calls on small multi-request searches). ``solve_after``: the
        same for solving the last request by dynamic programming (default 16, at most
        ``fast_after``). ``solve_on_backtrack``: also solve it as soon as one of its devices under
        a ``distinctAttribute`` is taken back (the search is past first fit; counting cannot
        decide such subtrees). ``list_type_attributes``: the scheduler's gate
        ``DRAListTypeAttributes``: selectors see list attributes (without it a device with one
        fails every selector). Constraints compare values as before either way: kube-scheduler
        1.36 does not hand the gate to its allocator (``AllocatorFeatures`` in
        ``pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go`` sets no
        ``ListTypeAttributes``), so it runs ``internal/incubating``, not ``experimental``, and a
        list value matches nothing in ``matchAttribute`` (``constraints``).
        """
        cache: DeviceCache = {}
        self.slices = [s if isinstance(s, Slice) else parse_slice(s, cache) for s in slices]
        self.classes = {c.name: c for c in (c if isinstance(c, DeviceClass) else parse_class(c) for c in classes)}
        self.state = state if state is not None else AllocatedState()
        self.prune = prune and not plain
        self.fast = fast and not plain
        self.fast_after = fast_after
        self.solve_after = min(fast_after, 16 if solve_after is None else solve_after)
        self.solve_on_backtrack = solve_on_backtrack
        self.list_type_attributes = list_type_attributes
        self.max_calls = max_calls
        if budget == "default":
            from topodra.sim.costmodel import DEFAULT_COSTS  # costmodel imports this package

            budget = DEFAULT_COSTS.budget()
        assert budget is None or isinstance(budget, FilterBudget)
        self.budget: FilterBudget | None = budget
        self._on_node: dict[str, list[Slice]] = {}
        self._shared: list[Slice] = []
        self._by_pool: dict[tuple[str, str], list[Slice]] = {}
        for s in self.slices:
            (self._on_node.setdefault(s.node_name, []) if s.node_name else self._shared).append(s)
            self._by_pool.setdefault((s.driver, s.pool), []).append(s)
        self._pools: dict[tuple[str, tuple[tuple[str, str], ...]], list[Pool]] = {}
        self._sel_cache: dict[tuple[str, str], bool | CelError] = {}
        self.last_stats = SearchStats()

    def pools_for(self, node: Node) -> list[Pool]:
        """The node's pools (``GatherPools``), cached per node name and labels."""
        key = (node.name, tuple(sorted(node.labels.items())))
        pools = self._pools.get(key)
        if pools is None:
            pools = gather_pools(self._on_node.get(node.name, []) + self._shared, node, self._by_pool)
            self._pools[key] = pools
        return pools

    def allocate(
        self, node: Node | Mapping[str, Any] | str, claims: Sequence[Claim | Mapping[str, Any]]
    ) -> list[ClaimAllocation] | None:
        """One allocation per claim (in order), ``None`` if this node has no solution."""
        result, _ = self.allocate_with_stats(node, claims)
        return result

    def allocate_with_stats(
        self, node: Node | Mapping[str, Any] | str, claims: Sequence[Claim | Mapping[str, Any]]
    ) -> tuple[list[ClaimAllocation] | None, SearchStats]:
        """``Allocate``: the allocations and the counted work of the call."""
        n = node if isinstance(node, Node) else parse_node(node)
        parsed = [c if isinstance(c, Claim) else parse_claim(c) for c in claims]
        search = Search(self, n, parsed)
        try:
            result = search.run()
        finally:
            self.last_stats = search.stats
        return result, search.stats

    def evaluate(self, expression: str, device: Device, stats: SearchStats) -> bool:
        """A selector's result on a device through the cross-call cache (raises its CEL error).

        Without ``DRAListTypeAttributes`` a device with a list attribute fails every selector:
        upstream converts all attributes before evaluating (``cel/compile.go``
        ``DeviceMatches``, ``getAttributeValue``)."""
        if device.list_attribute and not self.list_type_attributes:
            stats.engine_evals += 1
            raise CelRuntimeError(expression, f"attribute {device.list_attribute}: unsupported attribute value")
        key = (expression, device.driver if reads_only_driver(expression) else device.fingerprint)
        hit = self._sel_cache.get(key)
        if hit is None:
            stats.engine_evals += 1
            try:
                hit = compile_selector(expression, lists=self.list_type_attributes).matches(device.cel())
            except CelError as e:
                hit = e
            if len(self._sel_cache) > 200_000:
                self._sel_cache.clear()
            self._sel_cache[key] = hit
        if isinstance(hit, CelError):
            raise hit
        return hit


#: string literals without escapes (triple-quoted first, as CEL's lexer reads them), left to right
_LITERAL = re.compile(r"'''.*?'''|\"\"\".*?\"\"\"|'[^'\n]*'|\"[^\"\n]*\"", re.S)
#: the identifier ``device`` (also root-scoped, ``.device``), not a part of a longer name
_DEVICE_WORD = re.compile(r"(?<!\w)device(?!\w)")
_DRIVER_FIELD = re.compile(r"\s*\.\s*driver(?!\w)")


@functools.lru_cache(maxsize=1024)
def reads_only_driver(expression: str) -> bool:
    """Whether a selector's result (or error) is a function of ``device.driver`` alone: every use of
    the ``device`` variable, the only one in the DRA environment, is ``device.driver``. Such a
    selector is evaluated once per driver instead of once per device content (a class like
    ``device.driver == "native.cpu"`` costs one evaluation for the whole node, not one per CPU).

    Conservative: an expression with an escape, a backtick-quoted field or a comment, or whose
    string literals do not blank out cleanly, does not qualify and is evaluated per device.
    """
    if "\\" in expression or "`" in expression:
        return False
    bare = _LITERAL.sub(" 0 ", expression)
    if "//" in bare or "'" in bare or '"' in bare:
        return False
    return all(_DRIVER_FIELD.match(bare, m.end()) for m in _DEVICE_WORD.finditer(bare))


class Search:
    """One Allocate call (upstream's per-call ``allocator``)."""

    def __init__(self, alloc: Allocator, node: Node, claims: list[Claim]) -> None:
        self.a = alloc
        self.node = node
        self.claims = claims
        self.stats = SearchStats()
        self.pools = alloc.pools_for(node)
        self.cands: list[Candidate] = []
        for pool in self.pools:
            if not pool.usable:
                continue
            for s in pool.slices:
                for d in s.devices:
                    simple = not d.allow_multiple and not any(c.policy for c in d.capacity.values())
                    self.cands.append(Candidate(len(self.cands), (pool.driver, pool.name, d.name), d, s, pool, simple))
        self.D = len(self.cands)
        self.stats.devices = self.D
        self.has_counters = any(c.device.consumes_counters for c in self.cands)
        self.has_multi = any(c.device.allow_multiple for c in self.cands)
        self.state = alloc.state
        self.budget = alloc.budget
        self.next_budget_check = 0
        self.req: dict[RequestKey, RequestData] = {}
        #: upstream's deviceMatchesRequest: (position, request key) -> (selectable, evaluations not yet counted)
        self.matches: dict[tuple[int, int, int, int], tuple[bool, int]] = {}
        self.allocating: dict[DeviceID, set[int]] = {}
        self.allocating_cap: dict[DeviceID, dict[str, Fraction]] = {}
        self.available: dict[tuple[str, str], dict[str, dict[str, Fraction]]] = {}
        self.consumed: dict[tuple[str, str], dict[str, dict[str, Fraction]]] = {}
        self.results: list[list[PickedDevice]] = [[] for _ in claims]
        self.constraints: list[list[ClaimConstraint]] = []
        # facts the accelerations read, kept by the plain search as it goes:
        self.completions = 0  # requests completed
        self.leaks = 0  # rejections that left counters charged (or constraint values stored)
        self.cons_leaks = 0  # rejections that left constraint values stored (capacity)
        #: devices being allocated, per claim, as bit masks by position (mirrors ``allocating``)
        self.amask = [0] * len(claims)
        self.all_mask = (1 << self.D) - 1
        self.accelerations: tuple[Acceleration, ...] = ()
        self.rest_hooks: tuple[Acceleration, ...] = ()

    def _accelerate(self, bits: Bitsets) -> None:
        """The accelerations, in the order they are asked (``hooks``)."""
        accs: list[Acceleration] = []
        if self.a.fast:
            solver = LastRequestSolver(self, bits)
            self.rest_hooks = (solver,)
            accs.append(solver)
            accs.append(DeadStateMemo(self, bits, after=len(accs) + 1))
        if self.a.prune:
            accs.append(Prune(self, bits))
        if self.a.fast:
            accs.append(MaskScan(self, bits))
        self.accelerations = tuple(accs)

    # ---- Allocate
    def run(self) -> list[ClaimAllocation] | None:
        for ci, claim in enumerate(self.claims):
            min_devices = 0
            for ri, req in enumerate(claim.requests):
                if req.first_available:
                    smallest = None
                    for si, sub in enumerate(req.first_available):
                        rd = self.validate_device_request(ci, ri, si, sub, req.name)
                        self.req[(ci, ri, si)] = rd
                        smallest = rd.num_devices if smallest is None else min(smallest, rd.num_devices)
                    min_devices += smallest or 0
                else:
                    assert req.exactly is not None
                    rd = self.validate_device_request(ci, ri, 0, req.exactly, None)
                    self.req[(ci, ri, 0)] = rd
                    min_devices += rd.num_devices
            if min_devices > MAX_RESULTS:
                raise AllocationError(
                    f"claim {claim.key}: number of requested devices {min_devices} exceeds the claim limit of {MAX_RESULTS}"
                )
            self.constraints.append([make_constraint(c) for c in claim.constraints])
        if self.a.fast or self.a.prune:
            self._accelerate(Bitsets(self))
        try:
            done = self.allocate_one(0, 0, 0, 0, False, 0)
        except MaxSizeExceeded:
            done = False
        if not done:
            if any(p.invalid for p in self.pools):
                raise InvalidPools
            return None
        return [self.build_result(ci) for ci in range(len(self.claims))]

    def validate_device_request(self, ci: int, ri: int, si: int, spec: RequestSpec, parent: str | None) -> RequestData:
        claim = self.claims[ci]
        cls = self.a.classes.get(spec.class_name)
        if cls is None:
            raise AllocationError(
                f"claim {claim.key}, request {spec.name}: could not retrieve device class {spec.class_name}: "
                f'deviceclass.resource.k8s.io "{spec.class_name}" not found'
            )
        rd = RequestData(spec, parent, cls, spec.count)
        if spec.mode == "ExactCount":
            return rd
        if spec.mode != "All":
            raise AllocationError(f"claim {claim.key}, request {spec.name}: unsupported count mode {spec.mode}")
        rd.all_devices = []
        for pool in self.pools:
            if pool.incomplete:
                raise AllocationError(
                    f"claim {claim.key}, request {spec.name}: asks for all devices, but resource pool {pool.driver}/{pool.name} is currently being updated"
                )
            if pool.invalid:
                raise AllocationError(
                    f"claim {claim.key}, request {spec.name}: asks for all devices, but resource pool {pool.driver}/{pool.name} is currently invalid"
                )
        for cand in self.cands:
            if self.is_selectable(cand, rd, (ci, ri, si), True) and self.cmp_request_over_capacity(cand, spec):
                rd.all_devices.append(cand)
        rd.num_devices = len(rd.all_devices)
        return rd

    # ---- allocateOne
    def allocate_one(self, ci: int, ri: int, si: int, di: int, in_sub: bool, start: int) -> bool:
        """One slot of the depth-first search: device ``di`` of request ``(ci, ri, si)``, from
        candidate position ``start`` on; True when the whole search completed from here."""
        stats = self.stats
        stats.calls += 1
        stats.our_calls += 1
        if stats.our_calls > self.a.max_calls:
            raise SearchAborted(f"search exceeded {self.a.max_calls} steps on node {self.node.name}")
        if self.budget is not None and stats.calls >= self.next_budget_check:
            self.check_budget()
        if ci >= len(self.claims):
            return True
        if ri >= len(self.claims[ci].requests):
            try:
                return self.allocate_one(ci + 1, 0, 0, 0, False, 0)
            except MaxSizeExceeded:
                return False
        rd = self.req[(ci, ri, si)]
        if not in_sub and rd.parent is not None:
            return self.allocate_sub_requests(ci, ri, di)
        spec = rd.spec
        if spec.mode == "All" and not rd.all_devices:
            return False
        if di >= rd.num_devices:
            self.completions += 1
            return self.allocate_one(ci, ri + 1, 0, 0, False, 0)
        if len(self.results[ci]) + rd.num_devices - di > MAX_RESULTS:
            raise MaxSizeExceeded()
        if spec.mode == "All":
            return self.allocate_all_device(ci, ri, si, di, in_sub, rd)
        return self.answer(Slot(ci, ri, si, di, in_sub, start, rd, (ci, ri, si)))

    def allocate_sub_requests(self, ci: int, ri: int, di: int) -> bool:
        """``firstAvailable``: the subrequests in order, the first that completes the search wins."""
        all_exceeded = True
        sub = 0
        while (ci, ri, sub) in self.req:
            try:
                ok = self.allocate_one(ci, ri, sub, di, True, 0)
            except MaxSizeExceeded:
                sub += 1
                continue
            all_exceeded = False
            if ok:
                self.req[(ci, ri, 0)].selected_sub = sub
                return True
            sub += 1
        if all_exceeded:
            raise MaxSizeExceeded()
        return False

    def allocate_all_device(self, ci: int, ri: int, si: int, di: int, in_sub: bool, rd: RequestData) -> bool:
        """``allocationMode: All``: the request's next device, which must be allocatable."""
        assert rd.all_devices is not None
        cand = rd.all_devices[di]
        if not self.allocate_device(ci, rd, cand, True):
            return False
        try:
            done = self.allocate_one(ci, ri, si, di + 1, in_sub, 0)
        except MaxSizeExceeded:
            self.deallocate(ci, rd, cand)
            raise
        if not done:
            self.deallocate(ci, rd, cand)
        return done

    def answer(self, at: Slot, after: int = 0) -> bool:
        """The slot's answer: from the accelerations (from index ``after`` on), else the device loop."""
        for acc in self.accelerations[after:] if after else self.accelerations:
            got = acc.answer(at)
            if got is not None:
                return got
        return self.allocate_from_devices(at)

    def allocate_from_devices(self, at: Slot) -> bool:
        """allocateOne's loop over the candidate devices for one slot."""
        ci, ri, si, di, in_sub, start, rd, rkey = at
        spec = rd.spec
        cands = self.cands
        stats = self.stats
        used = self.state.devices
        allocating = self.allocating
        admin = spec.admin_access
        simple_cap = not spec.capacity_requests
        rest = self.rest_hooks
        for pos in range(start, self.D):
            cand = cands[pos]
            stats.visits += 1
            cid = cand.id
            # in use is cheap: checked first
            if admin:
                if ci in allocating.get(cid, ()):
                    continue
            elif cid in used or allocating.get(cid):
                continue
            if not self.is_selectable(cand, rd, rkey, True):
                continue
            if not (simple_cap and cand.simple_cap) and not self.cmp_request_over_capacity(cand, spec):
                continue
            if not self.allocate_device(ci, rd, cand, False):
                continue
            try:
                done = self.allocate_one(ci, ri, si, di + 1, in_sub, pos + 1)
            except MaxSizeExceeded:
                self.deallocate(ci, rd, cand)
                raise
            if done:
                return True
            self.deallocate(ci, rd, cand)
            for hook in rest:
                got = hook.answer_rest(at, pos + 1)
                if got is not None:
                    return got
        return False

    # ---- isSelectable
    def is_selectable(self, cand: Candidate, rd: RequestData, rkey: RequestKey, count: bool) -> bool:
        """Class then request selectors, then per-device node selection; memoised per call.
        ``count``: the scheduler reaches this device here (its evaluations are counted, once)."""
        key = (cand.pos, *rkey)
        hit = self.matches.get(key)
        if hit is None:
            hit = self.selectors_match(cand, rd, rkey[0])
            self.matches[key] = hit
        if count and hit[1]:
            # the scheduler's own per-call memo: evaluations are counted the first time only
            self.stats.cel_evals += hit[1]
            self.matches[key] = (hit[0], 0)
        return hit[0]

    def cmp_request_over_capacity(self, cand: Candidate, spec: RequestSpec) -> bool:
        return cmp_request_over_capacity(
            cand.device, spec.capacity_requests, self.state.capacity.get(cand.id, {}), self.allocating_cap.get(cand.id, {})
        )

    def selectors_match(self, cand: Candidate, rd: RequestData, ci: int) -> tuple[bool, int]:
        """(selectable, selector evaluations made) for one device and request."""
        d = cand.device
        evals = 0
        for owner, exprs in ((rd.cls, rd.cls.selectors), (None, rd.spec.selectors)):
            for i, expr in enumerate(exprs):
                evals += 1
                try:
                    ok = self.a.evaluate(expr, d, self.stats)
                except CelCompileError as e:  # selectorsMatch (allocator_incubating.go), word for word
                    who = f"class {owner.name}" if owner else f"claim {self.claims[ci].key}"
                    raise AllocationError(f"{who}: selector #{i}: CEL compile error: {e.detail()}") from None
                except CelRuntimeError as e:
                    who = f"class {owner.name}" if owner else f"claim {self.claims[ci].key}"
                    raise AllocationError(f"{who}: selector #{i}: CEL runtime error: {e.message}") from None
                if not ok:
                    return (False, evals)
        if cand.slice.per_device_node_selection and not node_matches(self.node, d.node_name, d.all_nodes, d.node_selector):
            return (False, evals)
        return (True, evals)

    # ---- allocateDevice
    def allocate_device(self, ci: int, rd: RequestData, cand: Candidate, must: bool) -> bool:
        """Availability, counters, taints, constraints and capacity of one selectable candidate;
        on success the device is held as allocated (``deallocate`` rolls it back)."""
        self.stats.checks += 1
        spec = rd.spec
        d = cand.device
        multi = d.allow_multiple
        if not multi and spec.admin_access and ci in self.allocating.get(cand.id, ()):
            return False
        if not spec.admin_access and self.device_in_use(cand):
            return False
        skip_counters = multi and (cand.id in self.state.capacity or cand.id in self.allocating_cap)
        charged = not skip_counters and bool(d.consumes_counters)
        if charged and not self.check_available_counters(cand):
            return False
        if taint_prevents_allocation(d, spec):
            self.leaks += charged
            return False
        if not self._add_to_constraints(ci, rd, cand, must):
            self.leaks += charged
            return False
        if not multi:
            self.allocating.setdefault(cand.id, set()).add(ci)
            self.amask[ci] |= 1 << cand.pos
        consumed: dict[str, Quantity] | None = None
        share: str | None = None
        if not self.cmp_request_over_capacity(cand, spec):
            self.leaks += 1
            self.cons_leaks += 1
            return False  # upstream leaves constraints and counters as they are here
        if multi:
            consumed = {
                name: consumed_capacity(spec.capacity_requests.get(name) if spec.capacity_requests else None, cap)
                for name, cap in d.capacity.items()
            }
            share = share_id(self.claims[ci].uid, rd.name, cand.id, len(self.results[ci]))
            agg = self.allocating_cap.setdefault(cand.id, {})  # an entry even when empty, as upstream
            for k, q in consumed.items():
                agg[k] = agg.get(k, _ZERO) + q.amount
        self.results[ci].append(PickedDevice(rd, cand, share, consumed if consumed else None))
        return True

    def take_proven(self, ci: int, rd: RequestData, cand: Candidate, applying: list[tuple[ClaimConstraint, list[Typed | None]]]) -> None:
        """``allocate_device`` for a device the caller has proven to pass every check (free,
        exclusive, no counters, no taints, always fits, accepted without side effect by the
        constraints in ``applying``, with their values by position): the check is counted and
        the device held exactly as ``allocate_device`` holds it."""
        self.stats.checks += 1
        base, p = rd.base, cand.pos
        for c, vals in applying:
            v = vals[p]
            assert v is not None
            c.add(base, v)
        self.allocating.setdefault(cand.id, set()).add(ci)
        self.amask[ci] |= 1 << p
        self.results[ci].append(PickedDevice(rd, cand, None, None))

    def _add_to_constraints(self, ci: int, rd: RequestData, cand: Candidate, must: bool) -> bool:
        """Each constraint of the claim in order takes the device's value, or the ones before it
        give theirs back and the device is rejected (``must``: an error instead)."""
        cons = self.constraints[ci]
        base, sub = rd.base, rd.sub
        d = cand.device
        for i, c in enumerate(cons):
            if not c.matches(base, sub):
                continue
            v: Typed | None = lookup_attribute(d, cand.pool.driver, c.name)
            if not c.accepts(v):
                if must:
                    raise AllocationError(
                        f"claim {self.claims[ci].key}, request {rd.spec.name}: cannot add device {'/'.join(cand.id)} because a claim constraint would not be satisfied"
                    )
                for j in range(i):
                    if cons[j].matches(base, sub):
                        cons[j].remove(base)
                return False
            assert v is not None
            c.add(base, v)
        return True

    def deallocate(self, ci: int, rd: RequestData, cand: Candidate) -> None:
        """The rollback of a successful ``allocate_device``."""
        for c in self.constraints[ci]:
            if c.matches(rd.base, rd.sub):
                c.remove(rd.base)
        res = self.results[ci].pop()
        s = self.allocating.get(cand.id)
        if s is not None:
            s.discard(ci)
            self.amask[ci] &= ~(1 << cand.pos)
        if cand.device.allow_multiple:
            agg = self.allocating_cap.get(cand.id)
            if res.consumed and agg is not None:
                for k, q in res.consumed.items():
                    if k in agg:
                        agg[k] -= q.amount
                if all(v == 0 for v in agg.values()):
                    del self.allocating_cap[cand.id]
        elif cand.device.consumes_counters:
            self.deallocate_counters_for_device(cand)

    # ---- counters (partitionable devices)
    def check_available_counters(self, cand: Candidate) -> bool:
        """Charge the device's counters; if some counter of its pool is then over, uncharge and refuse."""
        avail = self.available_counters(cand.pool)
        used = self.consumed.setdefault(cand.pool.key, {})
        for cset, consumption in cand.device.consumes_counters:
            u = used.setdefault(cset, {})
            for cname, q in consumption:
                u[cname] = u.get(cname, _ZERO) + q.amount
        for sname, available in avail.items():
            u = used.get(sname, {})
            for cname, value in available.items():
                if value < u.get(cname, _ZERO):
                    self.deallocate_counters_for_device(cand)
                    return False
        return True

    def available_counters(self, pool: Pool) -> dict[str, dict[str, Fraction]]:
        """The pool's counters less what allocated devices (other pods) consume; computed once per call."""
        got = self.available.get(pool.key)
        if got is None:
            got = {n: {c: q.amount for c, q in cs.items()} for n, cs in pool.counter_sets.items()}
            for s in pool.slices + pool.other_slices:
                for d in s.devices:
                    if not d.consumes_counters or not self.state.is_allocated((pool.driver, pool.name, d.name)):
                        continue
                    for cset, counters in d.consumes_counters:
                        avail = got.get(cset, {})
                        for cname, q in counters:
                            if cname in avail:
                                avail[cname] -= q.amount
            self.available[pool.key] = got
        return got

    def device_in_use(self, cand: Candidate) -> bool:
        return cand.id in self.state.devices or bool(self.allocating.get(cand.id))

    def deallocate_counters_for_device(self, cand: Candidate) -> None:
        used = self.consumed.get(cand.pool.key, {})
        for cset, counters in cand.device.consumes_counters:
            u = used.get(cset, {})
            for cname, q in counters:
                u[cname] = u.get(cname, _ZERO) - q.amount

    # ---- results
    def create_node_selector(self, ci: int) -> Mapping[str, Any] | None:
        fields: list[dict[str, Any]] = []
        exprs: list[dict[str, Any]] = []
        for r in self.results[ci]:
            s, d = r.cand.slice, r.cand.device
            if s.per_device_node_selection:
                node_name, sel = d.node_name, d.node_selector
            else:
                node_name, sel = s.node_name, s.node_selector
            if node_name or d.binds_to_node:
                return {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [self.node.name]}]}
                    ]
                }
            if isinstance(sel, Mapping):
                terms = sel.get("nodeSelectorTerms") or []
                if len(terms) > 1:
                    raise AllocationError(f"unsupported ResourceSlice.NodeSelector with {len(terms)} terms")
                if terms:
                    for src, dst in ((terms[0].get("matchFields") or [], fields), (terms[0].get("matchExpressions") or [], exprs)):
                        for req in src:
                            if req not in dst:
                                dst.append(req)
        if fields or exprs:
            term: dict[str, Any] = {}
            if exprs:
                term["matchExpressions"] = exprs
            if fields:
                term["matchFields"] = fields
            return {"nodeSelectorTerms": [term]}
        return None

    def build_result(self, ci: int) -> ClaimAllocation:
        """The claim's allocation result: devices, configs and node selector (end of ``Allocate``)."""
        claim = self.claims[ci]
        results = []
        for r in self.results[ci]:
            d = r.cand.device
            results.append(
                DeviceResult(
                    request=r.rd.name,
                    driver=r.cand.id[0],
                    pool=r.cand.id[1],
                    device=r.cand.id[2],
                    admin_access=r.rd.spec.admin_access,
                    tolerations=tuple(t.raw for t in r.rd.spec.tolerations),
                    binding_conditions=d.binding_conditions,
                    binding_failure_conditions=d.binding_failure_conditions,
                    share_id=r.share_id,
                    consumed_capacity=r.consumed,
                )
            )
        return ClaimAllocation(claim.key, tuple(results), self._config(ci), self.create_node_selector(ci))

    def _config(self, ci: int) -> tuple[Mapping[str, Any], ...]:
        """``allocationResult.Devices.Config`` as upstream's ``Allocate`` fills it ("Populate
        configs", incubating/allocator_incubating.go, Kubernetes v1.36.2): each class's configs
        once, naming every request of that class (a subrequest as ``req/sub``); then each claim
        config with no requests once, and one naming requests once per request of the claim it
        names (by its name, or by its chosen subrequest's ``req/sub``), its requests as written."""
        claim = self.claims[ci]
        out: list[dict[str, Any]] = []
        class_ranges: dict[str, tuple[int, int]] = {}
        for ri in range(len(claim.requests)):
            rd = _chosen(self.req, ci, ri)
            rng = class_ranges.get(rd.cls.name)
            if rng is not None:
                for i in range(*rng):
                    out[i]["requests"].append(rd.name)
                continue
            first = len(out)
            for cfg in rd.cls.config:
                out.append({"source": "FromClass", "requests": [rd.name], **{k: v for k, v in cfg.items() if k != "requests"}})
            class_ranges[rd.cls.name] = (first, len(out))
        for cfg in claim.config:
            reqs = list(cfg.get("requests") or [])
            body = {k: v for k, v in cfg.items() if k != "requests"}
            if not reqs:
                out.append({"source": "FromClaim", **body})
                continue
            for ri, req in enumerate(claim.requests):
                if req.name in reqs:
                    out.append({"source": "FromClaim", "requests": reqs, **body})
                    continue
                rd = _chosen(self.req, ci, ri)
                if rd.parent is not None and rd.name in reqs:
                    out.append({"source": "FromClaim", "requests": reqs, **body})
        # key order as the API prints it
        return tuple({k: e[k] for k in ("source", "requests", "opaque") if k in e} | e for e in out)

    # ---- counted work and the Filter timeout
    def add_counted(self, calls: int, visits: int, checks: int) -> None:
        """Add counted work of a subtree an acceleration decided; stop at the deadline inside it, as Go would."""
        st = self.stats
        b = self.budget
        if b is not None:
            before = b.seconds(st)
            cost = b.per_call_s * calls + b.per_visit_s * visits + b.per_check_s * checks
            if before + cost > b.timeout_s:
                f = max(0.0, (b.timeout_s - before) / cost)
                st.calls += int(calls * f)
                st.visits += int(visits * f)
                st.checks += int(checks * f)
                raise FilterTimeout(b.seconds(st))
        st.calls += calls
        st.visits += visits
        st.checks += checks

    def check_budget(self) -> None:
        assert self.budget is not None
        secs = self.budget.seconds(self.stats)
        if secs > self.budget.timeout_s:
            raise FilterTimeout(secs)
        self.next_budget_check = self.stats.calls + 32


def _chosen(req: Mapping[RequestKey, RequestData], ci: int, ri: int) -> RequestData:
    """The request, or for ``firstAvailable`` the subrequest the search chose."""
    rd = req[(ci, ri, 0)]
    if rd.parent is not None:
        return req[(ci, ri, rd.selected_sub)]
    return rd
