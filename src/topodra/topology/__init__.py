"""Hardware topology: the immutable model, sysfs discovery and synthetic machines."""

from topodra.topology.errors import TopologyError
from topodra.topology.model import (
    CacheInstance,
    CoreType,
    CoreTypeSource,
    CPUInfo,
    MemoryKind,
    NUMANode,
    Topology,
)
from topodra.topology.serialize import topology_from_dict, topology_to_dict
from topodra.topology.synthetic import MachineSpec, synthetic_topology
from topodra.topology.sysfs import read_topology

__all__ = [
    "CPUInfo",
    "CacheInstance",
    "CoreType",
    "CoreTypeSource",
    "MachineSpec",
    "MemoryKind",
    "NUMANode",
    "Topology",
    "TopologyError",
    "read_topology",
    "synthetic_topology",
    "topology_from_dict",
    "topology_to_dict",
]
