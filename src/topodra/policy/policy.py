"""The topology-aware policy: containers and DRA claims in, every cpuset/mems change out.

Pure and deterministic: no I/O, no clock, no randomness. Every state-changing
call runs as a transaction: it either returns the ``Changes`` it caused (each
container whose assignment differs from what the caller last got, plus the
container the call was about) or raises a ``PolicyError`` with nothing
changed. Nothing is left pending for a later call to deliver.

The parts: ``Partition`` (the static split of the CPUs and the pool tree),
``Supply`` (the accounting: grants and claims against the pools), ``Placer``
(where a container goes). This class runs the operations as transactions and
works out which containers changed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from topodra.cpuset import CPUSet
from topodra.policy import snapshot as snap_json
from topodra.policy.annotations import DOMAIN, Preferences, parse_preferences
from topodra.policy.api import (
    MEMORY_MODES,
    Assignment,
    BadRequestError,
    Changes,
    ContainerRequest,
    NoFitError,
    PolicyError,
    SnapshotError,
)
from topodra.policy.classify import (
    CLAIMED,
    EXCLUSIVE,
    MIXED,
    PRESERVE,
    RESERVED,
    SHARED,
    Need,
    classify,
    validate_request,
)
from topodra.policy.config import PolicyConfig
from topodra.policy.grants import Grant
from topodra.policy.packing import pack, pack_spread
from topodra.policy.partition import Partition, bits, build_partition, fmt
from topodra.policy.placement import Placer
from topodra.policy.pools import Pool
from topodra.policy.stats import PolicyStats, collect
from topodra.policy.supply import FOLLOW_MIXED, FOLLOW_NO_MEMS, Supply, where
from topodra.topology.model import CoreType, Topology

__all__ = ["Policy"]

_Phase = list[tuple[ContainerRequest, Need, Assignment | None, str]]


class _PolicyQueries:
    """The read-only side of :class:`Policy` (its base): the machine, the config, the pools,
    claims, grants and assignments as the operations left them. Nothing here changes state."""

    _topology: Topology
    _config: PolicyConfig
    _part: Partition
    _supply: Supply
    _assigned: dict[str, Assignment]  # what the caller last got, per container
    _offline_claims: dict[str, int]  # claims holding CPUs gone offline, as claimed
    _placer: Placer

    @property
    def topology(self) -> Topology:
        return self._topology

    @property
    def config(self) -> PolicyConfig:
        return self._config

    @property
    def reserved_cpus(self) -> CPUSet:
        return CPUSet.from_mask(self._part.reserved)

    @property
    def isolated_cpus(self) -> CPUSet:
        """Kernel-isolated CPUs the policy may hand out (reserved ones excluded)."""
        return CPUSet.from_mask(self._part.isolated)

    @property
    def available_cpus(self) -> CPUSet:
        """The CPUs the policy manages (online, allowed by the config)."""
        return CPUSet.from_mask(self._part.allowed)

    @property
    def pools(self) -> Sequence[Pool]:
        return self._part.pools

    @property
    def notes(self) -> list[str]:
        """Topology groups left out of the pool tree, and why."""
        return list(self._part.tree.notes)

    def claimed(self, claim_id: str) -> CPUSet | None:
        """The CPUs claimed, as claimed (offline ones included: see ``follow``)."""
        mask = self._offline_claims.get(claim_id, self._supply.claims.get(claim_id))
        return None if mask is None else CPUSet.from_mask(mask)

    @property
    def claimed_cpus(self) -> CPUSet:
        """The online CPUs DRA claims hold."""
        return CPUSet.from_mask(self._supply.claimed)

    def claim_memory(self, claim_id: str) -> str:
        """The memory nodes of a claim's containers: ``all`` or ``local`` (see ``claim``)."""
        return "all" if claim_id in self._placer.all_memory else "local"

    def claims(self) -> dict[str, CPUSet]:
        """Every claim's CPUs as claimed (offline ones included: see ``follow``)."""
        merged = {**self._supply.claims, **self._offline_claims}
        return {k: CPUSet.from_mask(v) for k, v in sorted(merged.items())}

    def offline_claims(self) -> dict[str, CPUSet]:
        """Claims holding CPUs that went offline: claim id -> those CPUs."""
        online = self._topology.online.mask
        return {k: CPUSet.from_mask(v & ~online) for k, v in sorted(self._offline_claims.items()) if v & ~online}

    def assignment(self, container_id: str) -> Assignment | None:
        return self._assigned.get(container_id)

    def assignments(self) -> dict[str, Assignment]:
        return dict(sorted(self._assigned.items()))

    def grants(self) -> dict[str, Grant]:
        """Every container's grant, by container id (preserve containers included)."""
        return dict(sorted(self._supply.grants.items()))

    def grant(self, container_id: str) -> Grant | None:
        """The policy's record for one container (kind, pool, exclusive CPUs ...)."""
        return self._supply.grants.get(container_id)

    def pool_name(self, index: int) -> str:
        return self._part.pools[index].name

    def shared_cpus(self, pool: str = "root") -> CPUSet:
        """The current shared set of a pool."""
        index = self._part.by_name.get(pool)
        if index is None:
            raise BadRequestError(f"no pool named {pool!r} (pools: {', '.join(self._part.by_name)})")
        return CPUSet.from_mask(self._supply.shared(index))

    def stats(self) -> PolicyStats:
        return collect(self._supply, self._config)


class Policy(_PolicyQueries):
    """Topology-aware CPU and memory placement for one node (see docs/policy.md)."""

    def __init__(self, topology: Topology, config: PolicyConfig | None = None) -> None:
        self._topology = topology
        self._config = config if config is not None else PolicyConfig()
        self._part = build_partition(topology, self._config)
        self._supply = Supply(
            self._part, count_pods=self._config.colocate_pods, count_namespaces=self._config.colocate_namespaces
        )
        self._placer = Placer(self._supply, self._config)
        self._assigned: dict[str, Assignment] = {}  # what the caller last got, per container
        self._assignment_cache: dict[tuple[int, int], Assignment] = {}
        self._node_sets: dict[int, CPUSet] = {}  # memory node masks as sets: few, and in every Assignment
        self._default_kinds = frozenset(self._config.default_memory_types)
        self._pin_cpu, self._pin_memory = self._config.pin_cpu, self._config.pin_memory  # read on every diff
        self._needs: dict[tuple[object, ...], Need] = {}  # requests without annotations, by what classify reads
        # Machine changes (``follow``): the reserved CPUs as configured on the whole machine, and the
        # claims that hold CPUs gone offline, as claimed (the supply holds their online part only).
        self._base_reserved = self._part.reserved
        self._offline_claims: dict[str, int] = {}

    # ------------------------------------------------------------- public ops
    def add(self, req: ContainerRequest) -> Changes:
        """Place a new container. A known id is treated as an update."""
        if req.id in self._supply.grants:
            return self.update(req)
        need = self._classify(req)
        return self._transaction(lambda: self._supply.put(req.id, self._placer.place(req, need)), subject=req.id)

    def update(self, req: ContainerRequest) -> Changes:
        """Re-place a container whose request changed (in-place resize); unknown ids are added."""
        old = self._supply.grants.get(req.id)
        if old is None:
            return self.add(req)
        if old.request == req and not old.degraded:
            current = self._assigned.get(req.id)
            return {req.id: current} if current is not None else {}
        need = self._classify(req)

        def body() -> None:
            self._supply.put(req.id, None)
            self._supply.put(req.id, self._placer.place(req, need, hint=old, keep=old.exclusive))

        return self._transaction(body, subject=req.id)

    def remove(self, container_id: str) -> Changes:
        """Forget a stopped or removed container; unknown ids change nothing."""
        if container_id not in self._supply.grants:
            return {}
        return self._transaction(lambda: self._supply.put(container_id, None))

    def claim(self, claim_id: str, cpus: CPUSet, *, keep_offline: bool = False, memory: str = "local") -> Changes:
        """Take ``cpus`` out of every pool for a DRA claim (see docs/policy.md for the rules).

        ``keep_offline``: a claim restored after a restart may hold CPUs that are present but
        offline now; they are kept for it (``offline_claims``) as ``follow`` keeps them.
        ``memory``: the memory nodes of the claim's containers, ``local`` (the nodes of its CPUs)
        or ``all`` (every memory node of the kinds they use).
        """
        if memory not in MEMORY_MODES:
            raise BadRequestError(f"claim {claim_id!r}: memory must be {' or '.join(MEMORY_MODES)}, got {memory!r}")
        supply, mask = self._supply, cpus.mask
        old = self._offline_claims.get(claim_id, supply.claims.get(claim_id))
        if old is not None:
            if old == mask and (memory == "all") == (claim_id in self._placer.all_memory):
                return {}
            if old == mask:
                raise BadRequestError(f"claim {claim_id!r} already holds CPUs {cpus} with other memory nodes")
            raise BadRequestError(
                f"claim {claim_id!r} already holds CPUs {fmt(old)}; release it before claiming {cpus}"
            )
        if not claim_id:
            raise BadRequestError("claim id must not be empty")
        offline = mask & ~self._topology.online.mask
        if keep_offline and offline:
            absent = offline & ~(self._topology.present or self._topology.possible).mask
            taken = [k for k, v in self._offline_claims.items() if v & offline]
            if absent or taken:
                why = f"CPUs {fmt(absent)} are not present" if absent else f"CPUs are already claimed by {taken}"
                raise BadRequestError(f"claim {claim_id!r}: {why}")
            mask &= ~offline
            if not mask:
                self._offline_claims[claim_id] = cpus.mask
                if memory == "all":
                    self._placer.all_memory.add(claim_id)
                return {}
        problem = supply.claim_problem(mask)
        if problem is not None:
            raise BadRequestError(f"claim {claim_id!r}: {problem}")
        if memory == "all":
            self._placer.all_memory.add(claim_id)
        try:
            changes = self._claim(claim_id, CPUSet.from_mask(mask))
        except BaseException:
            self._placer.all_memory.discard(claim_id)
            raise
        if mask != cpus.mask:
            self._offline_claims[claim_id] = cpus.mask
        return changes

    def _claim(self, claim_id: str, cpus: CPUSet) -> Changes:
        supply, mask = self._supply, cpus.mask

        def body() -> None:
            victims = supply.owners(mask)
            olds = {cid: supply.grants[cid] for cid in victims}
            supply.set_claim(claim_id, mask)
            for cid in victims:
                supply.put(cid, None)
            # Move the biggest grants first: they are the hardest to fit.
            for cid in sorted(victims, key=lambda c: (-olds[c].exclusive.bit_count(), c)):
                g = olds[cid]
                need, note = self._classify_for_sync(g.request)
                try:
                    new = self._placer.place(g.request, need, hint=g, keep=g.exclusive & ~mask)
                except PolicyError as e:
                    raise NoFitError(
                        f"claim {claim_id!r} of CPUs {cpus} refused: {where(g.request)} holds "
                        f"{fmt(g.exclusive & mask)} exclusively and cannot move: {e}"
                    ) from None
                supply.put(cid, _with_note(new, note))
            self._rebalance(f"claim {claim_id!r} of CPUs {cpus}", mask)

        return self._transaction(body)

    def release(self, claim_id: str) -> Changes:
        """Return a claim's CPUs to the pools; unknown ids change nothing."""
        supply = self._supply
        if claim_id not in supply.claims:
            self._offline_claims.pop(claim_id, None)  # none of its CPUs is online
            self._placer.all_memory.discard(claim_id)
            return {}

        def body() -> None:
            users = sorted(supply.claim_users.get(claim_id, {}))
            supply.set_claim(claim_id, None)
            for cid in users:
                g = supply.grants[cid]
                supply.put(cid, None)
                supply.put(cid, self._replace_claimed(g, f"claim {claim_id!r} was released while it ran"))

        changes = self._transaction(body)
        self._offline_claims.pop(claim_id, None)
        self._placer.all_memory.discard(claim_id)
        return changes

    def pick(
        self, count: int, within: CPUSet, *, prefer: CoreType | None = None, whole_cores: bool = False,
        spread: bool = False,
    ) -> CPUSet:
        """Choose ``count`` CPUs of ``within`` for a grouped device; does not claim them.

        ``prefer``: CPUs of that core type first when there are enough; ``whole_cores``: only
        cores whose every online thread is free and in ``within``, and ``count`` must make whole
        cores; ``spread``: evenly over the NUMA nodes of ``within`` (else packed onto the fewest).
        """
        if count <= 0:
            raise BadRequestError(f"pick: count must be positive, got {count}")
        part, supply = self._part, self._supply
        usable = within.mask & part.allowed
        if usable & ~part.reserved:  # reserved CPUs only for a group of reserved CPUs alone
            usable &= ~part.reserved
        cand = usable & ~supply.used
        if whole_cores:
            cand = _whole_core_cpus(self._topology, cand)
        if cand.bit_count() < count:
            raise NoFitError(
                f"pick: {count} CPUs wanted out of {within} but only {cand.bit_count()} are free"
                + (" on whole cores" if whole_cores else "")
                + f" ({fmt(cand)}; claimed {fmt(usable & supply.claimed)}, exclusively granted "
                f"{fmt(usable & supply.excl)}, reserved or unavailable {fmt(within.mask & ~usable)})"
            )
        start = part.tree.deepest_containing(usable) if usable else 0
        slack = supply.capacity().slack
        choices = [cand]
        if prefer is not None:
            pref = cand & part.kind_masks.get(prefer, 0)
            if pref.bit_count() >= count:
                choices.insert(0, pref)
        nodes = [self._topology.cpus_of_node(n).mask for n in self._topology.numa_nodes()] if spread else []
        for use in choices:
            for limits in (slack, None):  # first without squeezing shared containers, then any
                if spread:
                    got = pack_spread(part.tree, nodes, use, count, part.tree.max_threads if whole_cores else 1, limits)
                else:
                    got = pack(part.tree, start, use, count, limits)
                if got is not None and (not whole_cores or _whole_core_cpus(self._topology, got) == got):
                    return CPUSet.from_mask(got)
        if whole_cores:
            raise NoFitError(f"pick: {count} CPUs of {within} cannot be whole cores (free whole cores: {fmt(cand)})")
        raise NoFitError(f"pick: cannot choose {count} CPUs out of {within}")  # pragma: no cover

    def reconfigure(self, config: PolicyConfig) -> Changes:
        """Apply a new configuration: rebuild the pools and re-place everything."""
        fresh = Policy(self._topology, config)
        fresh._offline_claims = dict(self._offline_claims)
        fresh._placer.all_memory = set(self._placer.all_memory)
        for claim_id, mask in sorted(self._supply.claims.items()):
            bad = mask & ~fresh._part.allowed
            if bad:
                raise BadRequestError(
                    f"reconfigure refused: claim {claim_id!r} holds CPUs {fmt(bad)} which the new "
                    "configuration does not make available"
                )
            fresh._supply.set_claim(claim_id, mask)
        reserved = fresh._part.reserved
        if reserved and not reserved & ~fresh._supply.claimed:
            holders = ", ".join(repr(k) for k, v in sorted(fresh._supply.claims.items()) if v & reserved)
            raise BadRequestError(
                f"reconfigure refused: claim {holders} would hold every CPU the new configuration reserves "
                f"({fmt(reserved)}); one must stay for the system containers"
            )
        current = [(g.request, self._assigned.get(cid)) for cid, g in sorted(self._supply.grants.items())]
        changes = fresh.sync(current)
        self.__dict__.update(fresh.__dict__)
        return changes

    def follow(self, topology: Topology) -> Changes:
        """The machine changed under the node (CPU or NUMA node hotplug, isolated CPUs): rebuild
        the pools for ``topology`` and re-place every container (those on a vanished CPU move).

        The configured CPU sets are narrowed to what is online (the reserved CPUs stay those
        chosen on the whole machine, so they do not wander as CPUs come and go). A claim keeps
        what it claimed: its containers run on its online CPUs, its offline ones are reported
        by ``offline_claims`` and return when they come back online; a claim with no CPU online
        leaves its containers on CPUs by their request (noted as degraded), never on none.
        Raises ``PolicyError`` with nothing changed when no policy fits the machine.
        """
        config = _narrowed(self._config, topology, self._base_reserved)
        fresh = Policy(topology, config)
        fresh._config, fresh._base_reserved = self._config, self._base_reserved
        fresh._placer.all_memory = set(self._placer.all_memory)
        usable = fresh._part.allowed
        for claim_id, mask in sorted({**self._supply.claims, **self._offline_claims}.items()):
            if mask & ~usable:
                fresh._offline_claims[claim_id] = mask
            if mask & usable:
                fresh._supply.set_claim(claim_id, mask & usable)
        current = [(g.request, self._assigned.get(cid)) for cid, g in sorted(self._supply.grants.items())]
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
                raise BadRequestError(f"sync: container {req.id} is listed twice")
            seen.add(req.id)
        reported = {req.id: cur for req, cur in containers}
        # phases: pinned by rule (claimed, preserve, reserved); exclusive keeping its CPUs; the other
        # exclusive and mixed; shared last
        phases: list[_Phase] = [[], [], [], []]
        for req, cur in sorted(containers, key=lambda rc: rc[0].id):
            need, note = self._classify_for_sync(req)
            kind = need.kind
            if kind is CLAIMED or kind is PRESERVE or kind is RESERVED:
                phase = 0
            elif kind is SHARED:
                phase = 3
            elif (kind is EXCLUSIVE and cur is not None and not need.hide_hyperthreads
                  and len(cur.cpus) == need.exclusive):
                phase = 1
            else:
                phase = 2
            phases[phase].append((req, need, cur, note))
        self._placer.mem_hints = {req.id: cur.mems.mask for req, cur in containers if cur is not None}
        try:
            return self._transaction(lambda: self._sync_body(phases), reported=reported)
        finally:
            self._placer.mem_hints = {}

    def _sync_body(self, phases: list[_Phase]) -> None:
        supply, placer = self._supply, self._placer
        for cid in sorted(supply.grants):
            supply.put(cid, None)
        for req, need, _cur, note in phases[0]:
            supply.put(req.id, _with_note(placer.place(req, need), note))
        # Exclusive grants come first but must leave a CPU for the shared containers that follow:
        # hold 1 milli-CPU for them in the root while the exclusive ones are placed.
        phantom = 1 if phases[3] or any(n.kind is MIXED for _, n, _, _ in phases[2]) else 0
        supply.hold(phantom)
        try:
            retry: _Phase = []
            for req, need, cur, note in phases[1]:
                assert cur is not None
                kept = placer.keep_exclusive(req, need, cur.cpus.mask)
                if kept is None:
                    retry.append((req, need, cur, note))
                else:
                    supply.put(req.id, _with_note(kept, note))
            for req, need, cur, note in retry + phases[2]:
                keep = cur.cpus.mask & self._part.allowed if cur is not None else 0
                if need.hide_hyperthreads:  # it saw one thread per core: it held the cores
                    for c in bits(keep):
                        keep |= self._part.tree.core_of.get(c, 0)
                try:
                    g = placer.place(req, need, keep=keep)
                except PolicyError as e:
                    milli = max(need.milli, need.exclusive * 1000)
                    shared = replace(need, kind=SHARED, exclusive=0, milli=milli)
                    g = _with_note(placer.place(req, shared), f"placed on shared CPUs: {e}")
                supply.put(req.id, _with_note(g, note))
        finally:
            supply.hold(-phantom)
        for req, need, cur, note in phases[3]:
            hint = placer.pool_hint(cur.cpus.mask, cur.mems.mask, need.memory_kinds) if cur is not None else None
            # already running there: stay, even where claims have over-committed the pool
            stay = hint is not None and supply.capacity().counts[hint] > 0
            supply.put(req.id, _with_note(placer.place(req, need, hint_pool=hint, stay=stay), note))

    # --------------------------------------------------------- snapshot/restore
    def snapshot(self) -> dict[str, Any]:
        """The whole state as JSON-able data; ``restore`` rebuilds it exactly."""
        containers = [(g, self._assigned.get(cid)) for cid, g in sorted(self._supply.grants.items())]
        return snap_json.encode(
            self._topology, self._config, self._part.pools, self.reserved_cpus,
            {k: CPUSet.from_mask(v) for k, v in sorted(self._supply.claims.items())}, containers,
            sorted(self._placer.all_memory & self._supply.claims.keys()),
        )

    @classmethod
    def restore(cls, topology: Topology, snapshot: dict[str, Any]) -> Policy:
        """Rebuild a policy from ``snapshot()`` output; ``SnapshotError`` if it does not fit this machine."""
        config = snap_json.read_config(topology, snapshot)
        try:
            policy = cls(topology, config)
        except PolicyError as e:
            raise SnapshotError(f"snapshot: its configuration does not fit this machine: {e}") from None
        policy._load(snap_json.decode(snapshot, topology, policy.pools, policy.reserved_cpus))
        return policy

    def _load(self, saved: snap_json.Saved) -> None:
        supply = self._supply
        for claim_id, mask in saved.claims.items():
            problem = supply.claim_problem(mask)
            if problem is not None:
                raise SnapshotError(f"snapshot: claim {claim_id!r}: {problem}")
            supply.set_claim(claim_id, mask)
        self._placer.all_memory = set(saved.all_memory)
        for g, _ in saved.containers:
            what = f"snapshot: container {g.request.id}"
            if g.request.id in supply.grants:
                raise SnapshotError(f"{what} is listed twice")
            problem = supply.grant_problem(g)
            if problem is None and g.kind is not PRESERVE:
                problem = self._mems_problem(g)
            if problem is not None:
                raise SnapshotError(f"{what}: {problem}")
            supply.put(g.request.id, g)
        for g, want in saved.containers:
            a = self._compute(g)
            if snap_json.assignment_to_json(a) != want:
                raise SnapshotError(
                    f"snapshot: container {g.request.id}: recorded assignment {want!r} but the state gives "
                    f"{snap_json.assignment_to_json(a)!r}"
                )
            if a is not None:
                self._assigned[g.request.id] = a

    def _mems_problem(self, g: Grant) -> str | None:
        """Why ``g``'s memory nodes break the rule (docs/policy.md, Memory), or None."""
        nodes = self._part.pools[g.mem_pool].nodes_of(self._classify_for_sync(g.request)[0].memory_kinds)
        ok = (g.mems and not g.mems & ~nodes) if g.kind is CLAIMED else g.mems == nodes
        return None if ok else f"mems {fmt(g.mems)} are not those of pool {self._part.pools[g.mem_pool].name}"

    # ============================================================ internals
    def _classify(self, req: ContainerRequest, *, ignore_claims: bool = False,
                  prefs: Preferences | None = None) -> Need:
        part = self._part
        ann = req.annotations
        if prefs is None and not ignore_claims and (not ann or not any(DOMAIN in k for k in ann)):
            # Without placement annotations the reading depends on these fields and the config alone;
            # a Need is never changed once made, so one serves every request that reads the same.
            validate_request(req)
            key = (req.qos, req.cpu_request_milli, req.cpu_limit_milli, req.memory_request, req.namespace, req.claims)
            need = self._needs.get(key)
            if need is None:
                if len(self._needs) > 4096:
                    self._needs.clear()
                need = self._needs[key] = classify(req, self._config, has_reserved=part.reserved != 0,
                                                   has_isolated=part.isolated != 0)
            return need
        return classify(req, self._config, has_reserved=part.reserved != 0, has_isolated=part.isolated != 0,
                        ignore_claims=ignore_claims, prefs=prefs)

    def _classify_for_sync(self, req: ContainerRequest) -> tuple[Need, str]:
        """Classify a running container; it already runs, so degrade instead of refusing."""
        notes: list[str] = []
        prefs: Preferences | None = None
        try:
            parse_preferences(req.annotations, req.name)
        except PolicyError as e:
            notes.append(f"annotations ignored: {e}")
            prefs = Preferences()
        need = self._classify(req, prefs=prefs)
        if need.kind is CLAIMED:
            claims = self._supply.claims
            missing = [c for c in need.claims if c not in claims]
            known = tuple(c for c in need.claims if c in claims)
            if missing and known:
                notes.append(f"claims {', '.join(map(repr, missing))} are not prepared; pinned to the others")
                need = replace(need, claims=known)
            elif missing:
                why = "have no CPU online" if all(c in self._offline_claims for c in missing) else "are not prepared"
                notes.append(f"claims {', '.join(map(repr, missing))} {why}; placed by its CPU request")
                need = self._classify(req, ignore_claims=True, prefs=prefs)
        if not self._part.pools[0].nodes_of(need.memory_kinds):
            notes.append(
                f"memory types {', '.join(sorted(k.value for k in need.memory_kinds))} are not on this node; "
                "default types used"
            )
            need = replace(need, memory_kinds=self._default_kinds)
        return need, "; ".join(notes)

    def _replace_claimed(self, g: Grant, why: str) -> Grant:
        """Re-place a claim-pinned container after one of its claims went away."""
        need, _ = self._classify_for_sync(g.request)  # pinned to the claims that remain, if any
        try:
            new = self._placer.place(g.request, need)
        except PolicyError:
            new = self._placer.place(g.request, replace(need, kind=SHARED, exclusive=0, claims=()))
        return replace(new, degraded=why)

    def _rebalance(self, what: str, taken: int) -> None:
        """After a claim shrank shared sets: move shared containers up from pools that cannot hold them."""
        supply, pools = self._supply, self._part.pools
        counts = supply.capacity().counts
        for p in sorted((pools[i] for i in self._part.pools_of(taken)), key=lambda p: (-p.depth, p.index)):
            i = p.index
            followers = supply.followers_of(i)
            while followers and (counts[i] == 0 or 1000 * counts[i] < supply.milli[i]) and p.parent >= 0:
                cid = min(followers, key=lambda c: (-supply.grants[c].milli, c))
                followers.remove(cid)
                g = supply.grants[cid]
                supply.put(cid, None)
                need, _ = self._classify_for_sync(g.request)
                mem_pool, mems = self._placer.memory_for(g.request, need, p.parent)  # memory goes up with the CPUs
                supply.put(cid, replace(g, pool=p.parent, mem_pool=mem_pool, mems=mems))
            if followers and counts[i] == 0:
                raise NoFitError(
                    f"{what} refused: it would leave no shared CPU for {len(followers)} container(s) "
                    f"in pool {p.name}, e.g. {next(iter(sorted(followers)))}"
                )

    # --- transactions --------------------------------------------------------
    def _transaction(
        self,
        body: Callable[[], None],
        subject: str | None = None,
        reported: dict[str, Assignment | None] | None = None,
    ) -> Changes:
        supply = self._supply
        supply.begin()
        if len(self._assignment_cache) > 4096:
            self._assignment_cache.clear()
        claimed_before = supply.claimed
        used_before = supply.excl | claimed_before
        try:
            body()
            if reported is None:
                changes, new, gone = self._diff(used_before, claimed_before, subject)
            else:
                changes, new, gone = self._diff_reported(reported)
        except BaseException:
            supply.rollback()
            raise
        supply.commit()
        assigned = self._assigned
        assigned.update(new)
        for cid in gone:
            assigned.pop(cid, None)
        if reported is not None:
            for cid in [c for c in assigned if c not in supply.grants]:
                del assigned[cid]
        return changes

    def _diff(
        self, used_before: int, claimed_before: int, subject: str | None
    ) -> tuple[Changes, dict[str, Assignment], list[str]]:
        """(changes, new assignments, containers that lost theirs): the followers of every pool whose
        shared set changed (all of them moved with it), and the containers whose grant changed,
        compared one by one."""
        supply, assigned, compute = self._supply, self._assigned, self._compute
        grants = supply.grants
        pinned = self._pin_cpu
        new: dict[str, Assignment] = {}
        # Shared sets changed exactly in the pools holding a sharable CPU that was taken or freed.
        delta = (used_before ^ (supply.excl | supply.claimed)) & self._part.sharable
        if delta and pinned:
            for i in self._part.pools_of(delta):
                for key, group in supply.followers[i].items():
                    if key >= FOLLOW_NO_MEMS:  # one assignment for the whole group
                        a = compute(grants[next(iter(group))])
                        assert a is not None
                        new.update(dict.fromkeys(supply.sorted_followers(i, key), a))
                        continue
                    if key == FOLLOW_MIXED:  # the shared set plus each one's own CPUs
                        shared, pin_memory = supply.shared(i), self._pin_memory
                        for cid in group:
                            g = grants[cid]
                            mems = g.mems if pin_memory and not g.memory_preserve else 0
                            new[cid] = self._assignment(shared | g.exclusive, mems, g)
                        continue
                    for cid in group:  # thinned: one thread per core may be what it had
                        a = compute(grants[cid])
                        assert a is not None
                        if a != assigned.get(cid):
                            new[cid] = a
        reserved = self._part.reserved
        if pinned and reserved and ((claimed_before ^ supply.claimed) & reserved or (delta and not reserved & ~supply.claimed)):
            # a claim took or returned reserved CPUs (or the reserved containers run on the root
            # pool's shared set, which moved): the reserved containers move with them
            for cid, g in grants.items():
                if g.kind is RESERVED and (a := compute(g)) is not None and a != assigned.get(cid):
                    new[cid] = a
        touched = supply.touched
        if not pinned and supply.claimed != claimed_before:
            touched = {**touched, **dict.fromkeys(grants)}  # unpinned containers avoid claims
        gone: list[str] = []
        for cid in touched:
            now = grants.get(cid)
            a = None if now is None else compute(now)
            old = assigned.get(cid)
            if a is None:
                new.pop(cid, None)
                if old is not None:
                    gone.append(cid)
            elif a is old or (old is not None and a == old):  # (None == a costs a reflected call)
                new.pop(cid, None)
            else:
                new[cid] = a
        changes: Changes = {}
        if subject is not None:
            a = new.get(subject) or assigned.get(subject)
            if a is not None and subject not in gone:
                changes[subject] = a
        changes.update({cid: new[cid] for cid in sorted(new)} if len(new) > 1 else new)
        return changes, new, gone

    def _diff_reported(
        self, reported: dict[str, Assignment | None]
    ) -> tuple[Changes, dict[str, Assignment], list[str]]:
        changes: Changes = {}
        new: dict[str, Assignment] = {}
        gone: list[str] = []
        for cid in sorted(reported):
            g = self._supply.grants.get(cid)
            a = self._compute(g) if g is not None else None
            if a is None:
                gone.append(cid)
                continue
            new[cid] = a
            if a != reported[cid]:
                changes[cid] = a
        return changes, new, gone

    # --- assignments -----------------------------------------------------------
    def _compute(self, g: Grant) -> Assignment | None:
        """Where a grant runs now (docs/policy.md: shared set, claims, pin switches)."""
        kind = g.kind
        if kind is PRESERVE:
            return None
        supply = self._supply
        if kind is CLAIMED:
            cpus = 0
            for claim in g.claims:
                cpus |= supply.claims[claim]
        elif not self._pin_cpu:
            cpus = self._part.allowed & ~supply.claimed
        elif kind is RESERVED:
            # the reserved CPUs no claim holds; none left only after a hotplug (claims keep what
            # they hold): the root pool's shared set until a reserved CPU returns
            cpus = self._part.reserved & ~supply.claimed or supply.shared(0)
        elif kind is EXCLUSIVE:
            cpus = g.exclusive
        else:
            cpus = supply.shared(g.pool) | g.exclusive  # shared, or mixed: its own CPUs too
        if g.hide_hyperthreads and kind is not CLAIMED:
            cpus = self._part.thin(cpus)
        return self._assignment(cpus, g.mems if self._pin_memory and not g.memory_preserve else 0, g)

    def _assignment(self, cpus: int, mems: int, g: Grant) -> Assignment:
        """The (shared, cached) ``Assignment`` for these masks; never one without CPUs."""
        key = (cpus, mems)
        a = self._assignment_cache.get(key)
        if a is None:
            if not cpus:
                raise NoFitError(
                    f"refusing to leave {where(g.request)} without CPUs "
                    f"({g.kind.value} in pool {self._part.pools[g.pool].name})"
                )
            nodes = self._node_sets.get(mems)
            if nodes is None:
                nodes = self._node_sets[mems] = CPUSet.from_mask(mems)
            a = self._assignment_cache[key] = Assignment(CPUSet.from_mask(cpus), nodes)
        return a


def _narrowed(config: PolicyConfig, topology: Topology, reserved: int) -> PolicyConfig:
    """``config`` for the CPUs of ``topology`` that are online: the CPU sets it names (and the
    reserved CPUs picked on the whole machine, ``reserved``) lose their offline CPUs."""
    online = topology.online
    update: dict[str, Any] = {"reserved_cpus": CPUSet.from_mask(reserved) & online, "reserved_cpu_count": None}
    if config.available_cpus is not None:
        update["available_cpus"] = config.available_cpus & online
    return config.model_copy(update=update)


def _whole_core_cpus(topology: Topology, mask: int) -> int:
    """The CPUs of ``mask`` on cores whose every online thread is in ``mask``."""
    out = 0
    for c in bits(mask):
        if not out >> c & 1:
            core = (topology.cpus_of_core(topology.cpus[c].core) & topology.online).mask
            if not core & ~mask:
                out |= core
    return out


def _with_note(g: Grant, note: str) -> Grant:
    if not note or g.degraded:
        return g
    return replace(g, degraded=note)
