"""Memory kind (DRAM, HBM, PMEM, CXL) of each NUMA node, from sysfs evidence.

Pure: takes facts already read from sysfs, returns a kind and the reason for
it per node. Two layers (docs/topology.md, "Memory kinds"):

**hwloc's reading** (:func:`hwloc_subtypes`, hwloc 2.9.0: ``look_sysfsnode``,
``annotate_dax_nodes`` and the KNL quirk in ``hwloc/topology-linux.c``, the
memory-tier guess ``hwloc_internal_memattrs_guess_memory_tiers`` in
``hwloc/memattrs.c``): NVIDIA GPU memory is ``GPUMemory``; Xeon Phi (KNL)
flat-mode MCDRAM, found from the distance matrix, is ``MCDRAM``; a ``kmem``
DAX node whose device lies on an NVDIMM bus (``ndbus``) is ``NVM``, any other
``kmem`` DAX node ``SPM`` (specific-purpose memory). When every SPM node has
more than twice the bandwidth of the best other node (HMAT: the mean of read
and write bandwidth, both needed), SPM nodes are ``HBM`` and the others
``DRAM``. Other nodes get no subtype. The kernel's ``memory_tiering`` files
play no part.

**topodra's kinds** (:func:`classify_memory`), the first rule that applies:

1. A node with CPUs is ``DRAM`` (also behind a memory-side cache).
2. A node hwloc names: GPUMemory, MCDRAM and HBM are ``HBM``, NVM is
   ``PMEM``, DRAM is ``DRAM``.
3. topodra's own reading where hwloc names nothing (or only SPM): an SPM
   node on a CXL region (``ACPI0017``, ``decoder``, ``cxl`` in the device
   path) is ``CXL``; then the kernel memory tier
   (``/sys/devices/virtual/memory_tiering``): below the DRAM tier (the tier
   of the CPU nodes, else the kernel's default tier 4) ``HBM``, above it slow
   memory (``CXL`` when the machine has CXL devices, else ``PMEM``); then
   HMAT read figures against the best CPU node: more than twice the
   bandwidth ``HBM``, 1.5x the latency or two thirds of the bandwidth slow
   memory.
4. Otherwise ``DRAM``: the kernel puts every node no driver describes in its
   default (DRAM) tier; hwloc leaves its kind unknown and never guesses from
   the size.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from topodra.topology.model import MemoryKind

__all__ = [
    "DEFAULT_DRAM_TIER",
    "NodeMemoryFacts",
    "classify_memory",
    "hwloc_subtypes",
    "is_knl",
    "knl_mcdram_nodes",
]

#: The kernel's tier for ordinary DRAM: MEMTIER_ADISTANCE_DRAM (576) >> 7.
DEFAULT_DRAM_TIER = 4
_PERF_RATIO = 1.5
#: hwloc calls specific-purpose memory HBM when its bandwidth is more than twice DRAM's.
_HBM_BANDWIDTH_RATIO = 2

#: hwloc subtypes and the kind topodra gives them.
SUBTYPE_KINDS: Mapping[str, MemoryKind] = {
    "DRAM": MemoryKind.DRAM,
    "HBM": MemoryKind.HBM,
    "MCDRAM": MemoryKind.HBM,
    "GPUMemory": MemoryKind.HBM,
    "NVM": MemoryKind.PMEM,
}


@dataclass(frozen=True)
class NodeMemoryFacts:
    """What sysfs says about one NUMA node's memory."""

    id: int
    has_cpus: bool
    memory_bytes: int
    tier: int | None = None
    dax: str = ""  # hwloc's DAXType of a kmem DAX device on the node: "NVM" (ndbus) or "SPM"
    dax_cxl: bool = False  # that DAX device lies on a CXL region
    dax_evidence: str = ""
    bandwidth: int | None = None  # MB/s, hwloc's: mean of HMAT read and write bandwidth
    read_bandwidth: int | None = None  # MB/s, HMAT access1 (CPU initiators), else access0
    read_latency: int | None = None  # ns, HMAT access1, else access0
    memory_side_cache: bool = False
    gpu: str = ""  # the GPU whose memory this node is (PCI bus id), from the NVIDIA driver
    mcdram: bool = False  # Xeon Phi MCDRAM (hwloc's KNL quirk, knl_mcdram_nodes)


def hwloc_subtypes(facts: Sequence[NodeMemoryFacts]) -> dict[int, str]:
    """hwloc 2.9.0's NUMA node subtypes; nodes it leaves without one are absent."""
    out: dict[int, str] = {}
    for f in facts:
        if f.gpu:
            out[f.id] = "GPUMemory"
        elif f.mcdram:
            out[f.id] = "MCDRAM"
        elif f.dax:
            out[f.id] = f.dax
    # guess_memory_tiers: nodes that are neither DAX nor GPU memory are the "unknown"
    # tier (MCDRAM included); compare their best bandwidth with the SPM nodes' worst.
    unknown = [f for f in facts if not f.gpu and not f.dax]
    spm = [f for f in facts if not f.gpu and f.dax == "SPM"]
    best_unknown = max((f.bandwidth or 0 for f in unknown), default=0)
    worst_spm = min((f.bandwidth or 0 for f in spm), default=0)
    if best_unknown > 0 and worst_spm > 0 and best_unknown * _HBM_BANDWIDTH_RATIO < worst_spm:
        for f in spm:
            out[f.id] = "HBM"
        for f in unknown:
            out.setdefault(f.id, "DRAM")
    return out


def _slow(cxl_present: bool) -> MemoryKind:
    return MemoryKind.CXL if cxl_present else MemoryKind.PMEM


def _hwloc_reason(f: NodeMemoryFacts, subtype: str, ref_bw: int) -> str:
    if subtype == "GPUMemory":
        return f"memory of NVIDIA GPU {f.gpu} (proc/driver/nvidia/gpus)"
    if subtype == "MCDRAM":
        return "Xeon Phi MCDRAM (flat mode), told apart by the NUMA distances as hwloc does"
    if subtype == "HBM":
        return (
            f"{f.dax_evidence or 'DAX device'}: specific-purpose memory with HMAT bandwidth "
            f"{f.bandwidth} MB/s, more than twice the {ref_bw} MB/s of other nodes (hwloc's guess)"
        )
    if subtype == "NVM":
        return f.dax_evidence or "DAX device on an NVDIMM bus"
    return f"other nodes are HBM by bandwidth (hwloc's guess), so this is DRAM (HMAT {f.bandwidth} MB/s)"


@dataclass(frozen=True)
class _Reference:
    """What CPU nodes offer, for topodra's own rules."""

    tier: int
    read_bandwidth: int | None
    read_latency: int | None
    cxl_present: bool

    def slow(self, why: str) -> tuple[MemoryKind, str]:
        more = "CXL devices present" if self.cxl_present else "no CXL devices, so persistent memory"
        return _slow(self.cxl_present), f"{why}; {more}"


def _own_kind(f: NodeMemoryFacts, ref: _Reference) -> tuple[MemoryKind, str]:
    """topodra's reading of a CPU-less node hwloc names nothing (or SPM)."""
    if f.dax == "SPM" and f.dax_cxl:
        return MemoryKind.CXL, f.dax_evidence or "DAX device on a CXL region"
    if f.tier is not None and f.tier != ref.tier:
        if f.tier < ref.tier:
            return MemoryKind.HBM, f"memory tier {f.tier} is faster than DRAM tier {ref.tier}"
        return ref.slow(f"memory tier {f.tier} is slower than DRAM tier {ref.tier}")
    bw, lat = f.read_bandwidth, f.read_latency
    if ref.read_bandwidth and bw and bw > _HBM_BANDWIDTH_RATIO * ref.read_bandwidth:
        return MemoryKind.HBM, f"HMAT read bandwidth {bw} MB/s vs {ref.read_bandwidth} on CPU nodes"
    if (ref.read_latency and lat and lat >= _PERF_RATIO * ref.read_latency) or (
        ref.read_bandwidth and bw and bw * _PERF_RATIO <= ref.read_bandwidth
    ):
        return ref.slow(
            f"HMAT latency {lat} ns / bandwidth {bw} MB/s vs "
            f"{ref.read_latency} ns / {ref.read_bandwidth} MB/s on CPU nodes"
        )
    if f.memory_bytes == 0:
        return MemoryKind.DRAM, "no memory"
    if f.dax == "SPM":
        return (
            MemoryKind.DRAM,
            f"{f.dax_evidence or 'DAX device'}: specific-purpose memory, no evidence of another kind",
        )
    return MemoryKind.DRAM, "CPU-less, no evidence of another kind (the kernel's default tier)"


def classify_memory(
    facts: Sequence[NodeMemoryFacts], cxl_present: bool = False
) -> dict[int, tuple[MemoryKind, str]]:
    """Kind and reason for every node in ``facts``."""
    dram = [f for f in facts if f.has_cpus and f.memory_bytes > 0]
    cpu_tiers = [f.tier for f in dram if f.tier is not None]
    bws = [f.read_bandwidth for f in dram if f.read_bandwidth]
    lats = [f.read_latency for f in dram if f.read_latency]
    ref = _Reference(
        min(cpu_tiers) if cpu_tiers else DEFAULT_DRAM_TIER,
        max(bws) if bws else None,
        min(lats) if lats else None,
        cxl_present,
    )
    subtypes = hwloc_subtypes(facts)
    hwloc_ref = max((f.bandwidth or 0 for f in facts if not f.gpu and not f.dax), default=0)
    out: dict[int, tuple[MemoryKind, str]] = {}
    for f in facts:
        subtype = subtypes.get(f.id, "")
        if f.has_cpus:
            why = "node has CPUs" + (" (behind a memory-side cache)" if f.memory_side_cache else "")
            out[f.id] = (MemoryKind.DRAM, why)
        elif subtype in SUBTYPE_KINDS:
            out[f.id] = (SUBTYPE_KINDS[subtype], _hwloc_reason(f, subtype, hwloc_ref))
        else:
            out[f.id] = _own_kind(f, ref)
    return out


# --- Xeon Phi (KNL) ---------------------------------------------------------------------


def is_knl(cpuinfo: str) -> bool:
    """The first processor of ``/proc/cpuinfo`` is a Xeon Phi x200 (KNL, model 87) or
    KNM (133), as hwloc decides it (vendor, family and model of its first entry)."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return (
        fields.get("vendor_id") == "GenuineIntel"
        and fields.get("cpu family") == "6"
        and fields.get("model") in ("87", "133")
    )


def knl_mcdram_nodes(
    node_ids: Sequence[int], cpu_less: Sequence[int], distances: Mapping[tuple[int, int], int]
) -> list[int]:
    """The MCDRAM nodes of a Xeon Phi in flat or hybrid memory mode, as hwloc 2.9.0 finds them
    without ``hwloc-dump-hwdata``'s file (``hwloc_linux_knl_numa_quirk``): 2 nodes with a
    CPU-less second one (Quadrant), 4 nodes with four distance values (SNC-2) or 8 nodes
    (SNC-4), picked out of the distance matrix. Other layouts have none."""
    n = len(node_ids)
    if n not in (2, 4, 8) or any((a, b) not in distances for a in node_ids for b in node_ids):
        return []

    def d(i: int, j: int) -> int:
        return distances[(node_ids[i], node_ids[j])]

    counts: dict[int, int] = {10: n}
    for i in range(n):
        if d(i, i) != 10:
            return []
        for j in range(i + 1, n):
            v = d(i, j)
            if v != d(j, i) or v <= 10 or (v not in counts and len(counts) == 4):
                return []
            counts[v] = counts.get(v, 0) + 1
    by_count = sorted(counts.items(), key=lambda vc: vc[1])  # (value, occurrences), fewest first
    occurrences = [c for _, c in by_count]
    if n == 2:
        return [node_ids[1]] if len(counts) == 2 and node_ids[1] in cpu_less else []
    if n == 4 and occurrences == [1, 2, 3, 4]:  # SNC-2 flat; two values: SNC-4 cache mode
        ddrs = [0, *itertools.islice((i for i in range(4) if d(0, i) == by_count[0][0]), 1)]
        local = by_count[1][0]
    elif n == 8 and occurrences == [4, 6, 8, 18]:  # SNC-4 flat
        ddrs = [0, *itertools.islice((i for i in range(8) if d(0, i) == by_count[1][0]), 3)]
        local = by_count[0][0]
    else:
        return []
    if len(ddrs) != n // 2:
        return []
    mcdram = [0] * len(ddrs)
    for i in range(1, n):  # each MCDRAM is at the "local" distance from its DDR
        owner = next((k for k, ddr in enumerate(ddrs) if d(ddr, i) == local), None)
        if owner is not None:
            mcdram[owner] = i
    return [node_ids[i] for i in mcdram] if all(mcdram) else []
