"""What the accelerations share during one Allocate call: the candidate devices as bit masks by
position (in use by other pods, selected by a request, holding a constraint's attribute value),
the typed attribute values, which selectors the scheduler has reached, and facts about the
claims' constraints (which requests a ``distinctAttribute`` covers, the canonical constraints
of the dead-state memo). Built lazily: a first-fit search never needs the masks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from topodra.sim.allocator.constraints import Typed, lookup_attribute
from topodra.sim.allocator.results import AllocationError
from topodra.sim.allocator.types import RequestData, RequestKey

if TYPE_CHECKING:
    from topodra.sim.allocator.search import Search

__all__ = ["Bitsets"]


class Bitsets:
    def __init__(self, search: Search) -> None:
        self.s = search
        self.used_mask = -1  # devices in use by other pods; set up on first use (``ensure``)
        self.special_mask = 0  # devices the mask scan always walks (taints, capacity rules)
        self.sel_masks: dict[RequestKey, tuple[int, int]] = {}
        self.errs: dict[int, int] = {}  # per claim: positions whose selectors fail to evaluate (so far)
        #: per request: positions whose selectors the scheduler has reached (evaluations counted)
        self.counted: dict[RequestKey, int] = {}
        self.vmasks: dict[tuple[int, int], tuple[int, int, dict[Typed, int]]] = {}
        self.cvals: dict[tuple[int, int], list[Typed | None]] = {}
        self.distinct_req: dict[RequestKey, bool] = {}
        #: a device was taken back under a distinctAttribute: the mask scan and memo start now
        self.backtracked = False
        self.canon = self._canonical_constraints()

    def ensure(self) -> None:
        """Devices in use by other pods, and those the mask scan always walks (taints, capacity rules)."""
        if self.used_mask < 0:
            cands = self.s.cands
            devices = self.s.state.devices
            self.used_mask = sum(1 << c.pos for c in cands if c.id in devices)
            self.special_mask = sum(1 << c.pos for c in cands if c.device.taints or not c.simple_cap)

    def busy(self) -> int:
        """Devices in use by other pods or held by this call."""
        busy = self.used_mask
        for m in self.s.amask:
            busy |= m
        return busy

    def sel_mask(self, rd: RequestData, rkey: RequestKey) -> tuple[int, int]:
        """Positions the request's selectors accept, and those whose evaluation fails (raised when reached)."""
        got = self.sel_masks.get(rkey)
        if got is None:
            sel = err = 0
            s = self.s
            for cand in s.cands:
                try:
                    if s.is_selectable(cand, rd, rkey, False):
                        sel |= 1 << cand.pos
                except AllocationError:
                    err |= 1 << cand.pos
            got = (sel, err)
            self.sel_masks[rkey] = got
            self.errs[rkey[0]] = self.errs.get(rkey[0], 0) | err
        return got

    def reach(self, rd: RequestData, rkey: RequestKey, new: int) -> None:
        """The scheduler reaches the devices of ``new`` (in position order): their selector
        evaluations are counted if not yet."""
        s = self.s
        cands = s.cands
        while new:
            low = new & -new
            s.is_selectable(cands[low.bit_length() - 1], rd, rkey, True)
            new ^= low

    def values(self, ci: int, j: int) -> list[Typed | None]:
        """The typed value of claim ``ci``'s constraint ``j`` attribute, by device position."""
        key = (ci, j)
        vals = self.cvals.get(key)
        if vals is None:
            name = self.s.constraints[ci][j].name
            vals = [lookup_attribute(c.device, c.pool.driver, name) for c in self.s.cands]
            self.cvals[key] = vals
        return vals

    def value_masks(self, ci: int, j: int) -> tuple[int, int, dict[Typed, int]]:
        """For claim ``ci``'s constraint ``j``: positions with the attribute, with a list value, and by value."""
        key = (ci, j)
        got = self.vmasks.get(key)
        if got is None:
            has = lists = 0
            by: dict[Typed, int] = {}
            for pos, v in enumerate(self.values(ci, j)):
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

    def distinct_applies(self, ci: int, rd: RequestData, rkey: RequestKey) -> bool:
        """Whether a ``distinctAttribute`` of the claim applies to this request (fixed per request)."""
        got = self.distinct_req.get(rkey)
        if got is None:
            got = self.distinct_req[rkey] = any(c.distinct and c.matches(rd.base, rd.sub) for c in self.s.constraints[ci])
        return got

    def _canonical_constraints(self) -> list[list[int | None]]:
        """Per claim and request: a ``distinctAttribute`` that rejects, first and without side effect,
        the devices whose value an earlier request holds, in every request from there to the end of
        the search (last claim; plain ``exactly`` requests the mask scan walks). Such devices are dead
        for the whole subtree: whether they are in use changes only the checks counted, linearly,
        so failing subtrees are memoised without them (``DeadStateMemo.dead_checks`` adds their
        checks back).
        """
        s = self.s
        out: list[list[int | None]] = []
        last = len(s.claims) - 1
        for ci, claim in enumerate(s.claims):
            row: list[int | None] = [None] * (len(claim.requests) + 1)
            ok_from = ci == last and not s.has_counters and not s.has_multi
            cons = s.constraints[ci]
            for ri in range(len(claim.requests) - 1, -1, -1):
                req = claim.requests[ri]
                spec = req.exactly
                if not ok_from or req.first_available or spec is None or spec.mode != "ExactCount" or spec.capacity_requests or spec.admin_access:
                    ok_from = False
                    continue
                names = [r.name for r in claim.requests[ri:]]
                for j, c in enumerate(cons):
                    if not c.distinct or not all(c.matches(n, "") for n in names):
                        continue
                    if any(cons[k].distinct and cons[k].matches(n, "") for n in names for k in range(j)):
                        break
                    row[ri] = j
                    break
            out.append(row)
        return out


