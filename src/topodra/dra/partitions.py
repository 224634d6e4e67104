"""The ``core-or-thread`` device model: whole cores and single threads of the same CPUs in one
pool, kept apart by shared counters (KEP-4815, ``DRAPartitionableDevices``).

Every physical core has one counter, ``core<N>``, holding its number of offered threads. The core
device ``core<N>`` consumes all of it and each thread device ``cpu<M>`` consumes one, so the
scheduler never allocates a core together with one of its threads: taking the core leaves no
counter for its threads, taking a thread leaves too little for the core (the other threads stay
available one by one). Devices carry ``unit`` (``"core"`` or ``"thread"``) for claims to select
on. Prepare gives a core device all its threads and a thread device its one CPU (``Device.cpus``).

Counters live in counter sets of at most 32 counters (the API's limit), ``cores<K>`` holding
cores ``32K`` to ``32K+31``, so a core's set never depends on which devices are offered. A
ResourceSlice holds either devices or counter sets (1.36 validation), at most 8 sets: the sets
go into slices of their own, after the device slices (``slices.build_slices``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

__all__ = [
    "COUNTERS_PER_SET",
    "SETS_PER_SLICE",
    "UNIT_ATTRIBUTE",
    "core_consumption",
    "counter_sets",
    "counter_set_chunks",
]

#: ``ResourceSliceMaxCountersPerCounterSet``
COUNTERS_PER_SET: Final = 32
#: ``ResourceSliceMaxCounterSets``
SETS_PER_SLICE: Final = 8
#: The attribute telling a whole-core device from a single-thread one.
UNIT_ATTRIBUTE: Final = "unit"


def counter_set_name(core: int) -> str:
    return f"cores{core // COUNTERS_PER_SET}"


def core_consumption(core: int, threads: int) -> tuple[dict[str, Any], ...]:
    """The ``consumesCounters`` of a device taking ``threads`` threads of ``core``."""
    return ({"counterSet": counter_set_name(core), "counters": {f"core{core}": {"value": str(threads)}}},)


def counter_sets(devices: Iterable[Any]) -> list[dict[str, Any]]:
    """The ``sharedCounters`` the devices consume: each core's counter holds its offered threads,
    the CPUs of the devices that consume it (each device takes as many as it has CPUs): the core
    device takes all of it, and with the core withdrawn (one of its threads held or kept back)
    every thread still offered can be taken, together too. Sets and counters in core order;
    empty when no device consumes counters."""
    sets: dict[str, dict[str, int]] = {}  # set -> counter -> mask of the consumers' CPUs
    for d in devices:
        for consumption in d.consumes_counters:
            counters = sets.setdefault(consumption["counterSet"], {})
            for name in consumption["counters"]:
                counters[name] = counters.get(name, 0) | d.cpus.mask

    def number(name: str) -> tuple[int, str]:
        digits = name.lstrip("abcdefghijklmnopqrstuvwxyz-")
        return (int(digits) if digits.isdigit() else -1, name)

    return [
        {"name": s, "counters": {c: {"value": str(sets[s][c].bit_count())} for c in sorted(sets[s], key=number)}}
        for s in sorted(sets, key=number)
    ]


def counter_set_chunks(sets: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """The counter sets in slices of at most ``SETS_PER_SLICE``."""
    return [list(sets[i : i + SETS_PER_SLICE]) for i in range(0, len(sets), SETS_PER_SLICE)]
