"""The typed, immutable hardware topology model.

Plain data: discovery (``topology.sysfs``) and the synthetic generator
(``topology.synthetic``) build it; policy, device models and the simulator
only read it. No I/O happens here.

Identifiers: sysfs ``core_id`` and ``die_id`` are only unique inside a
package (and ``cluster_id`` often too), so every CPU also carries
machine-unique indexes (``core``, ``die``, ``cluster``) numbered in order of
each group's lowest CPU. The raw sysfs values are kept as ``*_id``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Final, Protocol

from topodra.cpuset import CPUSet

__all__ = [
    "CoreType",
    "MemoryKind",
    "CacheInstance",
    "CPUInfo",
    "NUMANode",
    "Topology",
    "CoreTypeSource",
    "PCIDevice",
    "PCIRoot",
]


class CoreType(enum.StrEnum):
    """CPU kind as users select it (``coreType`` device attribute)."""

    P_CORE = "P-core"
    E_CORE = "E-core"
    STANDARD = "standard"


class CoreTypeSource(enum.StrEnum):
    """What told the CPU kinds apart (``topology.coretypes``)."""

    INTEL_PMU = "intel-pmu"  # /sys/devices/cpu_core/cpus, /sys/devices/cpu_atom/cpus
    CPU_CAPACITY = "cpu-capacity"  # cpuN/cpu_capacity (ARM big.LITTLE / DynamIQ)
    BASE_FREQUENCY = "base-frequency"  # cpuN/cpufreq/base_frequency
    MAX_FREQUENCY = "max-frequency"  # cpuN/cpufreq/cpuinfo_max_freq
    NONE = "none"  # a single kind of CPU


class MemoryKind(enum.StrEnum):
    DRAM = "DRAM"
    HBM = "HBM"
    PMEM = "PMEM"
    CXL = "CXL"


@dataclass(frozen=True, slots=True)
class CacheInstance:
    """One cache: level, kind (Data/Instruction/Unified), id and its CPUs.

    ``id`` is the sysfs cache ``id`` or, where missing (ARM), the lowest CPU
    of ``shared_cpu_list``; it is unique per (level, kind).
    """

    level: int
    kind: str
    id: int
    cpus: CPUSet
    size_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class CPUInfo:
    """Everything known about one online CPU (hardware thread)."""

    id: int
    package: int
    die: int  # machine-unique die index
    die_id: int  # raw sysfs die_id (per package)
    cluster: int  # machine-unique cluster index
    cluster_id: int  # raw sysfs cluster_id (-1 when absent)
    core: int  # machine-unique physical core index
    core_id: int  # raw sysfs core_id (per package)
    siblings: CPUSet  # SMT threads of the same core, this CPU included
    node: int  # NUMA node (0 when the machine has no NUMA information)
    l1d: int | None = None
    l1i: int | None = None
    l2: int | None = None
    l3: int | None = None
    core_type: CoreType = CoreType.STANDARD
    kind: int = 0  # rank of the CPU's kind as hwloc ranks them: 0 = least performant
    base_freq_khz: int | None = None
    min_freq_khz: int | None = None
    max_freq_khz: int | None = None
    capacity: int | None = None  # ARM cpu_capacity (1024 = biggest)
    isolated: bool = False


@dataclass(frozen=True, slots=True)
class NUMANode:
    """A NUMA node: its CPUs (may be empty), memory and memory kind."""

    id: int
    cpus: CPUSet
    memory_bytes: int
    kind: MemoryKind = MemoryKind.DRAM
    tier: int | None = None  # kernel memory tier: memory_tierN, N = abstract distance >> 7 (DRAM: 4)
    kind_reason: str = ""  # why this kind: "node has CPUs", "memory tier 5 is slower ...", ...

    @property
    def memory_only(self) -> bool:
        return not self.cpus


#: PCI base classes of the machine's own plumbing (see ``PCIDevice.is_endpoint``).
_INFRASTRUCTURE_CLASSES: Final = frozenset({0x06, 0x08, 0x11})


@dataclass(frozen=True, slots=True)
class PCIDevice:
    """One PCI device as sysfs lists it (``sys/bus/pci/devices/<address>``).

    ``cpus``: its ``local_cpus`` as the kernel wrote them (None when it gave none);
    ``node``: its ``numa_node`` (None for -1 or missing); ``class_code``: the 24-bit
    class, e.g. 0x030200 for a 3D controller (None when unknown).
    """

    address: str  # "0000:65:00.0"
    class_code: int | None = None
    cpus: CPUSet | None = None
    node: int | None = None

    @property
    def is_display(self) -> bool:
        """A display controller (base class 0x03: VGA, XGA, 3D): what a GPU shows as."""
        return self.class_code is not None and self.class_code >> 16 == 0x03

    @property
    def is_endpoint(self) -> bool:
        """A device another DRA driver could publish: anything but a bridge (class 0x06), a base
        system peripheral (0x08: interrupt controllers, IOMMUs, uncore registers) or a signal
        processing controller (0x11: performance counters). An unknown class counts."""
        return self.class_code is None or self.class_code >> 16 not in _INFRASTRUCTURE_CLASSES


@dataclass(frozen=True, slots=True)
class PCIRoot:
    """A PCIe root complex (``pci0000:00``, the name of the standard ``pcieRoot`` attribute),
    its devices and the online CPUs local to it (``topology.pci`` says how they are found)."""

    name: str
    cpus: CPUSet
    devices: tuple[PCIDevice, ...] = ()
    nodes: tuple[int, ...] = ()  # NUMA nodes its devices name
    #: False when no device below it told its locality: ``cpus`` is then every online CPU
    locality_known: bool = True

    @property
    def has_endpoint(self) -> bool:
        """Whether it holds a device another driver could publish (``PCIDevice.is_endpoint``)."""
        return any(d.is_endpoint for d in self.devices)


class _TopologyFields(Protocol):
    """What :class:`_NodeQueries` reads of a Topology."""

    @property
    def cpus(self) -> Mapping[int, CPUInfo]: ...
    @property
    def nodes(self) -> Mapping[int, NUMANode]: ...
    @property
    def distances(self) -> Mapping[tuple[int, int], int]: ...
    @property
    def online(self) -> CPUSet: ...
    def distance(self, a: int, b: int) -> int: ...


class _NodeQueries:
    """The NUMA-node questions of a :class:`Topology` (its base): which nodes, their
    CPUs, distances and memory-only nodes. It reads only the Topology's fields."""

    def numa_nodes(self: _TopologyFields) -> list[int]:
        return sorted(self.nodes)

    def cpus_of_node(self: _TopologyFields, node: int) -> CPUSet:
        n = self.nodes.get(node)
        return n.cpus & self.online if n is not None else _EMPTY

    def distance(self: _TopologyFields, a: int, b: int) -> int:
        """SLIT distance between two NUMA nodes (10 local, 20 remote if unknown)."""
        d = self.distances.get((a, b))
        if d is not None:
            return d
        return 10 if a == b else 20

    def memory_only_nodes(self: _TopologyFields) -> list[int]:
        return [n.id for n in sorted(self.nodes.values(), key=lambda n: n.id) if n.memory_only]

    def closest_cpu_node(self: _TopologyFields, node: int) -> int | None:
        """Nearest NUMA node that has CPUs (ties: lowest id)."""
        candidates = [n.id for n in self.nodes.values() if n.cpus & self.online]
        if not candidates:
            return None
        return min(candidates, key=lambda c: (self.distance(node, c), c))

    def nodes_of(self: _TopologyFields, cpus: CPUSet) -> list[int]:
        """NUMA nodes holding any of ``cpus``."""
        return sorted({self.cpus[c].node for c in cpus if c in self.cpus})


@dataclass(frozen=True)
class Topology(_NodeQueries):
    """A machine's CPUs, caches and NUMA nodes at one moment.

    ``cpus`` holds the online CPUs; offline CPUs appear only in the CPU sets
    (``present``/``offline``) since the kernel hides their topology.
    """

    cpus: Mapping[int, CPUInfo]
    nodes: Mapping[int, NUMANode]
    distances: Mapping[tuple[int, int], int] = field(default_factory=dict)
    caches: tuple[CacheInstance, ...] = ()
    possible: CPUSet = field(default_factory=CPUSet)
    present: CPUSet = field(default_factory=CPUSet)
    online_cpus: CPUSet = field(default_factory=CPUSet)
    isolated: CPUSet = field(default_factory=CPUSet)
    nohz_full: CPUSet = field(default_factory=CPUSet)
    core_type_source: CoreTypeSource = CoreTypeSource.NONE
    source: str = ""
    warnings: tuple[str, ...] = ()
    #: PCIe root complexes in name order (empty: the machine gave no PCI data)
    pci_roots: tuple[PCIRoot, ...] = ()

    # --- CPU sets -----------------------------------------------------
    @cached_property
    def online(self) -> CPUSet:
        return CPUSet(self.cpus)

    @property
    def offline(self) -> CPUSet:
        return (self.present or self.possible) - self.online

    @cached_property
    def _index(self) -> _Index:
        return _Index.build(self.cpus.values())

    def cpu(self, cpu: int) -> CPUInfo:
        try:
            return self.cpus[cpu]
        except KeyError:
            raise KeyError(f"CPU {cpu} is not an online CPU of this machine") from None

    def packages(self) -> list[int]:
        return sorted(self._index.package)

    def dies(self) -> list[int]:
        return sorted(self._index.die)

    def clusters(self) -> list[int]:
        return sorted(self._index.cluster)

    def cores(self) -> list[int]:
        return sorted(self._index.core)

    def l2_groups(self) -> list[int]:
        return sorted(self._index.l2)

    def l3_groups(self) -> list[int]:
        return sorted(self._index.l3)

    def cpus_of_package(self, package: int) -> CPUSet:
        return self._index.package.get(package, _EMPTY)

    def cpus_of_die(self, die: int) -> CPUSet:
        return self._index.die.get(die, _EMPTY)

    def cpus_of_cluster(self, cluster: int) -> CPUSet:
        return self._index.cluster.get(cluster, _EMPTY)

    def cpus_of_core(self, core: int) -> CPUSet:
        return self._index.core.get(core, _EMPTY)

    def cpus_of_l2(self, l2: int) -> CPUSet:
        return self._index.l2.get(l2, _EMPTY)

    def cpus_of_l3(self, l3: int) -> CPUSet:
        return self._index.l3.get(l3, _EMPTY)

    def cpus_of_type(self, core_type: CoreType) -> CPUSet:
        return self._index.core_type.get(core_type, _EMPTY)

    def siblings(self, cpu: int) -> CPUSet:
        return self.cpu(cpu).siblings

    def core_type(self, cpu: int) -> CoreType:
        return self.cpu(cpu).core_type

    def core_types(self) -> list[CoreType]:
        return sorted(self._index.core_type, key=list(CoreType).index)

    def cpu_kinds(self) -> list[CPUSet]:
        """The CPUs of each kind, least performant first (by ``CPUInfo.kind``)."""
        return [self._index.kind[k] for k in sorted(self._index.kind)]

    @property
    def hybrid(self) -> bool:
        return len(self._index.core_type) > 1

    @property
    def threads_per_core(self) -> int:
        return max((len(c.siblings) for c in self.cpus.values()), default=1)

    # --- PCIe roots -----------------------------------------------------
    def pcie_roots_of(self, cpu: int) -> tuple[str, ...]:
        """Names of the PCIe roots CPU ``cpu`` is local to, in name order, counting only roots
        that hold an endpoint device (``PCIRoot.has_endpoint``): the others (bridges and
        uncore registers only) hold nothing another driver could align with."""
        return self._roots_by_cpu.get(cpu, ())

    @cached_property
    def _roots_by_cpu(self) -> dict[int, tuple[str, ...]]:
        out: dict[int, list[str]] = {}
        for root in self.pci_roots:
            if not root.has_endpoint:
                continue
            for c in root.cpus:
                out.setdefault(c, []).append(root.name)
        return {c: tuple(names) for c, names in out.items()}


_EMPTY = CPUSet()


@dataclass(frozen=True)
class _Index:
    """CPU sets per package, die, cluster, core and cache id, built once per topology."""

    package: dict[int, CPUSet]
    die: dict[int, CPUSet]
    cluster: dict[int, CPUSet]
    core: dict[int, CPUSet]
    l2: dict[int, CPUSet]
    l3: dict[int, CPUSet]
    core_type: dict[CoreType, CPUSet]
    kind: dict[int, CPUSet]

    @staticmethod
    def build(cpus: Iterable[CPUInfo]) -> _Index:
        groups: dict[str, dict[object, int]] = {
            k: {} for k in ("package", "die", "cluster", "core", "l2", "l3", "core_type", "kind")
        }
        for c in cpus:
            bit = 1 << c.id
            for name, key in (
                ("package", c.package),
                ("die", c.die),
                ("cluster", c.cluster),
                ("core", c.core),
                ("l2", c.l2),
                ("l3", c.l3),
                ("core_type", c.core_type),
                ("kind", c.kind),
            ):
                if key is None:
                    continue
                g = groups[name]
                g[key] = g.get(key, 0) | bit

        def sets(name: str) -> dict[int, CPUSet]:
            return {int(k): CPUSet.from_mask(m) for k, m in groups[name].items()}  # type: ignore[call-overload]

        return _Index(
            package=sets("package"),
            die=sets("die"),
            cluster=sets("cluster"),
            core=sets("core"),
            l2=sets("l2"),
            l3=sets("l3"),
            kind=sets("kind"),
            core_type={CoreType(k): CPUSet.from_mask(m) for k, m in groups["core_type"].items()},  # type: ignore[arg-type]
        )
