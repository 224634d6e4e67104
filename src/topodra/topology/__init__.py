"""Hardware topology: the immutable model, sysfs discovery and synthetic machines."""

from topodra.topology.model import (
    CacheInstance,
    CoreType,
    CoreTypeSource,
    CPUInfo,
    MemoryKind,
    NUMANode,
    Topology,
)
from topodra.topology.synthetic import MachineSpec, synthetic_topology

__all__ = [
    "CPUInfo",
    "CacheInstance",
    "CoreType",
    "CoreTypeSource",
    "MachineSpec",
    "MemoryKind",
    "NUMANode",
    "Topology",
    "synthetic_topology",
]
