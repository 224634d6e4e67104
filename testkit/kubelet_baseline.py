"""A Python port of the kubelet static CPU manager's ``takeByTopologyNUMAPacked``.

The peer the policy benchmark compares placements with: what a default kubelet
(``cpuManagerPolicy: static``, topology manager ``none``, no policy options)
gives a Guaranteed container with integer CPUs. It follows
``pkg/kubelet/cm/cpumanager/cpu_assignment.go`` of Kubernetes v1.36.2 step by
step (``cpuAccumulator``, ``numaFirst``/``socketsFirst``, packed sorting, no
uncore-cache preference), including its quirks: "free" sockets and cores are
judged against the uniform view of the machine (CPUs per socket / per core =
total CPUs / count), the lists of free NUMA nodes, sockets and cores are
computed once per step before anything is taken, and a socket listed under two
NUMA nodes is listed twice.

It is checked grant for grant against the Go code itself: ``testkit.kubelet_harness``
replays grant sequences through the kubelet's own function (a Go harness kept out
of this repo) and ``tests/data/kubelet-grants/`` keeps what it answered.

The machine is seen as the kubelet sees it (``kubelet_view``): socket = physical
package, NUMA node, and core = the lowest CPU id of the core's threads
(``getUniqueCoreID``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from topodra.cpuset import CPUSet
from topodra.policy.api import PolicyError
from topodra.topology.model import Topology

__all__ = ["KubeletCPU", "KubeletMachine", "kubelet_view", "take_by_topology", "take_by_topology_numa_packed"]


@dataclass(frozen=True)
class KubeletCPU:
    """One CPU as the kubelet's ``topology.CPUInfo`` holds it."""

    socket: int
    numa: int
    core: int


_Key = Callable[[KubeletCPU], int]


def _numa(i: KubeletCPU) -> int:
    return i.numa


def _socket(i: KubeletCPU) -> int:
    return i.socket


def _core(i: KubeletCPU) -> int:
    return i.core


class KubeletMachine:
    """The kubelet's ``CPUTopology``: each CPU's ``CPUInfo`` and, computed once, the CPUs of every
    NUMA node, socket and core (``CPUDetails.CPUsInNUMANodes`` and the like on the whole machine)."""

    def __init__(self, cpus: Mapping[int, KubeletCPU]) -> None:
        self.cpus = dict(cpus)
        self.members: dict[_Key, dict[int, frozenset[int]]] = {}
        for key in (_numa, _socket, _core):
            groups: dict[int, set[int]] = {}
            for c, info in self.cpus.items():
                groups.setdefault(key(info), set()).add(c)
            self.members[key] = {k: frozenset(v) for k, v in groups.items()}
        n_cpus = len(self.cpus)
        #: ``CPUsPerSocket`` and ``CPUsPerCore``: the uniform view (total CPUs / count)
        self.per_socket = n_cpus // len(self.members[_socket])
        self.per_core = n_cpus // len(self.members[_core])
        #: ``NumSockets >= NumNUMANodes``: NUMA nodes are the first level (``numaFirst``)
        self.numa_first = len(self.members[_socket]) >= len(self.members[_numa])


def kubelet_view(topology: Topology) -> KubeletMachine:
    """The kubelet's view of a machine (``topology.Discover``)."""
    out: dict[int, KubeletCPU] = {}
    for cpu, info in topology.cpus.items():
        siblings = info.siblings or CPUSet([cpu])
        out[cpu] = KubeletCPU(socket=info.package, numa=info.node, core=min(siblings | CPUSet([cpu])))
    return KubeletMachine(out)


class _Accumulator:
    """``cpuAccumulator``: ``free`` is the CPUs its ``details`` still hold."""

    def __init__(self, machine: KubeletMachine, available: CPUSet, count: int) -> None:
        self.topo = machine.cpus
        self.members = machine.members
        self.per_socket, self.per_core, self.numa_first = machine.per_socket, machine.per_core, machine.numa_first
        self.free = {c for c in self.topo if c in available}
        self.needed = count
        self.result: set[int] = set()

    # --- CPUDetails queries ---------------------------------------------------------
    def free_in(self, key: _Key, ident: int) -> set[int]:
        """``details.CPUsIn...(ident)``: the free CPUs of one NUMA node / socket / core."""
        return self.free & self.members[key][ident]

    def ids(self, key: _Key, parent: _Key | None = None, parent_id: int = 0) -> list[int]:
        """``details.NUMANodes()``, or with a parent ``SocketsInNUMANodes(parent_id)``,
        ``CoresInSockets(parent_id)`` and the like: the ids that still hold a free CPU."""
        cpus = self.free if parent is None else self.free_in(parent, parent_id)
        return sorted({key(self.topo[c]) for c in cpus})

    def sort(self, ids: list[int], key: _Key) -> list[int]:
        """``sort``: fewest free CPUs first, then by id."""
        return sorted(ids, key=lambda ident: (len(self.free_in(key, ident)), ident))

    # --- numaFirst / socketsFirst ---------------------------------------------------
    def sort_numa_nodes(self) -> list[int]:
        if self.numa_first:
            return self.sort(self.ids(_numa), _numa)
        out: list[int] = []
        for socket in self.sort_sockets():
            out += self.sort(self.ids(_numa, _socket, socket), _numa)
        return out

    def sort_sockets(self) -> list[int]:
        if not self.numa_first:
            return self.sort(self.ids(_socket), _socket)
        out: list[int] = []
        for numa in self.sort_numa_nodes():
            out += self.sort(self.ids(_socket, _numa, numa), _socket)
        return out

    def sort_cores(self) -> list[int]:
        out: list[int] = []
        if self.numa_first:
            for socket in self.sort_sockets():
                out += self.sort(self.ids(_core, _socket, socket), _core)
        else:
            for numa in self.sort_numa_nodes():
                out += self.sort(self.ids(_core, _numa, numa), _core)
        return out

    def sort_cpus_packed(self) -> list[int]:
        return [cpu for core in self.sort_cores() for cpu in sorted(self.free_in(_core, core))]

    # --- taking ---------------------------------------------------------------------
    def take(self, cpus: Iterable[int]) -> None:
        taken = set(cpus)
        self.result |= taken
        self.free -= self.result
        self.needed -= len(taken)

    def take_full(self, order: list[int], key: _Key, is_free: Callable[[int], bool]) -> None:
        """``takeFullNUMANodes`` / ``takeFullSockets`` / ``takeFullCores``: the free list is made
        first, then each whole group the request still needs at least is taken."""
        for ident in [i for i in order if is_free(i)]:
            whole = self.members[key][ident]
            if self.needed >= len(whole):
                self.take(whole)

    def numa_free(self, numa: int) -> bool:
        return len(self.free_in(_numa, numa)) == len(self.members[_numa][numa])

    def socket_free(self, socket: int) -> bool:
        return len(self.free_in(_socket, socket)) == self.per_socket

    def core_free(self, core: int) -> bool:
        return len(self.free_in(_core, core)) == self.per_core

    def take_levels(self) -> None:
        """Steps 1 and 3: whole NUMA nodes and sockets (in the machine's order), then whole cores."""
        numas = (self.sort_numa_nodes, _numa, self.numa_free)
        sockets = (self.sort_sockets, _socket, self.socket_free)
        for order, key, is_free in (numas, sockets) if self.numa_first else (sockets, numas):
            self.take_full(order(), key, is_free)
            if self.needed < 1:
                return
        self.take_full(self.sort_cores(), _core, self.core_free)

    def take_remaining(self) -> None:
        """Step 4: single threads in packed order."""
        for cpu in self.sort_cpus_packed():
            self.take([cpu])
            if self.needed < 1:
                return


def take_by_topology_numa_packed(machine: KubeletMachine, available: CPUSet, count: int) -> CPUSet:
    """``takeByTopologyNUMAPacked`` with packed sorting and no uncore-cache preference."""
    acc = _Accumulator(machine, available, count)
    if acc.needed < 1:
        return CPUSet(acc.result)
    if acc.needed > len(acc.free):
        raise PolicyError(
            f"not enough cpus available to satisfy request: requested={count}, available={len(available)}"
        )
    acc.take_levels()
    if acc.needed >= 1:
        acc.take_remaining()
    if acc.needed >= 1:
        raise PolicyError("failed to allocate cpus")  # pragma: no cover - guarded by the size check
    return CPUSet(acc.result)


def take_by_topology(topology: Topology, available: CPUSet, count: int) -> CPUSet:
    """The CPUs a default kubelet static policy would give a ``count``-CPU container."""
    if count < 0:
        raise PolicyError(f"CPU count must not be negative, got {count}")
    return take_by_topology_numa_packed(kubelet_view(topology), available, count)
