"""The dead-state memo: failing subtrees remembered by what the rest of the search can see.

A slot's subtree depends only on where the search is (claim, request, slot, start position),
what the claim's constraints hold (``constraint_key``), the number of results so far, the
shareable devices held, shared capacity and counters in use (``use_key``) and which devices
this call holds (the claims' masks so far): a subtree that failed once fails again from the same state,
with the same counted work. A hit adds that work in bulk and answers False; a miss runs the
steps after the memo (``Search.answer``), returns their answer and remembers it when it fails
without leaving state behind. A subtree that completes no request only looks at positions from
its start on, so it is remembered by those alone (a local key, flagged as such: shifted masks
can equal another state's whole masks).

Under a canonical ``distinctAttribute`` (``Bitsets.canon``) the devices it rejects for the rest
of the search are left out of the key; the checks the scans made on them are kept apart (the
scans' record, ``scan_log``) and added back for the free ones (``dead_checks``).

Applies once the search is past first fit (``fast_after`` calls, or a device taken back under
a ``distinctAttribute``) for claims with constraints or on nodes with counters, until a capacity
rejection leaves constraint values behind; declines (don't know) elsewhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from topodra.sim.allocator.types import RequestData, RequestKey, Slot

if TYPE_CHECKING:
    from topodra.sim.allocator.bitsets import Bitsets
    from topodra.sim.allocator.search import Search

__all__ = ["DeadStateMemo"]

#: dead states kept per Allocate call before the memo starts over (bounds its memory)
_DEAD_STATES_MAX = 500_000

#: a scan's record: (request key, start position, weight)
ScanRecord = tuple[RequestKey, int, int]


class DeadStateMemo:
    def __init__(self, search: Search, bits: Bitsets, after: int) -> None:
        self.s = search
        self.bits = bits
        self.after = after  # the index of the first acceleration after this one (``Search.answer``)
        #: dead states: (where, constraint state, in-use state) -> the scheduler's work of that failing subtree
        self.dead: dict[Any, tuple[int, int, int, Any]] = {}
        self.memo_on = [bool(c.constraints) or search.has_counters for c in search.claims]
        #: (request key, start, weight) of every scan inside the canonical subtrees being walked
        self.scan_log: list[ScanRecord] = []
        self.dead_masks: dict[tuple[int, int, frozenset[Any], int], int] = {}

    def answer(self, at: Slot) -> bool | None:
        s = self.s
        ci = at.ci
        cj = self.bits.canon[ci][at.ri]
        if not (self.memo_on[ci] and not s.cons_leaks and (self.bits.backtracked or s.stats.our_calls > s.a.fast_after)):
            if cj is not None:
                self.scan_log.append((at.rkey, at.start, 1))  # the scan that follows (``dead_checks``)
            return None
        local, full, deadfree = self._keys(at, cj)
        hit = self.dead.get(local)
        if hit is None:
            hit = self.dead.get(full)
            if hit is not None:
                s.completions += 1  # it completed a request: enclosing subtrees are not local either
        if hit is not None:
            h_calls, h_visits, h_checks, hist = hit
            if hist is not None:
                h_checks += self.dead_checks(hist, deadfree, at.rd)
                self.scan_log.extend(hist)
            s.stats.calls -= 1  # the hit includes this call
            s.stats.pruned += 1
            s.add_counted(h_calls, h_visits, h_checks)
            return False
        return self._walk(at, cj, local, full, deadfree)

    def answer_rest(self, at: Slot, pos: int) -> bool | None:
        return None

    def _keys(self, at: Slot, cj: int | None) -> tuple[Any, Any, int]:
        """The slot's local key (positions from ``start`` on), full key, and the free dead devices.
        The two are told apart by a flag: a shifted mask can equal an unshifted one."""
        s = self.s
        ci = at.ci
        ckey = self.constraint_key(ci, at.rd.base)
        where = (ci, at.ri, at.si, at.di, at.start, at.in_sub, ckey, *self.use_key(ci))
        if cj is None:
            masks = tuple(s.amask[: ci + 1])
            # a subtree that completes no request only looks at positions from ``start`` on
            return (where, True, tuple(m >> at.start for m in masks)), (where, False, masks), 0
        self.bits.ensure()
        free = s.all_mask & ~self.bits.busy()
        held = ckey[cj]  # the distinct's (value of this request, values of earlier ones)
        dead = self.dead_mask(ci, cj, held[1] if held is not None else frozenset())
        nd = free & ~dead
        return (where, True, nd >> at.start), (where, False, nd), free & dead

    def _walk(self, at: Slot, cj: int | None, local: Any, full: Any, deadfree: int) -> bool:
        """A miss: the steps after the memo answer; a failure without side effects is remembered."""
        s = self.s
        st = s.stats
        calls, visits, checks, leaks, completions = st.calls, st.visits, st.checks, s.leaks, s.completions
        mark = len(self.scan_log)
        if cj is not None:
            self.scan_log.append((at.rkey, at.start, 1))  # the scan that follows (``dead_checks``)
        done = s.answer(at, self.after)
        if cj is None:
            del self.scan_log[mark:]
            entry: tuple[int, int, int, Any] = (st.calls - calls + 1, st.visits - visits, st.checks - checks, None)
        else:
            agg: dict[tuple[RequestKey, int], int] = {}
            for rk, s0, w in self.scan_log[mark:]:
                agg[(rk, s0)] = agg.get((rk, s0), 0) + w
            hist = tuple((rk, s0, w) for (rk, s0), w in agg.items())
            del self.scan_log[mark:]
            self.scan_log.extend(hist)
            own = st.checks - checks - self.dead_checks(hist, deadfree, None)
            entry = (st.calls - calls + 1, st.visits - visits, own, hist)
        if not done and s.leaks == leaks:
            if len(self.dead) >= _DEAD_STATES_MAX:
                self.dead.clear()
            self.dead[local if s.completions == completions else full] = entry
        return done

    def dead_mask(self, ci: int, j: int, others: frozenset[Any]) -> int:
        """Positions constraint ``j`` rejects for every request after the current one: no value, a list
        value or a value ``others`` (earlier requests) hold; without taints, capacity rules or
        selector errors."""
        bits = self.bits
        errs = bits.errs.get(ci, 0)
        key = (ci, j, others, errs)
        got = self.dead_masks.get(key)
        if got is None:
            has, lists, by = bits.value_masks(ci, j)
            dead = self.s.all_mask & ~has
            if others:
                dead |= lists
                for v in others:
                    dead |= by.get(v, 0)
            got = self.dead_masks[key] = dead & ~bits.special_mask & ~errs
        return got

    def dead_checks(self, hist: tuple[ScanRecord, ...], deadfree: int, rd: RequestData | None) -> int:
        """Checks the scans of ``hist`` make on the free dead devices (selected, from their start on).
        With ``rd`` (a memo hit) the selectors of dead devices reached for the first time are counted."""
        if not deadfree:
            return 0  # no dead device is free: no checks, no selectors reached
        bits = self.bits
        n = 0
        first: dict[RequestKey, int] = {}
        for rk, s0, w in hist:
            got = bits.sel_masks.get(rk)
            sel = (got if got is not None else bits.sel_mask(self.s.req[rk], rk))[0]
            n += w * (deadfree & sel & ~((1 << s0) - 1)).bit_count()
            if rd is not None and (rk not in first or s0 < first[rk]):
                first[rk] = s0
        for rk, s0 in first.items():
            counted = bits.counted.get(rk, 0)
            bits.reach(self.s.req[rk], rk, deadfree & ~((1 << s0) - 1) & ~counted)
            bits.counted[rk] = counted | (deadfree & ~((1 << s0) - 1))
        return n

    def constraint_key(self, ci: int, base: str) -> tuple[Any, ...]:
        """What the rest of the search can see of claim ``ci``'s constraints from request ``base`` on.

        A ``matchAttribute`` is its fixed value (none while no device holds it). A
        ``distinctAttribute`` is the value the current request last stored (the only
        entry the subtree can remove, and its caller removes it afterwards anyway) and
        the set of values earlier requests hold: which request holds which does not
        matter, as later requests only compare with them. So a failing subtree reached
        again through another order of the same earlier choices is recognised.
        """
        out: list[Any] = []
        for c in self.s.constraints[ci]:
            if c.distinct:
                vals = c.values
                if not vals:
                    out.append(None)
                else:
                    out.append((vals.get(base), frozenset(v for k, v in vals.items() if k != base)))
            else:
                out.append(c.stored if c.num else None)
        return tuple(out)

    def use_key(self, ci: int) -> tuple[Any, ...]:
        """Results so far, shared capacity and counters in use by this call."""
        s = self.s
        return (
            len(s.results[ci]),
            tuple(sorted((k, tuple(sorted(v.items()))) for k, v in s.allocating_cap.items())) if s.has_multi else None,
            # shareable devices held now are in no mask (they stay allocatable): name them
            tuple(r.cand.pos for c in range(ci + 1) for r in s.results[c] if r.cand.device.allow_multiple) if s.has_multi else None,
            self._counter_key() if s.has_counters else None,
        )

    def _counter_key(self) -> tuple[Any, ...]:
        return tuple(
            (pool, cset, name, v)
            for pool, sets in sorted(self.s.consumed.items())
            for cset, used in sorted(sets.items())
            for name, v in sorted(used.items())
            if v
        )
