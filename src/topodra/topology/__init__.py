"""Hardware topology: the immutable model, sysfs discovery and synthetic machines.

The names below are loaded on first use (PEP 562): importing one submodule, as the
simulator does for the model, does not pay for sysfs discovery or serialisation.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

#: Public name -> the submodule that defines it.
_WHERE: dict[str, str] = {
    "TopologyError": "errors",
    "CacheInstance": "model",
    "CoreType": "model",
    "CoreTypeSource": "model",
    "CPUInfo": "model",
    "MemoryKind": "model",
    "NUMANode": "model",
    "Topology": "model",
    "topology_from_dict": "serialize",
    "topology_to_dict": "serialize",
    "MachineSpec": "synthetic",
    "synthetic_topology": "synthetic",
    "read_topology": "sysfs",
}

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


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'topodra.topology' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"topodra.topology.{where}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
