"""Write a Topology out as a Linux sysfs tree (for tests, demos and the playground).

``write_sysfs(t, root)`` lays out the files ``read_topology`` reads, the way
the kernel writes them: CPU sets in list and hex-mask form, sibling masks
limited to online CPUs, offline CPUs as bare ``cpuN`` folders with
``online`` = 0, node ``meminfo``/``distance``, evidence for core types
and memory kinds, and the PCI devices of ``pci_roots`` (each in
``sys/devices/<root>/<address>`` with ``class``, ``local_cpus``/``local_cpulist``
and ``numa_node``, linked from ``sys/bus/pci/devices``: any shape a test builds). :class:`TreeStyle` switches parts off to imitate older
kernels, containers and VMs (no caches, no cpufreq, no NUMA folder, no
die/cluster files, masks only) so tests can check every fallback.
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from topodra.cpuset import CPUSet
from topodra.topology.model import CoreType, MemoryKind, Topology

__all__ = [
    "TreeStyle",
    "format_hexmask",
    "publish_sysfs",
    "with_offline",
    "write_cpu_identity",
    "write_dax_kmem",
    "write_hmat",
    "write_memory_tiers",
    "write_sysfs",
]


def format_hexmask(cpus: CPUSet, width_bits: int = 64) -> str:
    """The kernel's cpumap format: comma-separated 32-bit hex words, high first."""
    nbits = max(width_bits, cpus.last() + 1 if cpus else 0)
    words = (nbits + 31) // 32
    mask = cpus.mask
    return ",".join(f"{(mask >> (32 * i)) & 0xFFFFFFFF:08x}" for i in reversed(range(words)))


@dataclass(frozen=True)
class TreeStyle:
    """Which parts of sysfs to write (all on = a recent kernel on bare metal)."""

    caches: bool = True
    cpufreq: bool = True
    numa: bool = True
    die_cluster_files: bool = True
    #: off: the kernel's defaults for architectures without dies or clusters
    #: (ppc64, s390, older arm64): each CPU alone in die_cpus/cluster_cpus, ids -1
    dies_and_clusters: bool = True
    list_files: bool = True  # *_list twins next to the hex masks
    sibling_masks: bool = True  # off: only the *_id files (grouping falls back to ids)
    online_file: bool = True  # cpu/online (old kernels only have cpuN/online)
    #: How hybrid machines say which core is which: "pmu", "capacity", "cppc" or "frequency".
    core_type_evidence: str = "pmu"
    memory_evidence: bool = True  # memory tiers and DAX devices for memory-only nodes


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def _cpus(root: Path, rel: str, cpus: CPUSet, style: TreeStyle, list_name: str | None = None) -> None:
    _write(root, rel, format_hexmask(cpus))
    if style.list_files and list_name is not None:
        _write(root, str(Path(rel).parent / list_name), cpus.format())


_TIER = {MemoryKind.DRAM: 4, MemoryKind.HBM: 3, MemoryKind.PMEM: 5, MemoryKind.CXL: 5}


def write_sysfs(t: Topology, root: str | os.PathLike[str], style: TreeStyle = TreeStyle()) -> Path:
    """Write ``t`` below ``root`` (which must be empty or new); returns the root."""
    base = Path(root)
    cpu_dir = "sys/devices/system/cpu"
    online = t.online
    present = t.present or online
    possible = t.possible or present
    _write(base, f"{cpu_dir}/possible", possible.format())
    _write(base, f"{cpu_dir}/present", present.format())
    if style.online_file:
        _write(base, f"{cpu_dir}/online", online.format())
    _write(base, f"{cpu_dir}/offline", (possible - online).format())
    _write(base, f"{cpu_dir}/isolated", t.isolated.format())
    _write(base, f"{cpu_dir}/nohz_full", t.nohz_full.format() if t.nohz_full else "(null)")
    for c in present - online:
        _write(base, f"{cpu_dir}/cpu{c}/online", "0")

    hybrid = t.hybrid
    for c, info in t.cpus.items():
        d = f"{cpu_dir}/cpu{c}"
        if c != 0:
            _write(base, f"{d}/online", "1")
        topo = f"{d}/topology"
        _write(base, f"{topo}/physical_package_id", str(info.package))
        _write(base, f"{topo}/core_id", str(info.core_id))
        core = info.siblings & online
        pkg = t.cpus_of_package(info.package)
        die_cpus, cluster_cpus = t.cpus_of_die(info.die), t.cpus_of_cluster(info.cluster)
        die_id, cluster_id = info.die_id, info.cluster_id
        if not style.dies_and_clusters:
            die_cpus = cluster_cpus = CPUSet([c])
            die_id = cluster_id = -1
        if style.die_cluster_files:
            _write(base, f"{topo}/die_id", str(die_id))
            _write(base, f"{topo}/cluster_id", str(cluster_id))
        if style.sibling_masks:
            _cpus(base, f"{topo}/thread_siblings", core, style, "thread_siblings_list")
            _cpus(base, f"{topo}/core_siblings", pkg, style, "core_siblings_list")
        if style.sibling_masks and style.die_cluster_files:
            _cpus(base, f"{topo}/core_cpus", core, style, "core_cpus_list")
            _cpus(base, f"{topo}/package_cpus", pkg, style, "package_cpus_list")
            _cpus(base, f"{topo}/die_cpus", die_cpus, style, "die_cpus_list")
            _cpus(base, f"{topo}/cluster_cpus", cluster_cpus, style, "cluster_cpus_list")
        if style.caches:
            index = 0
            for cache in t.caches:
                if c not in cache.cpus:
                    continue
                idx = f"{d}/cache/index{index}"
                index += 1
                _write(base, f"{idx}/level", str(cache.level))
                _write(base, f"{idx}/type", cache.kind)
                _write(base, f"{idx}/id", str(cache.id))
                _cpus(base, f"{idx}/shared_cpu_map", cache.cpus & online, style, "shared_cpu_list")
                if cache.size_bytes:
                    _write(base, f"{idx}/size", f"{cache.size_bytes // 1024}K")
        if style.cpufreq:
            for name, value in (
                ("base_frequency", info.base_freq_khz),
                ("cpuinfo_min_freq", info.min_freq_khz),
                ("cpuinfo_max_freq", info.max_freq_khz),
            ):
                if value is not None:
                    _write(base, f"{d}/cpufreq/{name}", str(value))
        capacity = info.capacity
        if capacity is None and hybrid and style.core_type_evidence == "capacity":
            capacity = 1024 if info.core_type is CoreType.P_CORE else 400
        if capacity is not None:
            _write(base, f"{d}/cpu_capacity", str(capacity))
        if hybrid and style.core_type_evidence == "cppc":
            _write(base, f"{d}/acpi_cppc/highest_perf", "64" if info.core_type is CoreType.P_CORE else "39")
        if style.numa:
            (base / d).mkdir(parents=True, exist_ok=True)
            os.symlink(f"../../node/node{info.node}", base / d / f"node{info.node}")
    if hybrid and style.core_type_evidence == "pmu":
        _write(base, "sys/devices/cpu_core/cpus", t.cpus_of_type(CoreType.P_CORE).format())
        _write(base, "sys/devices/cpu_atom/cpus", t.cpus_of_type(CoreType.E_CORE).format())
    _write_pci(base, t, style)

    total_kb = sum(n.memory_bytes for n in t.nodes.values()) // 1024
    _write(base, "proc/meminfo", f"MemTotal:       {total_kb} kB\nMemFree:        {total_kb // 2} kB")
    if not style.numa:
        return base
    node_dir = "sys/devices/system/node"
    ids = sorted(t.nodes)
    _write(base, f"{node_dir}/online", CPUSet(ids).format())
    _write(base, f"{node_dir}/possible", CPUSet(ids).format())
    _write(base, f"{node_dir}/has_cpu", CPUSet(n for n in ids if t.nodes[n].cpus).format())
    tiers: dict[int, list[int]] = {}
    dax = 0
    for n in ids:
        node = t.nodes[n]
        d = f"{node_dir}/node{n}"
        _cpus(base, f"{d}/cpumap", node.cpus, style, "cpulist")
        kb = node.memory_bytes // 1024
        _write(
            base, f"{d}/meminfo", f"Node {n} MemTotal:       {kb} kB\nNode {n} MemFree:        {kb // 2} kB"
        )
        _write(base, f"{d}/distance", " ".join(str(t.distance(n, m)) for m in ids))
        if style.memory_evidence:
            tiers.setdefault(_TIER[node.kind], []).append(n)
            if node.memory_only and node.kind in (MemoryKind.PMEM, MemoryKind.CXL):
                write_dax_kmem(base, n, "ndbus" if node.kind is MemoryKind.PMEM else "cxl", dax)
                dax += 1
    for tier, nodes in tiers.items():
        _write(base, f"sys/devices/virtual/memory_tiering/memory_tier{tier}/nodelist", CPUSet(nodes).format())
    return base


def _write_pci(base: Path, t: Topology, style: TreeStyle) -> None:
    """Every device of every root directly below its root's folder (whatever its bus: the
    path, not the bus number, names the root), with the attributes the reader and hwloc read."""
    links = base / "sys/bus/pci/devices"
    for root in t.pci_roots:
        for dev in root.devices:
            d = f"sys/devices/{root.name}/{dev.address}"
            (base / d).mkdir(parents=True, exist_ok=True)
            _write(base, f"{d}/vendor", "0x8086")
            _write(base, f"{d}/device", "0x0000")
            if dev.class_code is not None:
                _write(base, f"{d}/class", f"0x{dev.class_code:06x}")
            if dev.cpus is not None:
                _cpus(base, f"{d}/local_cpus", dev.cpus, style, "local_cpulist")
            _write(base, f"{d}/numa_node", str(-1 if dev.node is None else dev.node))
            links.mkdir(parents=True, exist_ok=True)
            os.symlink(f"../../../devices/{root.name}/{dev.address}", links / dev.address)


def with_offline(t: Topology, cpus: CPUSet) -> Topology:
    """``t`` as the kernel shows it once ``cpus`` are offline (a hotplug): they leave every
    group and node list but stay present (``cpuN/online`` = 0 in the written tree)."""
    keep = t.online - cpus
    if not keep:
        raise ValueError(f"taking CPUs {cpus} offline leaves none online")
    nodes = {n: replace(node, cpus=node.cpus & keep) for n, node in t.nodes.items()}
    caches = tuple(replace(k, cpus=k.cpus & keep) for k in t.caches if k.cpus & keep)
    return replace(
        t,
        cpus={c: replace(info, siblings=info.siblings & keep) for c, info in t.cpus.items() if c in keep},
        nodes=nodes,
        caches=caches,
        pci_roots=tuple(replace(r, cpus=r.cpus & keep or keep, locality_known=bool(r.cpus & keep)) for r in t.pci_roots),
        present=t.present or t.online,
        online_cpus=keep,
        isolated=t.isolated & keep,
    )


_generation = itertools.count()


def publish_sysfs(t: Topology, link: str | os.PathLike[str], style: TreeStyle = TreeStyle()) -> Path:
    """Write ``t`` next to ``link`` and point the symlink ``link`` at it in one rename, so a
    reader polling ``link`` sees the old machine or the new one, never a half-written tree (the
    kernel changes its files CPU by CPU, each state consistent). Returns the new tree."""
    link = Path(link)
    tree = link.parent / f"{link.name}.{os.getpid()}.{next(_generation)}"
    write_sysfs(t, tree, style)
    tmp = link.parent / f".{tree.name}.link"
    os.symlink(tree.name, tmp)
    os.replace(tmp, link)
    return tree


# --- memory and CPU evidence added to a written tree ------------------------------------

#: Where the kernel puts a DAX device, by the bus its memory sits on (paths below sys/).
_DAX_BUS = {
    # an NVDIMM region (hwloc: DAXType NVM)
    "ndbus": "devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0012:00/ndbus0/region{i}/dax{i}.1",
    # a CXL region (hwloc 2.9: SPM; 2.10 and later: CXL-DRAM)
    "cxl": "devices/platform/ACPI0017:00/root0/decoder0.{i}/region{i}/dax_region{i}",
    # soft-reserved ("specific purpose") memory such as HBM (hwloc: SPM)
    "hmem": "devices/platform/hmem.{i}",
}


def write_dax_kmem(root: str | os.PathLike[str], node: int, bus: str, index: int) -> None:
    """A DAX device ``dax{index}.0`` on ``bus`` ("ndbus", "cxl" or "hmem") onlined into NUMA
    ``node`` by the kmem driver, as ``daxctl reconfigure-device --mode=system-ram`` leaves it."""
    base = Path(root)
    where = _DAX_BUS[bus].format(i=index)
    name = f"dax{index}.0"
    _write(base, f"sys/{where}/{name}/target_node", str(node))
    for folder, up in (("sys/bus/dax/devices", "../../.."), ("sys/bus/dax/drivers/kmem", "../../../..")):
        (base / folder).mkdir(parents=True, exist_ok=True)
        os.symlink(f"{up}/{where}/{name}", base / folder / name)
    if bus == "cxl":
        _write(base, f"sys/bus/cxl/devices/mem{index}/serial", str(index))


def write_hmat(
    root: str | os.PathLike[str],
    node: int,
    initiators: Iterable[int],
    *,
    read_bandwidth: int,
    write_bandwidth: int,
    read_latency: int,
    write_latency: int,
    access: str = "access1",
) -> None:
    """HMAT performance of ``node`` from its best ``initiators`` (MB/s, ns), as the kernel
    writes ``nodeN/accessK/initiators`` (access0: any initiator, access1: CPUs only)."""
    base = Path(root)
    d = f"sys/devices/system/node/node{node}/{access}/initiators"
    for name, value in (
        ("read_bandwidth", read_bandwidth),
        ("write_bandwidth", write_bandwidth),
        ("read_latency", read_latency),
        ("write_latency", write_latency),
    ):
        _write(base, f"{d}/{name}", str(value))
    for i in initiators:
        os.symlink(f"../../../node{i}", base / d / f"node{i}")


def write_memory_tiers(root: str | os.PathLike[str], tiers: Mapping[int, Iterable[int]]) -> None:
    """The kernel's memory tiers (``memory_tierN/nodelist``, N = abstract distance >> 7),
    replacing any written before."""
    folder = Path(root) / "sys/devices/virtual/memory_tiering"
    if folder.exists():
        shutil.rmtree(folder)
    for tier, nodes in tiers.items():
        _write(Path(root), f"sys/devices/virtual/memory_tiering/memory_tier{tier}/nodelist", CPUSet(nodes).format())


def write_cpu_identity(
    root: str | os.PathLike[str], cpus: Iterable[int], *, vendor: str, family: int, model: int, arch: str = "x86_64"
) -> None:
    """``proc/cpuinfo`` naming the processor model, and the architecture line
    ``hwloc-gather-topology`` leaves in ``proc/hwloc-nofile-info`` (hwloc applies its x86
    quirks to a tree only when that says x86)."""
    base = Path(root)
    entries = [
        f"processor\t: {c}\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\n" for c in cpus
    ]
    _write(base, "proc/cpuinfo", "\n".join(entries))
    _write(base, "proc/hwloc-nofile-info", f"Architecture: {arch}")
