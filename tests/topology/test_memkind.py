"""Memory kinds: sysfs evidence first, else DRAM (the kernel's default tier)."""

from __future__ import annotations

from topodra.topology.memkind import NodeMemoryFacts, classify_memory
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
    pmem = NodeMemoryFacts(2, False, 742 * GIB, dax_kind=MemoryKind.PMEM, dax_evidence="DAX dax0.0")
    cxl = NodeMemoryFacts(3, False, 64 * GIB, dax_kind=MemoryKind.CXL)
    assert kinds(DRAM0, pmem, cxl) == {0: MemoryKind.DRAM, 2: MemoryKind.PMEM, 3: MemoryKind.CXL}


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
