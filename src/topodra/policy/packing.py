"""Topology-packed choice of exclusive CPUs: full cores first, in the smallest group that fits.

The choice descends the group tree (package, die, NUMA node, L3, cluster, L2,
core). At each node it looks for the children that can supply the whole
request and takes the tightest one (best fit: the fewest free CPUs), which
keeps big free blocks whole for later big requests. When no child fits, it
spans the fewest children: the biggest ones whole, then the tightest one that
fits the rest.

"Clean" first: CPUs count only on cores whose every thread is free, so a
request of n CPUs lands on n/threads whole cores, and an odd remainder goes
to a thread whose sibling is already taken before it breaks a new core. Only
when the candidates cannot supply the request cleanly does any free CPU count.

``limits`` bounds how many CPUs may come out of a group (a pool whose shared
containers need the rest); the caller checks the start group's own limit.
Everything is bitmask arithmetic: no sets, no sorting of CPUs.
"""

from __future__ import annotations

from collections.abc import Sequence

from topodra.policy.groups import GroupTree

__all__ = ["pack", "clean_mask", "pack_near", "pack_spread", "spread_shares"]

_INF = 1 << 30


def clean_mask(tree: GroupTree, start: int, cand: int) -> int:
    """The candidate CPUs of group ``start`` that sit on cores whose every usable thread is a candidate."""
    return tree.whole_cores(cand & tree.groups[start].mask)


def _lowest(mask: int, n: int) -> int:
    out = 0
    for _ in range(n):
        if not mask:
            break
        low = mask & -mask
        out |= low
        mask ^= low
    return out


class _Packer:
    __slots__ = ("cand", "clean", "core_of", "groups", "limits", "strict", "threads")

    def __init__(self, tree: GroupTree, cand: int, clean: int, limits: Sequence[int] | None, strict: bool) -> None:
        self.groups = tree.groups
        self.core_of = tree.core_of
        self.cand = cand
        self.clean = clean
        self.limits = limits
        self.strict = strict  # clean mode
        self.threads = tree.max_threads

    def take(self, g: int, need: int) -> int:
        """Up to ``need`` candidate CPUs from group ``g`` (fewer if it cannot)."""
        group = self.groups[g]
        if not group.children:
            # A core (or an undivided leaf): its lowest free threads.
            return _lowest(self.cand & group.mask, need)
        if self.strict and group.even_cores:
            return self.take_cores(group.mask, need)
        cand, clean, strict, threads = self.cand, self.clean, self.strict, self.threads
        groups, limits = self.groups, self.limits
        rows = []
        for c in group.children:
            child = groups[c]
            m = child.mask
            free = (cand & m).bit_count()
            if not free:
                continue
            cl = (clean & m).bit_count()
            lim = _INF if limits is None or child.pool < 0 else limits[child.pool]
            rows.append((c, free, cl, lim))
        result = 0
        remaining = need
        while remaining > 0 and rows:
            rem = remaining % threads
            best = None
            best_key: tuple[int, int, int, int] | None = None
            for row in rows:
                c, free, cl, lim = row
                if lim < remaining:
                    continue
                if strict:
                    half = free - cl
                    if cl + (half if half < rem else rem) < remaining:
                        continue
                    # An odd remainder is free on a half-used core; best fit on whole cores.
                    key = (0 if half >= rem else 1, cl, free, c)
                else:
                    if free < remaining:
                        continue
                    key = (0, free, free, c)
                if best_key is None or key < best_key:
                    best, best_key = row, key
            if best is not None:
                got = self.take(best[0], remaining)
                rows.remove(best)
                if got:
                    result |= got
                    remaining -= got.bit_count()
                continue
            # Nothing fits the rest: take the biggest child whole.
            pick = None
            pick_key: tuple[int, int] | None = None
            assert rows
            for row in rows:
                c, free, cl, lim = row
                whole = cl if strict else free
                if lim < whole:
                    whole = lim
                if remaining < whole:
                    whole = remaining
                if strict and whole < (cl if cl < remaining else remaining) and whole >= threads:
                    whole -= whole % threads  # do not split a core because of a limit
                span_key = (-whole, c)
                if pick_key is None or span_key < pick_key:
                    pick, pick_key = row, span_key
            assert pick is not None
            assert pick_key is not None
            rows.remove(pick)
            whole = -pick_key[0]
            if whole <= 0:
                continue
            got = self.take(pick[0], whole)
            result |= got
            remaining -= got.bit_count()
        return result

    def take_cores(self, mask: int, need: int) -> int:
        """``take`` in clean mode from a group whose children are cores of ``threads`` usable
        threads each (no pools, so no limits), worked out on masks. Each child is then either
        whole (all its threads candidates) or half-used, and the steps above come to: whole
        cores, lowest first, while ``need`` is at least a core; the rest from the half-used
        core with the fewest free threads that can give it (lowest first), else from the lowest
        whole core. A property test holds it to ``take``."""
        return _take_cores(self.threads, self.core_of, self.cand & mask, self.clean & mask, need)


def _take_cores(threads: int, core_of: dict[int, int], cand: int, clean: int, need: int) -> int:
    """``_Packer.take_cores`` on the candidates and whole-core CPUs of the group."""
    out = 0
    while need >= threads:
        if not clean:
            return out
        core = core_of[(clean & -clean).bit_length() - 1]
        out |= core
        clean &= ~core
        cand &= ~core
        need -= threads
    if need <= 0:
        return out
    half = cand & ~clean
    best, best_key = 0, (threads, 0)
    while half:
        core = core_of[(half & -half).bit_length() - 1]
        half &= ~core
        free = (cand & core).bit_count()
        if free >= need and (free, core & -core) < best_key:
            best, best_key = core, (free, core & -core)
    if not best and clean:
        best = core_of[(clean & -clean).bit_length() - 1]
    return out | _lowest(cand & best, need)


def pack(
    tree: GroupTree,
    start: int,
    cand: int,
    n: int,
    limits: Sequence[int] | None = None,
) -> int | None:
    """``n`` CPUs out of ``cand`` inside group ``start``, topology-packed; None if impossible.

    ``limits[pool]`` is the most CPUs that may be taken from that pool's
    group (groups that are not pools are unlimited).
    """
    if n <= 0:
        return 0
    cand &= tree.groups[start].mask
    if cand.bit_count() < n:
        return None
    clean = clean_mask(tree, start, cand)
    for strict in (True, False):
        if strict and clean.bit_count() + min((cand & ~clean).bit_count(), n % tree.max_threads) < n:
            continue
        if strict and tree.groups[start].even_cores:  # (what ``take`` does there, without a packer)
            got = _take_cores(tree.max_threads, tree.core_of, cand, clean, n)
        else:
            got = _Packer(tree, cand, clean, limits, strict).take(start, n)
        if got.bit_count() == n:
            return got
    return None


def pack_near(
    tree: GroupTree,
    start: int,
    anchor: int,
    cand: int,
    n: int,
    limits: Sequence[int] | None = None,
) -> int | None:
    """Like ``pack`` but as close to the ``anchor`` CPUs as possible.

    Tries the deepest group under ``start`` holding all of ``anchor`` first,
    then each wider group up to ``start``, each time within the limits of the
    pools between that group and ``start``.
    """
    if n <= 0:
        return 0
    anchor &= tree.groups[start].mask
    if not anchor:
        return pack(tree, start, cand, n, limits)
    g = tree.deepest_containing(anchor, start)
    chain = [g]
    while g != start:
        g = tree.groups[g].parent
        chain.append(g)
    for i, g in enumerate(chain):
        if limits is not None:
            bound = min(
                (limits[tree.groups[h].pool] for h in chain[i:] if tree.groups[h].pool >= 0),
                default=_INF,
            )
            if bound < n:
                continue
        got = pack(tree, g, cand, n, limits)
        if got is not None:
            return got
    return None


def spread_shares(free: Sequence[int], n: int, unit: int) -> list[int] | None:
    """How many of ``n`` CPUs each part gives when spread as evenly as the free CPUs allow, in
    steps of ``unit`` (a core's threads, for whole cores): each step goes to the part that has
    given least so far and still has room, the one with the most room left on a tie, then the
    lowest. None when the parts cannot hold ``n``."""
    shares = [0] * len(free)
    left = n
    while left > 0:
        step = min(unit, left)
        fits = [(shares[i], shares[i] - room, i) for i, room in enumerate(free) if room - shares[i] >= step]
        if not fits:
            return None
        best = min(fits)[2]
        shares[best] += step
        left -= step
    return shares


def pack_spread(
    tree: GroupTree,
    parts: Sequence[int],
    cand: int,
    n: int,
    unit: int = 1,
    limits: Sequence[int] | None = None,
) -> int | None:
    """``n`` CPUs out of ``cand`` spread evenly over ``parts`` (disjoint masks: NUMA nodes), each
    part's share topology-packed within it (``spread_shares``, ``pack``); None if impossible."""
    masks = [cand & m for m in parts]
    shares = spread_shares([m.bit_count() for m in masks], n, unit)
    if shares is None:
        return None
    out = 0
    for mask, share in zip(masks, shares, strict=True):
        if not share:
            continue
        got = pack(tree, tree.deepest_containing(mask), mask, share, limits)
        if got is None:
            return None
        out |= got
    return out
