"""Device health for the kubelet's DRAResourceHealth stream: which devices can deliver their CPUs.

A device is Healthy when every CPU it stands for is online, Unhealthy otherwise.
That holds for grouped devices too (a NUMA node or L3 group with consumable
capacity): one with some CPUs offline still serves new claims from the rest (its
published capacity shrinks), but a claim allocated on it before may hold a CPU
that is gone, and the kubelet shows a device's health on every pod the device
was allocated to, so "degraded" is reported as Unhealthy with the offline CPUs
named in the message. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from topodra.cpuset import CPUSet
from topodra.dra.devices import Device

__all__ = ["DeviceHealth", "MESSAGE_MAX", "device_health"]

#: The kubelet keeps at most this many characters of a message.
MESSAGE_MAX = 1024


@dataclass(frozen=True, slots=True)
class DeviceHealth:
    name: str
    healthy: bool
    message: str = ""


def device_health(
    devices: Sequence[Device], online: CPUSet, claims: Mapping[str, CPUSet] | None = None
) -> list[DeviceHealth]:
    """The health of each device on a machine whose online CPUs are ``online``; ``claims``
    (claim id -> CPUs) are named in the message of a device holding one of their offline CPUs."""
    out: list[DeviceHealth] = []
    for d in devices:
        gone = d.cpus - online
        if not gone:
            out.append(DeviceHealth(d.name, True))
            continue
        text = f"CPUs {gone} offline" if len(gone) > 1 else f"CPU {gone} offline"
        if len(gone) < len(d.cpus):
            text += f" ({len(d.cpus) - len(gone)} of its {len(d.cpus)} CPUs online)"
        hit = sorted(uid for uid, cpus in (claims or {}).items() if cpus & gone)
        if hit:
            text += "; prepared claims on them: " + ", ".join(hit)
        if len(text) > MESSAGE_MAX:
            text = text[: MESSAGE_MAX - 3] + "..."
        out.append(DeviceHealth(d.name, False, text))
    return out
