"""One validation path for ``agent --check``, start and reload.

``config.py`` checks what the file says on its own (types, names, addresses,
paths). What only the machine can say (are the reserved CPUs online, is any
CPU left for containers, does the attribute hook import and answer for every
CPU) is checked here, by building exactly the policy and the devices the
agent would run with. ``--check`` therefore refuses whatever start would, and
a reload is applied only when a fresh start with the same file would succeed.
"""

from __future__ import annotations

from dataclasses import dataclass

from topodra.agent.config import AgentConfig, ConfigError
from topodra.dra.devices import Device, build_devices
from topodra.policy import Policy
from topodra.policy.api import PolicyError
from topodra.topology.model import Topology

__all__ = ["Checked", "check_on_machine"]


@dataclass(frozen=True)
class Checked:
    """A configuration that holds on this machine, with what it builds."""

    config: AgentConfig
    policy: Policy
    devices: list[Device]


def check_on_machine(config: AgentConfig, topology: Topology, source: str = "the configuration") -> Checked:
    """Build the policy and the devices ``config`` asks for on ``topology``, or raise
    ``ConfigError`` naming the section and why."""
    try:
        policy = Policy(topology, config.policy)
    except (PolicyError, ValueError) as err:
        raise ConfigError(f"{source}: policy: {err} (on this machine)") from None
    try:
        devices = build_devices(topology, config.devices, reserved=policy.reserved_cpus)
    except ValueError as err:
        raise ConfigError(f"{source}: devices: {err} (on this machine)") from None
    return Checked(config=config, policy=policy, devices=devices)
