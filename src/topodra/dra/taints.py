"""Device taints (KEP-5055, ``DRADeviceTaints``, beta and on in Kubernetes 1.36): which devices
the node publishes tainted, with which key and effect, and which it keeps out of its slices.

A taint keeps claims off a device unless they tolerate it (effects ``NoSchedule`` and
``NoExecute``; ``None`` only informs), and ``NoExecute`` also makes kube-controller-manager's
device taint eviction controller evict the pods of claims already allocated on the device that do
not tolerate it. Four reasons, each with a key in the driver's domain (``reason_key``):

- ``offline``: every CPU of the device is offline: it can run nothing.
- ``unhealthy``: some CPUs of a device that stands for several fixed CPUs (a core one of whose
  threads is offline) are offline: it cannot give what it was allocated for. A grouped device
  shrinks to its online CPUs instead (its capacity says what it can give).
- ``isolated``: the device holds a CPU the kernel isolates (``isolcpus``, value ``isolcpus``) or
  runs tickless (``nohz_full``, value ``nohz_full``; both: ``isolcpus.nohz_full``).
- ``reserved``: the device holds a CPU the operator reserves for system daemons (``reservedCPUs``).

Per reason, ``TaintConfig`` picks an effect or one of two other treatments: ``Withdraw`` (the
device is not published at all) and ``Untainted`` (published like any other device; not for
``offline`` and ``unhealthy``, whose CPUs cannot run a claim). The reasons and defaults are
explained in docs/dra.md ("Device taints"). Pure: no I/O, no clock (the agent stamps
``timeAdded``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from topodra.cpuset import CPUSet
from topodra.topology.model import Topology

__all__ = [
    "DOMAIN",
    "EFFECTS",
    "REASONS",
    "TREATMENTS",
    "UNTAINTED",
    "WITHDRAW",
    "TaintConfig",
    "isolation_value",
    "offline_reason",
    "reason_key",
    "static_reasons",
    "static_taints",
    "taint",
]

#: The taint keys' domain: the driver's name.
DOMAIN: Final = "native.cpu"
#: Why a device is tainted, in the order its taints are listed.
REASONS: Final = ("offline", "unhealthy", "reserved", "isolated")
#: The taint effects of resource.k8s.io/v1 (``DeviceTaintEffect``).
EFFECTS: Final = ("NoSchedule", "NoExecute", "None")
#: Not published at all (what topodra did before taints for offline and reserved CPUs).
WITHDRAW: Final = "Withdraw"
#: Published without a taint (what topodra did before taints for isolated CPUs).
UNTAINTED: Final = "Untainted"
TREATMENTS: Final = (*EFFECTS, WITHDRAW, UNTAINTED)


def reason_key(reason: str) -> str:
    """The taint key of a reason: ``native.cpu/<reason>``."""
    return f"{DOMAIN}/{reason}"


def taint(reason: str, effect: str, value: str = "") -> dict[str, Any]:
    """One ``DeviceTaint`` as the API writes it (``timeAdded`` is left to the publisher)."""
    out: dict[str, Any] = {"key": reason_key(reason)}
    if value:
        out["value"] = value
    out["effect"] = effect
    return out


@dataclass(frozen=True)
class TaintConfig:
    """Per reason, the taint effect of a device published for it, or ``Withdraw`` / ``Untainted``
    (the ``dra.devices.taints`` config section; defaults and reasons in docs/dra.md).

    A plain dataclass that checks itself, like ``DeviceModelConfig`` which holds it.
    """

    __pydantic_config__: ClassVar[dict[str, Any]] = {"extra": "forbid"}

    offline: str = "NoExecute"
    unhealthy: str = "NoExecute"
    isolated: str = "NoSchedule"
    reserved: str = "NoSchedule"

    def __post_init__(self) -> None:
        for reason in REASONS:
            value = getattr(self, reason)
            allowed = TREATMENTS if reason in ("isolated", "reserved") else (*EFFECTS, WITHDRAW)
            if value not in allowed:
                raise ValueError(f"taints.{reason} must be one of {', '.join(allowed)}, got {value!r}")

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> TaintConfig:
        """From a plain mapping (reason -> treatment); ``ValueError`` naming an unknown reason."""
        unknown = sorted(set(raw) - set(REASONS))
        if unknown:
            raise ValueError(f"taints: unknown reason {unknown[0]!r} (known: {', '.join(REASONS)})")
        return cls(**{str(k): str(v) for k, v in raw.items()})

    def effect(self, reason: str) -> str | None:
        """The effect of the reason's taint; None when its devices carry none (withdrawn or untainted)."""
        value: str = getattr(self, reason)
        return value if value in EFFECTS else None

    def withdraws(self, reason: str) -> bool:
        return bool(getattr(self, reason) == WITHDRAW)


def isolation_value(topology: Topology, cpus: Iterable[int]) -> str:
    """The ``isolated`` taint's value for these CPUs: how the kernel isolates them, '' if not at all."""
    isolcpus = nohz = False
    for c in cpus:
        info = topology.cpus.get(c)
        isolcpus |= c in topology.isolated or (info is not None and info.isolated)
        nohz |= c in topology.nohz_full
    return ".".join(name for name, on in (("isolcpus", isolcpus), ("nohz_full", nohz)) if on)


def static_reasons(topology: Topology, reserved: CPUSet, config: TaintConfig) -> dict[int, str]:
    """The online CPUs whose devices a taint or withdrawal sets apart for a lasting reason:
    CPU -> ``reserved`` or ``isolated`` (reserved wins, as in the policy's partition). CPUs whose
    reason is ``Untainted`` are not listed."""
    out: dict[int, str] = {}
    if config.reserved != UNTAINTED:
        out.update(dict.fromkeys(reserved & topology.online, "reserved"))
    if config.isolated != UNTAINTED:
        for c in topology.online:
            if c not in out and isolation_value(topology, (c,)):
                out[c] = "isolated"
    return out


def static_taints(
    topology: Topology, cpus: CPUSet, reasons: Mapping[int, str], config: TaintConfig
) -> tuple[dict[str, Any], ...]:
    """The lasting taints of a device standing for ``cpus`` (``reasons``: ``static_reasons``)."""
    found = {reasons[c] for c in cpus if c in reasons}
    out: list[dict[str, Any]] = []
    for reason in REASONS:
        effect = config.effect(reason)
        if reason in found and effect is not None:
            out.append(taint(reason, effect, isolation_value(topology, cpus) if reason == "isolated" else ""))
    return tuple(out)


def offline_reason(cpus: CPUSet, online: CPUSet) -> str | None:
    """``offline`` when none of ``cpus`` is online, ``unhealthy`` when some are not, else None."""
    if cpus <= online:
        return None
    return "unhealthy" if cpus & online else "offline"
