"""What one node's agent knows: the configuration in force, the machine, the policy, the runtime's
pods and containers, the devices, and the lock every policy operation runs under.

``NodeState`` is data and the few questions asked of it; the components that change it
(agent/nri_handlers.py, agent/hotplug.py, agent/reload.py, agent/publisher.py) hold it under
``lock`` while they do. The warm-up builds a scratch one (``NodeState.build``) beside the node's.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from topodra.agent.config import AgentConfig, ConfigError
from topodra.agent.config_check import check_on_machine
from topodra.dra.devices import Device
from topodra.nri.types import Container, Pod
from topodra.policy import Policy
from topodra.policy.api import Assignment
from topodra.topology.model import CPUInfo, Topology

__all__ = ["AgentError", "NodeState", "load_topology"]


class AgentError(RuntimeError):
    """The agent cannot start (bad topology, config, sockets...)."""


def load_topology(config: AgentConfig) -> Topology:
    """The machine to manage: sysfs under ``sysfsRoot``, or the machine ``topology`` names."""
    from topodra.topology.errors import TopologyError
    from topodra.topology.machine import load_machine

    try:
        return load_machine(config.topology, host_root=config.sysfs_root)
    except TopologyError as err:
        raise AgentError(f"cannot read the topology ({config.topology or config.sysfs_root}): {err}") from err


@dataclass(eq=False)
class NodeState:
    """The node as the agent sees it. ``containers``: the runtime's live containers (only those
    can be updated); ``seen_cpus``: every CPU seen online since the start, as last seen (group
    numbers stay stable across hotplug); ``restoring``: the DRA driver is restoring prepared
    claims (Prepare-time checks relaxed)."""

    config: AgentConfig
    topology: Topology
    policy: Policy
    devices: list[Device]
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    pods: dict[str, Pod] = field(default_factory=dict)
    containers: dict[str, Container] = field(default_factory=dict)
    seen_cpus: dict[int, CPUInfo] = field(default_factory=dict)
    restoring: bool = False

    @classmethod
    def build(cls, config: AgentConfig, topology: Topology, source: str = "the configuration") -> NodeState:
        """The policy and devices ``config`` asks for on ``topology`` (``check_on_machine``)."""
        try:
            checked = check_on_machine(config, topology, source)
        except ConfigError as err:
            raise AgentError(str(err)) from None
        return cls(config, topology, checked.policy, checked.devices, seen_cpus=dict(topology.cpus))

    def pushable(self, container_id: str) -> Assignment | None:
        """The container's assignment, if the runtime told us about it (and it still runs)."""
        if container_id not in self.containers:
            return None
        return self.policy.assignment(container_id)

    def node_of(self) -> dict[int, int]:
        """The NUMA node of every CPU seen since the start."""
        return {c: info.node for c, info in self.seen_cpus.items()}
