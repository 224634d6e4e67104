"""The topology-aware policy: containers and DRA claims in, every cpuset/mems change out.

Pure and deterministic: no I/O, no clock, no randomness. Every state-changing
call runs as a transaction: it either returns the ``Changes`` it caused (each
container whose assignment differs from what the caller last got, plus the
container the call was about) or raises ``PolicyError`` with nothing changed.
Nothing is left pending for a later call to deliver.

State is kept so the common operations touch only what they change: CPU
sets are int bitmasks; per pool the shared CPU requested in its subtree, and
the containers that follow its shared set; per CPU the owner of an exclusive
grant. A pool's shared set is ``sharable & ~(exclusive | claimed)``, one
machine-word expression, so finding which pools changed is a comparison of
a few dozen ints.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from topodra.cpuset import CPUSet
from topodra.policy.annotations import Preferences, parse_preferences
from topodra.policy.api import Assignment, Changes, ContainerRequest, PolicyError
from topodra.policy.classify import GrantKind, Isolation, Need, classify
from topodra.policy.config import PolicyConfig, TopologyLevel
from topodra.policy.grants import Grant
from topodra.policy.groups import LEVELS, GroupTree, build_group_tree
from topodra.policy.packing import clean_mask, pack, pack_near
from topodra.policy.pools import MemoryMap, Pool, build_pools, core_type_masks
from topodra.policy.stats import CPUUsage, PolicyStats, PoolStats
from topodra.topology.model import CoreType, MemoryKind, Topology

__all__ = ["Policy"]

_RANK = {name: i for i, name in enumerate(LEVELS)}
_LEVEL_RANK = {TopologyLevel(v): _RANK[v] for v in ("system", "package", "die", "numa", "l3cache")}


def _bits(mask: int) -> Iterable[int]:
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def _fmt(mask: int) -> str:
    return CPUSet.from_mask(mask).format() or "none"


def _where(req: ContainerRequest) -> str:
    return f"container {req.id} ({req.namespace}/{req.pod_name}/{req.name})"


@dataclass(frozen=True, slots=True)
class _Capacity:
    version: int
    counts: list[int]  # shared CPUs per pool
    free: list[int]  # free shared milli-CPU, bounded by the ancestors
    slack: list[int]  # CPUs the pool itself can give up and still hold its shared requests
    reach: list[int]  # slack bounded by the ancestors: the most an exclusive grant may take here


class Policy:
    """Topology-aware CPU and memory placement for one node (see docs/policy.md)."""

    def __init__(self, topology: Topology, config: PolicyConfig | None = None) -> None:
        self._topology = topology
        self._config = config if config is not None else PolicyConfig()
        self._setup()
        n = len(self._pools)
        self._grants: dict[str, Grant] = {}
        self._claims: dict[str, int] = {}
        self._claimed = 0  # union of claims
        self._excl = 0  # union of exclusive grants
        self._owner: dict[int, str] = {}  # exclusive CPU -> container
        self._milli = [0] * n  # shared milli-CPU charged in each pool's subtree
        self._mem = [0] * n  # memory bytes charged in each pool's subtree
        self._followers: list[dict[str, None]] = [{} for _ in range(n)]
        self._members = [0] * n  # containers whose CPU pool is this one
        self._pod_pools: dict[str, dict[int, int]] = {}
        self._ns_pools: dict[str, dict[int, int]] = {}
        self._claim_users: dict[str, dict[str, None]] = {}
        self._assigned: dict[str, Assignment] = {}
        self._log: list[tuple[str, str, Any]] | None = None
        self._version = 0  # bumped by every state change; keys the capacity cache
        self._mem_hints: dict[str, int] = {}  # during sync: the memory nodes containers run on
        self._cap: _Capacity | None = None
        self._touched: dict[str, None] = {}

    # ------------------------------------------------------------------ setup
    def _setup(self) -> None:
        cfg, topo = self._config, self._topology
        online = topo.online
        allowed = online
        if cfg.available_cpus is not None:
            bad = cfg.available_cpus - online
            if bad:
                raise PolicyError(
                    f"availableCPUs {cfg.available_cpus.format()!r}: CPUs {bad} are not online "
                    f"(online CPUs: {online})"
                )
            allowed = cfg.available_cpus
        if cfg.excluded_cpus is not None:
            allowed = allowed - cfg.excluded_cpus
        if not allowed:
            raise PolicyError("availableCPUs/excludedCPUs leave no CPU for the policy to use")
        kernel_isolated = topo.isolated | CPUSet(c for c, info in topo.cpus.items() if info.isolated)
        isolated_all = kernel_isolated & allowed
        tree = build_group_tree(topo, allowed)
        if cfg.reserved_cpus is not None:
            bad = cfg.reserved_cpus - allowed
            if bad:
                raise PolicyError(
                    f"reservedCPUs {cfg.reserved_cpus.format()!r}: CPUs {bad} are not available to the "
                    f"policy (available: {allowed})"
                )
            reserved = cfg.reserved_cpus
        elif cfg.reserved_cpu_count:
            cand = allowed - isolated_all
            if cfg.reserved_cpu_count >= len(cand):
                raise PolicyError(
                    f"reservedCPUCount {cfg.reserved_cpu_count}: only {len(cand)} non-isolated CPUs are "
                    "available and at least one must stay for containers"
                )
            # Start at the lowest CPU (where the kernel keeps its housekeeping), topology-packed.
            first = cand.first()
            anchor = tree.core_of.get(first, 1 << first) & cand.mask
            picked = pack_near(tree, 0, anchor, cand.mask, cfg.reserved_cpu_count)
            assert picked is not None  # enough candidates were checked above
            reserved = CPUSet.from_mask(picked)
        else:
            reserved = CPUSet()
        isolated = isolated_all - reserved
        sharable = allowed - reserved - isolated
        if not sharable:
            raise PolicyError(
                f"no CPU left for shared containers: of the available CPUs {allowed}, {reserved or 'none'} "
                f"are reserved and {isolated or 'none'} isolated"
            )
        pools, memory = build_pools(topo, tree, reserved, isolated)
        self._tree: GroupTree = tree
        self._pools: list[Pool] = pools
        self._memory_map: MemoryMap = memory
        self._allowed = allowed.mask
        self._reserved = reserved.mask
        self._isolated = isolated.mask
        self._sharable = sharable.mask
        self._kind_masks = core_type_masks(topo, allowed.mask)
        self._pool_of_group = [0] * len(tree.groups)
        for g in tree.groups:
            self._pool_of_group[g.index] = g.pool if g.pool >= 0 else self._pool_of_group[g.parent]
        self._by_name = {p.name: p.index for p in pools}
        self._depth = [p.depth for p in pools]
        self._parents = [p.parent for p in pools]
        self._sharables = [p.sharable for p in pools]
        self._level_dist = {lv: [self._level_distance(p, lv) for p in pools] for lv in TopologyLevel}
        # CPU -> every pool holding it (the path of the deepest one)
        self._cpu_pools: dict[int, tuple[int, ...]] = {}
        for p in pools:
            for c in _bits(p.cpus):
                if len(p.path) > len(self._cpu_pools.get(c, ())):
                    self._cpu_pools[c] = p.path
        self._mem_size_cache: dict[tuple[int, frozenset[MemoryKind]], int] = {}
        self._missing_cache: dict[frozenset[MemoryKind], list[int]] = {}
        self._assignment_cache: dict[tuple[int, int], Assignment] = {}

    # ------------------------------------------------------------- properties
    @property
    def topology(self) -> Topology:
        return self._topology

    @property
    def config(self) -> PolicyConfig:
        return self._config

    @property
    def reserved_cpus(self) -> CPUSet:
        return CPUSet.from_mask(self._reserved)

    @property
    def isolated_cpus(self) -> CPUSet:
        """Kernel-isolated CPUs the policy may hand out (reserved ones excluded)."""
        return CPUSet.from_mask(self._isolated)

    @property
    def available_cpus(self) -> CPUSet:
        """The CPUs the policy manages (online, allowed by the config)."""
        return CPUSet.from_mask(self._allowed)

    @property
    def pools(self) -> Sequence[Pool]:
        return tuple(self._pools)

    @property
    def notes(self) -> list[str]:
        """Topology groups left out of the pool tree, and why."""
        return list(self._tree.notes)

    def claimed(self, claim_id: str) -> CPUSet | None:
        mask = self._claims.get(claim_id)
        return None if mask is None else CPUSet.from_mask(mask)

    def claims(self) -> dict[str, CPUSet]:
        return {k: CPUSet.from_mask(v) for k, v in sorted(self._claims.items())}

    def assignment(self, container_id: str) -> Assignment | None:
        return self._assigned.get(container_id)

    def assignments(self) -> dict[str, Assignment]:
        return dict(sorted(self._assigned.items()))

    def grants(self) -> dict[str, Grant]:
        """Every container's grant, by container id (preserve containers included)."""
        return dict(sorted(self._grants.items()))

    def grant(self, container_id: str) -> Grant | None:
        """The policy's record for one container (kind, pool, exclusive CPUs ...)."""
        return self._grants.get(container_id)

    def pool_name(self, index: int) -> str:
        return self._pools[index].name

    def shared_cpus(self, pool: str = "root") -> CPUSet:
        """The current shared set of a pool."""
        try:
            p = self._pools[self._by_name[pool]]
        except KeyError:
            raise PolicyError(f"no pool named {pool!r} (pools: {', '.join(self._by_name)})") from None
        return CPUSet.from_mask(p.sharable & ~(self._excl | self._claimed))

    # ------------------------------------------------------------- public ops
    def add(self, req: ContainerRequest) -> Changes:
        """Place a new container. A known id is treated as an update."""
        if req.id in self._grants:
            return self.update(req)
        need = self._classify(req)

        def body() -> None:
            self._put(req.id, self._place(req, need))

        return self._transaction(body, subject=req.id)

    def update(self, req: ContainerRequest) -> Changes:
        """Re-place a container whose request changed (in-place resize); unknown ids are added."""
        old = self._grants.get(req.id)
        if old is None:
            return self.add(req)
        if old.request == req and not old.degraded:
            current = self._assigned.get(req.id)
            return {req.id: current} if current is not None else {}
        need = self._classify(req)

        def body() -> None:
            self._put(req.id, None)
            self._put(req.id, self._place(req, need, hint=old, keep=old.exclusive))

        return self._transaction(body, subject=req.id)

    def remove(self, container_id: str) -> Changes:
        """Forget a stopped or removed container; unknown ids change nothing."""
        if container_id not in self._grants:
            return {}
        return self._transaction(lambda: self._put(container_id, None))

    def claim(self, claim_id: str, cpus: CPUSet) -> Changes:
        """Take ``cpus`` out of every pool for a DRA claim (see docs/policy.md for the rules)."""
        mask = cpus.mask
        old = self._claims.get(claim_id)
        if old is not None:
            if old == mask:
                return {}
            raise PolicyError(
                f"claim {claim_id!r} already holds CPUs {_fmt(old)}; release it before claiming {cpus}"
            )
        if not claim_id:
            raise PolicyError("claim id must not be empty")
        if not mask:
            raise PolicyError(f"claim {claim_id!r}: refusing to claim an empty CPU set")
        offline = mask & ~self._topology.online.mask
        if offline:
            raise PolicyError(f"claim {claim_id!r}: CPUs {_fmt(offline)} are not online")
        outside = mask & ~self._allowed
        if outside:
            raise PolicyError(f"claim {claim_id!r}: CPUs {_fmt(outside)} are not available to the policy")
        reserved = mask & self._reserved
        if reserved:
            raise PolicyError(f"claim {claim_id!r}: CPUs {_fmt(reserved)} are reserved for system containers")
        taken = mask & self._claimed
        if taken:
            others = sorted(k for k, v in self._claims.items() if v & taken)
            raise PolicyError(
                f"claim {claim_id!r}: CPUs {_fmt(taken)} are already claimed by {', '.join(map(repr, others))}"
            )

        def body() -> None:
            victims = sorted({self._owner[c] for c in _bits(mask) if c in self._owner})
            olds = {cid: self._grants[cid] for cid in victims}
            self._set_claim(claim_id, mask)
            for cid in victims:
                self._put(cid, None)
            # Move the biggest grants first: they are the hardest to fit.
            for cid in sorted(victims, key=lambda c: (-olds[c].exclusive.bit_count(), c)):
                g = olds[cid]
                need, note = self._classify_for_sync(g.request)
                try:
                    new = self._with_note(self._place(g.request, need, hint=g, keep=g.exclusive & ~mask), note)
                except PolicyError as e:
                    raise PolicyError(
                        f"claim {claim_id!r} of CPUs {cpus} refused: {_where(g.request)} holds "
                        f"{_fmt(g.exclusive & mask)} exclusively and cannot move: {e}"
                    ) from None
                self._put(cid, new)
            self._rebalance(f"claim {claim_id!r} of CPUs {cpus}", mask)

        return self._transaction(body)

    def release(self, claim_id: str) -> Changes:
        """Return a claim's CPUs to the pools; unknown ids change nothing."""
        if claim_id not in self._claims:
            return {}

        def body() -> None:
            users = sorted(self._claim_users.get(claim_id, {}))
            self._set_claim(claim_id, None)
            for cid in users:
                g = self._grants[cid]
                self._put(cid, None)
                self._put(cid, self._replace_claimed(g, f"claim {claim_id!r} was released while it ran"))

        return self._transaction(body)

    def pick(self, count: int, within: CPUSet, *, prefer: CoreType | None = None) -> CPUSet:
        """Choose ``count`` CPUs of ``within`` for a grouped device; does not claim them."""
        if count <= 0:
            raise PolicyError(f"pick: count must be positive, got {count}")
        usable = within.mask & self._allowed & ~self._reserved
        cand = usable & ~self._claimed & ~self._excl
        if cand.bit_count() < count:
            raise PolicyError(
                f"pick: {count} CPUs wanted out of {within} but only {cand.bit_count()} are free "
                f"({_fmt(cand)}; claimed {_fmt(usable & self._claimed)}, exclusively granted "
                f"{_fmt(usable & self._excl)}, reserved or unavailable {_fmt(within.mask & ~usable)})"
            )
        start = self._tree.deepest_containing(usable) if usable else 0
        slack = self._capacity().slack
        choices = [cand]
        if prefer is not None:
            pref = cand & self._kind_masks.get(prefer, 0)
            if pref.bit_count() >= count:
                choices.insert(0, pref)
        for use in choices:
            for limits in (slack, None):  # first without squeezing shared containers, then any
                got = pack(self._tree, start, use, count, limits)
                if got is not None:
                    return CPUSet.from_mask(got)
        raise PolicyError(f"pick: cannot choose {count} CPUs out of {within}")  # pragma: no cover

    def reconfigure(self, config: PolicyConfig) -> Changes:
        """Apply a new configuration: rebuild the pools and re-place everything."""
        fresh = Policy(self._topology, config)
        for claim_id, mask in sorted(self._claims.items()):
            bad = mask & ~(fresh._allowed & ~fresh._reserved)
            if bad:
                raise PolicyError(
                    f"reconfigure refused: claim {claim_id!r} holds CPUs {_fmt(bad)} which the new "
                    "configuration reserves or does not make available"
                )
            fresh._claims[claim_id] = mask
            fresh._claimed |= mask
        current = [(g.request, self._assigned.get(cid)) for cid, g in sorted(self._grants.items())]
        changes = fresh.sync(current)
        self.__dict__.update(fresh.__dict__)
        return changes

    def sync(self, containers: Sequence[tuple[ContainerRequest, Assignment | None]]) -> Changes:
        """Rebuild the grants from what the runtime reports, keeping current CPUs where valid.

        Claims must be restored first (``claim()``). Returns every container
        whose assignment differs from the one reported (or had none).
        """
        seen: set[str] = set()
        for req, _ in containers:
            if req.id in seen:
                raise PolicyError(f"sync: container {req.id} is listed twice")
            seen.add(req.id)
        reported = {req.id: cur for req, cur in containers}
        phases: list[list[tuple[ContainerRequest, Need, Assignment | None, str]]] = [[], [], [], []]
        for req, cur in sorted(containers, key=lambda rc: rc[0].id):
            need, note = self._classify_for_sync(req)
            if need.kind is GrantKind.CLAIMED or need.kind is GrantKind.PRESERVE or need.kind is GrantKind.RESERVED:
                phases[0].append((req, need, cur, note))
            elif need.kind is GrantKind.SHARED:
                phases[3].append((req, need, cur, note))
            elif (
                need.kind is GrantKind.EXCLUSIVE
                and cur is not None
                and not need.hide_hyperthreads
                and len(cur.cpus) == need.exclusive
            ):
                phases[1].append((req, need, cur, note))
            else:
                phases[2].append((req, need, cur, note))

        def body() -> None:
            for cid in sorted(self._grants):
                self._put(cid, None)
            self._mem_hints = {req.id: cur.mems.mask for req, cur in containers if cur is not None}
            for req, need, _cur, note in phases[0]:
                self._put(req.id, self._with_note(self._place(req, need), note))
            # Exclusive grants come first but must leave a CPU for the shared containers that follow:
            # hold 1 milli-CPU for them in the root while the exclusive ones are placed.
            phantom = 1 if phases[3] or any(n.kind is GrantKind.MIXED for _, n, _, _ in phases[2]) else 0
            self._milli[0] += phantom
            self._version += 1
            try:
                retry: list[tuple[ContainerRequest, Need, Assignment | None, str]] = []
                for req, need, cur, note in phases[1]:
                    assert cur is not None
                    kept = self._keep_exclusive(req, need, cur.cpus.mask)
                    if kept is None:
                        retry.append((req, need, cur, note))
                    else:
                        self._put(req.id, self._with_note(kept, note))
                for req, need, cur, note in retry + phases[2]:
                    keep = cur.cpus.mask & self._allowed if cur is not None else 0
                    if need.hide_hyperthreads:  # it saw one thread per core: it held the cores
                        for c in _bits(keep):
                            keep |= self._tree.core_of.get(c, 0)
                    try:
                        g = self._place(req, need, keep=keep)
                    except PolicyError as e:
                        milli = max(need.milli, need.exclusive * 1000)
                        shared = replace(need, kind=GrantKind.SHARED, exclusive=0, milli=milli)
                        g = self._with_note(self._place(req, shared), f"placed on shared CPUs: {e}")
                    self._put(req.id, self._with_note(g, note))
            finally:
                self._milli[0] -= phantom
                self._version += 1
            for req, need, cur, note in phases[3]:
                hint = self._pool_hint(cur.cpus.mask, cur.mems.mask, need.memory_kinds) if cur is not None else None
                if hint is not None and self._capacity().counts[hint]:
                    # already running there: stay, even where claims have over-committed the pool
                    self._put(req.id, self._with_note(self._place(req, need, hint_pool=hint, stay=True), note))
                else:
                    self._put(req.id, self._with_note(self._place(req, need, hint_pool=hint), note))

        try:
            return self._transaction(body, reported=reported)
        finally:
            self._mem_hints = {}

    # ---------------------------------------------------------------- stats
    def stats(self) -> PolicyStats:
        used_excl, claimed = self._excl, self._claimed
        default_kinds = frozenset(self._config.default_memory_types)

        def usage(cpus: int) -> CPUUsage:
            shared = cpus & self._sharable & ~used_excl & ~claimed
            free_iso = cpus & self._isolated & ~used_excl & ~claimed
            return CPUUsage(
                cpus=CPUSet.from_mask(cpus),
                allocated=CPUSet.from_mask(cpus & used_excl),
                shared=CPUSet.from_mask(shared),
                claimed=CPUSet.from_mask(cpus & claimed),
                reserved=CPUSet.from_mask(cpus & self._reserved),
                isolated=CPUSet.from_mask(cpus & self._isolated),
                free=CPUSet.from_mask(shared | free_iso),
            )

        pools = []
        for p in self._pools:
            nodes = 0
            for m in p.memory.values():
                nodes |= m
            shared_count = (p.sharable & ~used_excl & ~claimed).bit_count()
            pools.append(
                PoolStats(
                    name=p.name,
                    levels=p.levels,
                    depth=p.depth,
                    parent=self._pools[p.parent].name if p.parent >= 0 else None,
                    usage=usage(p.cpus),
                    mems=CPUSet.from_mask(nodes),
                    memory_bytes=self._memory_map.size(p.nodes_of(default_kinds)),
                    memory_requested=self._mem[p.index],
                    shared_requested_milli=self._milli[p.index],
                    shared_capacity_milli=1000 * shared_count,
                    containers=self._members[p.index],
                )
            )
        kinds = {kind: usage(mask) for kind, mask in self._kind_masks.items()}
        counts: dict[str, int] = {}
        for g in self._grants.values():
            counts[g.kind.value] = counts.get(g.kind.value, 0) + 1
        degraded = tuple(sorted(cid for cid, g in self._grants.items() if g.degraded))
        return PolicyStats(
            pools=tuple(pools), total=usage(self._allowed), kinds=kinds, containers=dict(sorted(counts.items())),
            degraded=degraded,
        )

    # --------------------------------------------------------- snapshot/restore
    def snapshot(self) -> dict[str, Any]:
        """The whole state as JSON-able data; ``restore`` rebuilds it exactly."""
        from topodra.policy.snapshot import dump

        return dump(self)

    @classmethod
    def restore(cls, topology: Topology, snapshot: dict[str, Any]) -> Policy:
        """Rebuild a policy from ``snapshot()`` output; PolicyError if it does not fit this machine."""
        from topodra.policy.snapshot import load

        return load(cls, topology, snapshot)

    # ============================================================ internals
    def _classify(self, req: ContainerRequest, *, ignore_claims: bool = False) -> Need:
        return classify(
            req,
            self._config,
            has_reserved=bool(self._reserved),
            has_isolated=bool(self._isolated),
            ignore_claims=ignore_claims,
        )

    def _classify_for_sync(self, req: ContainerRequest) -> tuple[Need, str]:
        """Classify a running container; it already runs, so degrade instead of refusing."""
        notes: list[str] = []
        prefs: Preferences | None = None
        try:
            parse_preferences(req.annotations, req.name)
        except PolicyError as e:
            notes.append(f"annotations ignored: {e}")
            prefs = Preferences()

        def reading(ignore_claims: bool) -> Need:
            return classify(
                req,
                self._config,
                has_reserved=bool(self._reserved),
                has_isolated=bool(self._isolated),
                ignore_claims=ignore_claims,
                prefs=prefs,
            )

        need = reading(False)
        if need.kind is GrantKind.CLAIMED:
            missing = [c for c in need.claims if c not in self._claims]
            known = tuple(c for c in need.claims if c in self._claims)
            if missing and known:
                notes.append(f"claims {', '.join(map(repr, missing))} are not prepared; pinned to the others")
                need = replace(need, claims=known)
            elif missing:
                notes.append(f"claims {', '.join(map(repr, missing))} are not prepared; placed by its CPU request")
                need = reading(True)
        if not self._pools[0].nodes_of(need.memory_kinds):
            notes.append(
                f"memory types {', '.join(sorted(k.value for k in need.memory_kinds))} are not on this node; "
                "default types used"
            )
            need = replace(need, memory_kinds=frozenset(self._config.default_memory_types))
        return need, "; ".join(notes)

    @staticmethod
    def _with_note(g: Grant, note: str) -> Grant:
        if not note or g.degraded:
            return g
        return replace(g, degraded=note)

    # --- transactions --------------------------------------------------------
    def _transaction(
        self,
        body: Callable[[], None],
        subject: str | None = None,
        reported: dict[str, Assignment | None] | None = None,
    ) -> Changes:
        self._log = []
        self._touched = {}
        if len(self._assignment_cache) > 4096:
            self._assignment_cache.clear()
        used_before = self._excl | self._claimed
        claimed_before = self._claimed
        try:
            body()
            if reported is None:
                if not self._config.pin_cpu and self._claimed != claimed_before:
                    self._touched.update(dict.fromkeys(self._grants))  # unpinned containers avoid claims
                changes, assigned = self._diff(used_before, subject)
            else:
                changes, assigned = self._diff_reported(reported)
        except BaseException:
            self._rollback()
            raise
        finally:
            self._log = None
        for cid, a in assigned.items():
            if a is None:
                self._assigned.pop(cid, None)
            else:
                self._assigned[cid] = a
        if reported is not None:
            for cid in [c for c in self._assigned if c not in self._grants]:
                del self._assigned[cid]
        return changes

    def _rollback(self) -> None:
        log, self._log = self._log, None
        assert log is not None
        for what, key, old in reversed(log):
            if what == "g":
                self._put(key, old)
            else:
                self._set_claim(key, old)

    def _diff(self, used_before: int, subject: str | None) -> tuple[Changes, dict[str, Assignment | None]]:
        # Shared sets changed exactly in the pools holding a sharable CPU that was taken or freed.
        delta = (used_before ^ (self._excl | self._claimed)) & self._sharable
        candidates: dict[str, None] = dict(self._touched)
        if delta:
            pools: set[int] = set()
            for c in _bits(delta):
                pools.update(self._cpu_pools[c])
            for i in pools:
                candidates.update(self._followers[i])
        new: dict[str, Assignment | None] = {}
        changes: Changes = {}
        assigned = self._assigned
        grants = self._grants
        shared = GrantKind.SHARED
        same: dict[tuple[int, int, bool, bool], Assignment | None] = {}  # shared followers of one pool
        for cid in candidates:
            g = grants.get(cid)
            if g is None:
                a = None
            elif g.kind is shared:
                key = (g.pool, g.mems, g.hide_hyperthreads, g.memory_preserve)
                if key in same:
                    a = same[key]
                else:
                    a = same[key] = self._compute(g)
            else:
                a = self._compute(g)
            old = assigned.get(cid)
            if a is None:
                if old is not None:
                    new[cid] = None
                continue
            if a is not old and a != old:
                changes[cid] = a
                new[cid] = a
        if subject is not None:
            a = new[subject] if subject in new else assigned.get(subject)
            if a is not None:
                changes[subject] = a
        ordered: Changes = {}
        if subject is not None and subject in changes:
            ordered[subject] = changes.pop(subject)
        for cid in sorted(changes):
            ordered[cid] = changes[cid]
        return ordered, new

    def _diff_reported(self, reported: dict[str, Assignment | None]) -> tuple[Changes, dict[str, Assignment | None]]:
        changes: Changes = {}
        new: dict[str, Assignment | None] = {}
        for cid in sorted(reported):
            g = self._grants.get(cid)
            a = self._compute(g) if g is not None else None
            new[cid] = a
            if a is not None and a != reported[cid]:
                changes[cid] = a
        return changes, new

    # --- primitive state changes (logged for rollback) -------------------------
    def _put(self, cid: str, grant: Grant | None) -> None:
        self._version += 1
        old = self._grants.get(cid)
        if self._log is not None:
            self._log.append(("g", cid, old))
            self._touched[cid] = None
        if old is not None:
            self._unindex(cid, old)
            del self._grants[cid]
        if grant is not None:
            self._grants[cid] = grant
            self._index(cid, grant)

    def _index(self, cid: str, g: Grant) -> None:
        req = g.request
        if g.follows_pool:
            self._followers[g.pool][cid] = None
            for p in self._pools[g.pool].path:
                self._milli[p] += g.milli
        if g.exclusive:
            self._excl |= g.exclusive
            for c in _bits(g.exclusive):
                self._owner[c] = cid
        if g.memory:
            for p in self._pools[g.mem_pool].path:
                self._mem[p] += g.memory
        self._members[g.pool] += 1
        pods = self._pod_pools.setdefault(req.pod_uid, {})
        pods[g.pool] = pods.get(g.pool, 0) + 1
        spaces = self._ns_pools.setdefault(req.namespace, {})
        spaces[g.pool] = spaces.get(g.pool, 0) + 1
        for claim in g.claims:
            self._claim_users.setdefault(claim, {})[cid] = None

    def _unindex(self, cid: str, g: Grant) -> None:
        req = g.request
        if g.follows_pool:
            del self._followers[g.pool][cid]
            for p in self._pools[g.pool].path:
                self._milli[p] -= g.milli
        if g.exclusive:
            self._excl &= ~g.exclusive
            for c in _bits(g.exclusive):
                del self._owner[c]
        if g.memory:
            for p in self._pools[g.mem_pool].path:
                self._mem[p] -= g.memory
        self._members[g.pool] -= 1
        for table, key in ((self._pod_pools, req.pod_uid), (self._ns_pools, req.namespace)):
            counts = table[key]
            counts[g.pool] -= 1
            if not counts[g.pool]:
                del counts[g.pool]
                if not counts:
                    del table[key]
        for claim in g.claims:
            users = self._claim_users[claim]
            del users[cid]
            if not users:
                del self._claim_users[claim]

    def _set_claim(self, claim_id: str, mask: int | None) -> None:
        self._version += 1
        old = self._claims.get(claim_id)
        if self._log is not None:
            self._log.append(("c", claim_id, old))
        if old is not None:
            del self._claims[claim_id]
            self._claimed &= ~old
        if mask is not None:
            self._claims[claim_id] = mask
            self._claimed |= mask

    # --- assignments -----------------------------------------------------------
    def _compute(self, g: Grant) -> Assignment | None:
        kind = g.kind
        if kind is GrantKind.PRESERVE:
            return None
        if kind is GrantKind.CLAIMED:
            cpus = 0
            for claim in g.claims:
                cpus |= self._claims[claim]
        elif not self._config.pin_cpu:
            cpus = self._allowed & ~self._claimed
        elif kind is GrantKind.RESERVED:
            cpus = self._reserved
        elif kind is GrantKind.EXCLUSIVE:
            cpus = g.exclusive
        else:
            cpus = self._pools[g.pool].sharable & ~(self._excl | self._claimed)
            if kind is GrantKind.MIXED:
                cpus |= g.exclusive
        if g.hide_hyperthreads and kind is not GrantKind.CLAIMED:
            cpus = self._thin(cpus)
        mems = g.mems if self._config.pin_memory and not g.memory_preserve else 0
        key = (cpus, mems)
        a = self._assignment_cache.get(key)
        if a is None:
            if not cpus:
                raise PolicyError(
                    f"refusing to leave {_where(g.request)} without CPUs "
                    f"({g.kind.value} in pool {self._pools[g.pool].name})"
                )
            a = Assignment(cpus=CPUSet.from_mask(cpus), mems=CPUSet.from_mask(mems))
            self._assignment_cache[key] = a
        return a

    def _thin(self, cpus: int) -> int:
        """One hardware thread per core (hide-hyperthreads)."""
        out, seen = 0, 0
        core_of = self._tree.core_of
        for c in _bits(cpus):
            core = core_of.get(c, 1 << c)
            if not core & seen:
                out |= 1 << c
                seen |= core
        return out

    # --- capacity views ----------------------------------------------------------
    def _capacity(self) -> _Capacity:
        """Per pool: shared CPUs, free shared milli-CPU and how many CPUs may still be sliced off.

        Both bounds are taken along the path from the root (a pool cannot give
        what an ancestor lacks). Cached until the state changes.
        """
        cap = self._cap
        if cap is not None and cap.version == self._version:
            return cap
        free_mask = ~(self._excl | self._claimed)
        n = len(self._pools)
        counts = [0] * n
        free = [0] * n
        slack = [0] * n
        reach = [0] * n
        milli = self._milli
        parents = self._parents
        for i, sharable in enumerate(self._sharables):  # parents come first
            c = (sharable & free_mask).bit_count()
            counts[i] = c
            m = milli[i]
            f = 1000 * c - m
            s = c - (m + 999) // 1000
            slack[i] = s
            par = parents[i]
            if par >= 0:
                pf = free[par]
                if pf < f:
                    f = pf
                ps = reach[par]
                if ps < s:
                    s = ps
            free[i] = f
            reach[i] = s
        cap = _Capacity(self._version, counts, free, slack, reach)
        self._cap = cap
        return cap

    def _mem_size(self, pool: int, kinds: frozenset[MemoryKind]) -> int:
        key = (pool, kinds)
        size = self._mem_size_cache.get(key)
        if size is None:
            size = self._memory_map.size(self._pools[pool].nodes_of(kinds))
            self._mem_size_cache[key] = size
        return size

    def _mem_free(self, pool: int, kinds: frozenset[MemoryKind]) -> int:
        return min(self._mem_size(p, kinds) - self._mem[p] for p in self._pools[pool].path)

    def _memory_for(self, req: ContainerRequest, need: Need, pool: int) -> tuple[int, int]:
        """(memory pool, cpuset.mems): the pool's nodes of the wanted kinds, widened until it fits."""
        kinds = need.memory_kinds
        root = self._pools[0]
        if not root.nodes_of(kinds):
            have = sorted({k.value for k in root.memory})
            raise PolicyError(
                f"{_where(req)}: memory type {', '.join(sorted(k.value for k in kinds))} requested but this "
                f"node has only {', '.join(have) or 'no'} memory"
            )
        hint = self._mem_hints.get(req.id)
        if hint:  # sync: a running container keeps its memory nodes if they are those of a pool on its line
            on_line = self._mem_on_line(pool, hint, kinds)
            if on_line is not None:
                return on_line, hint
        for p in reversed(self._pools[pool].path):
            nodes = self._pools[p].nodes_of(kinds)
            if not nodes or self._missing_kinds(kinds)[p]:
                continue
            if need.memory <= 0 or self._mem_free(p, kinds) >= need.memory:
                return p, nodes
        return 0, root.nodes_of(kinds)

    def _claim_mems(self, need: Need, cpus: int, pool: int) -> int:
        """The memory nodes of exactly these CPUs (plus memory-only nodes attached to them)."""
        nodes = 0
        for c in _bits(cpus):
            nodes |= 1 << self._topology.cpus[c].node
        mask = 0
        for n in _bits(self._pools[pool].nodes_of(need.memory_kinds)):
            home = self._memory_map.attached_to.get(n, n)
            if nodes >> home & 1:
                mask |= 1 << n
        return mask

    # --- placement -------------------------------------------------------------
    def _place(
        self,
        req: ContainerRequest,
        need: Need,
        *,
        hint: Grant | None = None,
        keep: int = 0,
        hint_pool: int | None = None,
        stay: bool = False,
    ) -> Grant:
        kind = need.kind
        common: dict[str, Any] = {
            "hide_hyperthreads": need.hide_hyperthreads,
            "memory_preserve": need.memory_preserve,
        }
        if kind is GrantKind.PRESERVE:
            return Grant(request=req, kind=kind, pool=0, **common)
        if kind is GrantKind.CLAIMED:
            cpus = 0
            for claim in need.claims:
                mask = self._claims.get(claim)
                if mask is None:
                    known = ", ".join(map(repr, sorted(self._claims))) or "none"
                    raise PolicyError(f"{_where(req)}: claim {claim!r} is not prepared on this node (known: {known})")
                cpus |= mask
            pool = self._pool_of_group[self._tree.deepest_containing(cpus)]
            mem_pool, mems = self._memory_for(req, need, pool)
            exact = self._claim_mems(need, cpus, mem_pool)
            return Grant(
                request=req,
                kind=kind,
                pool=pool,
                mem_pool=mem_pool,
                mems=exact or mems,
                memory=need.memory,
                claims=need.claims,
                **common,
            )
        if kind is GrantKind.RESERVED:
            mem_pool, mems = self._memory_for(req, need, 0)
            return Grant(
                request=req, kind=kind, pool=0, milli=need.milli, mem_pool=mem_pool, mems=mems,
                memory=need.memory, **common,
            )
        if hint is not None and hint_pool is None:
            hint_pool = hint.pool
        if kind is GrantKind.SHARED:
            pool = hint_pool if stay and hint_pool is not None else self._choose_shared(req, need, hint_pool)
            mem_pool, mems = self._memory_for(req, need, pool)
            return Grant(
                request=req, kind=kind, pool=pool, milli=max(need.milli, 1), mem_pool=mem_pool, mems=mems,
                memory=need.memory, **common,
            )
        pool, mask, isolated = self._choose_exclusive(req, need, hint_pool, keep)
        mem_pool, mems = self._memory_for(req, need, pool)
        return Grant(
            request=req,
            kind=kind,
            pool=pool,
            exclusive=mask,
            isolated=isolated,
            milli=need.milli if kind is GrantKind.MIXED else 0,
            mem_pool=mem_pool,
            mems=mems,
            memory=need.memory,
            **common,
        )

    def _missing_kinds(self, kinds: frozenset[MemoryKind]) -> list[int]:
        """Per pool: how many of the wanted memory kinds this machine has but the pool lacks."""
        got = self._missing_cache.get(kinds)
        if got is None:
            root = self._pools[0].memory
            got = [sum(1 for k in kinds if k in root and k not in p.memory) for p in self._pools]
            self._missing_cache[kinds] = got
        return got

    def _mem_fit(self, pool: int, need: Need) -> int:
        """0 when the pool has every wanted memory kind and room for the request; higher is worse."""
        missing = self._missing_kinds(need.memory_kinds)[pool]
        if need.memory <= 0:
            return 2 * missing
        return 2 * missing + (0 if self._mem_free(pool, need.memory_kinds) >= need.memory else 1)

    def _level_distance(self, pool: Pool, level: TopologyLevel) -> int:
        target = _LEVEL_RANK[level]
        ranks = [_RANK[lv] for lv in pool.levels]
        if target in ranks:
            return 0
        if max(ranks) < target:
            return target - max(ranks)
        return 100 + min(ranks) - target

    def _choose_shared(self, req: ContainerRequest, need: Need, hint_pool: int | None) -> int:
        cap = self._capacity()
        counts, free = cap.counts, cap.free
        milli = max(need.milli, 1)
        pods = self._pod_pools.get(req.pod_uid, {}) if self._config.colocate_pods else {}
        spaces = self._ns_pools.get(req.namespace, {}) if self._config.colocate_namespaces else {}
        level = self._level_dist[need.unlimited_level] if need.unlimited_level is not None else None
        limit = need.burst_limit
        with_memory = need.memory > 0 or any(self._missing_kinds(need.memory_kinds))
        depth = self._depth
        best, best_key = -1, None
        for i in range(len(counts)):
            f = free[i]
            if f < milli or not counts[i]:
                continue
            key = (
                0 if i == hint_pool else 1,  # stay where it ran (resize, restart) when it still fits
                self._mem_fit(i, need) if with_memory else 0,
                0 if limit is None or f >= limit else 1,
                level[i] if level is not None else 0,
                -(pods.get(i, 0) + spaces.get(i, 0)) if pods or spaces else 0,
                -depth[i],
                -f,
                i,
            )
            if best_key is None or key < best_key:
                best, best_key = i, key
        if best >= 0:
            return best
        # Every pool is full: over-commit the one with the most room left (CPU requests
        # of shared containers are weights, not reservations; never an empty cpuset).
        open_pools = [i for i in range(len(self._pools)) if counts[i] > 0]
        if not open_pools:
            raise PolicyError(f"{_where(req)}: no shared CPUs are left (all are allocated, claimed or reserved)")
        return max(open_pools, key=lambda i: (free[i], -i))

    def _exclusive_ok(self, mask: int, pool: int, frac: int) -> bool:
        """Taking ``mask`` leaves every pool's shared containers their requested CPU."""
        counts = self._capacity().counts
        path = self._pools[pool].path
        touched: set[int] = set(path) if frac else set()
        for c in _bits(mask & self._sharable):
            touched.update(self._cpu_pools[c])
        for i in touched:
            t = (mask & self._pools[i].sharable).bit_count()
            extra = frac if i in path else 0
            if 1000 * (counts[i] - t) < self._milli[i] + extra:
                return False
        return True

    def _choose_exclusive(
        self, req: ContainerRequest, need: Need, hint_pool: int | None, keep: int
    ) -> tuple[int, int, bool]:
        n = need.exclusive
        frac = need.milli if need.kind is GrantKind.MIXED else 0
        used = self._excl | self._claimed
        pref_mask: int | None = None
        if need.core_types is not None:
            pref_mask = 0
            for t in need.core_types:
                pref_mask |= self._kind_masks.get(t, 0)
        if need.isolation is not Isolation.NO and self._isolated:
            got = self._try_exclusive(need, n, frac, self._isolated & ~used, pref_mask, hint_pool, keep, True)
            if got is not None:
                return got[0], got[1], True
            if need.isolation is Isolation.REQUIRE:
                raise PolicyError(
                    f"{_where(req)}: {need.isolation_key or 'require-isolated-cpus'} needs {n} isolated CPUs "
                    f"in one pool; free isolated CPUs: {_fmt(self._isolated & ~used)}"
                )
        elif need.isolation is Isolation.REQUIRE:
            raise PolicyError(
                f"{_where(req)}: {need.isolation_key or 'require-isolated-cpus'} but this node has no "
                "isolated CPUs the policy may use"
            )
        got = self._try_exclusive(need, n, frac, self._sharable & ~used, pref_mask, hint_pool, keep, False)
        if got is not None:
            return got[0], got[1], False
        raise PolicyError(self._no_fit(req, need))

    def _no_fit(self, req: ContainerRequest, need: Need) -> str:
        cap = self._capacity()
        root = self._pools[0]
        held = (self._milli[0] + 999) // 1000
        what = f"{need.exclusive} exclusive CPUs" + (f" + {need.milli}m shared" if need.kind is GrantKind.MIXED else "")
        best = max(range(len(self._pools)), key=lambda i: (cap.reach[i], -i))
        return (
            f"{_where(req)}: no pool can supply {what}: {root.name} has {cap.counts[0]} shared CPUs of which "
            f"{held} hold its shared containers' requests; the most any pool can give is "
            f"{max(0, cap.reach[best])} ({self._pools[best].name})"
        )

    def _try_exclusive(
        self,
        need: Need,
        n: int,
        frac: int,
        cand_all: int,
        pref_mask: int | None,
        hint_pool: int | None,
        keep: int,
        isolated: bool,
    ) -> tuple[int, int] | None:
        if cand_all.bit_count() < n:
            return None
        tree = self._tree
        cap = self._capacity()
        free = cap.free
        limits = None if isolated else cap.slack
        # Keep what the container had, where it can stay (resize, claim moves, sync).
        if keep & cand_all and hint_pool is None:
            hint_pool = self._pool_of_group[tree.deepest_containing(keep & cand_all)]
        if hint_pool is not None and keep:
            pool = self._pools[hint_pool]
            keep_mask = keep & cand_all & pool.cpus
            if keep_mask:
                if keep_mask.bit_count() >= n:
                    mask = pack(tree, pool.group, keep_mask, n)
                else:
                    extra = pack_near(
                        tree,
                        pool.group,
                        keep_mask,
                        cand_all & pool.cpus & ~keep_mask,
                        n - keep_mask.bit_count(),
                        limits,
                    )
                    mask = None if extra is None else keep_mask | extra
                if mask is not None:
                    # the deepest pool that holds the CPUs kept: its memory is the closest
                    at = self._pool_of_group[tree.deepest_containing(mask, pool.group)]
                    if frac and free[at] < frac:
                        at = hint_pool
                    if (frac == 0 or free[at] >= frac) and (isolated or self._exclusive_ok(mask, at, frac)):
                        return at, mask
        pref_all = cand_all & pref_mask if pref_mask is not None else cand_all
        clean_all = clean_mask(tree, 0, cand_all)
        clean_pref = clean_all if pref_all == cand_all else clean_mask(tree, 0, pref_all)
        threads = tree.max_threads
        reach = cap.reach
        whole: dict[int, int] = {}  # clean CPUs per pool, for the top-down best fit

        def clean_of(a: int) -> int:
            got = whole.get(a)
            if got is None:
                got = whole[a] = (clean_all & self._pools[a].cpus).bit_count()
            return got

        rows = []
        for p in self._pools:
            i = p.index
            if not isolated and reach[i] < n:
                continue
            if frac and free[i] - (0 if isolated else 1000 * n) < frac:
                continue
            cand = cand_all & p.cpus
            if cand.bit_count() < n:
                continue
            pref = pref_all & p.cpus
            kind_fit = pref.bit_count() >= n
            use, clean = (pref, clean_pref & p.cpus) if kind_fit else (cand, clean_all & p.cpus)
            clean_n = clean.bit_count()
            half = (use & ~clean).bit_count()  # free threads of half-used cores
            rem = n % threads
            clean_fit = clean_n + min(half, rem) >= n
            key = (
                self._mem_fit(i, need),
                0 if i == hint_pool else 1,
                0 if kind_fit else 1,
                0 if clean_fit else 1,
                -p.depth,
                0 if half >= rem else 1,  # an odd remainder fills a half-used core
                # best fit on whole cores, top down: the fullest socket, NUMA node, then L3
                tuple(clean_of(a) for a in p.path[1:]),
                use.bit_count(),
                self._milli[i],  # on a tie, disturb fewer shared containers
                i,
            )
            rows.append((key, i, use, cand))
        rows.sort()
        for _key, i, use, cand in rows:
            pool = self._pools[i]
            for choice in (use, cand) if use != cand else (use,):
                mask = pack(tree, pool.group, choice, n, limits)
                if mask is not None and (isolated or self._exclusive_ok(mask, i, frac)):
                    return i, mask
        return None

    def _keep_exclusive(self, req: ContainerRequest, need: Need, cpus: int) -> Grant | None:
        """A grant on exactly ``cpus`` if they are still free and fit the rules (sync)."""
        used = self._excl | self._claimed
        if cpus & ~self._allowed or cpus & used or cpus & self._reserved:
            return None
        isolated = cpus & self._isolated
        if isolated and isolated != cpus:
            return None
        pool = self._pool_of_group[self._tree.deepest_containing(cpus)]
        if not isolated and not self._exclusive_ok(cpus, pool, 0):
            return None
        mem_pool, mems = self._memory_for(req, need, pool)
        return Grant(
            request=req,
            kind=GrantKind.EXCLUSIVE,
            pool=pool,
            exclusive=cpus,
            isolated=bool(isolated),
            mem_pool=mem_pool,
            mems=mems,
            memory=need.memory,
            hide_hyperthreads=need.hide_hyperthreads,
            memory_preserve=need.memory_preserve,
        )

    def _pool_hint(self, cpus: int, mems: int, kinds: frozenset[MemoryKind]) -> int | None:
        """The pool a shared container probably ran in: same shared set, else deepest holding its CPUs.

        Pools can share a shared set (a claim emptied a sibling); the one whose line holds
        the container's memory nodes wins.
        """
        if not cpus or cpus & ~self._allowed:
            return None
        used = self._excl | self._claimed
        same = [p.index for p in reversed(self._pools) if p.sharable & ~used == cpus]
        for i in same:
            if mems and self._mem_on_line(i, mems, kinds) is not None:
                return i
        if same:
            return same[0]
        return self._pool_of_group[self._tree.deepest_containing(cpus)]

    def _mem_on_line(self, pool: int, mems: int, kinds: frozenset[MemoryKind]) -> int | None:
        """The deepest of ``pool`` and its ancestors whose memory nodes are exactly ``mems``."""
        for q in reversed(self._pools[pool].path):
            if self._pools[q].nodes_of(kinds) == mems:
                return q
        return None

    def _replace_claimed(self, g: Grant, why: str) -> Grant:
        """Re-place a claim-pinned container after one of its claims went away."""
        need, _ = self._classify_for_sync(g.request)  # pinned to the claims that remain, if any
        try:
            new = self._place(g.request, need)
        except PolicyError:
            new = self._place(g.request, replace(need, kind=GrantKind.SHARED, exclusive=0, claims=()))
        return replace(new, degraded=why)

    def _rebalance(self, what: str, taken: int) -> None:
        """After a claim shrank shared sets: move shared containers up from pools that cannot hold them."""
        counts = self._capacity().counts
        hit: set[int] = set()
        for c in _bits(taken):
            hit.update(self._cpu_pools.get(c, ()))
        for p in sorted((self._pools[i] for i in hit), key=lambda p: (-p.depth, p.index)):
            i = p.index
            followers = self._followers[i]
            if not followers:
                continue
            while followers and (counts[i] == 0 or 1000 * counts[i] < self._milli[i]) and p.parent >= 0:
                cid = min(followers, key=lambda c: (-self._grants[c].milli, c))
                g = self._grants[cid]
                self._put(cid, None)
                need, _ = self._classify_for_sync(g.request)
                mem_pool, mems = self._memory_for(g.request, need, p.parent)  # memory goes up with the CPUs
                self._put(cid, replace(g, pool=p.parent, mem_pool=mem_pool, mems=mems))
            if followers and counts[i] == 0:
                raise PolicyError(
                    f"{what} refused: it would leave no shared CPU for {len(followers)} container(s) "
                    f"in pool {p.name}, e.g. {next(iter(sorted(followers)))}"
                )
