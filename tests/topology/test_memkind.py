"""Memory kinds: sysfs evidence first, else DRAM (the kernel's default tier)."""

from __future__ import annotations

import dataclasses

from topodra.topology.memkind import (
    NodeMemoryFacts,
    classify_memory,
    hwloc_subtypes,
    is_knl,
    knl_mcdram_nodes,
)
from topodra.topology.model import MemoryKind

GIB = 1 << 30
DRAM0 = NodeMemoryFacts(0, has_cpus=True, memory_bytes=96 * GIB)
DRAM1 = NodeMemoryFacts(1, has_cpus=True, memory_bytes=96 * GIB)


def kinds(*facts: NodeMemoryFacts, cxl: bool = False) -> dict[int, MemoryKind]:
    return {n: k for n, (k, _) in classify_memory(facts, cxl).items()}


def test_cpu_nodes_are_dram_even_behind_a_memory_side_cache() -> None:
    got = classify_memory([NodeMemoryFacts(0, True, 370 * GIB, memory_side_cache=True)])
    assert got[0] == (MemoryKind.DRAM, "node has CPUs (behind a memory-side cache)")


def test_dax_evidence_names_pmem_and_cxl() -> None:
    pmem = NodeMemoryFacts(2, False, 742 * GIB, dax="NVM", dax_evidence="DAX dax0.0")
    cxl = NodeMemoryFacts(3, False, 64 * GIB, dax="SPM", dax_cxl=True)
    spm = NodeMemoryFacts(4, False, 64 * GIB, dax="SPM")  # soft-reserved, nothing else known
    assert kinds(DRAM0, pmem, cxl, spm) == {
        0: MemoryKind.DRAM,
        2: MemoryKind.PMEM,
        3: MemoryKind.CXL,
        4: MemoryKind.DRAM,
    }
    assert hwloc_subtypes([DRAM0, pmem, cxl, spm]) == {2: "NVM", 3: "SPM", 4: "SPM"}


def test_hwloc_guess_makes_fast_specific_purpose_memory_hbm() -> None:
    # memattrs.c: every SPM node more than twice the best other node's bandwidth (mean of
    # read and write): SPM nodes are HBM, the others DRAM.
    dram = NodeMemoryFacts(0, True, 96 * GIB, bandwidth=100_000)
    cpu_less = NodeMemoryFacts(1, False, 96 * GIB)  # no HMAT: counts as 0, not as "unknown"
    hbm = NodeMemoryFacts(2, False, 16 * GIB, dax="SPM", bandwidth=200_001)
    assert hwloc_subtypes([dram, cpu_less, hbm]) == {0: "DRAM", 1: "DRAM", 2: "HBM"}
    got = classify_memory([dram, cpu_less, hbm])
    assert got[2][0] is MemoryKind.HBM
    assert "hwloc's guess" in got[2][1]
    # exactly twice is not enough; an SPM node without bandwidth spoils the guess
    assert hwloc_subtypes([dram, dataclasses.replace(hbm, bandwidth=200_000)]) == {2: "SPM"}
    no_bw = NodeMemoryFacts(3, False, 16 * GIB, dax="SPM")
    assert hwloc_subtypes([dram, hbm, no_bw]) == {2: "SPM", 3: "SPM"}
    # the best non-DAX node counts, CPU-less or not; GPU memory does not
    fast_plain = NodeMemoryFacts(4, False, 16 * GIB, bandwidth=150_000)
    assert hwloc_subtypes([dram, hbm, fast_plain]) == {2: "SPM"}
    gpu = NodeMemoryFacts(5, False, 16 * GIB, bandwidth=900_000, gpu="0004:04:00.0")
    assert hwloc_subtypes([dram, hbm, gpu]) == {0: "DRAM", 2: "HBM", 5: "GPUMemory"}


def test_hwloc_names_win_over_topodras_own_evidence() -> None:
    # hwloc calls a CPU-less non-DAX node DRAM once SPM nodes are HBM; topodra follows it
    # even where the kernel tier alone would say slow memory.
    dram = NodeMemoryFacts(0, True, 96 * GIB, bandwidth=100_000, tier=4)
    hbm = NodeMemoryFacts(1, False, 16 * GIB, dax="SPM", bandwidth=400_000, tier=4)
    tiered = NodeMemoryFacts(2, False, 96 * GIB, tier=5)
    assert kinds(dram, hbm, tiered) == {0: MemoryKind.DRAM, 1: MemoryKind.HBM, 2: MemoryKind.DRAM}
    # without the HBM guess hwloc names nothing, and the tier decides
    assert kinds(dram, tiered)[2] is MemoryKind.PMEM


def test_knl_mcdram_is_hbm() -> None:
    mcdram = NodeMemoryFacts(1, False, 16 * GIB, mcdram=True)
    got = classify_memory([DRAM0, mcdram])
    assert got[1][0] is MemoryKind.HBM
    assert "MCDRAM" in got[1][1]


def test_memory_tiers_relative_to_the_dram_tier() -> None:
    fast = NodeMemoryFacts(2, False, 64 * GIB, tier=3)
    slow = NodeMemoryFacts(3, False, 256 * GIB, tier=5)
    dram = NodeMemoryFacts(0, True, 96 * GIB, tier=4)
    assert kinds(dram, fast, slow) == {0: MemoryKind.DRAM, 2: MemoryKind.HBM, 3: MemoryKind.PMEM}
    assert kinds(dram, fast, slow, cxl=True)[3] is MemoryKind.CXL
    # same tier as DRAM says nothing: DRAM
    assert kinds(dram, NodeMemoryFacts(4, False, 96 * GIB, tier=4))[4] is MemoryKind.DRAM


def test_hmat_bandwidth_and_latency() -> None:
    dram = NodeMemoryFacts(0, True, 96 * GIB, read_bandwidth=100_000, read_latency=90)
    hbm = NodeMemoryFacts(1, False, 64 * GIB, read_bandwidth=400_000, read_latency=100)
    far = NodeMemoryFacts(2, False, 256 * GIB, read_bandwidth=40_000, read_latency=250)
    assert kinds(dram, hbm, far) == {0: MemoryKind.DRAM, 1: MemoryKind.HBM, 2: MemoryKind.PMEM}


def test_no_evidence_is_dram_whatever_the_size() -> None:
    # hwloc never guesses a kind from the size (128ia64-17n4s2c's 1 GiB
    # interleave node is ordinary DRAM); the kernel tiers such nodes as DRAM.
    small = NodeMemoryFacts(2, False, 1 * GIB)
    big = NodeMemoryFacts(3, False, 512 * GIB)
    empty = NodeMemoryFacts(4, False, 0)  # a generic initiator with no memory
    got = classify_memory([DRAM0, DRAM1, small, big, empty])
    assert (
        got[2]
        == got[3]
        == (MemoryKind.DRAM, "CPU-less, no evidence of another kind (the kernel's default tier)")
    )
    assert got[4] == (MemoryKind.DRAM, "no memory")


def test_gpu_memory_nodes_are_hbm() -> None:
    gpu = NodeMemoryFacts(250, False, 16 * GIB, gpu="0004:04:00.0")
    got = classify_memory([DRAM0, gpu])
    assert got[250] == (MemoryKind.HBM, "memory of NVIDIA GPU 0004:04:00.0 (proc/driver/nvidia/gpus)")


def test_hbm_needs_more_than_twice_the_bandwidth_as_in_hwloc() -> None:
    dram = NodeMemoryFacts(0, True, 96 * GIB, read_bandwidth=100_000, read_latency=90)
    assert kinds(dram, NodeMemoryFacts(1, False, 64 * GIB, read_bandwidth=200_000))[1] is MemoryKind.DRAM
    assert kinds(dram, NodeMemoryFacts(1, False, 64 * GIB, read_bandwidth=160_000))[1] is MemoryKind.DRAM
    assert kinds(dram, NodeMemoryFacts(1, False, 64 * GIB, read_bandwidth=200_001))[1] is MemoryKind.HBM


def test_no_cpu_node_with_memory_means_no_size_reference() -> None:
    # fakememinitiators: CPU nodes hold no memory; memory-only nodes stay DRAM.
    cpu_only = NodeMemoryFacts(0, True, 0)
    assert kinds(cpu_only, NodeMemoryFacts(5, False, 93 * GIB)) == {0: MemoryKind.DRAM, 5: MemoryKind.DRAM}


def matrix(rows: list[list[int]], ids: list[int] | None = None) -> dict[tuple[int, int], int]:
    ids = ids or list(range(len(rows)))
    return {(ids[i], ids[j]): v for i, row in enumerate(rows) for j, v in enumerate(row)}


def test_knl_quadrant_flat_second_node_is_mcdram() -> None:
    d = matrix([[10, 31], [31, 10]])
    assert knl_mcdram_nodes([0, 1], [1], d) == [1]
    assert knl_mcdram_nodes([0, 1], [], d) == []  # CPUs on both: SNC-2 in cache mode
    assert knl_mcdram_nodes([0, 1], [1], {}) == []  # no distances: hwloc skips the quirk
    assert knl_mcdram_nodes([0], [], matrix([[10]])) == []  # quadrant cache mode


def test_knl_snc2_and_snc4_flat_mcdram_from_the_distances() -> None:
    # the matrices of hwloc's comments (hwloc_linux_knl_identify_4nodes / _8nodes)
    snc2 = [[10, 21, 31, 41], [21, 10, 41, 31], [31, 41, 10, 41], [41, 31, 41, 10]]
    assert knl_mcdram_nodes([0, 1, 2, 3], [2, 3], matrix(snc2)) == [2, 3]
    snc4 = [
        [10, 21, 21, 21, 31, 41, 41, 41],
        [21, 10, 21, 21, 41, 31, 41, 41],
        [21, 21, 10, 21, 41, 41, 31, 41],
        [21, 21, 21, 10, 41, 41, 41, 31],
        [31, 41, 41, 41, 10, 41, 41, 41],
        [41, 31, 41, 41, 41, 10, 41, 41],
        [41, 41, 31, 41, 41, 41, 10, 41],
        [41, 41, 41, 31, 41, 41, 41, 10],
    ]
    ids = [0, 1, 2, 3, 4, 5, 6, 7]
    assert knl_mcdram_nodes(ids, ids[4:], matrix(snc4)) == [4, 5, 6, 7]
    # SNC-4 cache mode: four nodes, two distance values, no MCDRAM node
    snc4_cache = [[10, 21, 21, 21], [21, 10, 21, 21], [21, 21, 10, 21], [21, 21, 21, 10]]
    assert knl_mcdram_nodes([0, 1, 2, 3], [], matrix(snc4_cache)) == []
    asymmetric = [row[:] for row in snc2]
    asymmetric[0][2] = 32
    assert knl_mcdram_nodes([0, 1, 2, 3], [2, 3], matrix(asymmetric)) == []


def test_knl_is_told_by_the_first_processor() -> None:
    knl = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 87\n\nprocessor\t: 1\n"
    assert is_knl(knl)
    assert is_knl(knl.replace(": 87", ": 133"))  # Knights Mill
    assert not is_knl(knl.replace(": 87", ": 85"))
    assert not is_knl(knl.replace("GenuineIntel", "AuthenticAMD"))
    assert not is_knl("")
