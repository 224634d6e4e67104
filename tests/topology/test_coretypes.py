"""CPU kinds as hwloc 2.9.0 groups and ranks them, and the core types derived from them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from topodra.cpuset import CPUSet
from topodra.topology.coretypes import CoreTypeInputs, adjust_max_freqs, classify_cpu_kinds
from topodra.topology.model import CoreType, CoreTypeSource

P, E, S = CoreType.P_CORE, CoreType.E_CORE, CoreType.STANDARD


def kinds_of(kind_of: dict[int, int]) -> list[CPUSet]:
    return [CPUSet(c for c, k in kind_of.items() if k == r) for r in sorted(set(kind_of.values()))]


def test_turbo_max_favoured_cores_stay_with_their_kind() -> None:
    # Raptor Lake i7-1370P (hwloc's 20em64t-hybrid tree): favoured P-cores reach 5.2 GHz,
    # the others 5.0 GHz at the same 1.9 GHz base: less than 10 % apart, one kind.
    base = dict.fromkeys(range(12), 1_900_000) | dict.fromkeys(range(12, 20), 1_400_000)
    top = dict.fromkeys(range(12), 5_000_000) | {4: 5_200_000, 5: 5_200_000} | dict.fromkeys(range(12, 20), 3_900_000)
    got = classify_cpu_kinds(CoreTypeInputs(online=CPUSet(range(20)), base_freq_khz=base, max_freq_khz=top))
    assert kinds_of(got.kind_of) == [CPUSet(range(12, 20)), CPUSet(range(12))]
    assert got.source is CoreTypeSource.BASE_FREQUENCY
    assert got.ranked_as_hwloc
    assert {c for c, t in got.core_types.items() if t is E} == set(range(12, 20))
    # without base frequencies hwloc adjusts nothing: every max frequency is a kind
    got = classify_cpu_kinds(CoreTypeInputs(online=CPUSet(range(20)), max_freq_khz=top))
    assert kinds_of(got.kind_of) == [CPUSet(range(12, 20)), CPUSet(range(12)) - CPUSet([4, 5]), CPUSet([4, 5])]
    assert [got.core_types[c] for c in (12, 0, 4)] == [E, P, P]


def test_max_frequencies_are_unified_below_ten_percent_only() -> None:
    base = {0: 2_000_000, 1: 2_000_000}
    assert adjust_max_freqs({0: 2000, 1: 2199}, {0: 2000, 1: 2000}) == {0: 2000, 1: 2000}
    assert adjust_max_freqs({0: 2000, 1: 2200}, {0: 2000, 1: 2000}) == {0: 2000, 1: 2200}
    near = classify_cpu_kinds(CoreTypeInputs(CPUSet([0, 1]), base_freq_khz=base, max_freq_khz={0: 2_000_000, 1: 2_199_000}))
    assert near.core_types == {0: S, 1: S}
    far = classify_cpu_kinds(CoreTypeInputs(CPUSet([0, 1]), base_freq_khz=base, max_freq_khz={0: 2_000_000, 1: 2_200_000}))
    assert far.kind_of == {0: 0, 1: 1}
    assert far.source is CoreTypeSource.MAX_FREQUENCY
    # one CPU with a max frequency and no base: nothing is unified (hwloc's max_without_basefreq)
    partial = classify_cpu_kinds(
        CoreTypeInputs(CPUSet([0, 1, 2]), base_freq_khz=base, max_freq_khz={0: 2_000_000, 1: 2_100_000, 2: 2_000_000})
    )
    assert len(set(partial.kind_of.values())) > 1


def test_frequencies_count_in_whole_mhz() -> None:
    got = classify_cpu_kinds(CoreTypeInputs(CPUSet([0, 1]), max_freq_khz={0: 3_000_100, 1: 3_000_900}))
    assert got.core_types == {0: S, 1: S}


def test_three_arm_capacities_are_three_kinds_ranked_by_capacity() -> None:
    # a DynamIQ phone SoC: 4 little, 3 big, 1 prime core, no MIDR and no base frequency
    cap = dict.fromkeys(range(4), 325) | dict.fromkeys(range(4, 7), 870) | {7: 1024}
    top = dict.fromkeys(range(4), 1_800_000) | dict.fromkeys(range(4, 7), 2_400_000) | {7: 3_000_000}
    got = classify_cpu_kinds(CoreTypeInputs(online=CPUSet(range(8)), capacity=cap, max_freq_khz=top))
    assert kinds_of(got.kind_of) == [CPUSet(range(4)), CPUSet(range(4, 7)), CPUSet([7])]
    assert got.source is CoreTypeSource.CPU_CAPACITY
    assert got.ranked_as_hwloc
    assert [got.core_types[c] for c in (0, 4, 7)] == [E, P, P]


def test_capacity_ranks_before_frequency() -> None:
    # the bigger capacity wins even where the max frequency says otherwise
    cap = {0: 1024, 1: 512}
    top = {0: 2_000_000, 1: 3_000_000}
    got = classify_cpu_kinds(CoreTypeInputs(CPUSet([0, 1]), capacity=cap, max_freq_khz=top))
    assert got.kind_of == {0: 1, 1: 0}


def test_shared_capacity_is_ranked_by_base_frequency() -> None:
    cap = {0: 1024, 1: 1024, 2: 1024}
    base = {0: 2_000_000, 1: 3_000_000, 2: 1_000_000}
    got = classify_cpu_kinds(CoreTypeInputs(CPUSet([0, 1, 2]), capacity=cap, base_freq_khz=base))
    assert got.kind_of == {0: 1, 1: 2, 2: 0}
    assert got.ranked_as_hwloc
    assert got.source is CoreTypeSource.BASE_FREQUENCY


def test_kinds_hwloc_cannot_rank_get_topodras_order() -> None:
    # hwloc's fakeheterocpunuma: capacity 234/1025 and base 2.5/1.2 GHz cut three kinds;
    # two share a capacity and two a base frequency, so hwloc leaves the efficiency unknown.
    cap = dict.fromkeys(range(12), 234) | dict.fromkeys(range(12, 24), 1025)
    base = dict.fromkeys(range(8), 2_500_000) | dict.fromkeys(range(8, 24), 1_200_000)
    top = dict.fromkeys(range(12), 3_000_000) | dict.fromkeys(range(12, 24), 2_000_000)
    got = classify_cpu_kinds(CoreTypeInputs(CPUSet(range(24)), capacity=cap, base_freq_khz=base, max_freq_khz=top))
    assert not got.ranked_as_hwloc
    # capacity first, then base frequency
    assert kinds_of(got.kind_of) == [CPUSet(range(8, 12)), CPUSet(range(8)), CPUSet(range(12, 24))]


def test_pmu_lists_decide_core_types_and_split_kinds() -> None:
    inp = CoreTypeInputs(
        online=CPUSet(range(4)),
        pmu_core=CPUSet([2, 3]),
        pmu_atom=CPUSet([0, 1]),
        base_freq_khz=dict.fromkeys(range(4), 2_000_000),  # same frequencies: only the PMU tells
    )
    got = classify_cpu_kinds(inp)
    assert got.source is CoreTypeSource.INTEL_PMU
    assert [got.core_types[c] for c in range(4)] == [E, E, P, P]
    assert [got.kind_of[c] for c in range(4)] == [0, 0, 1, 1]  # atom below core, as hwloc ranks them


def test_low_power_e_cores_count_as_e_cores() -> None:
    # Meteor Lake: cpu_core, cpu_atom and cpu_lowpower PMUs (hwloc: IntelLowPower).
    inp = CoreTypeInputs(
        online=CPUSet(range(6)),
        pmu_core=CPUSet([0, 1]),
        pmu_atom=CPUSet([2, 3]),
        pmu_lowpower=CPUSet([4, 5]),
    )
    got = classify_cpu_kinds(inp)
    assert got.source is CoreTypeSource.INTEL_PMU
    assert [got.core_types[c] for c in range(6)] == [P, P, E, E, E, E]
    assert [got.kind_of[c] for c in range(6)] == [2, 2, 1, 1, 0, 0]
    overlapping = CoreTypeInputs(
        online=CPUSet(range(4)), pmu_core=CPUSet([0, 1]), pmu_atom=CPUSet([2, 3]), pmu_lowpower=CPUSet([1])
    )
    # lists that overlap name no core type; the kinds still follow them (hwloc intersects)
    got = classify_cpu_kinds(overlapping)
    assert kinds_of(got.kind_of)[0] == CPUSet([2, 3])
    assert len(kinds_of(got.kind_of)) == 3
    assert [got.core_types[c] for c in range(4)] == [P, P, E, E]


def test_pmu_lists_that_miss_a_cpu_leave_types_to_the_kinds() -> None:
    inp = CoreTypeInputs(
        online=CPUSet(range(4)),
        pmu_core=CPUSet([0, 1]),
        pmu_atom=CPUSet([2]),
        max_freq_khz={0: 5_000_000, 1: 5_000_000, 2: 3_900_000, 3: 3_900_000},
    )
    got = classify_cpu_kinds(inp)
    # CPU 3 is in no PMU list: a kind apart from CPU 2, as hwloc intersects the lists, and
    # ranked lowest: hwloc ranks by (PMU class << 20) + max frequency, class 0 for no list
    assert kinds_of(got.kind_of) == [CPUSet([3]), CPUSet([2]), CPUSet([0, 1])]
    assert [got.core_types[c] for c in range(4)] == [P, P, P, E]


def test_cpus_without_any_value_join_a_lone_kind() -> None:
    # hwloc's 2arm-2c: only CPU 0 has a cpufreq folder; hwloc's one kind is CPU 0, and
    # the machine is not hybrid
    got = classify_cpu_kinds(CoreTypeInputs(CPUSet([0, 1]), max_freq_khz={0: 800_000}))
    assert got.core_types == {0: S, 1: S}
    assert got.kind_of == {0: 0, 1: 0}
    assert not got.unknown


def test_cpus_without_any_value_beside_several_kinds_are_a_kind_ranked_lowest() -> None:
    got = classify_cpu_kinds(CoreTypeInputs(CPUSet(range(3)), capacity={1: 1024, 2: 512}))
    assert got.unknown == CPUSet([0])
    assert got.kind_of == {0: 0, 1: 2, 2: 1}


def test_nothing_known_is_standard() -> None:
    got = classify_cpu_kinds(CoreTypeInputs(online=CPUSet(range(3))))
    assert got.source is CoreTypeSource.NONE
    assert set(got.core_types.values()) == {S}
    assert set(got.kind_of.values()) == {0}


@given(
    st.dictionaries(
        st.integers(0, 31),
        st.tuples(st.sampled_from([None, 256, 512, 1024]), st.sampled_from([None, 1_000_000, 2_000_000]),
                  st.sampled_from([None, 3_000_000, 3_100_000, 4_000_000])),
        min_size=1,
    )
)
def test_kinds_are_the_cpus_that_agree_on_every_value(values: dict[int, tuple[int | None, ...]]) -> None:
    online = CPUSet(values)
    cap = {c: v[0] for c, v in values.items() if v[0] is not None}
    base = {c: v[1] for c, v in values.items() if v[1] is not None}
    top = {c: v[2] for c, v in values.items() if v[2] is not None}
    got = classify_cpu_kinds(CoreTypeInputs(online, capacity=cap, base_freq_khz=base, max_freq_khz=top))
    unified = adjust_max_freqs({c: v // 1000 for c, v in top.items()}, {c: v // 1000 for c, v in base.items()})
    if any(c not in base for c in top):
        unified = {c: v // 1000 for c, v in top.items()}
    key = {c: (cap.get(c), base.get(c), unified.get(c)) for c in online}
    if len({k for k in key.values() if k != (None, None, None)}) <= 1:
        key = dict.fromkeys(online, (None, None, None))  # one kind: the others join it
    assert all((got.kind_of[a] == got.kind_of[b]) == (key[a] == key[b]) for a in online for b in online)
    ranks = sorted(set(got.kind_of.values()))
    assert ranks == list(range(len(ranks)))  # dense, 0 = least performant
    if len(ranks) == 1:
        assert set(got.core_types.values()) == {S}
    else:
        assert all((got.core_types[c] is E) == (got.kind_of[c] == 0) for c in online)
