"""The last-request solver: the rest of the last request decided by dynamic programming.

In the last request of the search the devices in use change only by the request itself, which
only takes devices after ``start``, so a scan's outcome and the scheduler's work in it depend
only on the slot, the position reached and what the constraints hold: for a
``distinctAttribute`` the value this request stored last (upstream forgets it when a device is
removed or a later constraint rejects one) and the fixed values of earlier requests; for a
``matchAttribute`` its value once a device holds it; and the counters charged. A failing
subtree's calls, visits and checks are added in bulk; a success walks only the chosen devices
for real (through the plain search's ``allocate_device``) and then completes the search as the
scheduler does.

Applies to the last ``exactly`` request of the last claim under constraints, with no shared
capacity, admin access, taints, capacity rules or selector errors among its devices, and no
enclosing canonical memo; once ``solve_after`` calls ran, or as soon as a device under a
``distinctAttribute`` is taken back (``solve_on_backtrack``). Declines (don't know) elsewhere.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from topodra.sim.allocator.types import RequestData, RequestKey, Slot

if TYPE_CHECKING:
    from topodra.sim.allocator.bitsets import Bitsets
    from topodra.sim.allocator.search import Search

__all__ = ["LastRequestProgram", "LastRequestSolver"]

#: per slot state: the tracked constraints' values, then the counters charged (whole numbers)
State = tuple[Any, ...]
#: the devices chosen with the state each was accepted in
Path = list[tuple[int, State]]
#: counters as whole numbers: per position its (index, amount), per index its limit, the names, the scale
CounterIndex = tuple[list[list[tuple[int, int]]], list[int | None], list[tuple[tuple[str, str], str, str]], int]


class LastRequestSolver:
    def __init__(self, search: Search, bits: Bitsets) -> None:
        self.s = search
        self.bits = bits
        #: per request: the constraints the solver tracks (None: it does not apply)
        self.last_ok: dict[RequestKey, list[int] | None] = {}
        #: per context: the last request's dynamic program with its memo
        self.programs: dict[Any, LastRequestProgram] = {}
        #: the solver has taken over a scan: later scans of the last request start in it too
        self.solving = False
        self.cindex: CounterIndex | None = None

    def answer(self, at: Slot) -> bool | None:
        s = self.s
        if (
            s.constraints[at.ci]
            and (self.solving or s.stats.our_calls > s.a.solve_after)
            and self.last_ok.get(at.rkey, ()) is not None  # known not to apply: skip the call
        ):
            return self.solve_last(at, at.start)
        return None

    def answer_rest(self, at: Slot, pos: int) -> bool | None:
        s = self.s
        if s.constraints[at.ci] and (s.stats.our_calls > s.a.solve_after or self._backtracking(at)):
            solved = self.solve_last(at, pos)
            if solved is not None:
                self.solving = True  # later scans of the request go to the solver from their start
            return solved
        return None

    def _backtracking(self, at: Slot) -> bool:
        """A device of this request was taken back: whether the search is past first fit for the
        accelerations (``solve_on_backtrack``): a ``distinctAttribute`` applies to the request
        (counting decides no subtree under one). If so the mask scan and the memo start now, and
        the rest of this scan goes to the solver (when it applies)."""
        if not self.s.a.solve_on_backtrack:
            return False
        got = self.bits.distinct_applies(at.ci, at.rd, at.rkey)
        if got:
            self.bits.backtracked = True
        return got

    def _last_ok(self, ci: int, ri: int, rd: RequestData, rkey: RequestKey) -> list[int] | None:
        """The constraints the solver tracks for this request, or None when it does not apply."""
        if rkey in self.last_ok:
            return self.last_ok[rkey]
        s = self.s
        spec = rd.spec
        out: list[int] | None = None
        if (
            ci == len(s.claims) - 1
            and ri == len(s.claims[ci].requests) - 1
            and rd.parent is None
            and spec.mode == "ExactCount"
            and not spec.admin_access
            and not spec.capacity_requests
            and not s.has_multi
            and all(self.bits.canon[ci][k] is None for k in range(ri))
        ):
            self.bits.ensure()
            sel, err = self.bits.sel_mask(rd, rkey)
            if not err and not (sel & self.bits.special_mask):
                out = [j for j, c in enumerate(s.constraints[ci]) if c.matches(rd.base, rd.sub)] or None
        self.last_ok[rkey] = out
        return out

    def solve_last(self, at: Slot, start: int) -> bool | None:
        """The slot's answer with its device loop from ``start``, or None when the solver does not apply."""
        ci, ri, di, rd, rkey = at.ci, at.ri, at.di, at.rd, at.rkey
        js = self._last_ok(ci, ri, rd, rkey)
        if js is None:
            return None
        s, bits = self.s, self.bits
        counters = self._counters_now()
        if counters is None:
            return None
        cidx, C0, scale = counters
        cons = s.constraints[ci]
        base = rd.base
        free = s.all_mask & ~bits.busy()
        state0 = (*tuple(cons[j].values.get(base) if cons[j].distinct else cons[j].stored if cons[j].num else None for j in js), C0)
        # a program (and its memo) is kept for the rest of the call per context: the devices free
        # for this request (its own devices taken back: they lie before any position it is asked
        # about) and what earlier requests fixed
        own = 0
        for r in s.results[ci][len(s.results[ci]) - di :]:
            own |= 1 << r.cand.pos
        others = tuple(frozenset(v for k, v in cons[j].values.items() if k != base) if cons[j].distinct else frozenset() for j in js)
        ctx = (rkey, (free & bits.sel_mask(rd, rkey)[0]) | own, others, tuple(cons[j].num - di for j in js))
        program = self.programs.get(ctx)
        if program is None:
            if len(self.programs) > 10_000:
                self.programs.clear()
            program = self.programs[ctx] = LastRequestProgram(self, ci, rd, js, ctx[1], others, ctx[3])
        calls, visits, checks, path, exit_c, leaks, reached_all = program.solve(di, start, state0)
        if leaks:
            s.leaks += 1  # enclosing subtrees must not be remembered (as for the plain search)
        last = s.D if path is None or reached_all else (path[-1][0] + 1 if path else start)
        span = free & ((1 << last) - 1) & ~((1 << start) - 1)
        counted = bits.counted.get(rkey, 0)
        bits.reach(rd, rkey, span & ~counted)  # selectors reached for the first time in this call
        bits.counted[rkey] = counted | span
        s.stats.calls -= 1  # this call was counted on entry
        s.stats.pruned += 1
        if path is None:
            self._set_counters(cidx, exit_c, scale)
            s.add_counted(calls, visits, checks)
            return False
        s.add_counted(calls, visits, checks - len(path))  # the chosen devices are checked for real below
        self._walk_path(at, js, path, cidx, scale)
        return True

    def _walk_path(self, at: Slot, js: list[int], path: Path, cidx: list[tuple[tuple[str, str], str, str]], scale: int) -> None:
        """Allocate the solved devices for real, then complete the search from after the last one."""
        s = self.s
        ci, rd = at.ci, at.rd
        cons = s.constraints[ci]
        base = rd.base
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
            ok = s.allocate_device(ci, rd, s.cands[p], False)
            assert ok, "the solved path must be accepted"
        done = s.allocate_one(ci, at.ri, at.si, at.di + len(path), at.in_sub, path[-1][0] + 1)
        assert done

    def _counters_now(self) -> tuple[list[tuple[tuple[str, str], str, str]], tuple[int, ...], int] | None:
        """The counters charged now as whole numbers (with their names and scale), or None when
        the solver cannot track them (a pool already over, or amounts not on the common scale)."""
        s = self.s
        if not s.has_counters:
            return [], (), 1
        _, _, cidx, scale = self.counter_index()
        for pool in s.pools:  # a charge is checked against every counter of its pool
            if not pool.usable or not pool.counter_sets:
                continue
            used = s.consumed.get(pool.key, {})
            for sname, av in s.available_counters(pool).items():
                if any(value < used.get(sname, {}).get(cname, 0) for cname, value in av.items()):
                    return None  # already over (other pods): only the plain search checks that
        used_now = [s.consumed.get(pk, {}).get(sn, {}).get(cn, 0) * scale for pk, sn, cn in cidx]
        if any(Fraction(u).denominator != 1 for u in used_now):
            return None  # not a sum of these devices' amounts
        return cidx, tuple(int(u) for u in used_now), scale

    def counter_index(self) -> CounterIndex:
        """Counters as a flat vector of whole numbers (amounts times ``scale``, the common
        denominator of the devices' amounts: cheap to hash): per device position its
        consumption as (index, amount), per index the amount available (None: not declared,
        never checked), what each index is (pool, counter set, counter), and ``scale``."""
        if self.cindex is None:
            s = self.s
            where: dict[tuple[tuple[str, str], str, str], int] = {}
            avail_f: list[Fraction | None] = []
            rows: list[list[tuple[int, Fraction]]] = []
            for c in s.cands:
                row: list[tuple[int, Fraction]] = []
                for cset, counters in c.device.consumes_counters:
                    for cname, q in counters:
                        k = (c.pool.key, cset, cname)
                        i = where.get(k)
                        if i is None:
                            i = where[k] = len(avail_f)
                            avail_f.append(s.available_counters(c.pool).get(cset, {}).get(cname))
                        row.append((i, q.amount))
                rows.append(row)
            scale = math.lcm(1, *(a.denominator for row in rows for _, a in row))
            cons_of = [[(i, int(a * scale)) for i, a in row] for row in rows]
            # used <= available  <=>  used * scale <= floor(available * scale), used * scale being whole
            avail = [None if a is None else math.floor(a * scale) for a in avail_f]
            self.cindex = (cons_of, avail, list(where), scale)
        return self.cindex

    def _set_counters(self, cidx: list[tuple[tuple[str, str], str, str]], values: tuple[int, ...], scale: int) -> None:
        consumed = self.s.consumed
        for (pk, sname, cname), v in zip(cidx, values, strict=True):
            consumed.setdefault(pk, {}).setdefault(sname, {})[cname] = Fraction(v, scale)


class LastRequestProgram:
    """The dynamic program of one context (``cand``: the positions free and selected for the
    request; ``others``: per tracked distinct, the values earlier requests hold; ``mnd``: per
    tracked constraint, its holders minus the request's slot), with its memo. ``solve(slot,
    start, state)``: the scheduler's calls, visits and checks, the devices chosen with the state
    each was accepted in (None: it fails), the counters left charged, how many rejections leaked
    a charge, and whether the scan reached the last device."""

    def __init__(
        self, solver: LastRequestSolver, ci: int, rd: RequestData, js: list[int], cand: int, others: tuple[frozenset[Any], ...], mnd: tuple[int, ...]
    ) -> None:
        s, bits = solver.s, solver.bits
        cons = s.constraints[ci]
        self.N, self.D = rd.num_devices, s.D
        self.nj = nj = len(js)
        self.cand = cand
        self.others = others
        self.mnd = mnd
        self.vals = [bits.values(ci, j) for j in js]
        self.kinds = [cons[j].distinct for j in js]
        self.match_is = [i for i in range(nj) if not self.kinds[i]]
        self.nones = (None,) * nj
        self.counters_on = s.has_counters
        self.cons_of: list[list[tuple[int, int]]] = []
        self.avail: list[int | None] = []
        if self.counters_on:
            self.cons_of, self.avail, _, _ = solver.counter_index()
        # a constraint's rejection of a device with counters leaves them charged (a side effect)
        self.single = nj == 1 and not self.counters_on
        self.acc_cache: dict[State, int] = {}
        self.vm = [bits.value_masks(ci, j) for j in js]
        self.vals0, self.kind0 = self.vals[0], self.kinds[0]
        # memo: (slot, position, state) -> (calls, visits, checks, counters left, leaks) of the rest of a failing scan
        self.memo: dict[tuple[int, int, State], tuple[int, int, int, Any, int]] = {}
        self.reached = False

    def solve(self, di: int, start: int, state0: State) -> tuple[int, int, int, Path | None, tuple[int, ...], int, bool]:
        self.reached = False
        return (*self.call(di, start, state0), self.reached)

    def acc_mask(self, S: State) -> int:
        """Positions the single constraint accepts in state ``S`` (its rejections have no side effect)."""
        got = self.acc_cache.get(S)
        if got is None:
            has, lists, by = self.vm[0]
            u = S[0]
            if self.kinds[0]:
                got = has
                if u is not None or self.others[0]:
                    got &= ~lists
                    for v in ({u} if u is not None else set()) | self.others[0]:
                        got &= ~by.get(v, 0)
            else:
                got = has if u is None else (0 if u[0] == "list" else by.get(u, 0))
            self.acc_cache[S] = got
        return got

    def try_add(self, S: State, p: int) -> tuple[bool, State, bool]:
        """``allocate_device`` on state ``S`` (counters, then the constraints): accepted and the
        state for the next slot, or rejected and the state left behind (earlier distincts forget
        the value; counters a constraint's rejection leaves charged, the third item)."""
        nj, kinds, vals, others = self.nj, self.kinds, self.vals, self.others
        new = list(S)
        C = S[nj]
        charged = False
        if self.counters_on and self.cons_of[p]:
            c = list(C)
            for i, a in self.cons_of[p]:
                c[i] += a
            for i, _ in self.cons_of[p]:
                cap = self.avail[i]
                if cap is not None and cap < c[i]:
                    return False, S, False
            new[nj] = C = tuple(c)
            charged = True
        for i in range(nj):
            v = vals[i][p]
            u = S[i]
            if kinds[i]:
                ok = v is not None and ((u is None and not others[i]) if v[0] == "list" else (v != u and v not in others[i]))
            else:
                ok = v is not None and (u is None or (v[0] != "list" and v == u))
            if not ok:
                return False, tuple(None if kinds[k] else S[k] for k in range(i)) + S[i:nj] + (C,), charged
            if kinds[i] or u is None:
                new[i] = v
        return True, tuple(new), False

    def forget(self, S: State, C: tuple[int, ...]) -> State:
        """The state after removing a device: distincts forget the value, matches keep theirs."""
        if not self.match_is:
            return (*self.nones, C)
        return (*tuple(None if self.kinds[i] else S[i] for i in range(self.nj)), C)

    def uncharge(self, C: tuple[int, ...], p: int) -> tuple[int, ...]:
        if not self.cons_of or not self.cons_of[p]:
            return C
        c = list(C)
        for i, a in self.cons_of[p]:
            c[i] -= a
        return tuple(c)

    def call(self, d: int, s: int, S: State) -> tuple[int, int, int, Path | None, tuple[int, ...], int]:
        """allocateOne at slot ``d`` from ``s`` (before completion): its work, the devices chosen
        from here on with the state each was accepted in (None: it fails), the counters it
        leaves charged and how many rejections leaked a charge."""
        nj = self.nj
        if d >= self.N:
            return 0, 0, 0, [], S[nj], 0
        # the match state of this slot: no holder yet means nothing fixed
        for i in self.match_is:
            if self.mnd[i] + d <= 0 and S[i] is not None:
                S = (*S[:i], None, *S[i + 1 :])
        memo, cand, D, single = self.memo, self.cand, self.D, self.single
        calls, visits, checks, leaks = 1, 0, 0, 0
        trail: list[tuple[tuple[int, int, State], int, int, int, int]] = []
        exit_c: tuple[int, ...] = S[nj]
        pos = s
        path: Path | None = None
        while True:
            key = (d, pos, S)
            hit = memo.get(key)
            if hit is not None:
                self.reached = True  # only failing scans are remembered
                calls, visits, checks, leaks = calls + hit[0], visits + hit[1], checks + hit[2], leaks + hit[4]
                exit_c = hit[3]
                break
            trail.append((key, calls, visits, checks, leaks))
            rest = cand & ~((1 << pos) - 1)
            nxt = rest & self.acc_mask(S) if single else rest
            if not nxt:
                visits += D - pos
                checks += rest.bit_count()
                self.reached = True
                exit_c = S[nj]
                break
            p = (nxt & -nxt).bit_length() - 1
            visits += p + 1 - pos
            checks += (rest & ((2 << p) - 1)).bit_count()
            if single:
                # accepted (``acc_mask``): a distinct stores the value, a match keeps a fixed one
                S2 = (self.vals0[p], S[1]) if self.kind0 or S[0] is None else S
            else:
                ok, S2, leaked = self.try_add(S, p)
                if not ok:
                    S = S2
                    leaks += leaked
                    pos = p + 1
                    continue
            c2, v2, k2, sub, c_after, l2 = self.call(d + 1, p + 1, S2)
            calls, visits, checks, leaks = calls + c2, visits + v2, checks + k2, leaks + l2
            if sub is not None:
                path = [(p, S), *sub]
                exit_c = c_after
                break
            # removed again: distincts forget the value, its counters are given back
            S = self.forget(S, self.uncharge(c_after, p))
            pos = p + 1
        if path is None:
            for key, c0, v0, k0, l0 in trail:
                memo[key] = (calls - c0, visits - v0, checks - k0, exit_c, leaks - l0)
        return calls, visits, checks, path, exit_c, leaks
