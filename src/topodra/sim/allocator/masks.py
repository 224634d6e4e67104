"""The mask scan: allocateOne's device loop over bit masks.

Runs of devices that are in use, not selected, or rejected by the constraints without side
effect are counted (visits, checks, selector evaluations) in one step; only the devices that
could be allocated, or whose rejection has a side effect, are walked (through the plain
search's ``allocate_device``, or ``take_proven`` for a device the masks prove acceptable, and
``allocate_one``). Answers for slots under constraints once the
search is past first fit (``fast_after`` calls, or a device taken back under a
``distinctAttribute``), on nodes without counters or shareable devices, for requests without
capacity requests or admin access; declines (don't know) elsewhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from topodra.sim.allocator.types import MaxSizeExceeded, RequestData, Slot

if TYPE_CHECKING:
    from topodra.sim.allocator.bitsets import Bitsets
    from topodra.sim.allocator.search import Search

__all__ = ["MaskScan"]


class MaskScan:
    def __init__(self, search: Search, bits: Bitsets) -> None:
        self.s = search
        self.bits = bits

    def answer(self, at: Slot) -> bool | None:
        s = self.s
        spec = at.rd.spec
        if (
            (self.bits.backtracked or s.stats.our_calls > s.a.fast_after)
            and s.constraints[at.ci]
            and not s.has_counters
            and not s.has_multi
            and not spec.capacity_requests
            and not spec.admin_access
        ):
            return self._scan(at)
        return None

    def answer_rest(self, at: Slot, pos: int) -> bool | None:
        return None

    def accept_masks(self, ci: int, rd: RequestData) -> tuple[int, int]:
        """Positions the constraints accept as they stand, and those they reject only after a
        ``distinctAttribute`` stored the device's value (a side effect: ``allocate_device`` must run)."""
        acc = self.s.all_mask
        slow = 0
        distinct_before = False
        for j, c in enumerate(self.s.constraints[ci]):
            if not c.matches(rd.base, rd.sub):
                continue
            has, lists, by = self.bits.value_masks(ci, j)
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

    def _scan(self, at: Slot) -> bool:
        s, bits = self.s, self.bits
        ci, ri, si, di, in_sub, start, rd, rkey = at
        cands = s.cands
        stats = s.stats
        D = s.D
        bits.ensure()
        sel, err = bits.sel_mask(rd, rkey)
        counted = bits.counted.get(rkey, 0)
        last = start
        applying = [(c, bits.values(ci, j)) for j, c in enumerate(s.constraints[ci]) if c.matches(rd.base, rd.sub)]
        while True:
            free = ~bits.busy() & ~((1 << last) - 1) & s.all_mask
            base = free & sel & ~err
            acc, slow = self.accept_masks(ci, rd)
            indiv = ((acc | slow | bits.special_mask) & base) | (err & free)
            p = (indiv & -indiv).bit_length() - 1 if indiv else D
            span = ((1 << p) - 1) & ~((1 << last) - 1)
            bits.reach(rd, rkey, free & span & ~counted)  # selectors reached for the first time, in order
            counted |= free & span
            bits.counted[rkey] = counted
            stats.visits += p - last
            stats.checks += (base & span).bit_count()
            if p >= D:
                return False
            last = p + 1
            cand = cands[p]
            stats.visits += 1
            if not s.is_selectable(cand, rd, rkey, True):  # raises for an evaluation error
                continue
            counted |= 1 << p
            bit = 1 << p
            if acc & bit and not (slow | bits.special_mask) & bit:
                s.take_proven(ci, rd, cand, applying)  # nothing can reject it here
            else:
                if not cand.simple_cap and not s.cmp_request_over_capacity(cand, rd.spec):
                    continue
                if not s.allocate_device(ci, rd, cand, False):
                    continue
            try:
                done = s.allocate_one(ci, ri, si, di + 1, in_sub, p + 1)
            except MaxSizeExceeded:
                s.deallocate(ci, rd, cand)
                raise
            if done:
                return True
            s.deallocate(ci, rd, cand)
            counted = bits.counted.get(rkey, 0)
