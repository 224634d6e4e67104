"""Memory kind (DRAM, HBM, PMEM, CXL) of each NUMA node, from sysfs evidence.

Pure: takes facts already read from sysfs, returns a kind and the reason for
it per node. The first rule that applies wins (docs/topology.md sets each
beside hwloc's rule):

1. A node with CPUs is ``DRAM`` (also when a memory-side cache fronts it).
2. A node the NVIDIA driver names as GPU memory
   (``/proc/driver/nvidia/gpus/*/numa_status``, hwloc's ``GPUMemory``) is
   ``HBM``.
3. A DAX device onlined into the node (``dax*/target_node`` bound to ``kmem``)
   whose device path lies on an NVDIMM bus (``ndbus``, ACPI0012) is ``PMEM``;
   on a CXL region (``ACPI0017``, ``decoder``, ``cxl``) it is ``CXL``.
4. The kernel memory tier (``/sys/devices/virtual/memory_tiering``): a tier
   below the DRAM tier (the tier of the CPU nodes, else the kernel's default
   tier 4) is ``HBM``; a tier above it is slow memory: ``CXL`` when the machine
   has CXL devices (``/sys/bus/cxl/devices``), else ``PMEM``.
5. HMAT performance (``access1``, else ``access0``, ``initiators/read_*``)
   against the best CPU node: more than twice the bandwidth is ``HBM`` (hwloc's
   DRAM/HBM guess); 1.5x the latency or two thirds of the bandwidth is slow
   memory (as in 4).
6. Otherwise ``DRAM``: the kernel puts every node no driver describes in its
   default (DRAM) tier. hwloc leaves such a node's kind unknown; it never
   guesses from the size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from topodra.topology.model import MemoryKind

__all__ = ["DEFAULT_DRAM_TIER", "NodeMemoryFacts", "classify_memory"]

#: The kernel's tier for ordinary DRAM: MEMTIER_ADISTANCE_DRAM (576) >> 7.
DEFAULT_DRAM_TIER = 4
_PERF_RATIO = 1.5
#: hwloc calls a tier HBM when its bandwidth is more than twice DRAM's.
_HBM_BANDWIDTH_RATIO = 2


@dataclass(frozen=True)
class NodeMemoryFacts:
    """What sysfs says about one NUMA node's memory."""

    id: int
    has_cpus: bool
    memory_bytes: int
    tier: int | None = None
    dax_kind: MemoryKind | None = None
    dax_evidence: str = ""
    read_bandwidth: int | None = None  # MB/s, HMAT access1 (CPU initiators), else access0
    read_latency: int | None = None  # ns, HMAT access1, else access0
    memory_side_cache: bool = False
    gpu: str = ""  # the GPU whose memory this node is (PCI bus id), from the NVIDIA driver


def _slow(cxl_present: bool) -> MemoryKind:
    return MemoryKind.CXL if cxl_present else MemoryKind.PMEM


def classify_memory(
    facts: Sequence[NodeMemoryFacts], cxl_present: bool = False
) -> dict[int, tuple[MemoryKind, str]]:
    """Kind and reason for every node in ``facts``."""
    dram = [f for f in facts if f.has_cpus and f.memory_bytes > 0]
    cpu_tiers = [f.tier for f in dram if f.tier is not None]
    dram_tier = min(cpu_tiers) if cpu_tiers else DEFAULT_DRAM_TIER
    bws = [f.read_bandwidth for f in dram if f.read_bandwidth]
    lats = [f.read_latency for f in dram if f.read_latency]
    ref_bw = max(bws) if bws else None
    ref_lat = min(lats) if lats else None
    slow_name = "CXL devices present" if cxl_present else "no CXL devices, so persistent memory"

    out: dict[int, tuple[MemoryKind, str]] = {}
    for f in facts:
        if f.has_cpus:
            why = "node has CPUs"
            if f.memory_side_cache:
                why += " (behind a memory-side cache)"
            out[f.id] = (MemoryKind.DRAM, why)
        elif f.gpu:
            out[f.id] = (MemoryKind.HBM, f"memory of NVIDIA GPU {f.gpu} (proc/driver/nvidia/gpus)")
        elif f.dax_kind is not None:
            out[f.id] = (f.dax_kind, f.dax_evidence or "DAX device")
        elif f.tier is not None and f.tier != dram_tier:
            if f.tier < dram_tier:
                out[f.id] = (MemoryKind.HBM, f"memory tier {f.tier} is faster than DRAM tier {dram_tier}")
            else:
                out[f.id] = (
                    _slow(cxl_present),
                    f"memory tier {f.tier} is slower than DRAM tier {dram_tier}; {slow_name}",
                )
        elif ref_bw and f.read_bandwidth and f.read_bandwidth > _HBM_BANDWIDTH_RATIO * ref_bw:
            out[f.id] = (
                MemoryKind.HBM,
                f"HMAT read bandwidth {f.read_bandwidth} MB/s vs {ref_bw} on CPU nodes",
            )
        elif (ref_lat and f.read_latency and f.read_latency >= _PERF_RATIO * ref_lat) or (
            ref_bw and f.read_bandwidth and f.read_bandwidth * _PERF_RATIO <= ref_bw
        ):
            out[f.id] = (
                _slow(cxl_present),
                f"HMAT latency {f.read_latency} ns / bandwidth {f.read_bandwidth} MB/s vs "
                f"{ref_lat} ns / {ref_bw} MB/s on CPU nodes; {slow_name}",
            )
        elif f.memory_bytes == 0:
            out[f.id] = (MemoryKind.DRAM, "no memory")
        else:
            out[f.id] = (MemoryKind.DRAM, "CPU-less, no evidence of another kind (the kernel's default tier)")
    return out
