"""Parametric synthetic machines: sockets x dies x NUMA x L3 x cores x threads.

Used by the simulator (clusters of made-up nodes), by tests, and by the
playground when no fixture fits. Pure: it only builds a ``Topology``.

Compact spec strings name the counts: ``2s1d2n2l8c2t`` is 2 sockets, 1 die
per socket, 2 NUMA nodes per die, 2 L3 groups per NUMA node, 8 cores per L3
group and 2 threads per core (128 CPUs). ``4e`` adds four single-thread
E-cores per L3 group (a hybrid machine); ``+hbm`` / ``+cxl`` / ``+pmem``
add one memory-only node of that kind per socket; ``+pci`` gives every NUMA node
with CPUs a PCIe root of its own (``pci0000:00``, ``pci0000:20``...) holding a
host bridge and a 3D controller local to that node's CPUs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from topodra.cpuset import CPUSet
from topodra.topology.model import (
    CacheInstance,
    CoreType,
    CoreTypeSource,
    CPUInfo,
    MemoryKind,
    NUMANode,
    PCIDevice,
    PCIRoot,
    Topology,
)

__all__ = ["MachineSpec", "synthetic_topology", "SpecError"]

GIB = 1 << 30


class SpecError(ValueError):
    """A malformed machine spec string."""


@dataclass(frozen=True)
class MachineSpec:
    """A synthetic machine's shape: counts per level, from a spec such as ``2s1d2n2l8c2t``."""

    sockets: int = 1
    dies_per_socket: int = 1
    numa_per_die: int = 1
    l3_per_numa: int = 1
    cores_per_l3: int = 8
    threads_per_core: int = 2
    e_cores_per_l3: int = 0
    memory_per_node_gib: int = 64
    memory_only: tuple[MemoryKind, ...] = field(default_factory=tuple)
    pci: bool = False  # a PCIe root per NUMA node with CPUs
    #: "spread": thread k of every core comes after thread k-1 of all cores
    #: (as Linux numbers Intel/AMD servers); "adjacent": siblings are neighbours.
    smt_numbering: str = "spread"

    def __post_init__(self) -> None:
        for name, what in (
            ("sockets", "s (sockets)"),
            ("dies_per_socket", "d (dies per socket)"),
            ("numa_per_die", "n (NUMA nodes per die)"),
            ("l3_per_numa", "l (L3 groups per NUMA node)"),
            ("cores_per_l3", "c (cores per L3 group)"),
            ("threads_per_core", "t (threads per core)"),
        ):
            if getattr(self, name) < 1:
                raise SpecError(f"{what} must be at least 1 (got {getattr(self, name)})")
        if self.e_cores_per_l3 < 0:
            raise SpecError(f"e (E-cores per L3) must not be negative (got {self.e_cores_per_l3})")
        if self.smt_numbering not in ("spread", "adjacent"):
            raise SpecError(f"smt_numbering must be 'spread' or 'adjacent', got {self.smt_numbering!r}")
        if self.cpu_count > 8192:
            raise SpecError(f"{self.cpu_count} CPUs exceed the kernel limit of 8192")

    @property
    def l3_groups(self) -> int:
        return self.sockets * self.dies_per_socket * self.numa_per_die * self.l3_per_numa

    @property
    def cpu_count(self) -> int:
        return self.l3_groups * (self.cores_per_l3 * self.threads_per_core + self.e_cores_per_l3)

    @property
    def name(self) -> str:
        s = (
            f"{self.sockets}s{self.dies_per_socket}d{self.numa_per_die}n"
            f"{self.l3_per_numa}l{self.cores_per_l3}c{self.threads_per_core}t"
        )
        if self.e_cores_per_l3:
            s += f"{self.e_cores_per_l3}e"
        for kind in self.memory_only:
            s += f"+{kind.value.lower()}"
        if self.pci:
            s += "+pci"
        return s

    @classmethod
    def parse(cls, text: str) -> MachineSpec:
        """Parse a compact spec such as ``2s2n8c2t`` (missing counts default to 1)."""
        body, *extras = text.strip().lower().split("+")
        counts = {"s": 1, "d": 1, "n": 1, "l": 1, "c": 8, "t": 2, "e": 0}
        seen: set[str] = set()
        pos = 0
        for m in re.finditer(r"(\d+)([sdnlcte])", body):
            if m.start() != pos:
                break
            if m.group(2) in seen:
                raise SpecError(f"machine spec {text!r} repeats {m.group(2)!r}")
            seen.add(m.group(2))
            counts[m.group(2)] = int(m.group(1))
            pos = m.end()
        if pos != len(body) or not body:
            raise SpecError(
                f"invalid machine spec {text!r}: expected counts like 2s1d2n2l8c2t "
                "(s=sockets, d=dies, n=NUMA per die, l=L3 per NUMA, c=cores per L3, "
                "t=threads, e=E-cores per L3) and optional +hbm/+cxl/+pmem/+pci"
            )
        kinds = []
        pci = "pci" in extras
        for extra in extras:
            if extra == "pci":
                continue
            try:
                kinds.append(MemoryKind(extra.upper()))
            except ValueError:
                raise SpecError(f"invalid memory kind {extra!r} in machine spec {text!r}") from None
        return cls(
            sockets=counts["s"],
            dies_per_socket=counts["d"],
            numa_per_die=counts["n"],
            l3_per_numa=counts["l"],
            cores_per_l3=counts["c"],
            threads_per_core=counts["t"],
            e_cores_per_l3=counts["e"],
            memory_only=tuple(kinds),
            pci=pci,
        )


@dataclass(frozen=True, slots=True)
class _Core:
    """One core of a synthetic machine: its place in every level and its kind."""

    package: int
    die: int
    die_id: int
    node: int
    l3: int
    core_id: int
    efficient: bool
    ecluster: int


def synthetic_topology(spec: MachineSpec | str) -> Topology:
    """Build the ``Topology`` of a made-up machine."""
    if isinstance(spec, str):
        spec = MachineSpec.parse(spec)
    cores = _enumerate_cores(spec)
    cpus = _cpu_infos(spec, cores, _number_threads(spec, cores))
    nodes, node_pkg = _nodes(spec, cpus)
    all_cpus = CPUSet(cpus)
    return Topology(
        cpus=cpus,
        nodes=nodes,
        distances=_distances(nodes, node_pkg),
        caches=_caches(cpus),
        possible=all_cpus,
        present=all_cpus,
        online_cpus=all_cpus,
        core_type_source=CoreTypeSource.INTEL_PMU if spec.e_cores_per_l3 else CoreTypeSource.NONE,
        source=f"synthetic:{spec.name}",
        pci_roots=_pci_roots(nodes) if spec.pci else (),
    )


def _pci_roots(nodes: dict[int, NUMANode]) -> tuple[PCIRoot, ...]:
    """A root per NUMA node with CPUs, eight buses apart as on a server (``pci0000:00``,
    ``pci0000:20``... then the next domain): a host bridge and a 3D controller on its root bus."""
    roots = []
    for i, node in enumerate(n for n in nodes.values() if n.cpus):
        domain, bus = divmod(i, 8)
        prefix = f"{domain:04x}:{bus * 0x20:02x}"
        devices = (
            PCIDevice(f"{prefix}:00.0", 0x060000, node.cpus, node.id),
            PCIDevice(f"{prefix}:01.0", 0x030200, node.cpus, node.id),
        )
        roots.append(PCIRoot(name=f"pci{prefix}", cpus=node.cpus, devices=devices, nodes=(node.id,)))
    return tuple(roots)


def _enumerate_cores(spec: MachineSpec) -> list[_Core]:
    """The physical cores in topological order (package, die, node, L3)."""
    cores: list[_Core] = []
    l3 = 0
    per_package: dict[int, int] = {}
    for pkg in range(spec.sockets):
        for d in range(spec.dies_per_socket):
            die = pkg * spec.dies_per_socket + d
            for n in range(spec.numa_per_die):
                node = die * spec.numa_per_die + n
                for _ in range(spec.l3_per_numa):
                    for k in range(spec.cores_per_l3 + spec.e_cores_per_l3):
                        efficient = k >= spec.cores_per_l3
                        core_id = per_package.get(pkg, 0)
                        per_package[pkg] = core_id + 1
                        # E-cores come in clusters of four sharing an L2.
                        ecluster = (k - spec.cores_per_l3) // 4 if efficient else -1
                        cores.append(_Core(pkg, die, d, node, l3, core_id, efficient, ecluster))
                    l3 += 1
    return cores


def _number_threads(spec: MachineSpec, cores: list[_Core]) -> list[list[int]]:
    """The CPU ids of each core's threads, in the spec's SMT numbering (E-cores have one)."""
    threads: list[list[int]] = [[] for _ in cores]
    next_id = 0
    if spec.smt_numbering == "adjacent":
        for i, core in enumerate(cores):
            for _ in range(1 if core.efficient else spec.threads_per_core):
                threads[i].append(next_id)
                next_id += 1
    else:
        for t in range(spec.threads_per_core):
            for i, core in enumerate(cores):
                if t > 0 and core.efficient:
                    continue
                threads[i].append(next_id)
                next_id += 1
    return threads


def _cpu_infos(spec: MachineSpec, cores: list[_Core], threads: list[list[int]]) -> dict[int, CPUInfo]:
    """One CPUInfo per thread, by CPU id; clusters are the L2 groups."""
    hybrid = spec.e_cores_per_l3 > 0
    cpus: dict[int, CPUInfo] = {}
    l2_ids: dict[tuple[int, int], int] = {}
    for i, core in enumerate(cores):
        sibs = CPUSet(threads[i])
        l2_key = (core.l3, core.ecluster) if core.efficient else (core.l3, -1 - i)
        l2 = l2_ids.setdefault(l2_key, len(l2_ids))
        if hybrid:
            core_type = CoreType.E_CORE if core.efficient else CoreType.P_CORE
        else:
            core_type = CoreType.STANDARD
        for t in threads[i]:
            cpus[t] = CPUInfo(
                id=t,
                package=core.package,
                die=core.die,
                die_id=core.die_id,
                cluster=l2,
                cluster_id=l2,
                core=i,
                core_id=core.core_id,
                siblings=sibs,
                node=core.node,
                l1d=i,
                l1i=i,
                l2=l2,
                l3=core.l3,
                core_type=core_type,
                kind=0 if core_type is CoreType.E_CORE else int(hybrid),
                base_freq_khz=1_400_000 if core.efficient else 1_900_000,
                min_freq_khz=400_000,
                max_freq_khz=3_900_000 if core.efficient else 5_000_000,
            )
    return dict(sorted(cpus.items()))


def _nodes(spec: MachineSpec, cpus: dict[int, CPUInfo]) -> tuple[dict[int, NUMANode], dict[int, int]]:
    """The DRAM nodes with CPUs, then each package's memory-only nodes; and the package of each node."""
    n_cpu_nodes = spec.sockets * spec.dies_per_socket * spec.numa_per_die
    nodes: dict[int, NUMANode] = {}
    for node in range(n_cpu_nodes):
        node_cpus = CPUSet(info.id for info in cpus.values() if info.node == node)
        nodes[node] = NUMANode(
            id=node,
            cpus=node_cpus,
            memory_bytes=spec.memory_per_node_gib * GIB,
            kind=MemoryKind.DRAM,
            kind_reason="synthetic",
        )
    node_pkg = {n: n // (spec.dies_per_socket * spec.numa_per_die) for n in range(n_cpu_nodes)}
    for pkg in range(spec.sockets):
        for kind in spec.memory_only:
            nid = len(nodes)
            node_pkg[nid] = pkg
            size = 16 if kind is MemoryKind.HBM else 4 * spec.memory_per_node_gib
            nodes[nid] = NUMANode(
                id=nid, cpus=CPUSet(), memory_bytes=size * GIB, kind=kind, kind_reason="synthetic"
            )
    return nodes, node_pkg


def _distances(nodes: dict[int, NUMANode], node_pkg: dict[int, int]) -> dict[tuple[int, int], int]:
    """10 to itself, 12 within a package (14 to or from memory-only nodes), 32 across."""
    distances: dict[tuple[int, int], int] = {}
    for a in nodes:
        for b in nodes:
            if a == b:
                d = 10
            elif node_pkg[a] == node_pkg[b]:
                d = 12 if not (nodes[a].memory_only or nodes[b].memory_only) else 14
            else:
                d = 32
            distances[(a, b)] = d
    return distances


def _caches(cpus: dict[int, CPUInfo]) -> tuple[CacheInstance, ...]:
    """The L1d, L1i, L2 and L3 instances named by the CPUs' cache ids."""
    caches: list[CacheInstance] = []
    levels = ((1, "Data", "l1d"), (1, "Instruction", "l1i"), (2, "Unified", "l2"), (3, "Unified", "l3"))
    for level, cache_kind, attr in levels:
        groups: dict[int, int] = {}
        for info in cpus.values():
            cid = getattr(info, attr)
            groups[cid] = groups.get(cid, 0) | (1 << info.id)
        for cid, mask in sorted(groups.items()):
            caches.append(CacheInstance(level=level, kind=cache_kind, id=cid, cpus=CPUSet.from_mask(mask)))
    return tuple(caches)
