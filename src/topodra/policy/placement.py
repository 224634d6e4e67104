"""Where a container goes: the pool, its exclusive CPUs and its memory nodes, as a new ``Grant``.

Reads the ``Supply`` and never changes it: the caller records the grant. The
rules (docs/policy.md, "How containers are placed"): pools that cannot fit are
filtered out, the rest ranked; exclusive CPUs are packed down the group tree;
memory is the pool's nodes of the wanted kinds, widened to the nearest
ancestor that has them and room for the request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter
from typing import Any

from topodra.policy.api import BadRequestError, ContainerRequest, NoFitError
from topodra.policy.classify import (
    CLAIMED,
    EXCLUSIVE,
    ISOLATION_NO,
    ISOLATION_REQUIRE,
    MIXED,
    PRESERVE,
    RESERVED,
    SHARED,
    Need,
)
from topodra.policy.config import PolicyConfig
from topodra.policy.grants import Grant
from topodra.policy.packing import clean_mask, pack, pack_near
from topodra.policy.partition import fmt
from topodra.policy.supply import Capacity, Supply, where
from topodra.topology.model import MemoryKind

__all__ = ["Placer"]


@dataclass(slots=True)
class _Ask:
    """One search for exclusive CPUs, in one candidate set (isolated or sharable); not changed once made."""

    need: Need
    n: int  # exclusive CPUs wanted
    frac: int  # shared milli-CPU of a mixed grant
    cand: int  # free candidate CPUs
    pref: int  # the candidates of the preferred core kinds (== cand without a preference)
    hint_pool: int | None
    keep: int  # CPUs the container held (resize, claim moves, sync)
    isolated: bool


class Placer:
    """Placement decisions over one ``Supply``."""

    def __init__(self, supply: Supply, config: PolicyConfig) -> None:
        self.supply = supply
        self.part = supply.part
        self.config = config
        self.mem_hints: dict[str, int] = {}  # during sync: the memory nodes containers run on
        self.all_memory: set[str] = set()  # claims whose containers get every memory node (``memoryNodes: all``)
        self._homes: dict[tuple[int, frozenset[MemoryKind]], tuple[int, int]] = {}  # memory_for without a size
        self._kind_fits: dict[frozenset[MemoryKind], tuple[int, ...]] = {}  # _mem_fit_table where all have room
        pools, depth = self.part.pools, self.part.depth
        # Per pool, its path without the root as one getter: the whole-core counts there, top down,
        # in one call (a tie is among pools of one depth, so getters of one shape meet).
        self._below_root: list[Callable[[Sequence[int]], Any]] = [
            itemgetter(*p.path[1:]) if p.depth else _nothing for p in pools
        ]
        self._neg_depth = tuple(-d for d in depth)
        deepest = max(depth)
        self._depth_split = (  # (the deepest pools, the others), by index
            tuple(i for i, d in enumerate(depth) if d == deepest),
            tuple(i for i, d in enumerate(depth) if d != deepest),
        )
        # The lead kept between asks (``_lead_pool``): the deepest pools and their ancestors form a
        # tree; per pool, its children in that tree and its path within it.
        self._deep = [d == deepest for d in depth]
        way = {q for i in self._depth_split[0] for q in pools[i].path}
        self._lead_kids = [tuple(c for c in self.part.children[i] if c in way) for i in range(len(pools))]
        self._lead_path = [tuple(q for q in p.path if q in way) for p in pools]
        self._lead_all = tuple(sorted(way, reverse=True))  # children before parents
        self._kept: dict[tuple[int, frozenset[MemoryKind]], _Kept] = {}

    def place(
        self,
        req: ContainerRequest,
        need: Need,
        *,
        hint: Grant | None = None,
        keep: int = 0,
        hint_pool: int | None = None,
        stay: bool = False,
    ) -> Grant:
        """A grant for ``req``; ``NoFitError`` when nothing fits, ``BadRequestError`` for an unknown claim."""
        kind = need.kind
        hide, preserve = need.hide_hyperthreads, need.memory_preserve
        if kind is SHARED:
            if hint is not None and hint_pool is None:
                hint_pool = hint.pool
            pool = hint_pool if stay and hint_pool is not None else self.choose_shared(req, need, hint_pool)
            mem_pool, mems = self.memory_for(req, need, pool)
            # Positional, in field order (request, kind, pool, exclusive, isolated, milli, mem_pool, mems,
            # memory, hide_hyperthreads, memory_preserve): binding keywords took longer than the fields.
            return Grant(req, kind, pool, 0, False, need.milli if need.milli > 1 else 1, mem_pool, mems,
                         need.memory, hide, preserve)
        if kind is PRESERVE:
            return Grant(request=req, kind=kind, pool=0, hide_hyperthreads=hide, memory_preserve=preserve)
        if kind is CLAIMED:
            claims = self.supply.claims
            cpus = 0
            for claim in need.claims:
                mask = claims.get(claim)
                if mask is None:
                    known = ", ".join(map(repr, sorted(claims))) or "none"
                    raise BadRequestError(f"{where(req)}: claim {claim!r} is not prepared on this node (known: {known})")
                cpus |= mask
            pool = self.part.pool_at(cpus)
            if self.all_memory and not self.all_memory.isdisjoint(need.claims):
                # A claim with ``memoryNodes: all``: every memory node of the wanted kinds.
                mem_pool, mems = self.memory_for(req, need, 0)
                exact = mems
            else:
                mem_pool, mems = self.memory_for(req, need, pool)
                exact = self.part.nodes_near(cpus, mems)
            return Grant(request=req, kind=kind, pool=pool, mem_pool=mem_pool, mems=exact or mems, memory=need.memory,
                         claims=need.claims, hide_hyperthreads=hide, memory_preserve=preserve)
        if kind is RESERVED:
            mem_pool, mems = self.memory_for(req, need, 0)
            return Grant(request=req, kind=kind, pool=0, milli=need.milli, mem_pool=mem_pool, mems=mems,
                         memory=need.memory, hide_hyperthreads=hide, memory_preserve=preserve)
        if hint is not None and hint_pool is None:
            hint_pool = hint.pool
        pool, mask, isolated = self.choose_exclusive(req, need, hint_pool, keep)
        mem_pool, mems = self.memory_for(req, need, pool)
        # Positional, in field order, as above.
        return Grant(req, kind, pool, mask, isolated, need.milli if kind is MIXED else 0, mem_pool, mems,
                     need.memory, hide, preserve)

    # --- memory ----------------------------------------------------------------------
    def memory_for(self, req: ContainerRequest, need: Need, pool: int) -> tuple[int, int]:
        """(memory pool, cpuset.mems): the pool's nodes of the wanted kinds, widened until it fits."""
        kinds = need.memory_kinds
        hint = self.mem_hints.get(req.id) if self.mem_hints else None
        # No nodes to keep, and no request or one every pool has room for (``Supply.mem_floor``):
        # the answer is the pool's alone, as without a request.
        roomy = not hint and (need.memory <= 0 or self.supply.mem_floor(kinds) >= need.memory)
        if roomy:
            home = self._homes.get((pool, kinds))
            if home is not None:
                return home
        pools = self.part.pools
        root = pools[0]
        if not root.nodes_of(kinds):
            have = sorted({k.value for k in root.memory})
            raise BadRequestError(
                f"{where(req)}: memory type {', '.join(sorted(k.value for k in kinds))} requested but this "
                f"node has only {', '.join(have) or 'no'} memory"
            )
        if hint:  # sync: a running container keeps its memory nodes if they are those of its pool or an ancestor
            on_line = self.mem_pool_of(pool, hint, kinds)
            if on_line is not None:
                return on_line, hint
        missing = self.part.missing_kinds(kinds)
        for p in reversed(pools[pool].path):
            nodes = pools[p].nodes_of(kinds)
            if not nodes or missing[p]:
                continue
            if need.memory <= 0 or self.supply.mem_free(p, kinds) >= need.memory:
                home = (p, nodes)
                break
        else:
            home = (0, root.nodes_of(kinds))
        if roomy:
            self._homes[(pool, kinds)] = home
        return home

    def mem_pool_of(self, pool: int, mems: int, kinds: frozenset[MemoryKind]) -> int | None:
        """The deepest of ``pool`` and its ancestors whose memory nodes are exactly ``mems``."""
        pools = self.part.pools
        for q in reversed(pools[pool].path):
            if pools[q].nodes_of(kinds) == mems:
                return q
        return None

    def _mem_fit(self, pool: int, need: Need) -> int:
        """0 when the pool has every wanted memory kind and room for the request; higher is worse."""
        missing = self.part.missing_kinds(need.memory_kinds)[pool]
        if need.memory <= 0:
            return 2 * missing
        return 2 * missing + (0 if self.supply.mem_free(pool, need.memory_kinds) >= need.memory else 1)

    def _mem_fit_table(self, need: Need) -> Sequence[int]:
        """``_mem_fit`` of every pool, by index, for the many pools one placement ranks. Where every
        pool has room for the request (``Supply.mem_floor``), only the missing kinds count."""
        got = self._kind_fit(need)
        return self._mem_fits(need) if got is None else got

    def _kind_fit(self, need: Need) -> tuple[int, ...] | None:
        """``_mem_fit_table`` where every pool has room for the request (it depends on the kinds
        alone then), else None."""
        kinds = need.memory_kinds
        if need.memory <= 0 or self.supply.mem_floor(kinds) >= need.memory:
            got = self._kind_fits.get(kinds)
            if got is None:
                got = self._kind_fits[kinds] = tuple(2 * m for m in self.part.missing_kinds(kinds))
            return got
        return None

    def _mem_fits(self, need: Need) -> list[int]:
        """``_mem_fit`` of every pool, by index, for a request with a memory size: each pool's free
        memory (the least along its path, as ``Supply.mem_free``) is worked out once, from its
        parent's, in index order (parents come first)."""
        kinds, want = need.memory_kinds, need.memory
        part = self.part
        missing, sizes, mem, parents = part.missing_kinds(kinds), part.mem_sizes(kinds), self.supply.mem, part.parents
        room: list[int] = []
        fits: list[int] = []
        for i, size in enumerate(sizes):
            r = size - mem[i]
            par = parents[i]
            if par >= 0:
                up = room[par]
                if up < r:
                    r = up
            room.append(r)
            fits.append(2 * missing[i] + (0 if r >= want else 1))
        return fits

    # --- shared ----------------------------------------------------------------------
    def choose_shared(self, req: ContainerRequest, need: Need, hint_pool: int | None) -> int:
        """The pool for a shared container (docs/policy.md, "Choosing a pool"), criteria in order:
        the pool it ran in, memory, a limit's headroom, the level, colocation, depth, free room."""
        supply = self.supply
        cap = supply.capacity()
        counts, free = cap.counts, cap.free
        milli = max(need.milli, 1)
        if hint_pool is not None and counts[hint_pool] and free[hint_pool] >= milli:
            return hint_pool  # stay where it ran (resize, restart) when it still fits
        # the supply counts pods and namespaces exactly when the config colocates them
        pods = supply.pod_pools.get(req.pod_uid) if supply.count_pods else None
        spaces = supply.ns_pools.get(req.namespace) if supply.count_namespaces else None
        limit = need.burst_limit
        if need.memory > 0 or self.part.lacks_kinds(need.memory_kinds) or pods or spaces:
            return self._choose_shared_by_steps(req, need, cap, pods or {}, spaces or {})
        # The rest of the order is static (level, then deeper first): the first rank holding a pool
        # with room, the most free there (lowest index on a tie). A pool without shared CPUs has no
        # free room (its bound is <= 0), so "free >= milli" is the whole fit test.
        ranks = self.part.shared_order(need.unlimited_level)
        get = free.__getitem__
        for least in (limit, milli) if limit is not None and limit > milli else (milli,):
            for rank in ranks:
                best = max(rank, key=get) if len(rank) > 1 else rank[0]
                if free[best] >= least:
                    return best
        return self._overcommit(req, cap)

    def _choose_shared_by_steps(
        self, req: ContainerRequest, need: Need, cap: Capacity, pods: dict[int, int], spaces: dict[int, int]
    ) -> int:
        """The general case: each criterion narrows the pools with room to its best."""
        free = cap.free
        milli = max(need.milli, 1)
        fits = [i for i, f in enumerate(free) if f >= milli]
        if not fits:
            return self._overcommit(req, cap)
        if need.memory > 0 or self.part.lacks_kinds(need.memory_kinds):
            fit = self._mem_fit_table(need)
            fits = _best(fits, [fit[i] for i in fits])
        if need.burst_limit is not None:
            limit = need.burst_limit
            fits = [i for i in fits if free[i] >= limit] or fits
        if need.unlimited_level is not None:
            level = self.part.level_dist[need.unlimited_level]
            fits = _best(fits, [level[i] for i in fits])
        if pods or spaces:
            fits = _best(fits, [-(pods.get(i, 0) + spaces.get(i, 0)) for i in fits])
        depth = self.part.depth
        fits = _best(fits, [-depth[i] for i in fits])
        return _best(fits, [-free[i] for i in fits])[0]  # then the lowest index

    def _overcommit(self, req: ContainerRequest, cap: Capacity) -> int:
        """Every pool is full: over-commit the one with the most room left (CPU requests of shared
        containers are weights, not reservations; never an empty cpuset)."""
        open_pools = [i for i, c in enumerate(cap.counts) if c > 0]
        if not open_pools:
            raise NoFitError(f"{where(req)}: no shared CPUs are left (all are allocated, claimed or reserved)")
        return max(open_pools, key=lambda i: (cap.free[i], -i))

    def pool_hint(self, cpus: int, mems: int, kinds: frozenset[MemoryKind]) -> int | None:
        """The pool a shared container probably ran in: same shared set, else deepest holding its CPUs.

        Pools can share a shared set (a claim emptied a sibling); the one whose
        line holds the container's memory nodes wins.
        """
        if not cpus or cpus & ~self.part.allowed:
            return None
        shared = self.supply.shared
        same = [p.index for p in reversed(self.part.pools) if shared(p.index) == cpus]
        for i in same:
            if mems and self.mem_pool_of(i, mems, kinds) is not None:
                return i
        if same:
            return same[0]
        return self.part.pool_at(cpus)

    # --- exclusive -------------------------------------------------------------------
    def choose_exclusive(self, req: ContainerRequest, need: Need, hint_pool: int | None, keep: int) -> tuple[int, int, bool]:
        """(pool, exclusive CPUs, isolated?) for an exclusive or mixed grant."""
        part = self.part
        n = need.exclusive
        frac = need.milli if need.kind is MIXED else 0
        used = self.supply.used
        pref_mask: int | None = None
        if need.core_types is not None:
            pref_mask = 0
            for t in need.core_types:
                pref_mask |= part.kind_masks.get(t, 0)

        def ask(cand: int, isolated: bool) -> tuple[int, int] | None:
            hint = hint_pool
            if keep & cand and hint is None:
                hint = part.pool_at(keep & cand)
            pref = cand & pref_mask if pref_mask is not None else cand
            return self._search(_Ask(need, n, frac, cand, pref, hint, keep, isolated))

        if pref_mask is None and not frac and not keep and hint_pool is None and (
            need.isolation is ISOLATION_NO or not part.isolated
        ) and need.isolation is not ISOLATION_REQUIRE:
            # The common ask (an exclusive add, shared CPUs only): its first pool is kept between asks.
            got = self._lead(need, n)
            if got is not None:
                return got[0], got[1], False
        key = need.isolation_key or "require-isolated-cpus"
        if need.isolation is not ISOLATION_NO and part.isolated:
            got = ask(part.isolated & ~used, True)
            if got is not None:
                return got[0], got[1], True
            if need.isolation is ISOLATION_REQUIRE:
                raise NoFitError(f"{where(req)}: {key} needs {n} isolated CPUs in one pool; free isolated CPUs: "
                                 f"{fmt(part.isolated & ~used)}")
        elif need.isolation is ISOLATION_REQUIRE:
            raise NoFitError(f"{where(req)}: {key} but this node has no isolated CPUs the policy may use")
        got = ask(self.supply.shared_cpus, False)
        if got is not None:
            return got[0], got[1], False
        raise NoFitError(self._no_fit(req, need))

    def _no_fit(self, req: ContainerRequest, need: Need) -> str:
        """Why no pool can supply ``need``, on one line. When the CPUs held by DRA claims are what
        is missing, say so first: the scheduler does not count them against the node's CPU, so it
        keeps sending Guaranteed pods here (docs/dra.md, "Node CPU accounting")."""
        cap = self.supply.capacity()
        pools = self.part.pools
        held = (self.supply.milli[0] + 999) // 1000
        what = f"{need.exclusive} exclusive CPUs" + (f" + {need.milli}m shared" if need.kind is MIXED else "")
        best = max(range(len(pools)), key=lambda i: (cap.reach[i], -i))
        most = max(0, cap.reach[best])
        claimed = (self.supply.claimed & self.part.allowed & ~self.part.reserved).bit_count()
        if claimed and need.exclusive <= most + claimed:
            return self._no_fit_claimed(req, need, claimed, most)
        return (
            f"{where(req)}: no pool can supply {what}: {pools[0].name} has {cap.counts[0]} shared CPUs of which "
            f"{held} hold its shared containers' requests; the most any pool can give is "
            f"{most} ({pools[best].name})"
        )

    def _no_fit_claimed(self, req: ContainerRequest, need: Need, claimed: int, most: int) -> str:
        reserved = self.part.reserved.bit_count()
        total = self.part.allowed.bit_count()
        what = f"{need.exclusive} exclusive CPU(s)" + (f" + {need.milli}m shared" if need.kind is MIXED else "")
        by = f"DRA claims ({claimed}) or reserved ({reserved})" if reserved else "DRA claims"
        return (
            f"{where(req)}: no CPU left for {what}: {claimed + reserved} of {total} CPUs are held by {by} and "
            f"the rest can give at most {most}; the scheduler counts claimed CPUs as free node CPU "
            f"(see docs/dra.md, node CPU accounting)"
        )

    def _search(self, a: _Ask) -> tuple[int, int] | None:
        """(pool, CPUs) for ``a``: where the container can keep its CPUs, else the best-ranked pool."""
        if a.cand.bit_count() < a.n:
            return None
        cap = self.supply.capacity()
        if a.hint_pool is not None and a.keep:
            got = self._keep_near(a, cap)
            if got is not None:
                return got
        limits = None if a.isolated else cap.slack
        tree, pools = self.part.tree, self.part.pools
        # Without a shared part the check is met by construction: the ranking keeps pools whose
        # reach (the least slack on their path) covers n, and the packing takes no more than its
        # slack out of any pool below, so every pool keeps its shared requests.
        check = not a.isolated and a.frac > 0
        for i, use, cand in self._ranked(a, cap, self._figures(a, cap)):
            for choice in (use, cand) if use != cand else (use,):
                mask = pack(tree, pools[i].group, choice, a.n, limits)
                if mask is not None and (not check or self.supply.exclusive_ok(mask, i, a.frac)):
                    return i, mask
        return None

    def _keep_near(self, a: _Ask, cap: Capacity) -> tuple[int, int] | None:
        """Keep what the container had in its hint pool, growing next to it."""
        assert a.hint_pool is not None
        tree = self.part.tree
        pool = self.part.pools[a.hint_pool]
        keep = a.keep & a.cand & pool.cpus
        if not keep:
            return None
        if keep.bit_count() >= a.n:  # no limits: start where the kept CPUs are (the same choice, less descent)
            mask: int | None = pack(tree, tree.deepest_containing(keep, pool.group), keep, a.n)
        else:
            limits = None if a.isolated else cap.slack
            extra = pack_near(tree, pool.group, keep, a.cand & pool.cpus & ~keep, a.n - keep.bit_count(), limits)
            mask = None if extra is None else keep | extra
        if mask is None:
            return None
        # the deepest pool that holds the CPUs kept: its memory is the closest
        at = self.part.pool_at(mask, pool.group)
        if a.frac and cap.free[at] < a.frac:
            at = a.hint_pool
        if (a.frac == 0 or cap.free[at] >= a.frac) and (a.isolated or self.supply.exclusive_ok(mask, at, a.frac)):
            return at, mask
        return None

    def _lead(self, need: Need, n: int) -> tuple[int, int] | None:
        """``_search`` for ``n`` exclusive CPUs out of the shared ones (no hint, no CPUs to keep, no
        core kind, no shared part) when its first pool is the kept lead (``_lead_pool``) and
        packs; else None (the caller searches in full, from the same first pool)."""
        supply = self.supply
        fit = self._kind_fit(need)
        if fit is None:
            return None
        cap = supply.capacity()
        i = self._lead_pool(n, need.memory_kinds, fit, cap)
        if i is None:
            return None
        pool = self.part.pools[i]
        mask = pack(self.part.tree, pool.group, supply.shared_cpus & pool.cpus, n, cap.slack)
        return None if mask is None else (i, mask)

    def _lead_pool(self, n: int, kinds: frozenset[MemoryKind], fit: tuple[int, ...], cap: Capacity) -> int | None:
        """The pool ``_ranked`` hands out first for ``n`` of the shared CPUs (no hint, no core kind,
        no shared part, every pool with room for the memory: ``fit`` is the kinds' table) when it is
        one of the deepest pools and leads on every criterion before depth; else None (the caller
        ranks in full).

        Kept between asks, per (n, kinds): per pool of the tree of the deepest pools and their
        ancestors, the best deepest pool below it, keyed as ``_ranked`` orders them (the lead key,
        the whole-core counts along the path top down, the candidates, the milli-CPU charged, the
        index). A pool's key is made from its children's by putting each child's whole-core count
        in front of its tie, so only the pools whose figures changed since (``Supply.journal``) and
        their ancestors are worked out again."""
        supply = self.supply
        journal, base = supply.journal.changes, supply.journal.base
        end = base + len(journal)
        kept = self._kept.get((n, kinds))
        if kept is None or kept.pos < base or end - kept.pos > len(self._lead_all):
            if kept is None:
                if len(self._kept) >= _KEPT_MAX:
                    self._kept.clear()
                kept = self._kept[(n, kinds)] = _Kept(end, [None] * len(self._deep), min(fit))
            todo: Sequence[int] = self._lead_all
        elif kept.pos == end:
            todo = ()
        else:  # the changed pools and their ancestors, children first
            todo = sorted(set(chain.from_iterable(map(self._lead_path.__getitem__, set(journal[kept.pos - base:])))),
                          reverse=True)
        kept.pos = end
        best, deep, kids = kept.best, self._deep, self._lead_kids
        counts, whole, reach, milli = cap.counts, cap.whole, cap.reach, supply.milli
        rem = n % self.part.tree.max_threads
        for i in todo:
            if deep[i]:
                got = counts[i]
                if got < n or reach[i] < n:
                    best[i] = None
                    continue
                clean = whole[i]
                half = got - clean
                # ((memory fit, not on whole cores, no half-used core for the remainder), the tie, pool)
                best[i] = ((fit[i], clean + (half if half < rem else rem) < n, half < rem), (got, milli[i], i), i)
                continue
            low: _Key | None = None
            for c in kids[i]:
                v = best[c]
                if v is not None:
                    v = (v[0], (whole[c], v[1]), v[2])  # the child's whole-core count leads its tie
                    if low is None or v < low:
                        low = v
            best[i] = low
        top = best[0]
        if top is None or top[0][0] != kept.min_fit or top[0][1]:
            return None
        return top[2]

    def _figures(self, a: _Ask, cap: Capacity) -> tuple[Sequence[int], Sequence[int]]:
        """Per pool: how many candidates it holds, and how many of them sit on whole cores. An ask
        for shared CPUs (every one but for isolated CPUs) reads both from the supply, which keeps
        them (``Capacity.counts``, ``Capacity.whole``); any other candidate set is counted."""
        if a.cand == self.supply.shared_cpus:
            return cap.counts, cap.whole
        return self.count_figures(a.cand)

    def count_figures(self, cand: int) -> tuple[list[int], list[int]]:
        """``_figures`` by the rule: the candidates and those on whole cores, counted per pool."""
        clean = clean_mask(self.part.tree, 0, cand)
        pools = self.part.pools
        return [(cand & p.cpus).bit_count() for p in pools], [(clean & p.cpus).bit_count() for p in pools]

    def _ranked(
        self, a: _Ask, cap: Capacity, figures: tuple[Sequence[int], Sequence[int]]
    ) -> Iterator[tuple[int, int, int]]:
        """(pool, CPUs to pack from, candidates) of the pools that can hold ``a``, best first
        (docs/policy.md, "Choosing a pool"). The leading criteria are cheap and settle most
        choices: the rest of the key is worked out only for the pools that tie on them. Pools
        are ranked on counts (``figures``: candidates and those on whole cores, per pool); the
        masks are made only for the pools handed out.

        The deepest pools are ranked first: when the best of them leads on every criterion
        before depth (no pool can do better there), no shallower pool can come before it and
        its tie is handed out before the others are looked at (most searches stop there)."""
        tree, pools = self.part.tree, self.part.pools
        n, frac, isolated, need = a.n, a.frac, a.isolated, a.need
        n_cand, n_clean = figures
        all_cand, all_pref, any_pref = a.cand, a.pref, a.pref != a.cand
        clean_pref = clean_mask(tree, 0, a.pref) if any_pref else 0
        rem = n % tree.max_threads
        free, reach = cap.free, cap.reach
        mem_fit, hint, neg_depth = self._mem_fit_table(need), a.hint_pool, self._neg_depth

        def leads(batch: Sequence[int]) -> list[_Lead]:
            """The pools of ``batch`` that can hold ``a``: (lead key, pool, CPUs to use, kind fit)."""
            out: list[_Lead] = []
            for i in batch:
                if not isolated and reach[i] < n:  # most pools cannot give n CPUs at all
                    continue
                if frac and free[i] - (0 if isolated else 1000 * n) < frac:
                    continue
                got = n_cand[i]
                if got < n:
                    continue
                kind_fit, use, clean = True, got, n_clean[i]
                if any_pref:
                    cpus = pools[i].cpus
                    pref = (all_pref & cpus).bit_count()
                    if pref >= n:
                        use, clean = pref, (clean_pref & cpus).bit_count()
                    else:
                        kind_fit = False
                half = use - clean  # free threads of half-used cores
                # (False before True: each flag is "misses")
                out.append((
                    mem_fit[i],
                    i != hint,
                    not kind_fit,
                    clean + (half if half < rem else rem) < n,  # fits on whole cores
                    neg_depth[i],  # deeper first
                    half < rem,  # an odd remainder fills a half-used core
                    i,
                    use,
                    kind_fit,
                ))
            return out

        deepest, others = self._depth_split
        ranked = leads(deepest)
        ranked.sort()
        if ranked and ranked[0][:4] == (min(mem_fit), hint is None, False, False):
            k = _run(ranked, 0)
            yield from self._tie(ranked[:k], figures, all_cand, all_pref if any_pref else 0)
            ranked = ranked[k:]
        ranked += leads(others)
        ranked.sort()
        start = 0
        while start < len(ranked):
            end = _run(ranked, start)
            yield from self._tie(ranked[start:end], figures, all_cand, all_pref if any_pref else 0)
            start = end

    def _tie(
        self, tie: list[_Lead], figures: tuple[Sequence[int], Sequence[int]], all_cand: int, all_pref: int
    ) -> Iterator[tuple[int, int, int]]:
        """The pools of one lead, best first: best fit on whole cores top down (socket, NUMA
        node, L3), then fewer CPUs to use, then fewer shared containers to disturb, then the index."""
        milli, below, n_clean = self.supply.milli, self._below_root, figures[1]
        rows = [(below[i](n_clean), use, milli[i], i, kind_fit) for *_lead, i, use, kind_fit in tie]
        rows.sort()
        pools = self.part.pools
        for *_key, i, kind_fit in rows:
            cpus = pools[i].cpus
            cand = all_cand & cpus
            yield i, (all_pref & cpus if all_pref and kind_fit else cand), cand

    def keep_exclusive(self, req: ContainerRequest, need: Need, cpus: int) -> Grant | None:
        """A grant on exactly ``cpus`` if they are still free and fit the rules (sync)."""
        part, supply = self.part, self.supply
        if cpus & ~part.allowed or cpus & supply.used or cpus & part.reserved:
            return None
        isolated = cpus & part.isolated
        if isolated and isolated != cpus:
            return None
        pool = part.pool_at(cpus)
        if not isolated and not supply.exclusive_ok(cpus, pool, 0):
            return None
        mem_pool, mems = self.memory_for(req, need, pool)
        return Grant(request=req, kind=EXCLUSIVE, pool=pool, exclusive=cpus, isolated=bool(isolated),
                     mem_pool=mem_pool, mems=mems, memory=need.memory, hide_hyperthreads=need.hide_hyperthreads,
                     memory_preserve=need.memory_preserve)


#: One pool in the ranking for exclusive CPUs: the lead key (memory fit, not the hint, not the
#: core kind, not on whole cores, minus the depth, no half-used core for the remainder), then
#: the pool, the CPUs it would use and whether they are of the preferred kind.
_Lead = tuple[int, bool, bool, bool, int, bool, int, int, bool]


#: ``Placer._lead_pool``'s key of the best deepest pool below a pool: (memory fit, not on whole
#: cores, no half-used core for the remainder), then the tie nested from below the pool down (each
#: pool's whole-core count, then the deepest pool's candidates, milli-CPU charged and index), then
#: that pool (the tie ends with it, so nothing past the tie is ever compared)
_Key = tuple[tuple[int, bool, bool], tuple[Any, ...], int]

#: ``Placer._kept`` is cleared past this many ask shapes
_KEPT_MAX = 64


@dataclass(slots=True)
class _Kept:
    """``Placer._lead_pool``'s work for one ask shape, current as of change ``pos`` of the supply's journal."""

    pos: int
    best: list[_Key | None]  # per pool (None: no deepest pool below it can hold the ask)
    min_fit: int  # the best memory fit of any pool (the lead must have it)


def _nothing(_figures: Sequence[int]) -> tuple[()]:
    """The root's path below the root."""
    return ()


def _run(ranked: list[_Lead], start: int) -> int:
    """The end of the run of entries sharing ``ranked[start]``'s lead key."""
    lead = ranked[start][:6]
    end = start + 1
    while end < len(ranked) and ranked[end][:6] == lead:
        end += 1
    return end


def _best(items: list[int], keys: list[int]) -> list[int]:
    """The items with the lowest key, in their order."""
    low = min(keys)
    return [i for i, k in zip(items, keys, strict=True) if k == low]
