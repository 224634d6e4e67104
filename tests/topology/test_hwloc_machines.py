"""Machine classes the hwloc fixtures lack, written with the sysfs writer and read by both.

Each test writes a kernel-shaped tree (ARM hybrids without MIDR registers, Intel
frequency kinds, soft-reserved HBM, CXL, kernel memory tiers, Xeon Phi MCDRAM),
reads it with topodra and with Debian's ``lstopo-no-graphics --of console -v``
(hwloc 2.9, which ranks CPU kinds and names node subtypes there), and checks
that every level hwloc shows is ours, kind ranks included. Where topodra reads
more than hwloc (kernel tiers, CXL regions), the test says what hwloc names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from testkit.sysfs_writer import (
    TreeStyle,
    write_cpu_identity,
    write_dax_kmem,
    write_hmat,
    write_memory_tiers,
    write_sysfs,
)

from topodra.cpuset import CPUSet
from topodra.topology import CoreType, CoreTypeSource, MemoryKind, Topology, read_topology, synthetic_topology
from topodra.topology import hwloc as hw
from topodra.topology.model import NUMANode

GIB = 1 << 30
NO_EVIDENCE = TreeStyle(memory_evidence=False)


def both(root: Path) -> tuple[Topology, hw.HwlocReading]:
    """topodra's reading and hwloc's, after checking they agree on every level hwloc shows."""
    assert hw.lstopo_available(), f"{hw.LSTOPO} is needed: apt-get install hwloc (.ci/run does)"
    t = read_topology(root)
    h = hw.run_lstopo(root, console=True)
    checks = hw.compare(t, h)
    assert all(c.ok for c in checks), "\n".join(f"{c.level}: {c.detail}" for c in checks if not c.ok)
    return t, h


def with_cpu_values(
    t: Topology,
    *,
    capacity: Sequence[int | None] | None = None,
    base_freq_khz: Sequence[int | None] | None = None,
    max_freq_khz: Sequence[int | None] | None = None,
) -> Topology:
    """``t`` with per-CPU capacity and frequencies (lists by CPU id; None: keep ``t``'s)."""
    cpus = {
        c: dataclasses.replace(
            i,
            capacity=capacity[c] if capacity is not None else i.capacity,
            base_freq_khz=base_freq_khz[c] if base_freq_khz is not None else i.base_freq_khz,
            max_freq_khz=max_freq_khz[c] if max_freq_khz is not None else i.max_freq_khz,
        )
        for c, i in t.cpus.items()
    }
    return dataclasses.replace(t, cpus=cpus)


def ranked(h: hw.HwlocReading) -> list[CPUSet]:
    """hwloc's kinds, least efficient first (all must be ranked)."""
    assert all(e is not None and e >= 0 for e in h.cpu_kind_efficiency)
    return [k for _, k in sorted(zip(h.cpu_kind_efficiency, h.cpu_kinds, strict=True), key=lambda ek: ek[0] or 0)]


# --- CPU kinds --------------------------------------------------------------------------


def test_arm_dynamiq_without_midr_has_three_kinds_by_capacity(fast_tmp: Path) -> None:
    # 4 little, 3 big and 1 prime core; arm64 kernels give no base frequency.
    t = with_cpu_values(
        synthetic_topology("1s1d1n1l8c1t"),
        capacity=[325] * 4 + [870] * 3 + [1024],
        base_freq_khz=[None] * 8,
        max_freq_khz=[1_800_000] * 4 + [2_400_000] * 3 + [3_000_000],
    )
    got, h = both(write_sysfs(t, fast_tmp / "root"))
    assert ranked(h) == got.cpu_kinds() == [CPUSet(range(4)), CPUSet(range(4, 7)), CPUSet([7])]
    assert got.cpus_of_type(CoreType.E_CORE) == CPUSet(range(4))
    assert got.cpus_of_type(CoreType.P_CORE) == CPUSet(range(4, 8))
    assert got.core_type_source is CoreTypeSource.CPU_CAPACITY


def test_arm_clusters_told_apart_by_max_frequency_alone(fast_tmp: Path) -> None:
    # no cpu_capacity (older kernels): each distinct cpuinfo_max_freq is a kind, and
    # without base frequencies hwloc unifies nothing, however close the values.
    t = with_cpu_values(
        synthetic_topology("1s1d1n1l6c1t"),
        base_freq_khz=[None] * 6,
        max_freq_khz=[2_000_000] * 2 + [2_100_000] * 2 + [2_800_000] * 2,
    )
    got, h = both(write_sysfs(t, fast_tmp / "root"))
    assert ranked(h) == got.cpu_kinds() == [CPUSet([0, 1]), CPUSet([2, 3]), CPUSet([4, 5])]
    assert got.core_type_source is CoreTypeSource.MAX_FREQUENCY


def test_capacity_ranks_even_against_the_frequencies(fast_tmp: Path) -> None:
    t = with_cpu_values(
        synthetic_topology("1s1d1n1l4c1t"),
        capacity=[1024, 1024, 512, 512],
        base_freq_khz=[None] * 4,
        max_freq_khz=[2_000_000, 2_000_000, 3_000_000, 3_000_000],
    )
    got, h = both(write_sysfs(t, fast_tmp / "root"))
    assert ranked(h) == got.cpu_kinds() == [CPUSet([2, 3]), CPUSet([0, 1])]


def test_favoured_cores_join_their_kind_below_ten_percent(fast_tmp: Path) -> None:
    # Turbo Boost Max 3.0: two favoured cores 7.5 % faster at the same base frequency (the
    # kernel gives both threads of a core the same cpufreq values).
    t = synthetic_topology("1s1d1n1l4c2t")
    favoured = t.cpus_of_core(2) | t.cpus_of_core(3)
    near = with_cpu_values(
        t, base_freq_khz=[2_000_000] * 8, max_freq_khz=[4_300_000 if c in favoured else 4_000_000 for c in range(8)]
    )
    got, _ = both(write_sysfs(near, fast_tmp / "near"))
    assert got.cpu_kinds() == [got.online]
    assert got.core_types() == [CoreType.STANDARD]
    # 12.5 % faster is a kind of its own; hwloc ranks by the base frequency, which ties,
    # so it leaves the efficiency unknown, and topodra ranks by max frequency last
    far = with_cpu_values(
        t, base_freq_khz=[2_000_000] * 8, max_freq_khz=[4_500_000 if c in favoured else 4_000_000 for c in range(8)]
    )
    got, h = both(write_sysfs(far, fast_tmp / "far"))
    assert h.cpu_kind_efficiency == [-1, -1]
    assert got.cpu_kinds() == [t.online - favoured, favoured]


def test_speed_select_base_frequencies_are_two_kinds(fast_tmp: Path) -> None:
    # Intel SST-BF: high-priority cores get a higher base frequency; hwloc makes them a
    # kind, ranked above the others, and so does topodra (they become the P-cores).
    t = with_cpu_values(
        synthetic_topology("1s1d1n1l8c1t"),
        base_freq_khz=[2_100_000, 2_700_000] * 4,
        max_freq_khz=[3_900_000] * 8,
    )
    got, h = both(write_sysfs(t, fast_tmp / "root"))
    assert ranked(h) == got.cpu_kinds() == [CPUSet([0, 2, 4, 6]), CPUSet([1, 3, 5, 7])]
    assert got.cpus_of_type(CoreType.P_CORE) == CPUSet([1, 3, 5, 7])
    assert got.core_type_source is CoreTypeSource.BASE_FREQUENCY


def test_intel_hybrid_pmu_lists_name_p_and_e_cores(fast_tmp: Path) -> None:
    # Alder Lake: the PMU lists name the types (hwloc 2.9 does not read them; its
    # frequency kinds are the same CPUs).
    t = synthetic_topology("1s1d1n1l4c2t4e")
    got, h = both(write_sysfs(t, fast_tmp / "root", TreeStyle(core_type_evidence="pmu")))
    assert got.core_type_source is CoreTypeSource.INTEL_PMU
    assert got.cpus_of_type(CoreType.P_CORE) == t.cpus_of_type(CoreType.P_CORE)
    assert ranked(h) == got.cpu_kinds() == [t.cpus_of_type(CoreType.E_CORE), t.cpus_of_type(CoreType.P_CORE)]


def test_kinds_hwloc_cannot_rank_still_match(fast_tmp: Path) -> None:
    # capacity splits 0-3 from 4-5, base frequency 0-1 from 2-5: three kinds, two sharing a
    # capacity and two a base frequency. hwloc reports efficiency -1; topodra orders by
    # capacity, then base frequency.
    t = with_cpu_values(
        synthetic_topology("1s1d1n1l6c1t"),
        capacity=[500] * 4 + [1024] * 2,
        base_freq_khz=[2_000_000] * 2 + [1_000_000] * 4,
        max_freq_khz=[None] * 6,
    )
    got, h = both(write_sysfs(t, fast_tmp / "root"))
    assert h.cpu_kind_efficiency == [-1, -1, -1]
    assert set(h.cpu_kinds) == set(got.cpu_kinds())
    assert got.cpu_kinds() == [CPUSet([2, 3]), CPUSet([0, 1]), CPUSet([4, 5])]


# --- memory kinds -----------------------------------------------------------------------


def xeon_max(root: Path, hbm_bandwidth: int) -> Path:
    """Two sockets, each with a DRAM node and an HBM node the firmware marks soft-reserved
    (onlined through a kmem DAX device), with HMAT figures from the CPUs of its socket."""
    t = synthetic_topology("2s1d1n1l2c1t+hbm")
    write_sysfs(t, root, NO_EVIDENCE)
    for cpu_node, hbm in ((0, 2), (1, 3)):
        write_dax_kmem(root, hbm, "hmem", hbm)
        write_hmat(root, cpu_node, [cpu_node], read_bandwidth=100_000, write_bandwidth=90_000,
                   read_latency=90, write_latency=95)
        write_hmat(root, hbm, [cpu_node], read_bandwidth=hbm_bandwidth, write_bandwidth=hbm_bandwidth - 10_000,
                   read_latency=110, write_latency=115)
    return root


def test_soft_reserved_hbm_is_hbm_by_hwlocs_bandwidth_guess(fast_tmp: Path) -> None:
    got, h = both(xeon_max(fast_tmp / "root", 400_000))
    assert h.node_subtypes == {0: "DRAM", 1: "DRAM", 2: "HBM", 3: "HBM"}
    assert [got.nodes[n].kind for n in range(4)] == [MemoryKind.DRAM] * 2 + [MemoryKind.HBM] * 2
    assert "hwloc's guess" in got.nodes[2].kind_reason


def test_soft_reserved_memory_not_twice_as_fast_stays_unnamed(fast_tmp: Path) -> None:
    # mean bandwidth 185 GB/s vs 95 GB/s: less than twice, so hwloc says SPM only
    root = xeon_max(fast_tmp / "root", 190_000)
    got, h = both(root)
    assert h.node_subtypes == {2: "SPM", 3: "SPM"}
    assert got.nodes[2].kind is MemoryKind.DRAM
    assert "specific-purpose memory" in got.nodes[2].kind_reason
    # topodra's own reading: the kernel tiered the nodes apart (hwloc ignores the tiers)
    write_memory_tiers(root, {4: [0, 1], 3: [2, 3]})
    got, h = both(root)
    assert h.node_subtypes == {2: "SPM", 3: "SPM"}
    assert got.nodes[2].kind is MemoryKind.HBM
    assert got.nodes[2].kind_reason == "memory tier 3 is faster than DRAM tier 4"


def test_kernel_memory_tiers_are_topodras_own_reading(fast_tmp: Path) -> None:
    t = synthetic_topology("1s1d1n1l4c1t+pmem")
    root = write_sysfs(t, fast_tmp / "root", NO_EVIDENCE)
    write_memory_tiers(root, {4: [0], 5: [1]})  # slow memory with no DAX device
    got, h = both(root)
    assert 1 not in h.node_subtypes  # hwloc names nothing
    assert got.nodes[1].kind is MemoryKind.PMEM
    assert got.nodes[1].kind_reason.startswith("memory tier 5 is slower than DRAM tier 4")


def test_nvdimm_and_cxl_dax_nodes(fast_tmp: Path) -> None:
    t = synthetic_topology("1s1d1n1l4c1t+pmem")
    nodes = dict(t.nodes)
    nodes[2] = NUMANode(2, CPUSet(), 64 * GIB, MemoryKind.CXL)
    dist = dict(t.distances) | {(2, 2): 10, (0, 2): 24, (2, 0): 24, (1, 2): 30, (2, 1): 30}
    root = write_sysfs(dataclasses.replace(t, nodes=nodes, distances=dist), fast_tmp / "root", NO_EVIDENCE)
    write_dax_kmem(root, 1, "ndbus", 0)
    write_dax_kmem(root, 2, "cxl", 1)
    got, h = both(root)
    # hwloc 2.9 names the NVDIMM NVM and the CXL region only SPM (2.10 and later: CXL-DRAM)
    assert h.node_subtypes == {1: "NVM", 2: "SPM"}
    assert got.nodes[1].kind is MemoryKind.PMEM
    assert got.nodes[2].kind is MemoryKind.CXL
    assert "CXL region" in got.nodes[2].kind_reason


def knl(nodes: int) -> Topology:
    """A Xeon Phi 7250 in flat memory mode: ``nodes`` DDR nodes with CPUs and as many
    MCDRAM nodes, distances as hwloc's KNL quirk expects them."""
    t = synthetic_topology(f"1s1d{nodes}n1l2c1t")
    ddr = {n: dataclasses.replace(x, memory_bytes=96 * GIB // nodes) for n, x in t.nodes.items()}
    mcdram = {n + nodes: NUMANode(n + nodes, CPUSet(), 16 * GIB // nodes) for n in range(nodes)}
    dist: dict[tuple[int, int], int] = {}
    for a in range(2 * nodes):
        for b in range(2 * nodes):
            same_quadrant = a % nodes == b % nodes
            if a == b:
                dist[(a, b)] = 10
            elif a < nodes and b < nodes:
                dist[(a, b)] = 21
            elif same_quadrant:
                dist[(a, b)] = 31
            else:
                dist[(a, b)] = 41
    return dataclasses.replace(t, nodes=ddr | mcdram, distances=dist)


def test_knl_flat_mode_mcdram_is_hbm(fast_tmp: Path) -> None:
    for nodes in (1, 4):  # quadrant and SNC-4
        t = knl(nodes)
        root = write_sysfs(t, fast_tmp / f"knl{nodes}", NO_EVIDENCE)
        # before the tree says it is a Xeon Phi, neither reads MCDRAM
        got, h = both(root)
        assert not h.node_subtypes
        assert got.nodes[nodes].kind is MemoryKind.DRAM
        write_cpu_identity(root, t.cpus, vendor="GenuineIntel", family=6, model=87)
        got, h = both(root)
        mcdram = list(range(nodes, 2 * nodes))
        assert h.node_subtypes == dict.fromkeys(mcdram, "MCDRAM")
        assert [got.nodes[n].kind for n in mcdram] == [MemoryKind.HBM] * nodes
        assert "MCDRAM" in got.nodes[nodes].kind_reason
