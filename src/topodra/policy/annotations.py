"""Pod annotations that steer placement, with the upstream ``resource-policy.nri.io`` keys.

Each key may be scoped: ``KEY/container.<name>`` (one container), ``KEY/pod``
(every container of the pod) or plain ``KEY``; the most specific one wins.
A value that does not parse is an error naming the key and the value: a typo
must not silently fall back to a default.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from topodra.policy.api import BadRequestError
from topodra.policy.config import CPUPriority, TopologyLevel
from topodra.topology.model import MemoryKind

__all__ = ["Preferences", "parse_preferences", "KEYS", "DOMAIN", "parse_bool"]

DOMAIN = "resource-policy.nri.io"

PREFER_ISOLATED = f"prefer-isolated-cpus.{DOMAIN}"
REQUIRE_ISOLATED = f"require-isolated-cpus.{DOMAIN}"
PREFER_SHARED = f"prefer-shared-cpus.{DOMAIN}"
PREFER_RESERVED = f"prefer-reserved-cpus.{DOMAIN}"
CPU_PRIORITY = f"prefer-cpu-priority.{DOMAIN}"
HIDE_HYPERTHREADS = f"hide-hyperthreads.{DOMAIN}"
UNLIMITED_BURSTABLE = f"unlimited-burstable.{DOMAIN}"
MEMORY_TYPE = f"memory-type.{DOMAIN}"
CPU_PRESERVE = f"cpu.preserve.{DOMAIN}"
MEMORY_PRESERVE = f"memory.preserve.{DOMAIN}"

#: Every key this policy reads.
KEYS = (
    PREFER_ISOLATED,
    REQUIRE_ISOLATED,
    PREFER_SHARED,
    PREFER_RESERVED,
    CPU_PRIORITY,
    HIDE_HYPERTHREADS,
    UNLIMITED_BURSTABLE,
    MEMORY_TYPE,
    CPU_PRESERVE,
    MEMORY_PRESERVE,
)

_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def parse_bool(key: str, value: str) -> bool:
    """Go's ``strconv.ParseBool`` (what upstream accepts), surrounding spaces ignored."""
    v = value.strip()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise BadRequestError(f"annotation {key}: {value!r} is not a boolean (use true or false)")


@dataclass(frozen=True, slots=True)
class Preferences:
    """What a container's annotations ask for; ``None`` where nothing was said."""

    prefer_isolated: bool | None = None
    require_isolated: bool | None = None
    prefer_shared: bool | None = None
    prefer_reserved: bool | None = None
    cpu_priority: CPUPriority | None = None  # None: not annotated or "default"
    hide_hyperthreads: bool = False
    unlimited_burstable: TopologyLevel | None = None
    memory_types: frozenset[MemoryKind] | None = None
    cpu_preserve: bool = False
    memory_preserve: bool = False
    #: The more specific of prefer-/require-isolated-cpus, when both are set.
    isolation_key: str = ""


def _lookup(annotations: Mapping[str, str], key: str, container: str) -> tuple[str, str] | None:
    for scoped in (f"{key}/container.{container}", f"{key}/pod", key):
        value = annotations.get(scoped)
        if value is not None:
            return scoped, value
    return None


def _specificity(scoped: str) -> int:
    if "/container." in scoped:
        return 2
    if scoped.endswith("/pod"):
        return 1
    return 0


def _memory_types(key: str, value: str) -> frozenset[MemoryKind]:
    kinds: set[MemoryKind] = set()
    for raw in value.split(","):
        item = raw.strip().lower()
        if item == "mixed":
            kinds.update(MemoryKind)
        elif item in {k.value.lower() for k in MemoryKind}:
            kinds.add(MemoryKind(item.upper()))
        else:
            known = ", ".join([k.value.lower() for k in MemoryKind] + ["mixed"])
            raise BadRequestError(f"annotation {key}: unknown memory type {raw.strip()!r} in {value!r} (known: {known})")
    return frozenset(kinds)


def parse_preferences(annotations: Mapping[str, str], container: str) -> Preferences:
    """Read the placement annotations that apply to ``container`` (its name in the pod)."""
    if not annotations:
        return _NONE
    ours = tuple((k, v) for k, v in annotations.items() if DOMAIN in k)
    return _parse(container, ours) if ours else _NONE


@functools.lru_cache(maxsize=1024)
def _parse(container: str, ours: tuple[tuple[str, str], ...]) -> Preferences:
    """The reading of one container's placement annotations: pods of one workload carry the same
    ones, so each distinct set is parsed once (a malformed one raises every time)."""
    annotations = dict(ours)

    def get(key: str) -> tuple[str, str] | None:
        return _lookup(annotations, key, container)

    def flag(key: str) -> bool | None:
        hit = get(key)
        return None if hit is None else parse_bool(hit[0], hit[1])

    priority: CPUPriority | None = None
    hit = get(CPU_PRIORITY)
    if hit is not None:
        text = hit[1].strip().lower()
        if text != "default":
            try:
                priority = CPUPriority(text)
            except ValueError:
                raise BadRequestError(
                    f"annotation {hit[0]}: {hit[1]!r} is not a CPU priority (use high, normal, low, none or default)"
                ) from None
    level: TopologyLevel | None = None
    hit = get(UNLIMITED_BURSTABLE)
    if hit is not None:
        try:
            level = TopologyLevel(hit[1].strip().lower())
        except ValueError:
            known = ", ".join(lv.value for lv in TopologyLevel)
            raise BadRequestError(f"annotation {hit[0]}: {hit[1]!r} is not a topology level (use {known})") from None
    memory: frozenset[MemoryKind] | None = None
    hit = get(MEMORY_TYPE)
    if hit is not None:
        memory = _memory_types(hit[0], hit[1])
        if not memory:
            raise BadRequestError(f"annotation {hit[0]}: empty memory type list {hit[1]!r}")

    prefer_iso_hit, require_iso_hit = get(PREFER_ISOLATED), get(REQUIRE_ISOLATED)
    prefer_isolated = None if prefer_iso_hit is None else parse_bool(*prefer_iso_hit)
    require_isolated = None if require_iso_hit is None else parse_bool(*require_iso_hit)
    isolation_key = ""
    if prefer_iso_hit is not None and require_iso_hit is not None:
        # The more specifically scoped key wins; on a tie the strict one does.
        if _specificity(prefer_iso_hit[0]) > _specificity(require_iso_hit[0]):
            require_isolated = None
            isolation_key = prefer_iso_hit[0]
        else:
            prefer_isolated = None
            isolation_key = require_iso_hit[0]
    elif prefer_iso_hit is not None:
        isolation_key = prefer_iso_hit[0]
    elif require_iso_hit is not None:
        isolation_key = require_iso_hit[0]

    return Preferences(
        prefer_isolated=prefer_isolated,
        require_isolated=require_isolated,
        prefer_shared=flag(PREFER_SHARED),
        prefer_reserved=flag(PREFER_RESERVED),
        cpu_priority=priority,
        hide_hyperthreads=bool(flag(HIDE_HYPERTHREADS)),
        unlimited_burstable=level,
        memory_types=memory,
        cpu_preserve=bool(flag(CPU_PRESERVE)),
        memory_preserve=bool(flag(MEMORY_PRESERVE)),
        isolation_key=isolation_key,
    )


_NONE = Preferences()
