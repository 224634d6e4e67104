"""Core type classes: precedence of sources and the 15 % gap rule."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from topodra.cpuset import CPUSet
from topodra.topology.coretypes import CLASS_GAP, CoreTypeInputs, classify_core_types, value_classes
from topodra.topology.model import CoreType, CoreTypeSource

P, E, S = CoreType.P_CORE, CoreType.E_CORE, CoreType.STANDARD


def test_turbo_max_favoured_cores_stay_with_their_kind() -> None:
    # Raptor Lake i7-1370P: CPPC 64/67 on P-cores, 39 on E-cores.
    perf = dict.fromkeys(range(12), 64) | {4: 67, 5: 67, 8: 67, 9: 67} | dict.fromkeys(range(12, 20), 39)
    types, source = classify_core_types(CoreTypeInputs(online=CPUSet(range(20)), cppc_highest_perf=perf))
    assert source is CoreTypeSource.ACPI_CPPC
    assert {c for c, t in types.items() if t is E} == set(range(12, 20))


def test_amd_preferred_core_ladder_is_one_kind() -> None:
    perf = {c: 166 + 5 * c for c in range(16)}  # 166..241, each a few percent apart
    types, source = classify_core_types(CoreTypeInputs(online=CPUSet(range(16)), cppc_highest_perf=perf))
    assert source is CoreTypeSource.NONE
    assert set(types.values()) == {S}


def test_three_arm_classes_lowest_is_e() -> None:
    cap = {0: 325, 1: 325, 2: 870, 3: 870, 4: 1024}
    types, source = classify_core_types(CoreTypeInputs(online=CPUSet(range(5)), capacity=cap))
    assert source is CoreTypeSource.CPU_CAPACITY
    assert [types[c] for c in range(5)] == [E, E, P, P, P]


def test_pmu_lists_win_over_everything() -> None:
    inp = CoreTypeInputs(
        online=CPUSet(range(4)),
        pmu_core=CPUSet([2, 3]),
        pmu_atom=CPUSet([0, 1]),
        cppc_highest_perf={0: 60, 1: 60, 2: 30, 3: 30},  # contradicts; ignored
    )
    types, source = classify_core_types(inp)
    assert source is CoreTypeSource.INTEL_PMU
    assert [types[c] for c in range(4)] == [E, E, P, P]


def test_low_power_e_cores_count_as_e_cores() -> None:
    # Meteor Lake: cpu_core, cpu_atom and cpu_lowpower PMUs (hwloc: IntelLowPower).
    inp = CoreTypeInputs(
        online=CPUSet(range(6)),
        pmu_core=CPUSet([0, 1]),
        pmu_atom=CPUSet([2, 3]),
        pmu_lowpower=CPUSet([4, 5]),
    )
    types, source = classify_core_types(inp)
    assert source is CoreTypeSource.INTEL_PMU
    assert [types[c] for c in range(6)] == [P, P, E, E, E, E]
    overlapping = CoreTypeInputs(
        online=CPUSet(range(4)), pmu_core=CPUSet([0, 1]), pmu_atom=CPUSet([2, 3]), pmu_lowpower=CPUSet([1])
    )
    assert classify_core_types(overlapping)[1] is CoreTypeSource.NONE


def test_incomplete_sources_fall_through() -> None:
    # PMU lists that miss CPU 3, capacity missing for CPU 0: max frequency decides.
    inp = CoreTypeInputs(
        online=CPUSet(range(4)),
        pmu_core=CPUSet([0, 1]),
        pmu_atom=CPUSet([2]),
        capacity={1: 1024, 2: 500, 3: 500},
        max_freq_khz={0: 5_000_000, 1: 5_000_000, 2: 3_900_000, 3: 3_900_000},
    )
    types, source = classify_core_types(inp)
    assert source is CoreTypeSource.MAX_FREQUENCY
    assert [types[c] for c in range(4)] == [P, P, E, E]


def test_nothing_known_is_standard() -> None:
    types, source = classify_core_types(CoreTypeInputs(online=CPUSet(range(3))))
    assert source is CoreTypeSource.NONE
    assert set(types.values()) == {S}


@given(st.lists(st.integers(1, 10_000), min_size=1, max_size=40))
def test_classes_cover_values_in_order_and_split_only_at_gaps(values: list[int]) -> None:
    classes = value_classes(values)
    distinct = sorted(set(values))
    assert classes[0][0] == distinct[0]
    assert classes[-1][1] == distinct[-1]
    for (_, hi), (lo, _) in itertools.pairwise(classes):
        assert (lo - hi) / lo >= CLASS_GAP  # a cut is a big gap
    for lo, hi in classes:
        inside = [v for v in distinct if lo <= v <= hi]
        for a, b in itertools.pairwise(inside):
            assert (b - a) / b < CLASS_GAP  # no big gap inside a class
