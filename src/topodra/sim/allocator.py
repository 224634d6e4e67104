"""The structured DRA allocator of Kubernetes 1.36 (the "incubating" variant), in Python.

``Allocator(slices, classes, state).allocate(node, claims)`` returns one
``ClaimAllocation`` per claim, ``None`` when the node has no solution, or
raises ``AllocationError`` (unknown class, CEL error, more than 32 devices,
"All" over an incomplete pool...). It searches exactly as kube-scheduler
does: depth-first over claims, requests and device slots; devices in pool,
slice and list order; combinations, not permutations, inside a request;
``firstAvailable`` subrequests in order; exact rollback; the 32-result
early-prune rule. The first solution wins, so the result is the scheduler's.

What makes it faster without changing the answer:

- selector results are cached across calls per (expression, device content),
  so identical devices on many nodes are evaluated once;
- a subtree that cannot complete the current request (fewer acceptable
  devices left than slots to fill, given the constraint values already
  fixed) is decided by counting instead of searching. The counting also
  yields what the scheduler's own search would have done in that subtree
  (calls, devices visited, allocation checks), so ``SearchStats`` always
  describes kube-scheduler's work, not ours;
- where counting does not apply, a mask scan, a memo of failing subtrees and,
  for the last request, a dynamic program over (slot, position, constraint and
  counter state) do the same work in fewer steps, with the same counts.

Mirrored upstream details (kept on purpose so results match): counters
charged by a device that is then rejected by a taint, a constraint or its
capacity stay charged for the rest of that call; ``distinctAttribute``
remembers one value per request name.
"""

from __future__ import annotations

import bisect
import functools
import math
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from topodra.dra.allocation import AllocatedResult, AllocationFormatError, parse_allocation
from topodra.quantity import Quantity
from topodra.sim.cel import CelCompileError, CelError, CelRuntimeError, compile_selector
from topodra.sim.objects import (
    MAX_RESULTS,
    Capacity,
    Claim,
    Constraint,
    Device,
    DeviceCache,
    DeviceClass,
    DeviceID,
    Node,
    ObjectError,
    RequestSpec,
    Slice,
    parse_claim,
    parse_class,
    parse_node,
    parse_slice,
)
from topodra.sim.resourcepools import Pool, _device_matches, gather_pools

__all__ = [
    "ObjectError",
    "AllocationError",
    "SearchAborted",
    "TIMEOUT_MESSAGE",
    "FilterTimeout",
    "FilterBudget",
    "AllocatedState",
    "DeviceResult",
    "ClaimAllocation",
    "SearchStats",
    "Allocator",
    "write_allocation",
    "share_id",
    "allocation_of_claim",
    "hopeless_group_work",
    "reads_only_driver",
]

_ZERO = Fraction(0)
_SHARE_NS = uuid.UUID("6f1d3c1e-8a7b-4e55-9a43-7d0c2b1e5f10")


class AllocationError(Exception):
    """The scheduler would report an error (not "unschedulable") for this node."""


class SearchAborted(AllocationError):
    """Our own search exceeded its effort cap before the scheduler's Filter timeout was reached."""


#: kube-scheduler's words when Filter abandons the allocator at its timeout (it prefixes "node NAME: ").
TIMEOUT_MESSAGE = "timed out trying to allocate devices"


class FilterTimeout(AllocationError):
    """kube-scheduler would abandon this Filter call at its timeout (``DRASchedulerFilterTimeout``)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(TIMEOUT_MESSAGE)
        self.seconds = seconds


@dataclass(frozen=True, slots=True)
class FilterBudget:
    """The Filter timeout in counted work: the cost model's price of each step and the limit.

    The search stops, as kube-scheduler's does at its deadline, as soon as the
    work it has counted so far is priced above ``timeout_s``.
    """

    timeout_s: float
    per_node_s: float
    per_device_s: float
    per_call_s: float
    per_visit_s: float
    per_check_s: float
    per_cel_eval_s: float

    def seconds(self, s: SearchStats) -> float:
        return (
            self.per_node_s
            + self.per_device_s * s.devices
            + self.per_call_s * s.calls
            + self.per_visit_s * s.visits
            + self.per_check_s * s.checks
            + self.per_cel_eval_s * s.cel_evals
        )


class _MaxSizeExceeded(Exception):
    pass


#: dead states kept per Allocate call before the memo starts over (bounds its memory)
_DEAD_STATES_MAX = 500_000


# --- results and state ------------------------------------------------------------------------


#: One entry of ``status.allocation.devices.results``: the same record the DRA driver parses.
DeviceResult = AllocatedResult


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    """What the scheduler writes to ``status.allocation`` of one claim."""

    claim: str  # namespace/name
    results: tuple[DeviceResult, ...]
    config: tuple[Mapping[str, Any], ...] = ()
    node_selector: Mapping[str, Any] | None = None

    def to_api(self) -> dict[str, Any]:
        devices: dict[str, Any] = {"results": [r.to_api() for r in self.results]}
        if self.config:
            devices["config"] = [dict(c) for c in self.config]
        out: dict[str, Any] = {"devices": devices}
        if self.node_selector is not None:
            out["nodeSelector"] = self.node_selector
        return out


def write_allocation(
    claim: Mapping[str, Any], allocation: ClaimAllocation, pod: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A copy of ``claim`` with ``status.allocation`` set as the scheduler's PreBind writes it.

    With ``pod`` the pod is appended to ``status.reservedFor`` and the
    ``resource.kubernetes.io/delete-protection`` finalizer is added.
    """
    out = dict(claim)
    meta = dict(out.get("metadata") or {})
    status = dict(out.get("status") or {})
    status["allocation"] = allocation.to_api()
    if pod is not None:
        fin = list(meta.get("finalizers") or [])
        if "resource.kubernetes.io/delete-protection" not in fin:
            fin.append("resource.kubernetes.io/delete-protection")
        meta["finalizers"] = fin
        pmeta = pod.get("metadata") or {}
        ref = {"resource": "pods", "name": pmeta.get("name", ""), "uid": pmeta.get("uid", "")}
        reserved = [r for r in status.get("reservedFor") or [] if r.get("uid") != ref["uid"]]
        status["reservedFor"] = [*reserved, ref]
    out["metadata"] = meta
    out["status"] = status
    return out


def share_id(claim_uid: str, request: str, device: DeviceID, index: int) -> str:
    """Deterministic stand-in for the scheduler's random shareID UID."""
    return str(uuid.uuid5(_SHARE_NS, f"{claim_uid}/{request}/{'/'.join(device)}/{index}"))


class AllocatedState:
    """Devices in use in the cluster: exclusive ones, shared allocations and consumed capacity."""

    def __init__(self) -> None:
        self.devices: set[DeviceID] = set()
        self.shared: dict[DeviceID, set[str]] = {}
        self.capacity: dict[DeviceID, dict[str, Fraction]] = {}
        self.version = 0  # bumped on every change (cheap cache key)

    def add(self, allocation: ClaimAllocation) -> None:
        for r in allocation.results:
            if r.admin_access:
                continue
            if r.share_id is not None:
                self.shared.setdefault(r.id, set()).add(r.share_id)
                agg = self.capacity.setdefault(r.id, {})
                for k, q in (r.consumed_capacity or {}).items():
                    agg[k] = agg.get(k, Fraction(0)) + q.amount
            else:
                self.devices.add(r.id)
        self.version += 1

    def remove(self, allocation: ClaimAllocation) -> None:
        for r in allocation.results:
            if r.admin_access:
                continue
            if r.share_id is not None:
                shares = self.shared.get(r.id, set())
                shares.discard(r.share_id)
                agg = self.capacity.get(r.id)
                if agg is not None:
                    for k, q in (r.consumed_capacity or {}).items():
                        agg[k] = agg.get(k, Fraction(0)) - q.amount
                if not shares:
                    self.shared.pop(r.id, None)
                    self.capacity.pop(r.id, None)
            else:
                self.devices.discard(r.id)
        self.version += 1

    def is_allocated(self, device_id: DeviceID) -> bool:
        return device_id in self.devices or device_id in self.capacity or device_id in self.shared

    @classmethod
    def from_claims(cls, claims: Iterable[Mapping[str, Any]]) -> AllocatedState:
        """The state implied by the ``status.allocation`` of existing claims."""
        st = cls()
        for c in claims:
            a = allocation_of_claim(c)
            if a is not None:
                st.add(a)
        return st


def allocation_of_claim(claim: Mapping[str, Any]) -> ClaimAllocation | None:
    """The ``status.allocation`` of a claim dict as a ``ClaimAllocation`` (None if unallocated)."""
    meta = claim.get("metadata") or {}
    try:
        allocation = parse_allocation(claim)
    except AllocationFormatError as e:
        raise ObjectError(f"ResourceClaim {meta.get('name')}: {e}") from None
    if allocation is None:
        return None
    ns, name = meta.get("namespace") or "", meta.get("name") or ""
    return ClaimAllocation(f"{ns}/{name}" if ns else str(name), allocation.results, allocation.config, allocation.node_selector)


@dataclass(slots=True)
class SearchStats:
    """What kube-scheduler's own search does for one Allocate call (plus our own effort)."""

    calls: int = 0  # allocateOne invocations
    visits: int = 0  # candidate devices looked at in the search loops
    checks: int = 0  # allocateDevice attempts (availability, counters, taints, constraints)
    cel_evals: int = 0  # selector evaluations (memoised per device and request inside one call)
    devices: int = 0  # devices in usable pools for the node
    pruned: int = 0  # subtrees we decided by counting
    our_calls: int = 0  # allocateOne-equivalents we actually executed
    engine_evals: int = 0  # CEL evaluations we actually ran (cross-call cache misses)

    def add(self, o: SearchStats) -> None:
        self.calls += o.calls
        self.visits += o.visits
        self.checks += o.checks
        self.cel_evals += o.cel_evals
        self.devices += o.devices
        self.pruned += o.pruned
        self.our_calls += o.our_calls
        self.engine_evals += o.engine_evals


# --- the allocator ------------------------------------------------------------------------------


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
    ) -> None:
        """``budget``: the Filter timeout in counted work (``"default"``: the default cost
        model's; ``None``: no timeout). ``prune`` (decide hopeless subtrees by counting) and
        ``fast`` (memoised failing subtrees) change only our own effort; off,
        the search is the plain reference. ``max_calls`` caps our own effort (``SearchAborted``).
        ``fast_after``: executed calls of one Allocate before the mask scan and the dead-state
        memo start (a first-fit search ends sooner and skips their set-up; 16 rather than 64 saves
        a third of the walked calls on small multi-request searches). ``solve_after``: the
        same for solving the last request by dynamic programming (default 16, at most
        ``fast_after``). ``solve_on_backtrack``: also solve it as soon as one of its devices under
        a ``distinctAttribute`` is taken back (the search is past first fit; counting cannot
        decide such subtrees).
        """
        cache: DeviceCache = {}
        self.slices = [s if isinstance(s, Slice) else parse_slice(s, cache) for s in slices]
        self.classes = {c.name: c for c in (c if isinstance(c, DeviceClass) else parse_class(c) for c in classes)}
        self.state = state if state is not None else AllocatedState()
        self.prune = prune
        self.fast = fast
        self.fast_after = fast_after
        self.solve_after = min(fast_after, 16 if solve_after is None else solve_after)
        self.solve_on_backtrack = solve_on_backtrack
        self.max_calls = max_calls
        if budget == "default":
            from topodra.sim.costmodel import DEFAULT_COSTS  # costmodel imports this module

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

    # -- public entry points
    def pools_for(self, node: Node) -> list[Pool]:
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
        n = node if isinstance(node, Node) else parse_node(node)
        parsed = [c if isinstance(c, Claim) else parse_claim(c) for c in claims]
        search = _Search(self, n, parsed)
        try:
            result = search.run()
        finally:
            self.last_stats = search.stats
        return result, search.stats

    # -- selector evaluation with the cross-call cache
    def _eval(self, expression: str, device: Device, stats: SearchStats) -> bool:
        key = (expression, device.driver if reads_only_driver(expression) else device.fingerprint)
        hit = self._sel_cache.get(key)
        if hit is None:
            stats.engine_evals += 1
            try:
                hit = compile_selector(expression).matches(device.cel())
            except CelError as e:
                hit = e
            if len(self._sel_cache) > 200_000:
                self._sel_cache.clear()
            self._sel_cache[key] = hit
        if isinstance(hit, CelError):
            raise hit
        return hit


# --- selectors that read only the driver ------------------------------------------------------

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


# --- one Allocate call --------------------------------------------------------------------------


@dataclass(slots=True)
class _Cand:
    """A candidate device of a search: where it is (slice, pool) and whether its capacity always fits."""

    pos: int
    id: DeviceID
    device: Device
    slice: Slice
    pool: Pool
    simple_cap: bool = False  # exclusive, no request policy: consumes exactly its capacity, always fits


@dataclass(slots=True)
class _ReqData:
    """Per-request state of one claim's search: its spec, class, device count and candidates."""

    spec: RequestSpec
    parent: str | None  # parent request name for a subrequest
    cls: DeviceClass
    num_devices: int
    all_devices: list[_Cand] | None = None
    selected_sub: int = 0

    @property
    def name(self) -> str:
        return f"{self.parent}/{self.spec.name}" if self.parent else self.spec.name

    @property
    def base(self) -> str:
        return self.parent or self.spec.name

    @property
    def sub(self) -> str:
        return self.spec.name if self.parent else ""


@dataclass(slots=True)
class _Result:
    """One device picked for a request, with its share id and consumed capacity."""

    rd: _ReqData
    cand: _Cand
    share_id: str | None
    consumed: dict[str, Quantity] | None


def _typed(value: Any) -> tuple[str, Any]:
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, list):
        return ("list", None)
    return ("version", str(value))


def _lookup(device: Device, driver: str, name: str) -> tuple[str, Any] | None:
    if name in device.attributes:
        return _typed(device.attributes[name])
    i = name.find("/")
    if i < 0 or name[:i] != driver:
        return None
    bare = name[i + 1 :]
    if bare in device.attributes:
        return _typed(device.attributes[bare])
    return None


class _ConstraintState:
    __slots__ = ("distinct", "name", "num", "requests", "stored", "values")

    def __init__(self, c: Constraint) -> None:
        self.requests = c.requests
        self.distinct = c.distinct_attribute is not None
        self.name = (c.distinct_attribute or c.match_attribute) or ""
        self.num = 0
        self.values: dict[str, tuple[str, Any]] = {}  # distinct: per request name
        self.stored: tuple[str, Any] | None = None  # match: the fixed value

    def applies(self, base: str, sub: str) -> bool:
        if not self.requests:
            return True
        if not sub:
            return base in self.requests
        return base in self.requests or f"{base}/{sub}" in self.requests

    def accepts(self, value: tuple[str, Any] | None) -> bool:
        """Would ``add`` succeed (no mutation)?"""
        if value is None:
            return False
        if self.num == 0:
            return True
        if self.distinct:
            if value[0] == "list":  # unknown to the scalar comparison: rejected by any stored value
                return not self.values
            return all(not (v[0] == value[0] and v[1] == value[1]) for v in self.values.values())
        assert self.stored is not None
        return value[0] != "list" and self.stored[0] == value[0] and self.stored[1] == value[1]

    def add(self, base: str, value: tuple[str, Any]) -> None:
        if self.distinct:
            self.values[base] = value
        elif self.num == 0:
            self.stored = value
        self.num += 1

    def remove(self, base: str) -> None:
        if self.distinct:
            self.values.pop(base, None)
        self.num -= 1


class _Search:
    def __init__(self, alloc: Allocator, node: Node, claims: list[Claim]) -> None:
        self.a = alloc
        self.node = node
        self.claims = claims
        self.stats = SearchStats()
        self.pools = alloc.pools_for(node)
        self.cands: list[_Cand] = []
        for pool in self.pools:
            if not pool.usable:
                continue
            for s in pool.slices:
                for d in s.devices:
                    simple = not d.allow_multiple and not any(c.policy for c in d.capacity.values())
                    self.cands.append(_Cand(len(self.cands), (pool.driver, pool.name, d.name), d, s, pool, simple))
        self.D = len(self.cands)
        self.stats.devices = self.D
        self.has_counters = any(c.device.consumes_counters for c in self.cands)
        self.state = alloc.state
        self.req: dict[tuple[int, int, int], _ReqData] = {}
        self.memo: dict[tuple[int, int, int, int], tuple[bool, int]] = {}
        self.allocating: dict[DeviceID, set[int]] = {}
        self.allocating_cap: dict[DeviceID, dict[str, Fraction]] = {}
        self.available: dict[tuple[str, str], dict[str, dict[str, Fraction]]] = {}
        self.consumed: dict[tuple[str, str], dict[str, dict[str, Fraction]]] = {}
        self.results: list[list[_Result]] = [[] for _ in claims]
        self.constraints: list[list[_ConstraintState]] = []
        self.budget = alloc.budget
        self.cvals: dict[tuple[int, int], list[tuple[str, Any] | None]] = {}
        self.next_budget_check = 0
        self.completions = 0  # requests completed (a subtree that completes none is memoised more widely)
        self.leaks = 0  # counters left charged by a rejected device (upstream quirk; blocks memoising)
        self.cons_leaks = 0  # constraint values left by a capacity rejection (turns the memo off)
        self.has_multi = any(c.device.allow_multiple for c in self.cands)
        #: devices being allocated, per claim, as bit masks by position (mirrors ``allocating``)
        self.amask = [0] * len(claims)
        #: dead states: (where, constraint state, in-use state) -> the scheduler's work of that failing subtree
        self.dead: dict[Any, tuple[int, int, int, Any]] = {}
        self.memo_on = [bool(c.constraints) for c in claims]
        # bit masks by device position for the mask scan (``_scan_masks``)
        self.used_mask = -1  # set up on first use (``_masks``): first-fit searches never need them
        self.special_mask = 0
        self.sel_masks: dict[tuple[int, int, int], tuple[int, int]] = {}
        self.errs: dict[int, int] = {}  # per claim: positions whose selectors fail to evaluate (so far)
        self.counted: dict[tuple[int, int, int], int] = {}
        self.vmasks: dict[tuple[int, int], tuple[int, int, dict[tuple[str, Any], int]]] = {}
        self.all_mask = (1 << self.D) - 1
        self.canon: list[list[int | None]] = []
        #: (request key, start, weight) of every mask scan inside the canonical subtrees being walked
        self.scan_log: list[tuple[tuple[int, int, int], int, int]] = []
        #: per request: the constraints ``_solve_last`` tracks (None: it does not apply)
        self.last_ok: dict[tuple[int, int, int], list[int] | None] = {}
        #: per context: the last request's dynamic program with its memo (``_solver``)
        self.solvers: dict[Any, Any] = {}
        #: the solver has taken over a scan: later scans of the last request start in it too
        self.solving = False
        #: a device was taken back under a distinctAttribute: the mask scan and memo start (``_backtracking``)
        self.backtracked = False
        self.distinct_req: dict[tuple[int, int, int], bool] = {}
        self.dead_masks: dict[tuple[int, int, frozenset[Any], int], int] = {}
        self.cindex: tuple[list[list[tuple[int, int]]], list[int | None], list[tuple[tuple[str, str], str, str]], int] | None = None

    # ---- driver
    def run(self) -> list[ClaimAllocation] | None:
        for ci, claim in enumerate(self.claims):
            min_devices = 0
            for ri, req in enumerate(claim.requests):
                if req.first_available:
                    smallest = None
                    for si, sub in enumerate(req.first_available):
                        rd = self._validate(ci, ri, si, sub, req.name)
                        self.req[(ci, ri, si)] = rd
                        smallest = rd.num_devices if smallest is None else min(smallest, rd.num_devices)
                    min_devices += smallest or 0
                else:
                    assert req.exactly is not None
                    rd = self._validate(ci, ri, 0, req.exactly, None)
                    self.req[(ci, ri, 0)] = rd
                    min_devices += rd.num_devices
            if min_devices > MAX_RESULTS:
                raise AllocationError(
                    f"claim {claim.key}: number of requested devices {min_devices} exceeds the claim limit of {MAX_RESULTS}"
                )
            self.constraints.append([_ConstraintState(c) for c in claim.constraints])
            self.memo_on[ci] = self.memo_on[ci] or self.has_counters
        self.canon = self._canonical_constraints()
        try:
            done = self._one(0, 0, 0, 0, False, 0)
        except _MaxSizeExceeded:
            done = False
        if not done:
            if any(p.invalid for p in self.pools):
                raise AllocationError("invalid resource pools were encountered (failed allocation on node)")
            return None
        return [self._build(ci) for ci in range(len(self.claims))]

    def _validate(self, ci: int, ri: int, si: int, spec: RequestSpec, parent: str | None) -> _ReqData:
        claim = self.claims[ci]
        cls = self.a.classes.get(spec.class_name)
        if cls is None:
            raise AllocationError(
                f"claim {claim.key}, request {spec.name}: could not retrieve device class {spec.class_name}: "
                f'deviceclass.resource.k8s.io "{spec.class_name}" not found'
            )
        rd = _ReqData(spec, parent, cls, spec.count)
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
            if self._selectable(cand, rd, (ci, ri, si), True) and self._capacity_fits(cand, spec):
                rd.all_devices.append(cand)
        rd.num_devices = len(rd.all_devices)
        return rd

    # ---- checks
    def _selectable(self, cand: _Cand, rd: _ReqData, rkey: tuple[int, int, int], count: bool) -> bool:
        key = (cand.pos, *rkey)
        hit = self.memo.get(key)
        if hit is None:
            hit = self._match(cand, rd, rkey[0])
            self.memo[key] = hit
        if count and hit[1]:
            # the scheduler's own per-call memo: evaluations are counted the first time only
            self.stats.cel_evals += hit[1]
            self.memo[key] = (hit[0], 0)
        return hit[0]

    def _match(self, cand: _Cand, rd: _ReqData, ci: int) -> tuple[bool, int]:
        d = cand.device
        evals = 0
        for owner, exprs in ((rd.cls, rd.cls.selectors), (None, rd.spec.selectors)):
            for i, expr in enumerate(exprs):
                evals += 1
                try:
                    ok = self.a._eval(expr, d, self.stats)
                except CelCompileError as e:
                    who = f"class {owner.name}" if owner else f"claim {self.claims[ci].key}"
                    raise AllocationError(f"{who}: selector #{i}: CEL compile error: {e}") from None
                except CelRuntimeError as e:
                    who = f"class {owner.name}" if owner else f"claim {self.claims[ci].key}"
                    raise AllocationError(
                        f"{who}: selector #{i} on device {'/'.join(cand.id)}: CEL runtime error: {e}"
                    ) from None
                if not ok:
                    return (False, evals)
        if cand.slice.per_device_node_selection and not _device_matches(
            self.node, d.node_name, d.all_nodes, d.node_selector
        ):
            return (False, evals)
        return (True, evals)

    def _in_use(self, cand: _Cand) -> bool:
        return cand.id in self.state.devices or bool(self.allocating.get(cand.id))

    def _free(self, cand: _Cand, spec: RequestSpec, ci: int) -> bool:
        if spec.admin_access:
            return ci not in self.allocating.get(cand.id, ())
        return not self._in_use(cand)

    def _capacity_fits(self, cand: _Cand, spec: RequestSpec) -> bool:
        d = cand.device
        reqs = spec.capacity_requests
        if not reqs and not d.allow_multiple and not any(c.policy for c in d.capacity.values()):
            return True  # consumed == value for every capacity: always fits (fast path)
        if reqs:
            for name in reqs:
                if name not in d.capacity:
                    return False
        allocated = self.state.capacity.get(cand.id, {})
        allocating = self.allocating_cap.get(cand.id, {})
        for name, cap in d.capacity.items():
            consumed = _consumed(reqs.get(name) if reqs else None, cap)
            if _violates(consumed, cap):
                return False
            total = allocated.get(name, Fraction(0)) + consumed.amount + allocating.get(name, Fraction(0))
            if total > cap.value.amount:
                return False
        return True

    def _taint_blocks(self, d: Device, spec: RequestSpec) -> bool:
        for t in d.taints:
            if t.effect in ("NoSchedule", "NoExecute") and not any(tol.tolerates(t) for tol in spec.tolerations):
                return True
        return False

    # ---- counters (partitionable devices)
    def _available(self, pool: Pool) -> dict[str, dict[str, Fraction]]:
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

    def _charge(self, cand: _Cand) -> bool:
        avail = self._available(cand.pool)
        used = self.consumed.setdefault(cand.pool.key, {})
        for cset, consumption in cand.device.consumes_counters:
            u = used.setdefault(cset, {})
            for cname, q in consumption:
                u[cname] = u.get(cname, _ZERO) + q.amount
        for sname, available in avail.items():
            u = used.get(sname, {})
            for cname, value in available.items():
                if value < u.get(cname, _ZERO):
                    self._uncharge(cand)
                    return False
        return True

    def _uncharge(self, cand: _Cand) -> None:
        used = self.consumed.get(cand.pool.key, {})
        for cset, counters in cand.device.consumes_counters:
            u = used.get(cset, {})
            for cname, q in counters:
                u[cname] = u.get(cname, _ZERO) - q.amount

    # ---- allocateDevice
    def _allocate_device(self, ci: int, rd: _ReqData, cand: _Cand, must: bool) -> bool:
        self.stats.checks += 1
        spec = rd.spec
        d = cand.device
        multi = d.allow_multiple
        if not multi and spec.admin_access and ci in self.allocating.get(cand.id, ()):
            return False
        if not spec.admin_access and self._in_use(cand):
            return False
        skip_counters = multi and (cand.id in self.state.capacity or cand.id in self.allocating_cap)
        charged = not skip_counters and bool(d.consumes_counters)
        if charged and not self._charge(cand):
            return False
        if self._taint_blocks(d, spec):
            self.leaks += charged
            return False
        cons = self.constraints[ci]
        base, sub = rd.base, rd.sub
        values: list[tuple[str, Any]] = []
        for i, c in enumerate(cons):
            if not c.applies(base, sub):
                values.append(("", None))
                continue
            v = _lookup(d, cand.pool.driver, c.name)
            if not c.accepts(v):
                if must:
                    raise AllocationError(
                        f"claim {self.claims[ci].key}, request {spec.name}: cannot add device {'/'.join(cand.id)} because a claim constraint would not be satisfied"
                    )
                for j in range(i):
                    if cons[j].applies(base, sub):
                        cons[j].remove(base)
                self.leaks += charged
                return False
            assert v is not None
            c.add(base, v)
            values.append(v)
        if not multi:
            self.allocating.setdefault(cand.id, set()).add(ci)
            self.amask[ci] |= 1 << cand.pos
        consumed: dict[str, Quantity] | None = None
        share: str | None = None
        if not self._capacity_fits(cand, spec):
            self.leaks += 1
            self.cons_leaks += 1
            return False  # upstream leaves constraints and counters as they are here
        if multi:
            consumed = {
                name: _consumed(spec.capacity_requests.get(name) if spec.capacity_requests else None, cap)
                for name, cap in d.capacity.items()
            }
            n = len(self.results[ci])
            share = share_id(self.claims[ci].uid, rd.name, cand.id, n)
            agg = self.allocating_cap.setdefault(cand.id, {})  # an entry even when empty, as upstream
            for k, q in consumed.items():
                agg[k] = agg.get(k, Fraction(0)) + q.amount
        self.results[ci].append(_Result(rd, cand, share, consumed if consumed else None))
        return True

    def _deallocate(self, ci: int, rd: _ReqData, cand: _Cand) -> None:
        for c in self.constraints[ci]:
            if c.applies(rd.base, rd.sub):
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
            self._uncharge(cand)

    # ---- allocateOne
    def _one(self, ci: int, ri: int, si: int, di: int, in_sub: bool, start: int) -> bool:
        self.stats.calls += 1
        self.stats.our_calls += 1
        if self.stats.our_calls > self.a.max_calls:
            raise SearchAborted(f"search exceeded {self.a.max_calls} steps on node {self.node.name}")
        if self.budget is not None and self.stats.calls >= self.next_budget_check:
            self._check_budget()
        if ci >= len(self.claims):
            return True
        claim = self.claims[ci]
        if ri >= len(claim.requests):
            try:
                return self._one(ci + 1, 0, 0, 0, False, 0)
            except _MaxSizeExceeded:
                return False
        rd = self.req[(ci, ri, si)]
        if not in_sub and rd.parent is not None:
            all_exceeded = True
            sub = 0
            while (ci, ri, sub) in self.req:
                try:
                    ok = self._one(ci, ri, sub, di, True, 0)
                except _MaxSizeExceeded:
                    sub += 1
                    continue
                all_exceeded = False
                if ok:
                    self.req[(ci, ri, 0)].selected_sub = sub
                    return True
                sub += 1
            if all_exceeded:
                raise _MaxSizeExceeded()
            return False
        spec = rd.spec
        if spec.mode == "All" and not rd.all_devices:
            return False
        if di >= rd.num_devices:
            self.completions += 1
            return self._one(ci, ri + 1, 0, 0, False, 0)
        if len(self.results[ci]) + rd.num_devices - di > MAX_RESULTS:
            raise _MaxSizeExceeded()
        rkey = (ci, ri, si)
        if spec.mode == "All":
            assert rd.all_devices is not None
            cand = rd.all_devices[di]
            if not self._allocate_device(ci, rd, cand, True):
                return False
            try:
                done = self._one(ci, ri, si, di + 1, in_sub, 0)
            except _MaxSizeExceeded:
                self._deallocate(ci, rd, cand)
                raise
            if not done:
                self._deallocate(ci, rd, cand)
            return done
        if (
            self.a.fast
            and self.constraints[ci]
            and (self.solving or self.stats.our_calls > self.a.solve_after)
            and self.last_ok.get(rkey, ()) is not None  # known not to apply: skip the call
        ):
            solved = self._solve_last(ci, ri, si, di, in_sub, start, rd, rkey)
            if solved is not None:
                return solved
        memo = (
            self.dead
            if self.a.fast and self.memo_on[ci] and not self.cons_leaks and (self.backtracked or self.stats.our_calls > self.a.fast_after)
            else None
        )
        if memo is None:
            if self.a.prune and self._prune(ci, rd, rkey, start, rd.num_devices - di):
                return False
            return self._scan(ci, ri, si, di, in_sub, start, rd, rkey)
        ckey = self._constraint_key(ci, rd.base)
        where = (ci, ri, si, di, start, in_sub, ckey, *self._use_key(ci))
        cj = self.canon[ci][ri]
        deadfree = 0
        if cj is None:
            masks = tuple(self.amask[: ci + 1])
            # a subtree that completes no request only looks at positions from ``start`` on
            local: Any = (where, tuple(m >> start for m in masks))
            full: Any = (where, masks)
        else:
            self._masks()
            busy = self.used_mask
            for m in self.amask:
                busy |= m
            free = self.all_mask & ~busy
            held = ckey[cj]  # the distinct's (value of this request, values of earlier ones)
            dead = self._dead_mask(ci, cj, held[1] if held is not None else frozenset())
            deadfree = free & dead
            nd = free & ~dead
            local = (where, nd >> start, True)
            full = (where, nd, False)
        hit = memo.get(local)
        if hit is None:
            hit = memo.get(full)
            if hit is not None:
                self.completions += 1  # it completed a request: enclosing subtrees are not local either
        if hit is not None:
            h_calls, h_visits, h_checks, hist = hit
            if hist is not None:
                h_checks += self._dead_checks(hist, deadfree, rd)
                self.scan_log.extend(hist)
            self.stats.calls -= 1  # the hit includes this call
            self.stats.pruned += 1
            self._bulk(h_calls, h_visits, h_checks)
            return False
        st = self.stats
        calls, visits, checks, leaks, completions = st.calls, st.visits, st.checks, self.leaks, self.completions
        mark = len(self.scan_log)
        if self.a.prune and self._prune(ci, rd, rkey, start, rd.num_devices - di):
            done = False
        else:
            done = self._scan(ci, ri, si, di, in_sub, start, rd, rkey)
        if cj is None:
            del self.scan_log[mark:]
            entry: tuple[int, int, int, Any] = (st.calls - calls + 1, st.visits - visits, st.checks - checks, None)
        else:
            agg: dict[tuple[tuple[int, int, int], int], int] = {}
            for rk, s0, w in self.scan_log[mark:]:
                agg[(rk, s0)] = agg.get((rk, s0), 0) + w
            hist = tuple((rk, s0, w) for (rk, s0), w in agg.items())
            del self.scan_log[mark:]
            self.scan_log.extend(hist)
            own = st.checks - checks - self._dead_checks(hist, deadfree, None)
            entry = (st.calls - calls + 1, st.visits - visits, own, hist)
        if not done and self.leaks == leaks:
            if len(memo) >= _DEAD_STATES_MAX:
                memo.clear()
            memo[local if self.completions == completions else full] = entry
        return done

    # ---- the last request, solved by dynamic programming
    def _last_ok(self, ci: int, ri: int, rd: _ReqData, rkey: tuple[int, int, int]) -> list[int] | None:
        """The constraints ``_solve_last`` tracks for this request, or None when it does not apply.

        It applies to the last ``exactly`` request of the last claim (a completed request is a
        solution) under constraints, with no shared capacity, admin access, taints,
        capacity rules or selector errors among its devices, and no enclosing memo that needs
        a record of each scan (``_canonical_constraints``).
        """
        if rkey in self.last_ok:
            return self.last_ok[rkey]
        spec = rd.spec
        out: list[int] | None = None
        if (
            ci == len(self.claims) - 1
            and ri == len(self.claims[ci].requests) - 1
            and rd.parent is None
            and spec.mode == "ExactCount"
            and not spec.admin_access
            and not spec.capacity_requests
            and not self.has_multi
            and all(self.canon[ci][k] is None for k in range(ri))
        ):
            self._masks()
            sel, err = self._sel_mask(rd, rkey)
            if not err and not (sel & self.special_mask):
                out = [j for j, c in enumerate(self.constraints[ci]) if c.applies(rd.base, rd.sub)] or None
        self.last_ok[rkey] = out
        return out

    def _solve_last(self, ci: int, ri: int, si: int, di: int, in_sub: bool, start: int, rd: _ReqData, rkey: tuple[int, int, int]) -> bool | None:
        """Decide the rest of the last request by dynamic programming over (slot, position,
        constraint state) instead of walking it; None when it does not apply (``_last_ok``).

        In the last request the devices in use do not change except by the request itself,
        which only takes devices after ``start``, so a scan's outcome and the scheduler's work
        in it depend only on the slot, the position reached and what the constraints hold:
        for a ``distinctAttribute`` the value this request stored last (upstream forgets it when
        a device is removed or a later constraint rejects one) and the fixed values of earlier
        requests; for a ``matchAttribute`` its value once a device holds it. A failing
        subtree's calls, visits and checks are added in bulk; a success walks only the chosen
        devices for real (and then completes the search as the scheduler does).
        """
        js = self._last_ok(ci, ri, rd, rkey)
        if js is None:
            return None
        cons = self.constraints[ci]
        base = rd.base
        D = self.D
        busy = self.used_mask
        for m in self.amask:
            busy |= m
        free = self.all_mask & ~busy
        sel = self._sel_mask(rd, rkey)[0]
        cidx: list[tuple[tuple[str, str], str, str]] = []
        C0: tuple[int, ...] = ()
        scale = 1
        if self.has_counters:
            _, _, cidx, scale = self._counter_index()
            for pool in self.pools:  # a charge is checked against every counter of its pool
                if not pool.usable or not pool.counter_sets:
                    continue
                used = self.consumed.get(pool.key, {})
                for sname, av in self._available(pool).items():
                    if any(value < used.get(sname, {}).get(cname, 0) for cname, value in av.items()):
                        return None  # already over (other pods): only the plain search checks that
            used_now = [self.consumed.get(pk, {}).get(sn, {}).get(cn, 0) * scale for pk, sn, cn in cidx]
            if any(Fraction(u).denominator != 1 for u in used_now):
                return None  # not a sum of these devices' amounts
            C0 = tuple(int(u) for u in used_now)
        state0 = (*tuple(cons[j].values.get(base) if cons[j].distinct else cons[j].stored if cons[j].num else None for j in js), C0)
        # the solver (and its memo) is kept for the rest of the call per context: the devices free
        # for this request (its own devices taken back: they lie before any position it is asked
        # about) and what earlier requests fixed
        own = 0
        for r in self.results[ci][len(self.results[ci]) - di :]:
            own |= 1 << r.cand.pos
        others = tuple(frozenset(v for k, v in cons[j].values.items() if k != base) if cons[j].distinct else frozenset() for j in js)
        ctx = (rkey, (free & sel) | own, others, tuple(cons[j].num - di for j in js))
        solver = self.solvers.get(ctx)
        if solver is None:
            if len(self.solvers) > 10_000:
                self.solvers.clear()
            solver = self.solvers[ctx] = self._solver(ci, rd, js, ctx[1], others, ctx[3])
        calls, visits, checks, path, exit_c, leaks, reached_all = solver(di, start, state0)
        if leaks:
            self.leaks += 1  # enclosing subtrees must not be remembered (as for the plain search)
        last = D if path is None or reached_all else (path[-1][0] + 1 if path else start)
        span = free & ((1 << last) - 1) & ~((1 << start) - 1)
        counted = self.counted.get(rkey, 0)
        new = span & ~counted
        while new:  # selectors reached for the first time in this call
            low = new & -new
            self._selectable(self.cands[low.bit_length() - 1], rd, rkey, True)
            new ^= low
        self.counted[rkey] = counted | span
        self.stats.calls -= 1  # this call was counted on entry
        self.stats.pruned += 1
        if path is None:
            self._set_counters(cidx, exit_c, scale)
            self._bulk(calls, visits, checks)
            return False
        self._bulk(calls, visits, checks - len(path))  # the chosen devices are checked for real below
        for p, S in path:
            # the state rejected devices left behind (a distinct that accepted one and then saw a
            # later constraint reject it forgot this request's value)
            for i, j in enumerate(js):
                if cons[j].distinct:
                    if S[i] is None:
                        cons[j].values.pop(base, None)
                    else:
                        cons[j].values[base] = S[i]
            self._set_counters(cidx, S[-1], scale)  # including charges rejected devices left
            ok = self._allocate_device(ci, rd, self.cands[p], False)
            assert ok, "the solved path must be accepted"
        done = self._one(ci, ri, si, di + len(path), in_sub, path[-1][0] + 1)
        assert done
        return True

    def _solver(
        self, ci: int, rd: _ReqData, js: list[int], cand: int, others: tuple[frozenset[Any], ...], mnd: tuple[int, ...]
    ) -> Callable[[int, int, tuple[Any, ...]], tuple[int, int, int, list[tuple[int, tuple[Any, ...]]] | None, tuple[int, ...], int, bool]]:
        """The dynamic program of ``_solve_last`` for one context (``cand``: the positions free and
        selected for the request; ``others``: per tracked distinct, the values earlier requests
        hold; ``mnd``: per tracked constraint, its holders minus the request's slot), with its memo.
        Returns ``solve(slot, start, state)``: the scheduler's calls, visits and checks, the devices
        chosen with the state each was accepted in (None: it fails), the counters left charged, how
        many rejections leaked a charge, and whether the scan reached the last device."""
        cons = self.constraints[ci]
        N, D = rd.num_devices, self.D
        nj = len(js)
        vals = [self._values(ci, j) for j in js]
        kinds = [cons[j].distinct for j in js]
        match_is = [i for i in range(nj) if not kinds[i]]
        nones = (None,) * nj
        counters_on = self.has_counters
        cons_of: list[list[tuple[int, int]]] = []
        avail: list[int | None] = []
        if counters_on:
            cons_of, avail, _, _ = self._counter_index()
        # a constraint's rejection of a device with counters leaves them charged (a side effect)
        single = nj == 1 and not counters_on
        acc_cache: dict[tuple[Any, ...], int] = {}
        vm = [self._value_masks(ci, j) for j in js]
        vals0, kind0 = vals[0], kinds[0]

        def acc_mask(S: tuple[Any, ...]) -> int:
            """Positions the single constraint accepts in state ``S`` (its rejections have no side effect)."""
            got = acc_cache.get(S)
            if got is None:
                has, lists, by = vm[0]
                u = S[0]
                if kinds[0]:
                    got = has
                    if u is not None or others[0]:
                        got &= ~lists
                        for v in ({u} if u is not None else set()) | others[0]:
                            got &= ~by.get(v, 0)
                else:
                    got = has if u is None else (0 if u[0] == "list" else by.get(u, 0))
                acc_cache[S] = got
            return got

        def try_add(S: tuple[Any, ...], p: int) -> tuple[bool, tuple[Any, ...], bool]:
            """``_allocate_device`` on state ``S`` (counters, then the constraints): accepted and the
            state for the next slot, or rejected and the state left behind (earlier distincts forget
            the value; counters a constraint's rejection leaves charged, the third item)."""
            new = list(S)
            C = S[nj]
            charged = False
            if counters_on and cons_of[p]:
                c = list(C)
                for i, a in cons_of[p]:
                    c[i] += a
                for i, _ in cons_of[p]:
                    cap = avail[i]
                    if cap is not None and cap < c[i]:
                        return False, S, False
                new[nj] = C = tuple(c)
                charged = True
            for i in range(nj):
                v = vals[i][p]
                u = S[i]
                if kinds[i]:
                    ok = v is not None and (
                        (u is None and not others[i]) if v[0] == "list" else (v != u and v not in others[i])
                    )
                else:
                    ok = v is not None and (u is None or (v[0] != "list" and v == u))
                if not ok:
                    return False, tuple(None if kinds[k] else S[k] for k in range(i)) + S[i:nj] + (C,), charged
                if kinds[i] or u is None:
                    new[i] = v
            return True, tuple(new), False

        def forget(S: tuple[Any, ...], C: tuple[int, ...]) -> tuple[Any, ...]:
            """The state after removing a device: distincts forget the value, matches keep theirs."""
            if not match_is:
                return (*nones, C)
            return (*tuple(None if kinds[i] else S[i] for i in range(nj)), C)

        def uncharge(C: tuple[int, ...], p: int) -> tuple[int, ...]:
            if not cons_of or not cons_of[p]:
                return C
            c = list(C)
            for i, a in cons_of[p]:
                c[i] -= a
            return tuple(c)

        # memo: (slot, position, state) -> (calls, visits, checks, counters left, leaks) of the rest
        # of a failing scan
        memo: dict[tuple[int, int, tuple[Any, ...]], tuple[int, int, int, Any, int]] = {}
        reached = [False]

        def call(
            d: int, s: int, S: tuple[Any, ...]
        ) -> tuple[int, int, int, list[tuple[int, tuple[Any, ...]]] | None, tuple[int, ...], int]:
            """allocateOne at slot ``d`` from ``s`` (before completion): its work, the devices chosen
            from here on with the state each was accepted in (None: it fails), the counters it
            leaves charged and how many rejections leaked a charge."""
            if d >= N:
                return 0, 0, 0, [], S[nj], 0
            # the match state of this slot: no holder yet means nothing fixed
            for i in match_is:
                if mnd[i] + d <= 0 and S[i] is not None:
                    S = (*S[:i], None, *S[i + 1 :])
            calls, visits, checks, leaks = 1, 0, 0, 0
            trail: list[tuple[tuple[int, int, tuple[Any, ...]], int, int, int, int]] = []
            exit_c: tuple[int, ...] = S[nj]
            pos = s
            path: list[tuple[int, tuple[Any, ...]]] | None = None
            while True:
                key = (d, pos, S)
                hit = memo.get(key)
                if hit is not None:
                    reached[0] = True  # only failing scans are remembered
                    calls += hit[0]
                    visits += hit[1]
                    checks += hit[2]
                    exit_c = hit[3]
                    leaks += hit[4]
                    break
                trail.append((key, calls, visits, checks, leaks))
                rest = cand & ~((1 << pos) - 1)
                nxt = rest & acc_mask(S) if single else rest
                if not nxt:
                    visits += D - pos
                    checks += rest.bit_count()
                    reached[0] = True
                    exit_c = S[nj]
                    break
                p = (nxt & -nxt).bit_length() - 1
                visits += p + 1 - pos
                checks += (rest & ((2 << p) - 1)).bit_count()
                if single:
                    # accepted (``acc_mask``): a distinct stores the value, a match keeps a fixed one
                    S2 = (vals0[p], S[1]) if kind0 or S[0] is None else S
                else:
                    ok, S2, leaked = try_add(S, p)
                    if not ok:
                        S = S2
                        leaks += leaked
                        pos = p + 1
                        continue
                c2, v2, k2, sub, c_after, l2 = call(d + 1, p + 1, S2)
                calls += c2
                visits += v2
                checks += k2
                leaks += l2
                if sub is not None:
                    path = [(p, S), *sub]
                    exit_c = c_after
                    break
                # removed again: distincts forget the value, its counters are given back
                S = forget(S, uncharge(c_after, p))
                pos = p + 1
            if path is None:
                for key, c0, v0, k0, l0 in trail:
                    memo[key] = (calls - c0, visits - v0, checks - k0, exit_c, leaks - l0)
            return calls, visits, checks, path, exit_c, leaks

        def solve(
            di: int, start: int, state0: tuple[Any, ...]
        ) -> tuple[int, int, int, list[tuple[int, tuple[Any, ...]]] | None, tuple[int, ...], int, bool]:
            reached[0] = False
            return (*call(di, start, state0), reached[0])

        return solve

    def _backtracking(self, ci: int, rd: _ReqData, rkey: tuple[int, int, int]) -> bool:
        """A device of this request was taken back: whether the search is past first fit for the
        fast paths (``solve_on_backtrack``): a ``distinctAttribute`` applies to the request (counting
        decides no subtree under one). If so the mask scan and the memo start now, and the rest of
        this scan goes to the solver (when it applies)."""
        if not self.a.solve_on_backtrack:
            return False
        got = self._distinct_applies(ci, rd, rkey)
        if got:
            self.backtracked = True
        return got

    def _distinct_applies(self, ci: int, rd: _ReqData, rkey: tuple[int, int, int]) -> bool:
        """Whether a ``distinctAttribute`` of the claim applies to this request (fixed per request)."""
        got = self.distinct_req.get(rkey)
        if got is None:
            got = self.distinct_req[rkey] = any(c.distinct and c.applies(rd.base, rd.sub) for c in self.constraints[ci])
        return got

    def _counter_index(self) -> tuple[list[list[tuple[int, int]]], list[int | None], list[tuple[tuple[str, str], str, str]], int]:
        """Counters as a flat vector of whole numbers for ``_solve_last`` (amounts times ``scale``,
        the common denominator of the devices' amounts: cheap to hash): per device position its
        consumption as (index, amount), per index the amount available (None: not declared,
        never checked), what each index is (pool, counter set, counter), and ``scale``."""
        if self.cindex is None:
            where: dict[tuple[tuple[str, str], str, str], int] = {}
            avail_f: list[Fraction | None] = []
            rows: list[list[tuple[int, Fraction]]] = []
            for c in self.cands:
                row: list[tuple[int, Fraction]] = []
                for cset, counters in c.device.consumes_counters:
                    for cname, q in counters:
                        k = (c.pool.key, cset, cname)
                        i = where.get(k)
                        if i is None:
                            i = where[k] = len(avail_f)
                            avail_f.append(self._available(c.pool).get(cset, {}).get(cname))
                        row.append((i, q.amount))
                rows.append(row)
            scale = math.lcm(1, *(a.denominator for row in rows for _, a in row))
            cons_of = [[(i, int(a * scale)) for i, a in row] for row in rows]
            # used <= available  <=>  used * scale <= floor(available * scale), used * scale being whole
            avail = [None if a is None else math.floor(a * scale) for a in avail_f]
            self.cindex = (cons_of, avail, list(where), scale)
        return self.cindex

    def _set_counters(self, cidx: list[tuple[tuple[str, str], str, str]], values: tuple[int, ...], scale: int) -> None:
        for (pk, sname, cname), v in zip(cidx, values, strict=True):
            self.consumed.setdefault(pk, {}).setdefault(sname, {})[cname] = Fraction(v, scale)

    def _canonical_constraints(self) -> list[list[int | None]]:
        """Per claim and request: a ``distinctAttribute`` that rejects, first and without side effect,
        the devices whose value an earlier request holds, in every request from there to the end of
        the search (last claim; plain ``exactly`` requests the mask scan walks). Such devices are dead
        for the whole subtree: whether they are in use changes only the checks counted, linearly,
        so failing subtrees are memoised without them (``_dead_checks`` adds their checks back).
        """
        out: list[list[int | None]] = []
        last = len(self.claims) - 1
        for ci, claim in enumerate(self.claims):
            row: list[int | None] = [None] * (len(claim.requests) + 1)
            ok_from = ci == last and not self.has_counters and not self.has_multi
            cons = self.constraints[ci]
            for ri in range(len(claim.requests) - 1, -1, -1):
                req = claim.requests[ri]
                spec = req.exactly
                if not ok_from or req.first_available or spec is None or spec.mode != "ExactCount" or spec.capacity_requests or spec.admin_access:
                    ok_from = False
                    continue
                names = [r.name for r in claim.requests[ri:]]
                for j, c in enumerate(cons):
                    if not c.distinct or not all(c.applies(n, "") for n in names):
                        continue
                    if any(cons[k].distinct and cons[k].applies(n, "") for n in names for k in range(j)):
                        break
                    row[ri] = j
                    break
            out.append(row)
        return out

    def _dead_mask(self, ci: int, j: int, others: frozenset[Any]) -> int:
        """Positions constraint ``j`` rejects for every request after the current one: no value, a list
        value or a value ``others`` (earlier requests) hold; without taints, capacity rules or
        selector errors."""
        errs = self.errs.get(ci, 0)
        key = (ci, j, others, errs)
        got = self.dead_masks.get(key)
        if got is None:
            has, lists, by = self._value_masks(ci, j)
            dead = self.all_mask & ~has
            if others:
                dead |= lists
                for v in others:
                    dead |= by.get(v, 0)
            got = self.dead_masks[key] = dead & ~self.special_mask & ~errs
        return got

    def _dead_checks(self, hist: tuple[tuple[tuple[int, int, int], int, int], ...], deadfree: int, rd: _ReqData | None) -> int:
        """Checks the scans of ``hist`` make on the free dead devices (selected, from their start on).
        With ``rd`` (a memo hit) the selectors of dead devices reached for the first time are counted."""
        if not deadfree:
            return 0  # no dead device is free: no checks, no selectors reached
        n = 0
        first: dict[tuple[int, int, int], int] = {}
        for rk, s0, w in hist:
            got = self.sel_masks.get(rk)
            sel = (got if got is not None else self._sel_mask(self.req[rk], rk))[0]
            n += w * (deadfree & sel & ~((1 << s0) - 1)).bit_count()
            if rd is not None and (rk not in first or s0 < first[rk]):
                first[rk] = s0
        for rk, s0 in first.items():
            counted = self.counted.get(rk, 0)
            new = deadfree & ~((1 << s0) - 1) & ~counted
            rdk = self.req[rk]
            while new:
                low = new & -new
                self._selectable(self.cands[low.bit_length() - 1], rdk, rk, True)
                new ^= low
            self.counted[rk] = counted | (deadfree & ~((1 << s0) - 1))
        return n

    def _constraint_key(self, ci: int, base: str) -> tuple[Any, ...]:
        """What the rest of the search can see of claim ``ci``'s constraints from request ``base`` on.

        A ``matchAttribute`` is its fixed value (none while no device holds it). A
        ``distinctAttribute`` is the value the current request last stored (the only
        entry the subtree can remove, and its caller removes it afterwards anyway) and
        the set of values earlier requests hold: which request holds which does not
        matter, as later requests only compare with them. So a failing subtree reached
        again through another order of the same earlier choices is recognised.
        """
        out: list[Any] = []
        for c in self.constraints[ci]:
            if c.distinct:
                vals = c.values
                if not vals:
                    out.append(None)
                else:
                    out.append((vals.get(base), frozenset(v for k, v in vals.items() if k != base)))
            else:
                out.append(c.stored if c.num else None)
        return tuple(out)

    def _use_key(self, ci: int) -> tuple[Any, ...]:
        """Results so far, shared capacity and counters in use by this call."""
        return (
            len(self.results[ci]),
            tuple(sorted((k, tuple(sorted(v.items()))) for k, v in self.allocating_cap.items())) if self.has_multi else None,
            # shareable devices held now are in no mask (they stay allocatable): name them
            tuple(r.cand.pos for c in range(ci + 1) for r in self.results[c] if r.cand.device.allow_multiple) if self.has_multi else None,
            self._counter_key() if self.has_counters else None,
        )

    def _counter_key(self) -> tuple[Any, ...]:
        return tuple(
            (pool, cset, name, v)
            for pool, sets in sorted(self.consumed.items())
            for cset, used in sorted(sets.items())
            for name, v in sorted(used.items())
            if v
        )

    def _bulk(self, calls: int, visits: int, checks: int) -> None:
        """Add counted work of a subtree we did not walk; stop at the deadline inside it, as Go would."""
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

    def _check_budget(self) -> None:
        assert self.budget is not None
        secs = self.budget.seconds(self.stats)
        if secs > self.budget.timeout_s:
            raise FilterTimeout(secs)
        self.next_budget_check = self.stats.calls + 32

    def _scan(self, ci: int, ri: int, si: int, di: int, in_sub: bool, start: int, rd: _ReqData, rkey: tuple[int, int, int]) -> bool:
        spec = rd.spec
        if (
            self.a.fast
            and (self.backtracked or self.stats.our_calls > self.a.fast_after)
            and self.constraints[ci]
            and not self.has_counters
            and not self.has_multi
            and not spec.capacity_requests
            and not spec.admin_access
        ):
            return self._scan_masks(ci, ri, si, di, in_sub, start, rd, rkey)
        return self._scan_plain(ci, ri, si, di, in_sub, start, rd, rkey)

    # ---- the mask scan
    def _masks(self) -> None:
        """Devices in use by other pods, and those the mask scan always walks (taints, capacity rules)."""
        if self.used_mask < 0:
            self.used_mask = sum(1 << c.pos for c in self.cands if c.id in self.state.devices)
            self.special_mask = sum(1 << c.pos for c in self.cands if c.device.taints or not c.simple_cap)

    def _sel_mask(self, rd: _ReqData, rkey: tuple[int, int, int]) -> tuple[int, int]:
        """Positions the request's selectors accept, and those whose evaluation fails (raised when reached)."""
        got = self.sel_masks.get(rkey)
        if got is None:
            sel = err = 0
            for cand in self.cands:
                try:
                    if self._selectable(cand, rd, rkey, False):
                        sel |= 1 << cand.pos
                except AllocationError:
                    err |= 1 << cand.pos
            got = (sel, err)
            self.sel_masks[rkey] = got
            self.errs[rkey[0]] = self.errs.get(rkey[0], 0) | err
        return got

    def _value_masks(self, ci: int, j: int) -> tuple[int, int, dict[tuple[str, Any], int]]:
        """For claim ``ci``'s constraint ``j``: positions with the attribute, with a list value, and by value."""
        key = (ci, j)
        got = self.vmasks.get(key)
        if got is None:
            has = lists = 0
            by: dict[tuple[str, Any], int] = {}
            for pos, v in enumerate(self._values(ci, j)):
                if v is None:
                    continue
                bit = 1 << pos
                has |= bit
                if v[0] == "list":
                    lists |= bit
                else:
                    by[v] = by.get(v, 0) | bit
            got = (has, lists, by)
            self.vmasks[key] = got
        return got

    def _accept_masks(self, ci: int, rd: _ReqData) -> tuple[int, int]:
        """Positions the constraints accept as they stand, and those they reject only after a
        ``distinctAttribute`` stored the device's value (a side effect: ``_allocate_device`` must run)."""
        acc = (1 << self.D) - 1
        slow = 0
        distinct_before = False
        for j, c in enumerate(self.constraints[ci]):
            if not c.applies(rd.base, rd.sub):
                continue
            has, lists, by = self._value_masks(ci, j)
            if c.num == 0:
                ok = has
            elif c.distinct:
                ok = has
                if c.values:
                    ok &= ~lists
                    for v in set(c.values.values()):
                        ok &= ~by.get(v, 0)
            else:
                stored = c.stored
                ok = 0 if stored is None or stored[0] == "list" else by.get(stored, 0)
            if distinct_before:
                slow |= acc & ~ok
            acc &= ok
            distinct_before = distinct_before or c.distinct
        return acc, slow

    def _scan_masks(self, ci: int, ri: int, si: int, di: int, in_sub: bool, start: int, rd: _ReqData, rkey: tuple[int, int, int]) -> bool:
        """``_scan`` over bit masks: runs of devices that are in use, not selected, or rejected by the
        constraints without side effect are counted (visits, checks, selector evaluations) in one step;
        only the devices that could be allocated, or whose rejection has a side effect, are walked."""
        spec = rd.spec
        cands = self.cands
        stats = self.stats
        D = self.D
        self._masks()
        sel, err = self._sel_mask(rd, rkey)
        counted = self.counted.get(rkey, 0)
        last = start
        base_name = rd.base
        applying = [(c, self._values(ci, j)) for j, c in enumerate(self.constraints[ci]) if c.applies(base_name, rd.sub)]
        if self.canon[ci][ri] is not None:
            self.scan_log.append((rkey, start, 1))
        results = self.results[ci]
        allocating = self.allocating
        while True:
            busy = self.used_mask
            for m in self.amask:
                busy |= m
            free = ~busy & ~((1 << last) - 1) & ((1 << D) - 1)
            base = free & sel & ~err
            acc, slow = self._accept_masks(ci, rd)
            indiv = ((acc | slow | self.special_mask) & base) | (err & free)
            p = (indiv & -indiv).bit_length() - 1 if indiv else D
            span = ((1 << p) - 1) & ~((1 << last) - 1)
            new = free & span & ~counted
            while new:  # selectors reached for the first time in this call, in position order
                low = new & -new
                self._selectable(cands[low.bit_length() - 1], rd, rkey, True)
                new ^= low
            counted |= free & span
            self.counted[rkey] = counted
            stats.visits += p - last
            stats.checks += (base & span).bit_count()
            if p >= D:
                return False
            last = p + 1
            cand = cands[p]
            stats.visits += 1
            if not self._selectable(cand, rd, rkey, True):  # raises for an evaluation error
                continue
            counted |= 1 << p
            bit = 1 << p
            if acc & bit and not (slow | self.special_mask) & bit:
                # what _allocate_device does for a device that nothing can reject here
                stats.checks += 1
                for c, vals in applying:
                    v = vals[p]
                    assert v is not None
                    c.add(base_name, v)
                allocating.setdefault(cand.id, set()).add(ci)
                self.amask[ci] |= bit
                results.append(_Result(rd, cand, None, None))
            else:
                if not cand.simple_cap and not self._capacity_fits(cand, spec):
                    continue
                if not self._allocate_device(ci, rd, cand, False):
                    continue
            try:
                done = self._one(ci, ri, si, di + 1, in_sub, p + 1)
            except _MaxSizeExceeded:
                self._deallocate(ci, rd, cand)
                raise
            if done:
                return True
            self._deallocate(ci, rd, cand)
            counted = self.counted.get(rkey, 0)

    def _scan_plain(self, ci: int, ri: int, si: int, di: int, in_sub: bool, start: int, rd: _ReqData, rkey: tuple[int, int, int]) -> bool:
        """allocateOne's loop over the candidate devices for one slot.

        With ``fast``, a device that its constraints reject is counted as the
        allocation check it is without calling ``_allocate_device``, when that
        rejection has no side effect (no counters on the node, no taints).
        """
        spec = rd.spec
        cands = self.cands
        stats = self.stats
        used = self.state.devices
        allocating = self.allocating
        admin = spec.admin_access
        simple_cap = not spec.capacity_requests
        reject = self._rejecter(ci, rd) if self.a.fast and not self.has_counters else None
        if self.a.fast and self.canon[ci][ri] is not None:
            self.scan_log.append((rkey, start, 1))  # the dead-state memo's record of scans (``_dead_checks``)
        for pos in range(start, self.D):
            cand = cands[pos]
            stats.visits += 1
            cid = cand.id
            if admin:
                if ci in allocating.get(cid, ()):
                    continue
            elif cid in used or allocating.get(cid):
                continue
            if not self._selectable(cand, rd, rkey, True):
                continue
            d = cand.device
            if not (simple_cap and cand.simple_cap) and not self._capacity_fits(cand, spec):
                continue
            if reject is not None and not d.taints and reject(pos):
                stats.checks += 1
                continue
            if not self._allocate_device(ci, rd, cand, False):
                if reject is not None:
                    reject = self._rejecter(ci, rd)  # a rejection may have moved the constraint state
                continue
            try:
                done = self._one(ci, ri, si, di + 1, in_sub, pos + 1)
            except _MaxSizeExceeded:
                self._deallocate(ci, rd, cand)
                raise
            if done:
                return True
            self._deallocate(ci, rd, cand)
            if self.a.fast and self.constraints[ci] and (self.stats.our_calls > self.a.solve_after or self._backtracking(ci, rd, rkey)):
                # the rest of this loop, solved (the last request only)
                solved = self._solve_last(ci, ri, si, di, in_sub, pos + 1, rd, rkey)
                if solved is not None:
                    self.solving = True  # later scans of the request go to the solver from their start
                    return solved
            if reject is not None:
                # upstream's distinctAttribute forgets the request's value on removal: state moved
                reject = self._rejecter(ci, rd)
        return False

    def _values(self, ci: int, j: int) -> list[tuple[str, Any] | None]:
        """The typed value of claim ``ci``'s constraint ``j`` attribute, by device position."""
        key = (ci, j)
        vals = self.cvals.get(key)
        if vals is None:
            name = self.constraints[ci][j].name
            vals = [_lookup(c.device, c.pool.driver, name) for c in self.cands]
            self.cvals[key] = vals
        return vals

    def _rejecter(self, ci: int, rd: _ReqData) -> Any:
        """A test of whether the constraints, as they stand, reject a device position."""
        tests: list[tuple[list[tuple[str, Any] | None], int, Any]] = []
        for j, c in enumerate(self.constraints[ci]):
            if not c.applies(rd.base, rd.sub):
                continue
            vals = self._values(ci, j)
            if c.num == 0:
                tests.append((vals, 0, None))
            elif c.distinct:
                tests.append((vals, 1, (bool(c.values), set(c.values.values()))))
            else:
                tests.append((vals, 2, c.stored))
        if not tests:
            return None

        def reject(pos: int) -> bool:
            """True: rejected without side effect. False: accepted, or let ``_allocate_device`` decide
            (a distinctAttribute that accepted and is then undone forgets its request's value)."""
            distinct_added = False
            for vals, kind, arg in tests:
                v = vals[pos]
                if v is None:
                    return not distinct_added
                if kind == 1:
                    if v[0] == "list":
                        if arg[0]:
                            return not distinct_added
                    elif v in arg[1]:
                        return not distinct_added
                    distinct_added = True
                elif kind == 2 and (v[0] == "list" or v != arg):
                    return not distinct_added
            return False

        return reject

    # ---- pruning by counting
    def _prune(self, ci: int, rd: _ReqData, rkey: tuple[int, int, int], start: int, need: int) -> bool:
        """Decide a subtree that cannot fill ``need`` more slots; add the scheduler's work for it."""
        if self.has_counters or self._distinct_applies(ci, rd, rkey):
            return False
        cons = [c for c in self.constraints[ci] if c.applies(rd.base, rd.sub)]
        unfixed = [c for c in cons if c.num == 0]
        fixed = [c for c in cons if c.num > 0]
        spec = rd.spec
        cands = self.cands
        # Pass 1 (cheap, no counting): stop as soon as some group could be filled.
        groups: dict[Any, list[int]] = {}
        checked: list[int] = []  # positions reaching allocateDevice
        first_error: AllocationError | None = None
        free_positions: list[int] = []
        for pos in range(start, self.D):
            cand = cands[pos]
            if not self._free(cand, spec, ci):
                continue
            free_positions.append(pos)
            try:
                sel = self._selectable(cand, rd, rkey, False)
            except AllocationError as e:
                if first_error is None:
                    first_error = e
                continue
            if not sel or not self._capacity_fits(cand, spec):
                continue
            checked.append(pos)
            d = cand.device
            if self._taint_blocks(d, spec):
                continue
            ok = True
            for c in fixed:
                if not c.accepts(_lookup(d, cand.pool.driver, c.name)):
                    ok = False
                    break
            if not ok:
                continue
            key_parts = []
            for c in unfixed:
                v = _lookup(d, cand.pool.driver, c.name)
                if v is None:
                    ok = False
                    break
                key_parts.append(("list", pos) if v[0] == "list" else v)
            if not ok:
                continue
            g = groups.setdefault(tuple(key_parts), [])
            g.append(pos)
            if len(g) >= need:
                return False
        # Every group is too small: the scheduler's loop visits everything from ``start``.
        if first_error is not None:
            raise first_error
        for pos in free_positions:
            self._selectable(cands[pos], rd, rkey, True)
        # checks_from[t] = number of checked positions >= t (suffix count by bisect)
        def checks_from(t: int) -> int:
            return len(checked) - bisect.bisect_left(checked, t)

        D = self.D
        calls, visits, checks = 1, D - start, checks_from(start)
        for positions in groups.values():
            g_calls, g_visits, g_checks = hopeless_group_work(positions, checks_from, D)
            calls += g_calls
            visits += g_visits
            checks += g_checks
        self.stats.calls -= 1  # this call was counted on entry
        self.stats.pruned += 1
        self._bulk(calls, visits, checks)
        return True

    # ---- result building
    def _build(self, ci: int) -> ClaimAllocation:
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
        return ClaimAllocation(claim.key, tuple(results), self._config(ci), self._node_selector(ci))

    def _chosen(self, ci: int, ri: int) -> _ReqData:
        rd = self.req[(ci, ri, 0)]
        if rd.parent is not None:
            return self.req[(ci, ri, rd.selected_sub)]
        return rd

    def _config(self, ci: int) -> tuple[Mapping[str, Any], ...]:
        claim = self.claims[ci]
        out: list[dict[str, Any]] = []
        class_ranges: dict[str, tuple[int, int]] = {}
        for ri in range(len(claim.requests)):
            rd = self._chosen(ci, ri)
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
                    break
                rd = self._chosen(ci, ri)
                if rd.parent is not None and rd.name in reqs:
                    out.append({"source": "FromClaim", "requests": reqs, **body})
                    break
        for entry in out:
            entry_reqs = entry.get("requests")
            if not entry_reqs:
                continue
            if all(req.name in entry_reqs or self._chosen(ci, ri).name in entry_reqs for ri, req in enumerate(claim.requests)):
                del entry["requests"]
        # key order as the API prints it
        return tuple({k: e[k] for k in ("source", "requests", "opaque") if k in e} | e for e in out)

    def _node_selector(self, ci: int) -> Mapping[str, Any] | None:
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


# --- consumable capacity arithmetic (requestPolicy) -----------------------------------------


def _consumed(requested: Quantity | None, cap: Capacity) -> Quantity:
    pol = cap.policy
    if requested is None:
        if pol is not None and pol.default is not None:
            return pol.default
        return cap.value
    if pol is None:
        return requested
    if pol.has_range and pol.range_min is not None:
        if requested < pol.range_min:
            return pol.range_min
        if pol.range_step is None:
            return requested
        req, step, mn = requested.value(), pol.range_step.value(), pol.range_min.value()
        added = req - mn
        n = _go_div(added, step)
        if _go_mod(added, step) != 0:
            n += 1
        return Quantity.of(mn + step * n, "BinarySI")
    if pol.valid_values:
        for v in pol.valid_values:
            if requested <= v:
                return v
        return requested
    return requested


def _go_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _go_mod(a: int, b: int) -> int:
    return a - b * _go_div(a, b)


def _violates(value: Quantity, cap: Capacity) -> bool:
    pol = cap.policy
    if pol is None:
        return False
    if pol.default is not None and value == pol.default:
        return False
    if pol.has_range:
        if pol.range_max is not None and value > pol.range_max:
            return True
        if pol.range_step is not None and pol.range_min is not None:
            return _go_mod(value.value() - pol.range_min.value(), pol.range_step.value()) != 0
        return False
    if pol.valid_values:
        return all(value != v for v in pol.valid_values)
    return False


def hopeless_group_work(positions: Sequence[int], checks_from: Callable[[int], int], D: int) -> tuple[int, int, int]:
    """The scheduler's calls, visits and checks for trying every choice among ``positions`` (the
    accepted devices of one group, ascending) when none can complete the request: each position
    starts a subtree that visits the devices after it and tries the later positions in turn.
    ``checks_from(t)``: how many checked positions are at ``t`` or later; ``D``: devices in all.
    One formula for ``_prune`` and the first-fit shortcut (``sim/firstfit.py``)."""
    s_calls = s_visits = s_checks = 0
    for a in reversed(positions):
        g_calls = 1 + s_calls
        g_visits = (D - a - 1) + s_visits
        g_checks = checks_from(a + 1) + s_checks
        s_calls += g_calls
        s_visits += g_visits
        s_checks += g_checks
    return s_calls, s_visits, s_checks
