"""The policy's accounting: each pool's supply and every grant and claim against it, in one object.

What is *granted*: every container's ``Grant`` and every DRA claim, with the
indexes the operations need (exclusive CPU -> owner, per pool the shared CPU
requested in its subtree, the memory charged, the containers that follow its
shared set, pod and namespace counts, claim users).

What is *shared*: a pool's shared set is its sharable CPUs minus every
exclusive grant and every claimed CPU (``shared_cpus``; this is the only place
the rule is written).

What is *free*: per pool, the shared CPUs, the shared milli-CPU still free
(bounded by the ancestors), how many CPUs an exclusive grant may still
slice off without squeezing shared containers below their requests, and how
many shared CPUs sit on wholly free cores (``capacity``).

Every change goes through two primitives, ``put`` (a grant) and ``set_claim``,
which keep the indexes consistent and, inside a transaction, log the previous
value so ``rollback`` restores the state exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

from topodra.policy.api import ContainerRequest
from topodra.policy.classify import MIXED, SHARED, container_label
from topodra.policy.grants import Grant
from topodra.policy.partition import Partition, bits, fmt
from topodra.topology.model import MemoryKind

__all__ = ["FOLLOW_MIXED", "FOLLOW_NO_MEMS", "FOLLOW_THINNED", "Capacity", "Journal", "Supply", "follow_key", "where"]


def where(req: ContainerRequest) -> str:
    """How messages name a container."""
    return container_label(req)


#: ``Journal.changes`` is trimmed past this length
_JOURNAL_MAX = 4096

#: ``follow_key`` values besides the memory nodes of a plain shared container
FOLLOW_NO_MEMS, FOLLOW_MIXED, FOLLOW_THINNED = -1, -2, -3


def follow_key(g: Grant) -> int:
    """How a follower's assignment derives from its pool's shared set: plain shared containers of
    one pool with equal keys get the same assignment (the key is their memory nodes, or
    ``FOLLOW_NO_MEMS``); mixed ones add their own CPUs; thinned ones (hide-hyperthreads) may not
    change when the shared set does."""
    if g.hide_hyperthreads:
        return FOLLOW_THINNED
    if g.kind is MIXED:
        return FOLLOW_MIXED
    return FOLLOW_NO_MEMS if g.memory_preserve else g.mems


@dataclass(slots=True)
class Journal:
    """The pools whose figures (any of ``Capacity``'s, or the milli-CPU charged) a settle changed,
    in order, for readers that keep something worked out from them (``Placer``'s ranking):
    ``changes[k]`` is change number ``base + k``; trimmed now and then (a reader behind ``base``
    starts over). Current as of the last ``Supply.capacity()`` call."""

    changes: list[int]
    base: int


@dataclass(frozen=True, slots=True)
class Capacity:
    """Per pool: shared CPUs and what is still free of them. The supply's own lists, current as
    of the ``capacity()`` call that returned them: read them before the next change."""

    counts: list[int]  # shared CPUs
    free: list[int]  # free shared milli-CPU, bounded by the ancestors
    slack: list[int]  # CPUs the pool itself can give up and still hold its shared requests
    reach: list[int]  # slack bounded by the ancestors: the most an exclusive grant may take here
    whole: list[int]  # shared CPUs on cores whose every usable thread is shared (full cores free)


class Supply:
    """Grants and claims against the pools of one ``Partition``.

    The attributes are read by placement, statistics and the diff; only this
    class's methods change them.
    """

    def __init__(self, part: Partition, *, count_pods: bool = True, count_namespaces: bool = True) -> None:
        self.part = part
        self.count_pods = count_pods  # keep pod_pools (colocatePods)
        self.count_namespaces = count_namespaces  # keep ns_pools (colocateNamespaces)
        n = len(part.pools)
        self.grants: dict[str, Grant] = {}
        self.claims: dict[str, int] = {}
        self.claimed = 0  # union of claims
        self.excl = 0  # union of exclusive grants
        self.owner: dict[int, str] = {}  # exclusive CPU -> container
        self.milli = [0] * n  # shared milli-CPU charged in each pool's subtree
        self.mem = [0] * n  # memory bytes charged in each pool's subtree
        # who runs on each shared set, grouped by how their assignment follows it (``follow_key``)
        self.followers: list[dict[int, dict[str, None]]] = [{} for _ in range(n)]
        self._sorted: dict[tuple[int, int], list[str]] = {}  # (pool, follow key) -> the group's ids, sorted
        self.members = [0] * n  # containers whose CPU pool is this one
        self.pod_pools: dict[str, dict[int, int]] = {}  # pod -> pool -> containers
        self.ns_pools: dict[str, dict[int, int]] = {}  # namespace -> pool -> containers
        self.claim_users: dict[str, dict[str, None]] = {}
        self.touched: dict[str, None] = {}  # containers whose grant changed in this transaction
        self._log: list[tuple[bool, str, Grant | int | None]] | None = None
        # Per pool: ``own`` = 1000 x shared CPUs - charged milli-CPU and ``free`` its minimum along the
        # path from the root; ``slack`` = shared CPUs - charged CPUs (rounded up) and ``reach`` its
        # minimum. Changes mark the pools they touch (``_dirty``, and the pools holding CPUs taken
        # or freed since ``_counted``); ``capacity()`` settles only those.
        self._counted = 0
        self._counts = [p.sharable.bit_count() for p in part.pools]
        self._own = [1000 * c for c in self._counts]
        self._slack = list(self._counts)
        self._free = [0] * n
        self._reach = [0] * n
        self._dirty: set[int] = set(range(n))
        # Per pool, its shared CPUs on whole cores: recounted with the counts (a core is whole or
        # not as a unit, so the pools recounted are those holding a CPU that moved or a sibling).
        whole = part.tree.whole_cores(part.sharable)
        self._whole = [(p.cpus & whole).bit_count() for p in part.pools]
        # Per pool, the most any child can have of its own free milli-CPU and slack (all its
        # sharable CPUs, nothing charged: charges are never negative): a bound at or above these
        # leaves every child's figures as they were.
        sharable = [p.sharable.bit_count() for p in part.pools]
        self._top_slack = [max((sharable[c] for c in kids), default=0) for kids in part.children]
        self._top_free = [1000 * t for t in self._top_slack]
        self._capacity = Capacity(self._counts, self._free, self._slack, self._reach, self._whole)
        self.journal = Journal([], 0)  # which pools' figures a settle changed, in order

    # --- the rules -----------------------------------------------------------------
    @property
    def used(self) -> int:
        """CPUs out of every shared set: exclusively granted or claimed."""
        return self.excl | self.claimed

    @property
    def shared_cpus(self) -> int:
        """The shared CPUs of the machine: sharable, not exclusively granted, not claimed."""
        return self.part.sharable & ~(self.excl | self.claimed)

    def shared_in(self, cpus: int) -> int:
        """The shared CPUs among ``cpus``."""
        return cpus & self.shared_cpus

    def shared(self, pool: int) -> int:
        """A pool's shared set: the shared CPUs among its CPUs."""
        return self.part.pools[pool].cpus & self.shared_cpus

    def capacity(self) -> Capacity:
        """Shared CPUs, free shared milli-CPU, sliceable CPUs and shared CPUs on whole cores per
        pool (see ``Capacity``).

        The bounds are taken along the path from the root (a pool cannot give
        what an ancestor lacks).
        """
        if self._dirty or self._counted != self.excl | self.claimed:
            self._settle()
        return self._capacity

    def _charge_milli(self, path: tuple[int, ...], milli: int) -> None:
        """Charge shared milli-CPU to the pools of ``path`` (root first)."""
        charged, own, slack, counts = self.milli, self._own, self._slack, self._counts
        for p in path:
            m = charged[p] = charged[p] + milli
            own[p] -= milli
            slack[p] = counts[p] - (m + 999) // 1000
        self._dirty.update(path)

    def _settle(self) -> None:
        """Bring the figures up to date: recount the pools holding CPUs taken or freed (or a
        sibling of one), then settle every touched pool, parents first, and go down to a child
        only where its parent's bounds moved below the child's own figures."""
        used = self.excl | self.claimed
        dirty = self._dirty
        counts, own, slack, milli = self._counts, self._own, self._slack, self.milli
        kept = self.journal
        journal = kept.changes
        if len(journal) > _JOURNAL_MAX:
            kept.base += len(journal)
            journal.clear()
        if used != self._counted:
            part = self.part
            pools, shared = part.pools, part.sharable & ~used  # (``shared_cpus``)
            # the pools holding a CPU taken or freed, or a sibling of one (whose core became whole or split)
            moved = part.pools_of(part.tree.with_siblings((used ^ self._counted) & part.sharable))
            whole, clean = self._whole, part.tree.whole_cores(shared)
            for i in moved:
                cpus = pools[i].cpus
                c = (cpus & shared).bit_count()
                own[i] += 1000 * (c - counts[i])
                counts[i] = c
                slack[i] = c - (milli[i] + 999) // 1000
                whole[i] = (cpus & clean).bit_count()
            dirty.update(moved)
            self._counted = used
        free, reach, parents, children = self._free, self._reach, self.part.parents, self.part.children
        top_free, top_slack = self._top_free, self._top_slack
        todo: list[int] = []
        journal.extend(dirty)  # charged or recounted: their own figures may have moved
        # Dirty sets are closed under ancestors; in index order a pool's parent is settled first.
        for d in sorted(dirty):
            todo.append(d)
            while todo:
                j = todo.pop()
                f, r = own[j], slack[j]
                par = parents[j]
                if par >= 0:
                    if free[par] < f:
                        f = free[par]
                    if reach[par] < r:
                        r = reach[par]
                was_f, was_r = free[j], reach[j]
                if f != was_f or r != was_r:
                    free[j], reach[j] = f, r
                    journal.append(j)
                    # A child's figures are its own ones bounded by these: they move only where its own
                    # are above the lower of the old and the new bound (none can be where that is at or
                    # above what any child can have, ``_top_free``).
                    low_f = f if f < was_f else was_f
                    low_r = r if r < was_r else was_r
                    if low_f < top_free[j] or low_r < top_slack[j]:
                        for c in children[j]:
                            # (a dirty child comes later in this loop anyway, its parent settled)
                            if (own[c] > low_f or slack[c] > low_r) and c not in dirty:
                                todo.append(c)
        dirty.clear()

    def exclusive_ok(self, mask: int, pool: int, frac: int) -> bool:
        """Taking ``mask`` (plus ``frac`` shared milli-CPU in ``pool``) leaves every pool's shared
        containers their requested CPU."""
        counts = self.capacity().counts
        pools = self.part.pools
        path = pools[pool].path
        touched: list[int] | set[int] = self.part.pools_of(mask & self.part.sharable)
        if frac:
            touched = set(touched).union(path)
        for i in touched:
            t = (mask & pools[i].sharable).bit_count()
            extra = frac if i in path else 0
            if 1000 * (counts[i] - t) < self.milli[i] + extra:
                return False
        return True

    def mem_free(self, pool: int, kinds: frozenset[MemoryKind]) -> int:
        """Bytes of the wanted kinds not yet charged, in the pool and every ancestor."""
        size, mem = self.part.mem_size, self.mem
        return min(size(p, kinds) - mem[p] for p in self.part.pools[pool].path)

    def mem_floor(self, kinds: frozenset[MemoryKind]) -> int:
        """A bound at or below every pool's ``mem_free``: the smallest pool's size less the memory
        charged anywhere (whatever is charged to a pool is charged to the root too)."""
        return self.part.min_mem_size(kinds) - self.mem[0]

    def claim_problem(self, mask: int) -> str | None:
        """Why ``mask`` cannot be claimed now, or None."""
        if not mask:
            return "refusing to claim an empty CPU set"
        part = self.part
        offline = mask & ~part.topology.online.mask
        if offline:
            return f"CPUs {fmt(offline)} are not online"
        outside = mask & ~part.allowed
        if outside:
            return f"CPUs {fmt(outside)} are not available to the policy"
        reserved = mask & part.reserved
        if reserved and not part.reserved & ~(self.claimed | mask):
            # A claim may hold reserved CPUs (a system daemon tolerating the devices' reserved
            # taint), but one reserved CPU always stays for the system containers.
            return (
                f"CPUs {fmt(reserved)} are reserved for system containers and claiming them would leave "
                f"none of the reserved CPUs {fmt(part.reserved)} to them"
            )
        taken = mask & self.claimed
        if taken:
            others = sorted(k for k, v in self.claims.items() if v & taken)
            return f"CPUs {fmt(taken)} are already claimed by {', '.join(map(repr, others))}"
        return None

    def grant_problem(self, g: Grant) -> str | None:
        """Why ``g`` cannot be recorded now (its exclusive CPUs or claims), or None."""
        part = self.part
        allowed_here = part.isolated if g.isolated else part.sharable
        if g.exclusive & ~(allowed_here & part.pools[g.pool].cpus) or g.exclusive & self.used:
            return f"exclusive CPUs {fmt(g.exclusive)} are not grantable"
        if not all(c in self.claims for c in g.claims):
            return f"claims {list(g.claims)!r} are not all held"
        if g.mem_pool not in part.pools[g.pool].path:
            return f"memory pool {part.pools[g.mem_pool].name} is not {part.pools[g.pool].name} or an ancestor"
        return None

    def sorted_followers(self, pool: int, key: int) -> list[str]:
        """One follower group's ids in order (kept until the group changes: an operation that
        moves a shared set reports its followers sorted, and sorted runs merge cheaply)."""
        got = self._sorted.get((pool, key))
        if got is None:
            got = self._sorted[(pool, key)] = sorted(self.followers[pool][key])
        return got

    def followers_of(self, pool: int) -> list[str]:
        """The containers running on a pool's shared set."""
        return [cid for group in self.followers[pool].values() for cid in group]

    def hold(self, milli: int) -> None:
        """Charge (negative: return) shared milli-CPU to the root outside any grant (sync keeps
        a CPU for the shared containers it places last); not logged: the caller undoes it."""
        self._charge_milli(self.part.pools[0].path, milli)

    def owners(self, mask: int) -> list[str]:
        """The containers holding any of ``mask`` exclusively."""
        owner = self.owner
        return sorted({owner[c] for c in bits(mask) if c in owner})

    # --- transactions ----------------------------------------------------------------
    def begin(self) -> None:
        self._log = []
        self.touched = {}

    def commit(self) -> None:
        self._log = None

    def rollback(self) -> None:
        log, self._log = self._log, None
        assert log is not None
        for is_grant, key, old in reversed(log):
            if is_grant:
                assert not isinstance(old, int)
                self.put(key, old)
            else:
                assert not isinstance(old, Grant)
                self.set_claim(key, old)

    # --- the two primitives -------------------------------------------------------
    def put(self, cid: str, grant: Grant | None) -> None:
        """Set (or with None drop) a container's grant."""
        old = self.grants.get(cid)
        if self._log is not None:
            self._log.append((True, cid, old))
            self.touched[cid] = None
        if old is not None:
            self._unindex(cid, old)
            del self.grants[cid]
        if grant is not None:
            self.grants[cid] = grant
            self._index(cid, grant)

    def set_claim(self, claim_id: str, mask: int | None) -> None:
        """Set (or with None drop) a claim's CPUs."""
        old = self.claims.get(claim_id)
        if self._log is not None:
            self._log.append((False, claim_id, old))
        if old is not None:
            del self.claims[claim_id]
            self.claimed &= ~old
        if mask is not None:
            self.claims[claim_id] = mask
            self.claimed |= mask

    def _index(self, cid: str, g: Grant) -> None:
        follows = g.kind is SHARED or g.kind is MIXED
        if follows:
            groups = self.followers[g.pool]
            key = follow_key(g)
            group = groups.get(key)
            if group is None:
                group = groups[key] = {}
            group[cid] = None
            if self._sorted:
                self._sorted.pop((g.pool, key), None)
        if g.exclusive:
            self.excl |= g.exclusive
            for c in bits(g.exclusive):
                self.owner[c] = cid
        for claim in g.claims:
            self.claim_users.setdefault(claim, {})[cid] = None
        self._charge(g, 1, follows)

    def _unindex(self, cid: str, g: Grant) -> None:
        follows = g.kind is SHARED or g.kind is MIXED
        if follows:
            groups = self.followers[g.pool]
            key = follow_key(g)
            group = groups[key]
            del group[cid]
            if not group:
                del groups[key]
            if self._sorted:
                self._sorted.pop((g.pool, key), None)
        if g.exclusive:
            self.excl &= ~g.exclusive
            for c in bits(g.exclusive):
                del self.owner[c]
        for claim in g.claims:
            users = self.claim_users[claim]
            del users[cid]
            if not users:
                del self.claim_users[claim]
        self._charge(g, -1, follows)

    def _charge(self, g: Grant, sign: int, follows: bool) -> None:
        """Add (sign 1) or take back (-1) what a grant counts for: CPU, memory, pool members."""
        pools = self.part.pools
        if g.milli and follows:
            self._charge_milli(pools[g.pool].path, sign * g.milli)
        if g.memory:
            mem = self.mem
            for p in pools[g.mem_pool].path:
                mem[p] += sign * g.memory
        self.members[g.pool] += sign
        if self.count_pods:
            _count(self.pod_pools, g.request.pod_uid, g.pool, sign)
        if self.count_namespaces:
            _count(self.ns_pools, g.request.namespace, g.pool, sign)


def _count(table: dict[str, dict[int, int]], key: str, pool: int, sign: int) -> None:
    """Count a container in (sign 1) or out of (-1) ``table[key][pool]``, dropping zeros."""
    counts = table.get(key)
    if counts is None:
        counts = table[key] = {}
    left = counts.get(pool, 0) + sign
    if left:
        counts[pool] = left
    else:
        del counts[pool]
        if not counts:
            del table[key]
