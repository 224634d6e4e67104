"""What a container needs: its CPU class, counts and preferences, decided once per request.

First match wins:

1. DRA claims: pinned to the claimed CPUs (the claim is the allocation);
2. ``cpu.preserve``: the policy leaves the CPUs alone;
3. reserved: ``prefer-reserved-cpus: true``, or a kube-system / reserved-pool
   namespace unless annotated ``prefer-reserved-cpus: false`` (only when
   reserved CPUs exist);
4. shared: BestEffort, Burstable, fractional Guaranteed, and whole-CPU
   Guaranteed that prefers shared CPUs;
5. exclusive: whole-CPU Guaranteed; kernel-isolated CPUs preferred for 1-2
   CPUs when the machine has any (``preferIsolatedCPUs``), for more only
   when annotated;
6. mixed (exclusive cores plus a shared fraction): fractional Guaranteed of
   at least one CPU annotated ``prefer-shared-cpus: false``.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass

from topodra.policy.annotations import Preferences, parse_preferences
from topodra.policy.api import BadRequestError, ContainerRequest, QoSClass
from topodra.policy.config import CPUPriority, PolicyConfig, TopologyLevel
from topodra.topology.model import CoreType, MemoryKind


def container_label(req: ContainerRequest) -> str:
    """How messages name a container: its id, and its namespace/pod/name when the id is not that."""
    path = f"{req.namespace}/{req.pod_name}/{req.name}"
    return f"container {req.id}" if req.id == path else f"container {req.id} ({path})"

__all__ = [
    "CLAIMED", "EXCLUSIVE", "ISOLATION_NO", "ISOLATION_REQUIRE", "MIXED", "PRESERVE", "RESERVED", "SHARED",
    "GrantKind", "Isolation", "Need", "classify", "validate_request", "core_types_for",
]


class GrantKind(enum.StrEnum):
    RESERVED = "reserved"
    PRESERVE = "preserve"
    SHARED = "shared"
    EXCLUSIVE = "exclusive"
    MIXED = "mixed"
    CLAIMED = "claimed"


class Isolation(enum.StrEnum):
    NO = "no"
    PREFER = "prefer"
    REQUIRE = "require"


# The members as module names: Python 3.11 reads an enum member through its class several times
# slower than a global, and the hot paths compare kinds by identity several times per operation.
SHARED, EXCLUSIVE, MIXED = GrantKind.SHARED, GrantKind.EXCLUSIVE, GrantKind.MIXED
CLAIMED, RESERVED, PRESERVE = GrantKind.CLAIMED, GrantKind.RESERVED, GrantKind.PRESERVE
ISOLATION_NO, ISOLATION_REQUIRE = Isolation.NO, Isolation.REQUIRE
_BEST_EFFORT, _BURSTABLE = QoSClass.BEST_EFFORT, QoSClass.BURSTABLE


@dataclass(slots=True)
class Need:
    """The policy's reading of one ContainerRequest; never changed once made (``replace`` makes
    another). Not frozen: one is built on every operation, and a frozen dataclass builds several times slower."""

    kind: GrantKind
    exclusive: int = 0  # whole CPUs (exclusive, mixed)
    milli: int = 0  # shared CPU in milli-CPU (shared, mixed, reserved)
    isolation: Isolation = Isolation.NO
    isolation_key: str = ""
    core_types: frozenset[CoreType] | None = None  # preferred kinds for exclusive CPUs
    memory_kinds: frozenset[MemoryKind] = frozenset({MemoryKind.DRAM})
    memory_kinds_annotated: bool = False
    memory: int = 0  # bytes
    hide_hyperthreads: bool = False
    memory_preserve: bool = False
    burst_limit: int | None = None  # milli-CPU limit of a limited Burstable container
    unlimited_level: TopologyLevel | None = None  # level for an unlimited Burstable container
    claims: tuple[str, ...] = ()


def core_types_for(priority: CPUPriority) -> frozenset[CoreType] | None:
    """The core kinds a CPU priority prefers (None: no preference)."""
    if priority is CPUPriority.HIGH:
        return frozenset({CoreType.P_CORE})
    if priority is CPUPriority.NORMAL:
        return frozenset({CoreType.P_CORE, CoreType.STANDARD})
    if priority is CPUPriority.LOW:
        return frozenset({CoreType.E_CORE})
    return None


def _count(value: object) -> bool:
    return type(value) is int and value >= 0  # bool is not a count


def validate_request(req: ContainerRequest) -> None:
    """Reject requests no runtime could have produced, naming the field."""
    if not req.id:
        raise BadRequestError("container request has an empty id")
    if (
        isinstance(req.qos, QoSClass)
        and _count(req.cpu_request_milli)
        and _count(req.memory_request)
        and (req.cpu_limit_milli is None or _count(req.cpu_limit_milli))
        and (req.memory_limit is None or _count(req.memory_limit))
        and (not req.claims or (len(set(req.claims)) == len(req.claims) and all(req.claims)))
    ):
        return
    where = container_label(req)
    if not isinstance(req.qos, QoSClass):
        raise BadRequestError(f"{where}: qos {req.qos!r} is not one of {', '.join(q.value for q in QoSClass)}")
    for name in ("cpu_request_milli", "memory_request"):
        value = getattr(req, name)
        if not _count(value):
            raise BadRequestError(f"{where}: {name} must be a non-negative integer, got {value!r}")
    for name in ("cpu_limit_milli", "memory_limit"):
        value = getattr(req, name)
        if value is not None and not _count(value):
            raise BadRequestError(f"{where}: {name} must be None or a non-negative integer, got {value!r}")
    raise BadRequestError(f"{where}: claims {list(req.claims)!r} must be distinct non-empty ids")


@functools.lru_cache(maxsize=64)
def _kinds(kinds: tuple[MemoryKind, ...]) -> frozenset[MemoryKind]:
    return frozenset(kinds)


def classify(
    req: ContainerRequest,
    config: PolicyConfig,
    *,
    has_reserved: bool,
    has_isolated: bool,
    ignore_claims: bool = False,
    prefs: Preferences | None = None,
) -> Need:
    """Decide how ``req`` is placed (see the module docstring for the rule order)."""
    validate_request(req)
    if prefs is None:
        prefs = parse_preferences(req.annotations, req.name)
    kinds = prefs.memory_types if prefs.memory_types is not None else _kinds(config.default_memory_types)
    priority = prefs.cpu_priority if prefs.cpu_priority is not None else config.default_cpu_priority

    memory, annotated = req.memory_request, prefs.memory_types is not None
    hide, preserve = prefs.hide_hyperthreads, prefs.memory_preserve

    if req.claims and not ignore_claims:
        return Need(CLAIMED, memory_kinds=kinds, memory_kinds_annotated=annotated, memory=memory,
                    hide_hyperthreads=hide, memory_preserve=preserve, claims=tuple(req.claims))
    if prefs.cpu_preserve:
        return Need(PRESERVE, memory_kinds=kinds, memory_kinds_annotated=annotated, memory=memory,
                    hide_hyperthreads=hide, memory_preserve=preserve)
    wants_reserved = prefs.prefer_reserved is True or (
        prefs.prefer_reserved is None and config.reserved_namespace(req.namespace)
    )
    request = req.cpu_request_milli
    if wants_reserved and has_reserved:
        return Need(RESERVED, milli=request, memory_kinds=kinds, memory_kinds_annotated=annotated,
                    memory=memory, hide_hyperthreads=hide, memory_preserve=preserve)
    qos = req.qos
    if qos is _BEST_EFFORT:
        return Need(SHARED, memory_kinds=kinds, memory_kinds_annotated=annotated, memory=memory,
                    hide_hyperthreads=hide, memory_preserve=preserve)
    if qos is _BURSTABLE or request == 0:
        limit = req.cpu_limit_milli
        burstable = qos is _BURSTABLE
        return Need(
            SHARED,
            milli=request,
            memory_kinds=kinds,
            memory_kinds_annotated=annotated,
            memory=memory,
            hide_hyperthreads=hide,
            memory_preserve=preserve,
            burst_limit=limit if burstable and limit is not None else None,
            unlimited_level=(prefs.unlimited_burstable or config.unlimited_burstable)
            if burstable and limit is None else None,
        )

    # Guaranteed.
    whole, fraction = divmod(request, 1000)
    prefer_shared = prefs.prefer_shared if prefs.prefer_shared is not None else config.prefer_shared_cpus
    if fraction and whole >= 1 and prefs.prefer_shared is False:
        return Need(MIXED, exclusive=whole, milli=fraction, isolation=_isolation(prefs, default=False),
                    isolation_key=prefs.isolation_key, core_types=core_types_for(priority), memory_kinds=kinds,
                    memory_kinds_annotated=annotated, memory=memory, hide_hyperthreads=hide,
                    memory_preserve=preserve)
    if fraction or prefer_shared:
        return Need(SHARED, milli=request, memory_kinds=kinds, memory_kinds_annotated=annotated,
                    memory=memory, hide_hyperthreads=hide, memory_preserve=preserve)
    isolation = _isolation(prefs, default=whole <= 2 and config.prefer_isolated_cpus and has_isolated)
    return Need(EXCLUSIVE, exclusive=whole, isolation=isolation, isolation_key=prefs.isolation_key,
                core_types=core_types_for(priority), memory_kinds=kinds, memory_kinds_annotated=annotated,
                memory=memory, hide_hyperthreads=hide, memory_preserve=preserve)


def _isolation(prefs: Preferences, *, default: bool) -> Isolation:
    if prefs.require_isolated:
        return Isolation.REQUIRE
    if prefs.prefer_isolated is not None:
        return Isolation.PREFER if prefs.prefer_isolated else Isolation.NO
    return Isolation.PREFER if default else Isolation.NO
