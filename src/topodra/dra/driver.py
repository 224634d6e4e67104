"""Prepare and Unprepare, independent of gRPC: the agent, the playground and tests call this.

Prepare: fetch each claim, check it, turn our devices into CPUs (grouped
devices: the policy picks), claim them in the policy, write the CDI spec,
checkpoint, answer. Unprepare: release in the policy, checkpoint, remove the
spec. Both are idempotent, serialized, report per-claim errors and hand the
policy's container changes to ``on_changes`` at once (nothing is left for the
next runtime event, the prototype's Unprepare bug).

Bounded work: the claims of one call are fetched by at most
``fetch_concurrency`` workers (paced beyond ``UNPACED_FETCHES``), and whatever is not fetched by the call's
deadline (``prepare_deadline``, under the kubelet's 45 s) is answered with an
error the kubelet retries. Claims that could not be fetched and are not
prepared are answered without waiting for the serial lock, so a call with
thousands of unknown claims neither stalls other calls nor the event loop.

Durability: the checkpoint is the source of truth and its write is the one
flushed write per state change; CDI specs are replaced atomically but not
flushed, and ``restore`` rewrites them from the checkpoint. A damaged
checkpoint slot is settled with the CDI specs and the API server
(``recovery``), never a reason to refuse to start.

Locking: ``lock`` is the agent's policy lock (shared with its NRI handlers)
and is held only around policy calls; ``on_changes`` is awaited after it is
released, so the callback may take it. A second, driver-private lock keeps
Prepare/Unprepare calls strictly one after another, so changes reach
``on_changes`` in policy order.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from topodra.cpuset import CPUSet
from topodra.dra import cdi
from topodra.dra.cdi import ClaimEnvError, parse_claim_env
from topodra.dra.checkpoint import (
    CheckpointError,
    CheckpointStore,
    PreparedClaim,
    PreparedDevice,
)
from topodra.dra.claims import (
    AllocatedDevice,
    ClaimError,
    ClaimRef,
    allocated_devices,
    check_uid,
    claim_configs,
    claim_memory,
    core_siblings,
    pod_consumers,
    resolve_cpus,
)
from topodra.dra.devices import DRIVER, Device
from topodra.dra.params import CpuConfig
from topodra.dra.recovery import disputed, settle
from topodra.faults import crash_point
from topodra.policy.api import Changes, PolicyError
from topodra.topology.model import CoreType, Topology

__all__ = [
    "ClaimCheckError",
    "ClaimFetcher",
    "ClaimPolicy",
    "ClaimRef",
    "Driver",
    "PrepareResult",
    "PreparedClaim",
    "PreparedDevice",
    "RestoreReport",
    "StatusSink",
    "UnprepareResult",
    "merge_changes",
    "parse_claim_env",
    "ClaimEnvError",
    "CheckpointError",
]

log = logging.getLogger(__name__)

#: ``await fetch(namespace, name)`` -> the ResourceClaim JSON object.
ClaimFetcher = Callable[[str, str], Awaitable[Mapping[str, Any]]]
#: ``await list_claims()`` -> every ResourceClaim JSON object (only to repair a damaged checkpoint).
ClaimLister = Callable[[], Awaitable[Sequence[Mapping[str, Any]]]]
#: How many claims of one call are fetched at once.
FETCH_CONCURRENCY = 4
#: Fetches of one call beyond this many are paced: each worker then waits as long as its last
#: fetch took, so a flood of claims gets at most about half of the event loop. A pod's claims
#: (the kubelet sends one call per pod) stay far below it and are never slowed.
UNPACED_FETCHES = 32
#: Fetches in flight across all calls: many huge calls at once stay bounded too. Each call queues
#: at most ``fetch_concurrency`` workers here, so a small call waits for few fetches.
FETCHES_IN_FLIGHT = 16
#: Seconds a Prepare call may spend fetching claims: well under the kubelet's 45 s per call.
PREPARE_DEADLINE = 30.0
#: Seconds a container's creation may wait for its claim to be read again (``admit_consumer``):
#: under containerd's 2 s NRI request timeout.
ADMIT_DEADLINE = 1.0
ChangesCallback = Callable[[Changes], Awaitable[None]]


class ClaimPolicy(Protocol):
    """The part of the policy (topodra.policy.policy.Policy) the driver uses."""

    @property
    def topology(self) -> Topology: ...
    def claim(self, claim_id: str, cpus: CPUSet, *, memory: str = "local") -> Changes: ...
    def release(self, claim_id: str) -> Changes: ...
    def pick(
        self, count: int, within: CPUSet, *, prefer: CoreType | None = None, whole_cores: bool = False,
        spread: bool = False,
    ) -> CPUSet: ...
    def claimed(self, claim_id: str) -> CPUSet | None: ...


class StatusSink(Protocol):
    """Where prepared and released claims are reported (``dra.status.ClaimStatus``): it must only
    record them and return, never wait for the API server (Prepare's latency is the kubelet's)."""

    def prepared(self, claim: PreparedClaim, *, restored: bool = False) -> None: ...
    def unprepared(self, claim: PreparedClaim) -> None: ...


class ClaimCheckError(Exception):
    """A container's ``DRA_CPUSET_<uid>`` does not match what this node prepared."""


@dataclass(frozen=True, slots=True)
class PrepareResult:
    """One claim's answer: its prepared state, or an error message."""

    claim: PreparedClaim | None = None
    error: str = ""

    @property
    def devices(self) -> tuple[PreparedDevice, ...]:
        return self.claim.devices if self.claim else ()

    @property
    def cdi_ids(self) -> tuple[str, ...]:
        return self.claim.cdi_ids if self.claim else ()


@dataclass(frozen=True, slots=True)
class UnprepareResult:
    error: str = ""
    changes: Changes = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RestoreReport:
    """What ``restore`` did. ``recovery`` is "" for a sound checkpoint, else how it was repaired:
    ``previous-generation`` (a slot was damaged, the other one was good) or ``rebuilt`` (no good
    slot: the claims come from the CDI specs and the API server)."""

    restored: tuple[str, ...] = ()
    failed: Mapping[str, str] = field(default_factory=dict)
    removed_stale_specs: tuple[str, ...] = ()
    recovery: str = ""
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def merge_changes(*changes: Changes) -> Changes:
    """Later changes win per container: the net effect of applying them in order."""
    out: Changes = {}
    for c in changes:
        out.update(c)
    return out


async def _no_changes(_: Changes) -> None:
    return None


def _log_refusals(results: Mapping[str, PrepareResult]) -> None:
    """One warning line per Prepare call that refused claims (the kubelet retries it): how many,
    and the first one's reason."""
    errors = [r.error for r in results.values() if r.error]
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        first = " ".join(errors[0].split("\n"))
        log.warning("Prepare refused %d of %d claim(s): %s%s", len(errors), len(results), first, more)


def _fetch_error(ref: ClaimRef, exc: BaseException) -> str:
    """Why a claim could not be prepared because its ResourceClaim was not fetched."""
    if isinstance(exc, ClaimError):
        return str(exc)
    return f"claim {ref}: cannot fetch the ResourceClaim: {exc}"


def _identity_error(ref: ClaimRef, known: PreparedClaim) -> str:
    """Empty when ``ref`` names the claim prepared under its UID, else the refusal."""
    if (known.namespace, known.name) == (ref.namespace, ref.name):
        return ""
    return (
        f"claim {ref}: UID {ref.uid} was prepared for claim {known.namespace}/{known.name}; "
        "a request naming another claim with this UID is refused"
    )


def _claim_cpus(
    policy: ClaimPolicy,
    devices: Mapping[str, Device],
    prepared: Mapping[str, PreparedClaim],
    ref: ClaimRef,
    allocated: Sequence[AllocatedDevice],
    configs: Mapping[str, CpuConfig],
) -> tuple[list[CPUSet], CPUSet, str, Changes] | str:
    """Under the policy lock: the CPUs of each device (``resolve_cpus``, the parameters steering
    the pick) and of the claim, claimed in the policy with the claim's memory nodes; or the refusal."""
    taken = CPUSet()
    for p in prepared.values():
        if not p.error:
            taken |= p.cpus
    try:
        per_device = resolve_cpus(
            ref, allocated, devices, pick=functools.partial(_pick, policy), taken=taken, configs=configs,
            siblings=functools.partial(core_siblings, policy.topology),
        )
    except (ClaimError, PolicyError) as exc:
        return str(exc) if isinstance(exc, ClaimError) else f"claim {ref}: {exc}"
    cpus = CPUSet()
    for c in per_device:
        cpus |= c
    overlap = cpus & taken
    if overlap:
        holders = sorted(u for u, p in prepared.items() if p.cpus & overlap)
        return f"claim {ref}: CPUs {overlap} are already prepared for claim(s) {', '.join(holders)}"
    memory = claim_memory(configs)
    try:
        changes = _claim(policy, ref.uid, cpus, memory)
    except PolicyError as exc:
        return f"claim {ref}: the policy refuses CPUs {cpus}: {exc}"
    return per_device, cpus, memory, changes


def _pick(policy: ClaimPolicy, count: int, within: CPUSet, config: CpuConfig) -> CPUSet:
    """The policy's pick for a share of a grouped device, as the request's parameters steer it."""
    steer: dict[str, Any] = {}
    if config.preferred_core_type is not None:
        steer["prefer"] = CoreType(config.preferred_core_type)
    if config.whole_cores:
        steer["whole_cores"] = True
    if config.numa_placement == "spread":
        steer["spread"] = True
    return policy.pick(count, within, **steer)


def _claim(policy: ClaimPolicy, uid: str, cpus: CPUSet, memory: str) -> Changes:
    """``policy.claim``, naming the memory nodes only when they are not the default."""
    return policy.claim(uid, cpus) if memory == "local" else policy.claim(uid, cpus, memory=memory)


class Driver:
    """The DRA driver's node-side state machine for ``native.cpu`` claims."""

    def __init__(
        self,
        *,
        policy: ClaimPolicy,
        lock: asyncio.Lock,
        fetch_claim: ClaimFetcher,
        cdi_dir: Path,
        checkpoint_path: Path,
        devices: Sequence[Device],
        pool: str,
        on_changes: ChangesCallback | None = None,
        driver: str = DRIVER,
        list_claims: ClaimLister | None = None,
        fetch_concurrency: int = FETCH_CONCURRENCY,
        prepare_deadline: float = PREPARE_DEADLINE,
        status: StatusSink | None = None,
    ) -> None:
        self._policy = policy
        self._lock = lock
        self._fetch = fetch_claim
        self._cdi_dir = Path(cdi_dir)
        self._checkpoint_path = Path(checkpoint_path)
        self._store = CheckpointStore(self._checkpoint_path)
        self._list_claims = list_claims
        self._fetch_concurrency = max(1, fetch_concurrency)
        self._prepare_deadline = prepare_deadline
        self._in_flight = asyncio.Semaphore(max(FETCHES_IN_FLIGHT, self._fetch_concurrency))
        self._devices = {d.name: d for d in devices}
        self.pool = pool
        self._on_changes = on_changes or _no_changes
        self.driver_name = driver
        self._serial = asyncio.Lock()
        self._prepared: dict[str, PreparedClaim] = {}
        self._dirty = False  # the last checkpoint write failed: retry at the next operation
        self._status = status
        self._late_pushes: set[asyncio.Task[None]] = set()  # of operations cancelled after deciding

    # --- queries ------------------------------------------------------------------------------
    @property
    def devices(self) -> list[Device]:
        return list(self._devices.values())

    def set_devices(self, devices: Sequence[Device]) -> None:
        """New device list (CPU hotplug, config change); claims already prepared keep their CPUs."""
        self._devices = {d.name: d for d in devices}

    def prepared(self, uid: str) -> PreparedClaim | None:
        """The prepared claim (None if unknown or if restoring it failed)."""
        p = self._prepared.get(uid)
        return p if p is not None and not p.error else None

    def prepared_claims(self) -> dict[str, PreparedClaim]:
        return {uid: p for uid, p in self._prepared.items() if not p.error}

    def claimed_cpus(self) -> CPUSet:
        out = CPUSet()
        for p in self._prepared.values():
            if not p.error:
                out |= p.cpus
        return out

    def check_container_claim(self, pod_uid: str, claim_uid: str, cpuset: CPUSet) -> CPUSet:
        """The CPUs a container may run on for its ``DRA_CPUSET_<claim_uid>=<cpuset>``.

        Raises ClaimCheckError when the claim is not prepared here, the pod is
        not among its consumers, or the value differs from the prepared CPUs
        (forged or stale): the NRI side must then refuse the container.
        """
        p = self.prepared(claim_uid)
        variable = cdi.env_variable(claim_uid)
        if p is None:
            raise ClaimCheckError(f"{variable}: claim {claim_uid} is not prepared on this node")
        if p.pod_uids and pod_uid not in p.pod_uids:
            raise ClaimCheckError(
                f"{variable}: pod {pod_uid} is not a consumer of claim {p.namespace}/{p.name} "
                f"(reserved for {', '.join(p.pod_uids)})"
            )
        if cpuset != p.cpus:
            raise ClaimCheckError(
                f"{variable}={cpuset}: claim {p.namespace}/{p.name} holds CPUs {p.cpus} (forged or stale value)"
            )
        return p.cpus

    def container_claims(self, pod_uid: str, env: Sequence[str]) -> dict[str, CPUSet]:
        """Parse and check every claim variable of a container (ClaimEnvError / ClaimCheckError)."""
        return {uid: self.check_container_claim(pod_uid, uid, cpus) for uid, cpus in parse_claim_env(env).items()}

    async def admit_consumer(self, pod_uid: str, env: Sequence[str]) -> bool:
        """Record ``pod_uid`` as a consumer of the prepared claims its container's ``env`` names
        and it is not known to use, when each claim's ``reservedFor`` lists it now; True if any
        was recorded. The kubelet prepares a claim once per node (its claim info cache,
        ``pkg/kubelet/cm/dra/manager.go``, v1.36.2): a second pod of the node sharing the claim
        reaches the runtime without a Prepare. The claim is read as a repeated Prepare reads it,
        within ``ADMIT_DEADLINE``."""
        try:
            named = parse_claim_env(env)
        except ClaimEnvError:
            return False
        refs = []
        for uid in named:
            known = self.prepared(uid)
            if known is not None and known.pod_uids and pod_uid not in known.pod_uids:
                refs.append(ClaimRef(known.namespace, uid, known.name))
        if not refs:
            return False
        try:
            async with asyncio.timeout(ADMIT_DEADLINE):
                fetched = await self._fetch_all(refs)
                async with self._serial:
                    for ref, obj in zip(refs, fetched, strict=True):
                        await self._prepare_guarded(ref, obj)
        except TimeoutError:
            log.info("pod %s: its claims %s were not read again within %g s", pod_uid, ", ".join(map(str, refs)), ADMIT_DEADLINE)
            return False
        return any((p := self.prepared(r.uid)) is not None and pod_uid in p.pod_uids for r in refs)

    # --- restart --------------------------------------------------------------------------------
    async def restore(self) -> RestoreReport:
        """Load the checkpoint and re-claim its CPUs in the policy (after a restart).

        A damaged checkpoint slot is kept aside (``<slot>.damaged``) and the
        claims are settled with the CDI specs and the API server (``recovery``);
        only when that is impossible (API server unreachable while the records
        disagree) does it raise CheckpointError, and nothing is claimed.
        A claim whose CPUs the policy refuses now (e.g. they became reserved)
        is kept as failed: Prepare reports the reason, Unprepare forgets it.
        Specs are rewritten from the checkpoint and stale specs removed.
        """
        async with self._serial:
            loaded = self._store.load()
            claims = dict(loaded.claims)
            recovery = ""
            notes: tuple[str, ...] = ()
            if loaded.problems:
                for problem in loaded.problems:
                    log.error("checkpoint damaged: %s", problem)
                claims, notes = await self._settle(claims)
                recovery = "previous-generation" if loaded.generation >= 0 else "rebuilt"
                for slot in loaded.damaged:
                    with contextlib.suppress(OSError):
                        os.replace(slot, slot.with_name(slot.name + ".damaged"))
                for note in notes:
                    log.warning("checkpoint repair: %s", note)
            restored: list[str] = []
            failed: dict[str, str] = {}
            all_changes: list[Changes] = []
            async with self._lock:
                for uid, claim in claims.items():
                    if uid in self._prepared and not self._prepared[uid].error:
                        continue
                    try:
                        all_changes.append(_claim(self._policy, uid, claim.cpus, claim.memory))
                    except PolicyError as exc:
                        failed[uid] = f"cannot restore claim {claim.namespace}/{claim.name}: {exc}"
                        self._prepared[uid] = replace(claim, error=failed[uid])
                        continue
                    self._prepared[uid] = claim
                    restored.append(uid)
            for uid in restored:
                cpus = self._prepared[uid].cpus
                if cpus and self._spec_cpus(uid) != cpus:
                    cdi.write_spec(self._cdi_dir, uid, cpus)
            stale = [u for u in cdi.spec_uids(self._cdi_dir) if self.prepared(u) is None]
            for uid in stale:
                cdi.remove_spec(self._cdi_dir, uid)
            for uid in (*restored, *failed):
                self._report(self._prepared[uid], restored=True)
            if recovery:
                await self._save()  # a sound generation again, before anything is answered
            if failed:
                for uid, reason in failed.items():
                    log.error("claim %s: %s", uid, reason)
            await self._push(merge_changes(*all_changes))
            return RestoreReport(tuple(restored), failed, tuple(stale), recovery, loaded.problems, tuple(notes))

    def _spec_cpus(self, uid: str) -> CPUSet | None:
        try:
            return cdi.read_spec_cpus(self._cdi_dir, uid)
        except ClaimError:
            return None

    async def _settle(self, claims: dict[str, PreparedClaim]) -> tuple[dict[str, PreparedClaim], tuple[str, ...]]:
        specs = {uid: self._spec_cpus(uid) for uid in cdi.spec_uids(self._cdi_dir)}
        if not disputed(claims, specs):
            return claims, ()
        if self._list_claims is None:
            raise CheckpointError(
                f"{self._checkpoint_path}: damaged, and the CDI specs disagree with the last good generation; "
                "no API server to settle them"
            )
        try:
            api_claims = await self._list_claims()
        except Exception as exc:
            raise CheckpointError(
                f"{self._checkpoint_path}: damaged, and the API server cannot be asked which claims "
                f"are prepared here ({exc}); will retry at the next start"
            ) from None
        settled = settle(claims, specs, api_claims, self._devices, pool=self.pool, driver=self.driver_name)
        return settled.claims, settled.notes

    # --- Prepare ------------------------------------------------------------------------------------
    async def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        """Prepare every claim; the answer has an entry for each UID."""
        unique = list({c.uid: c for c in claims}.values())
        fetched = await self._fetch_all(unique)
        out: dict[str, PrepareResult] = {}
        pending: list[tuple[ClaimRef, Mapping[str, Any] | BaseException]] = []
        for i, (ref, obj) in enumerate(zip(unique, fetched, strict=True)):
            if isinstance(obj, BaseException) and ref.uid not in self._prepared:
                # Nothing to look up under the lock: answer now.
                out[ref.uid] = PrepareResult(error=_fetch_error(ref, obj))
                if i % 512 == 511:
                    await asyncio.sleep(0)  # let the event loop breathe on huge calls
            else:
                pending.append((ref, obj))
        if pending:
            async with self._serial:
                for ref, obj in pending:
                    out[ref.uid] = await self._prepare_guarded(ref, obj)
        _log_refusals(out)
        return out

    async def _prepare_guarded(self, ref: ClaimRef, obj: Mapping[str, Any] | BaseException) -> PrepareResult:
        """``_prepare_one``; an exception answers this claim only (one bad claim must not fail the
        whole call): a refusal (``ClaimError``, ``PolicyError``) with its reason, anything else as
        an internal error, logged with its traceback."""
        try:
            return await self._prepare_one(ref, obj)
        except (ClaimError, PolicyError) as exc:
            return PrepareResult(error=f"claim {ref}: {exc}")
        except Exception as exc:
            log.exception("prepare %s failed", ref)
            return PrepareResult(error=f"claim {ref}: internal error: {exc!r}")

    async def _fetch_all(self, refs: Sequence[ClaimRef]) -> list[Mapping[str, Any] | BaseException]:
        """Fetch with at most ``fetch_concurrency`` requests in flight, until the call's deadline."""
        loop = asyncio.get_running_loop()
        late = TimeoutError(f"not fetched within the call's {self._prepare_deadline:g} s deadline")
        results: list[Mapping[str, Any] | BaseException] = [late] * len(refs)
        todo = iter(range(len(refs)))

        async def worker() -> None:
            for i in todo:
                start = loop.time()
                try:
                    async with self._in_flight:
                        results[i] = await self._fetch_one(refs[i])
                except Exception as exc:
                    results[i] = exc
                if i >= UNPACED_FETCHES:
                    # A huge call: leave the event loop to everything else at least half the time.
                    await asyncio.sleep(min(loop.time() - start, 0.1))

        workers = [worker() for _ in range(min(self._fetch_concurrency, len(refs)))]
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(loop.time() + self._prepare_deadline):
                await asyncio.gather(*workers)
        return results

    async def _fetch_one(self, ref: ClaimRef) -> Mapping[str, Any]:
        check_uid(ref.uid)
        return await self._fetch(ref.namespace, ref.name)

    async def _prepare_one(self, ref: ClaimRef, obj: Mapping[str, Any] | BaseException) -> PrepareResult:
        try:
            check_uid(ref.uid)
        except ClaimError as exc:
            return PrepareResult(error=str(exc))
        known = self._prepared.get(ref.uid)
        if known is not None and (mismatch := _identity_error(ref, known)):
            return PrepareResult(error=mismatch)
        if known is not None and known.error:
            return PrepareResult(error=known.error)
        if isinstance(obj, BaseException):
            if known is not None:  # API server blip: the prepared answer still stands
                return PrepareResult(claim=known)
            return PrepareResult(error=_fetch_error(ref, obj))
        try:
            allocated = allocated_devices(obj, ref, pool=self.pool, driver=self.driver_name)
            configs = claim_configs(obj, ref, allocated, driver=self.driver_name)
        except ClaimError as exc:
            return PrepareResult(error=str(exc))
        pods = pod_consumers(obj)
        if known is not None:
            return await self._prepare_again(ref, known, allocated, pods)
        if not allocated:
            return PrepareResult(claim=PreparedClaim(ref.uid, ref.namespace, ref.name, CPUSet(), (), pods))

        async with self._lock:
            decided = _claim_cpus(self._policy, self._devices, self._prepared, ref, allocated, configs)
            if isinstance(decided, str):
                return PrepareResult(error=decided)
            per_device, cpus, memory, changes = decided
        crash_point("prepare.claimed")
        prepared = PreparedClaim(
            uid=ref.uid,
            namespace=ref.namespace,
            name=ref.name,
            cpus=cpus,
            devices=tuple(
                PreparedDevice(a.request, a.pool, a.device, c, a.share_id)
                for a, c in zip(allocated, per_device, strict=True)
            ),
            pod_uids=pods,
            memory=memory,
        )
        try:
            cdi.write_spec(self._cdi_dir, ref.uid, cpus)
            crash_point("prepare.cdi-written")
            self._prepared[ref.uid] = prepared
            await self._save()
        except asyncio.CancelledError:
            self._push_anyway(changes)
            raise
        except (OSError, ClaimError) as exc:
            self._prepared.pop(ref.uid, None)
            async with self._lock:
                undo = self._policy.release(ref.uid)
            try:
                cdi.remove_spec(self._cdi_dir, ref.uid)
            except OSError:
                log.exception("claim %s: cannot remove CDI spec after a failed prepare", ref)
            await self._push(merge_changes(changes, undo))
            return PrepareResult(error=f"claim {ref}: cannot record the prepared claim: {exc}")
        crash_point("prepare.saved")
        await self._push(changes)
        crash_point("prepare.pushed")
        self._report(prepared)
        return PrepareResult(claim=prepared)

    async def _prepare_again(
        self, ref: ClaimRef, known: PreparedClaim, allocated: Sequence[AllocatedDevice], pods: tuple[str, ...]
    ) -> PrepareResult:
        """A repeated Prepare: same answer, provided the allocation is the one we prepared."""
        want = [(a.request, a.pool, a.device, a.share_id) for a in allocated]
        have = [(d.request, d.pool, d.device, d.share_id) for d in known.devices]
        if want != have:
            return PrepareResult(
                error=f"claim {ref}: the allocation changed since it was prepared "
                f"(prepared {[h[2] for h in have]}, now {[w[2] for w in want]}); unprepare it first"
            )
        merged = tuple(sorted(set(known.pod_uids) | set(pods)))
        if merged != known.pod_uids:
            known = replace(known, pod_uids=merged)
            self._prepared[ref.uid] = known
            try:
                await self._save()
            except OSError as exc:
                return PrepareResult(error=f"claim {ref}: cannot record the new consumers: {exc}")
        if known.cpus and self._spec_cpus(ref.uid) != known.cpus:
            cdi.write_spec(self._cdi_dir, ref.uid, known.cpus)  # someone removed or edited it
        self._report(known)  # written once: the status writer drops an unchanged report
        return PrepareResult(claim=known)

    # --- Unprepare ------------------------------------------------------------------------------------
    async def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, UnprepareResult]:
        """Release every claim; unknown claims succeed (they may be long gone)."""
        out: dict[str, UnprepareResult] = {}
        async with self._serial:
            for ref in claims:
                if ref.uid in out:
                    continue
                try:
                    out[ref.uid] = await self._unprepare_one(ref)
                except Exception as exc:
                    log.exception("unprepare %s failed", ref)
                    out[ref.uid] = UnprepareResult(error=f"claim {ref}: internal error: {exc!r}")
        return out

    async def _unprepare_one(self, ref: ClaimRef) -> UnprepareResult:
        try:
            check_uid(ref.uid)
        except ClaimError as exc:
            return UnprepareResult(error=str(exc))
        known = self._prepared.get(ref.uid)
        if known is not None and (mismatch := _identity_error(ref, known)):
            return UnprepareResult(error=mismatch)
        changes: Changes = {}
        if known is not None and not known.error:
            async with self._lock:
                changes = self._policy.release(ref.uid)
            crash_point("unprepare.released")
        self._prepared.pop(ref.uid, None)
        error = ""
        try:
            if known is not None or self._dirty:
                await self._save()
                crash_point("unprepare.saved")
            cdi.remove_spec(self._cdi_dir, ref.uid)
        except asyncio.CancelledError:
            self._push_anyway(changes)
            raise
        except OSError as exc:
            error = f"claim {ref}: released, but cannot record it: {exc}"
        if known is not None:
            crash_point("unprepare.cdi-removed")
            self._report(known, released=True)
        await self._push(changes)
        return UnprepareResult(error=error, changes=changes)

    def _report(self, claim: PreparedClaim, *, restored: bool = False, released: bool = False) -> None:
        """Hand the claim to the status sink; a failing sink never fails Prepare or Unprepare."""
        if self._status is None:
            return
        try:
            if released:
                self._status.unprepared(claim)
            else:
                self._status.prepared(claim, restored=restored)
        except Exception:
            log.exception("claim %s/%s: cannot report its device status", claim.namespace, claim.name)

    async def _save(self) -> None:
        """Write the checkpoint; the flush runs in a worker thread so the event loop (NRI events,
        /healthz) is not held for the disk's latency. Calls are serialized by ``_serial``."""
        try:
            await asyncio.to_thread(self._store.save, dict(self._prepared))
        except OSError:
            self._dirty = True
            raise
        self._dirty = False

    def _push_anyway(self, changes: Changes) -> None:
        """The operation was cancelled (the kubelet's deadline) after the policy decided, while
        the checkpoint was being written: its containers still hear of the decision now, not
        at the next drift check. The kubelet's retry finds the claim as prepared or released."""
        if changes:
            task = asyncio.ensure_future(self._push(changes))
            self._late_pushes.add(task)
            task.add_done_callback(self._late_pushes.discard)

    async def _push(self, changes: Changes) -> None:
        if not changes:
            return
        try:
            await self._on_changes(changes)
        except Exception:
            # The policy state is already updated; the agent reports its own push failures.
            log.exception("pushing %d container change(s) failed", len(changes))
