"""What the slices offer: every device CPU but the exclusive grants and the shared floor.

``OfferTracker`` keeps the offer up to date from the containers each policy operation touched
(it runs after every placement, so it never re-reads every grant unless told to: at the start,
after Synchronize, a reload or a machine change). It holds no reference to the agent: it is
handed the policy, the machine and the device configuration when it computes, and is tested
on its own (tests/agent/test_offer_tracker.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from topodra.cpuset import CPUSet
from topodra.dra.devices import Device, DeviceModelConfig, offer_devices, offered_cpus, ordered_cpus
from topodra.policy import Policy
from topodra.topology.model import Topology

__all__ = ["OfferTracker"]


class OfferTracker:
    """The exclusive grants at the last offer, the containers touched since, and the offer."""

    def __init__(self) -> None:
        self.grants: dict[str, int] = {}  # container -> exclusive CPU mask, at the last offer
        self._union = 0  # the union of those masks
        self._touched: set[str] = set()  # containers whose grant may have changed since
        self._full = True  # re-read every grant (start, Synchronize, reconfiguration)
        self._root_pool = ""
        self._order: tuple[int, ...] = ()
        self._candidates = CPUSet()
        self._homes: tuple[Sequence[Device], Topology, CPUSet, list[Device]] | None = None

    def touch(self, container_ids: Iterable[str], *, subject: str | None = None, full: bool = False) -> None:
        """These containers' grants may have changed (``subject``: one removed; ``full``: any may)."""
        self._touched.update(container_ids)
        if subject is not None:
            self._touched.add(subject)
        self._full |= full

    def compute(self, policy: Policy, topology: Topology, config: DeviceModelConfig) -> CPUSet:
        """The offer now: the exclusive grants (re-read only for the touched containers) and the
        root pool's free shared CPUs taken from the candidate CPUs."""
        if self._full:
            self.grants = {c: g.exclusive for c, g in policy.grants().items() if g.exclusive}
            self._root_pool = next(p.name for p in policy.pools if p.parent < 0)
            self._order = tuple(ordered_cpus(topology, topology.online, config.order))
            self._candidates = _candidates(policy, config)  # a new machine or config: full
            self._full = False
            stale = True
        else:
            stale = self._apply_touched(policy)
        self._touched.clear()
        if stale:
            union = 0
            for mask in self.grants.values():
                union |= mask
            self._union = union
        reserved = policy.reserved_cpus
        reserved = CPUSet() if config.taints.withdraws("reserved") else reserved - policy.claimed_cpus
        return offered_cpus(
            topology,
            config,
            candidates=self._candidates,
            shared_free=policy.shared_cpus(self._root_pool),
            exclusive=CPUSet.from_mask(self._union),
            order=self._order,
            reserved_free=reserved,
        )

    def _apply_touched(self, policy: Policy) -> bool:
        """Re-read the touched grants: a new one adds its CPUs to the union; one that shrank or
        went makes the union stale (another grant may hold some of its CPUs too). A placement
        adds one grant, or none."""
        grants = self.grants
        stale = False
        for cid in self._touched:
            g = policy.grant(cid)
            new = g.exclusive if g is not None else 0
            old = grants.get(cid, 0)
            if new == old:
                continue
            if new:
                grants[cid] = new
            else:
                del grants[cid]
            if old:
                stale = True
            else:
                self._union |= new
        return stale

    def moved(self, policy: Policy, container_ids: Iterable[str]) -> list[str]:
        """Of these containers, those whose exclusive grant differs from the one last offered
        around (a claim allocated from slices published before the grant was withdrawn)."""
        return [
            c for c in container_ids
            if (mask := self.grants.get(c)) is not None and (g := policy.grant(c)) is not None and g.exclusive != mask
        ]

    def home_devices(
        self, policy: Policy, topology: Topology, config: DeviceModelConfig, devices: Sequence[Device]
    ) -> list[Device]:
        """The devices offered with nothing withdrawn (no exclusive grant, no shared floor): each
        device's home slice comes from this list, so a withdrawn device leaves a hole in its slice
        instead of moving every later one. The same list object until the devices, the machine
        or the candidate CPUs change: the reconciler re-computes the homes only then."""
        candidates = _candidates(policy, config) & topology.online
        cached = self._homes
        if cached is None or cached[0] is not devices or cached[1] is not topology or cached[2] != candidates:
            homes = offer_devices(topology, config, devices, candidates, reserved=policy.reserved_cpus)
            cached = self._homes = (devices, topology, candidates, homes)
        return cached[3]


def _candidates(policy: Policy, config: DeviceModelConfig) -> CPUSet:
    """The CPUs that may ever be offered: the policy's, reserved ones only when their devices are
    published (tainted, or not: ``config.taints``)."""
    if config.taints.withdraws("reserved"):
        return policy.available_cpus - policy.reserved_cpus
    return policy.available_cpus
