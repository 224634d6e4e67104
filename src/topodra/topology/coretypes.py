"""Core types (P-core / E-core / standard) from whatever the machine tells.

Pure: takes per-CPU numbers already read from sysfs, returns a type per CPU.

Precedence (the first source that covers every online CPU wins):

1. Intel hybrid PMU lists ``/sys/devices/cpu_core/cpus`` (P-cores),
   ``/sys/devices/cpu_atom/cpus`` and ``/sys/devices/cpu_lowpower/cpus``
   (E-cores and low-power E-cores): the kernel's own statement, read by hwloc
   as the IntelCore, IntelAtom and IntelLowPower kinds.
2. ARM ``cpuN/cpu_capacity`` (big.LITTLE / DynamIQ, 1024 = biggest core).
3. ACPI CPPC ``cpuN/acpi_cppc/highest_perf``.
4. ``cpuN/cpufreq/cpuinfo_max_freq``: the last resort. Base frequencies are
   never used: Intel Speed Select (SST-BF) gives cores of one kind different
   base frequencies on purpose.

Numeric sources are split into *classes*: sort the distinct values and cut
between two neighbours when the higher is at least :data:`CLASS_GAP` (15 %)
above the lower (``(hi - lo) / hi >= 0.15``). Values that differ only slightly
stay together, so Turbo Boost Max 3.0 favoured cores (highest_perf 64 vs 67,
5.0 vs 5.2 GHz) and AMD preferred-core rankings (a ladder of values a few
percent apart) are not mistaken for different kinds. With one class every CPU
is ``standard``; with more, the lowest class is ``E-core`` and every other
class ``P-core`` (users select by these names).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from topodra.cpuset import CPUSet
from topodra.topology.model import CoreType, CoreTypeSource

__all__ = ["CLASS_GAP", "CoreTypeInputs", "classify_core_types", "value_classes"]

#: Relative gap between neighbouring values that separates two CPU classes.
CLASS_GAP = 0.15


@dataclass(frozen=True)
class CoreTypeInputs:
    """What sysfs says about CPU kinds; ``None``/missing entries mean "not there"."""

    online: CPUSet
    pmu_core: CPUSet | None = None  # /sys/devices/cpu_core/cpus
    pmu_atom: CPUSet | None = None  # /sys/devices/cpu_atom/cpus
    pmu_lowpower: CPUSet | None = None  # /sys/devices/cpu_lowpower/cpus (LP E-cores)
    capacity: Mapping[int, int] | None = None
    cppc_highest_perf: Mapping[int, int] | None = None
    max_freq_khz: Mapping[int, int] | None = None


def value_classes(values: Sequence[int], gap: float = CLASS_GAP) -> list[tuple[int, int]]:
    """Split values into classes at relative gaps >= ``gap``; (low, high) per class, ascending."""
    distinct = sorted(set(values))
    if not distinct:
        return []
    classes: list[tuple[int, int]] = []
    lo = prev = distinct[0]
    for v in distinct[1:]:
        if v > 0 and (v - prev) / v >= gap:
            classes.append((lo, prev))
            lo = v
        prev = v
    classes.append((lo, prev))
    return classes


def _from_values(online: CPUSet, values: Mapping[int, int] | None) -> dict[int, CoreType] | None:
    """Types from a numeric source, or None when it misses a CPU or has one class."""
    if values is None or not online or any(c not in values for c in online):
        return None
    classes = value_classes([values[c] for c in online])
    if len(classes) < 2:
        return None
    lowest_high = classes[0][1]
    return {c: CoreType.E_CORE if values[c] <= lowest_high else CoreType.P_CORE for c in online}


def classify_core_types(inp: CoreTypeInputs) -> tuple[dict[int, CoreType], CoreTypeSource]:
    """The type of every online CPU and the source that decided it."""
    online = inp.online
    if inp.pmu_core is not None and (inp.pmu_atom is not None or inp.pmu_lowpower is not None):
        core = inp.pmu_core & online
        atom = (inp.pmu_atom or CPUSet()) & online
        lowp = (inp.pmu_lowpower or CPUSet()) & online
        if (
            core
            and (atom or lowp)
            and (core | atom | lowp) >= online
            and not (core & atom or (core | atom) & lowp)
        ):
            return (
                {c: CoreType.P_CORE if c in core else CoreType.E_CORE for c in online},
                CoreTypeSource.INTEL_PMU,
            )
    for source, values in (
        (CoreTypeSource.CPU_CAPACITY, inp.capacity),
        (CoreTypeSource.ACPI_CPPC, inp.cppc_highest_perf),
        (CoreTypeSource.MAX_FREQUENCY, inp.max_freq_khz),
    ):
        types = _from_values(online, values)
        if types is not None:
            return types, source
    return dict.fromkeys(online, CoreType.STANDARD), CoreTypeSource.NONE
