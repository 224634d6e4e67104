"""CPU kinds as hwloc finds them, and the core type users select by.

Pure: takes per-CPU values already read from sysfs, returns each CPU's kind
(ranked) and core type.

**Kinds** follow hwloc 2.9.0 (``look_sysfscpukinds`` and
``hwloc_linux_cpukinds_adjust_maxfreqs`` in ``hwloc/topology-linux.c``,
registering and ranking in ``hwloc/cpukinds.c``):

1. Each source splits the CPUs that report it by distinct value: cpufreq
   ``cpuinfo_max_freq`` and ``base_frequency`` in MHz (kHz // 1000; a missing
   or 0 file is no value) and ``cpu_capacity``. Within one base frequency,
   max frequencies less than 10 % apart count as the lowest of them (Turbo
   Boost Max 3.0 favours some cores), unless a CPU reports a max frequency
   without a base frequency.
2. The Intel hybrid PMU lists (``cpu_core``, ``cpu_atom``, ``cpu_lowpower``)
   split them too, as hwloc reads them since 2.10.
3. Registering intersects: two CPUs are of one kind when they agree on every
   source (a value or its absence). CPUs no source mentions are in no hwloc
   kind; topodra puts them in the one kind the others form, or, when the
   others form several, in a kind of their own ranked lowest.

**Ranking** (``hwloc_internal_cpukinds_rank``, default strategy), 0 = the
least performant kind: by capacity when every kind has one and no two share
it; else by PMU class (low-power < atom < core) then base frequency when
every kind has one, else max frequency when every kind has one, when that
leaves no tie. Otherwise hwloc leaves the efficiency unknown and topodra
orders by (PMU class, capacity, base, max), a missing value lowest.

**Core types**: the PMU lists when they name every online CPU once
(``cpu_core`` P-core; ``cpu_atom`` and ``cpu_lowpower`` E-core). Otherwise one
kind is ``standard``; with several, the lowest-ranked kind is ``E-core`` and
every other ``P-core``. ``kind_of`` keeps the rank for finer selection.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from topodra.cpuset import CPUSet
from topodra.topology.model import CoreType, CoreTypeSource

__all__ = ["MAX_FREQ_ADJUST_PERCENT", "CoreTypeInputs", "CpuKinds", "adjust_max_freqs", "classify_cpu_kinds"]

#: hwloc unifies max frequencies less than this many percent apart within one base frequency.
MAX_FREQ_ADJUST_PERCENT = 10

# hwloc's CoreType ranking values (cpukinds.c, hwloc 2.14: IntelLowPower 1, IntelAtom 2, IntelCore 3).
_PMU_LOWPOWER, _PMU_ATOM, _PMU_CORE = 1, 2, 3


@dataclass(frozen=True)
class CoreTypeInputs:
    """What sysfs says about CPU kinds; a CPU missing from a mapping has no such value."""

    online: CPUSet
    pmu_core: CPUSet | None = None  # /sys/devices/cpu_core/cpus
    pmu_atom: CPUSet | None = None  # /sys/devices/cpu_atom/cpus
    pmu_lowpower: CPUSet | None = None  # /sys/devices/cpu_lowpower/cpus (LP E-cores)
    capacity: Mapping[int, int] | None = None  # cpuN/cpu_capacity
    base_freq_khz: Mapping[int, int] | None = None  # cpuN/cpufreq/base_frequency
    max_freq_khz: Mapping[int, int] | None = None  # cpuN/cpufreq/cpuinfo_max_freq


@dataclass(frozen=True)
class CpuKinds:
    """Every online CPU's kind rank (0 = least performant) and core type."""

    kind_of: dict[int, int]
    core_types: dict[int, CoreType]
    source: CoreTypeSource
    #: False when hwloc cannot rank these kinds (it reports efficiency -1) and
    #: the order is topodra's own.
    ranked_as_hwloc: bool = True
    #: CPUs no source mentions while others are (a kind of their own, ranked lowest).
    unknown: CPUSet = field(default_factory=CPUSet)


def _f32(x: float) -> float:
    """``x`` rounded to a C float (hwloc computes the ratio in float)."""
    return float(struct.unpack("f", struct.pack("f", x))[0])


def adjust_max_freqs(
    max_mhz: Mapping[int, int], base_mhz: Mapping[int, int], adjust: int = MAX_FREQ_ADJUST_PERCENT
) -> dict[int, int]:
    """hwloc_linux_cpukinds_adjust_maxfreqs: per base frequency, max frequencies less than
    ``adjust`` % above the lowest of them become that lowest."""
    out = dict(max_mhz)
    for base in sorted(set(base_mhz.values())):
        cpus = [c for c, b in base_mhz.items() if b == base and c in max_mhz]
        if not cpus:
            continue
        lo, hi = min(max_mhz[c] for c in cpus), max(max_mhz[c] for c in cpus)
        if lo == hi:
            continue
        ratio = _f32(_f32(float(hi - lo)) / _f32(float(lo)))
        if _f32(ratio * 100) < adjust:
            out.update(dict.fromkeys(cpus, lo))
    return out


_Key = tuple[tuple[bool, bool, bool], int | None, int | None, int | None]  # (PMU lists, capacity, base, max)


def _keys(inp: CoreTypeInputs) -> dict[int, _Key]:
    """Each CPU's values in every source; equal keys = one hwloc kind."""
    online = inp.online
    # A 0 kHz file is no value; hwloc registers the rest in whole MHz.
    maxes = {c: v // 1000 for c, v in (inp.max_freq_khz or {}).items() if c in online and v}
    bases = {c: v // 1000 for c, v in (inp.base_freq_khz or {}).items() if c in online and v}
    if maxes and all(c in bases for c in maxes):
        maxes = adjust_max_freqs(maxes, bases)
    caps = inp.capacity or {}
    core, atom, lowp = (s or CPUSet() for s in (inp.pmu_core, inp.pmu_atom, inp.pmu_lowpower))
    return {c: ((c in atom, c in core, c in lowp), caps.get(c), bases.get(c), maxes.get(c)) for c in online}


def _pmu_class(pmu: tuple[bool, bool, bool]) -> int:
    atom, core, lowp = pmu
    return _PMU_CORE if core else _PMU_ATOM if atom else _PMU_LOWPOWER if lowp else 0


def _hwloc_order(kinds: Sequence[_Key]) -> list[_Key] | None:
    """hwloc's default ranking of ``kinds`` (least performant first), or None when it fails."""
    caps = [k[1] for k in kinds]
    if None not in caps and len(set(caps)) == len(caps):
        return sorted(kinds, key=lambda k: k[1] or 0)
    # CORETYPE_FREQUENCY: (core type << 20) + base frequency, else max frequency.
    have_type = all(_pmu_class(k[0]) for k in kinds)
    have_base = all(k[2] is not None for k in kinds)
    have_max = all(k[3] is not None for k in kinds)
    if not (have_type or have_base or have_max):
        return None

    def value(k: _Key) -> int:
        return (_pmu_class(k[0]) << 20) + ((k[2] if have_base else k[3]) or 0)

    values = [value(k) for k in kinds]
    if len(set(values)) != len(values):
        return None
    return sorted(kinds, key=value)


def _own_order(kinds: Sequence[_Key]) -> list[_Key]:
    """topodra's order where hwloc has none: PMU class, capacity, base, max (missing lowest)."""
    return sorted(kinds, key=lambda k: (_pmu_class(k[0]), *(-1 if v is None else v for v in k[1:]), k[0]))


def _source(kinds: Sequence[_Key]) -> CoreTypeSource:
    """The first source that tells the kinds apart, in hwloc's ranking order."""
    for i, source in (
        (1, CoreTypeSource.CPU_CAPACITY),
        (2, CoreTypeSource.BASE_FREQUENCY),
        (3, CoreTypeSource.MAX_FREQUENCY),
    ):
        if len({k[i] for k in kinds}) > 1:
            return source
    return CoreTypeSource.INTEL_PMU if len(kinds) > 1 else CoreTypeSource.NONE


def _pmu_types(inp: CoreTypeInputs) -> dict[int, CoreType] | None:
    """Core types from the hybrid PMU lists when they name every online CPU exactly once."""
    if inp.pmu_core is None or (inp.pmu_atom is None and inp.pmu_lowpower is None):
        return None
    online = inp.online
    core = inp.pmu_core & online
    atom = (inp.pmu_atom or CPUSet()) & online
    lowp = (inp.pmu_lowpower or CPUSet()) & online
    if not core or not (atom or lowp) or not (core | atom | lowp) >= online:
        return None
    if core & atom or (core | atom) & lowp:
        return None
    return {c: CoreType.P_CORE if c in core else CoreType.E_CORE for c in online}


def classify_cpu_kinds(inp: CoreTypeInputs) -> CpuKinds:
    """The kind rank and core type of every online CPU, and the source that told them apart."""
    keys = _keys(inp)
    unknown: _Key = ((False, False, False), None, None, None)
    known = sorted({k for k in keys.values() if k != unknown}, key=repr)
    if len(known) <= 1:  # one kind at most: CPUs no source mentions are of it too
        return _one_kind(keys)
    order = _hwloc_order(known)
    ordered = ([unknown] if unknown in keys.values() else []) + (order or _own_order(known))
    rank = {k: i for i, k in enumerate(ordered)}
    kind_of = {c: rank[k] for c, k in keys.items()}
    unknown_cpus = CPUSet(c for c, k in keys.items() if k == unknown)
    pmu = _pmu_types(inp)
    ranked = order is not None
    if pmu is not None:
        return CpuKinds(kind_of, pmu, CoreTypeSource.INTEL_PMU, ranked, unknown_cpus)
    types = {c: CoreType.E_CORE if r == 0 else CoreType.P_CORE for c, r in kind_of.items()}
    return CpuKinds(kind_of, types, _source(ordered), ranked, unknown_cpus)


def _one_kind(keys: Mapping[int, _Key]) -> CpuKinds:
    # Valid PMU lists always make two kinds, so one kind is never PMU-typed.
    return CpuKinds(dict.fromkeys(keys, 0), dict.fromkeys(keys, CoreType.STANDARD), CoreTypeSource.NONE)
