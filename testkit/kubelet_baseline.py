"""The kubelet CPU manager's static policy choice (takeByTopology, NUMA-packed), as a baseline.

Written from the documented algorithm of ``takeByTopologyNUMAPacked`` so the
benchmark can compare our packing with what a default kubelet does for a
Guaranteed pod with integer CPUs (topology manager policy "none"):

1. take whole free sockets, then whole free NUMA nodes, while the request
   still needs at least that many CPUs (NUMA nodes first when a NUMA node
   spans one or more sockets);
2. take whole free cores while the request needs at least a core;
3. take single threads, walking cores in the same order.

Sockets, NUMA nodes and cores are visited "packed": fewest free CPUs first,
ties by id. Sizes come from the kubelet's uniform view of the machine
(CPUs per socket / NUMA node / core = total CPUs / count), so on hybrid
machines a 2-thread P-core is never "free" when the average core has fewer
threads, as in the kubelet.
"""

from __future__ import annotations

from collections.abc import Callable

from topodra.cpuset import CPUSet
from topodra.policy.api import PolicyError
from topodra.topology.model import Topology

__all__ = ["take_by_topology"]


class _Accumulator:
    def __init__(self, topology: Topology, available: CPUSet, count: int) -> None:
        cpus = topology.cpus
        self.socket_of = {c: info.package for c, info in cpus.items()}
        self.numa_of = {c: info.node for c, info in cpus.items()}
        self.core_of = {c: info.core for c, info in cpus.items()}
        n_cpus = len(cpus)
        self.per_socket = n_cpus // max(1, len(set(self.socket_of.values())))
        self.per_core = n_cpus // max(1, len(set(self.core_of.values())))
        self.numa_first = len(set(self.socket_of.values())) >= len(set(self.numa_of.values()))
        self.free = set(available) & set(cpus)
        self.needed = count
        self.result: set[int] = set()
        self.all_by: dict[str, dict[int, set[int]]] = {"socket": {}, "numa": {}, "core": {}}
        for c in cpus:
            self.all_by["socket"].setdefault(self.socket_of[c], set()).add(c)
            self.all_by["numa"].setdefault(self.numa_of[c], set()).add(c)
            self.all_by["core"].setdefault(self.core_of[c], set()).add(c)

    # --- details restricted to the still-free CPUs ------------------------
    def free_in(self, kind: str, ident: int) -> set[int]:
        return self.all_by[kind][ident] & self.free

    def ids(self, kind: str, within: set[int] | None = None) -> list[int]:
        of = {"socket": self.socket_of, "numa": self.numa_of, "core": self.core_of}[kind]
        src = self.free if within is None else within & self.free
        return sorted({of[c] for c in src})

    def sort_packed(self, kind: str, ids: list[int]) -> list[int]:
        return sorted(ids, key=lambda i: (len(self.free_in(kind, i)), i))

    def sorted_sockets(self) -> list[int]:
        if self.numa_first:
            out: list[int] = []
            for numa in self.sorted_numas():
                for s in self.sort_packed("socket", self.ids("socket", self.all_by["numa"][numa])):
                    if s not in out:
                        out.append(s)
            return out
        return self.sort_packed("socket", self.ids("socket"))

    def sorted_numas(self) -> list[int]:
        if self.numa_first:
            return self.sort_packed("numa", self.ids("numa"))
        out: list[int] = []
        for s in self.sorted_sockets():
            out.extend(self.sort_packed("numa", self.ids("numa", self.all_by["socket"][s])))
        return out

    def sorted_cores(self) -> list[int]:
        outer: Callable[[], list[int]]
        out: list[int] = []
        if self.numa_first:
            # cores per socket inside the NUMA-ordered sockets
            outer, kind = self.sorted_sockets, "socket"
        else:
            outer, kind = self.sorted_numas, "numa"
        for ident in outer():
            for core in self.sort_packed("core", self.ids("core", self.all_by[kind][ident])):
                if core not in out:
                    out.append(core)
        return out

    # --- taking -------------------------------------------------------------
    def take(self, cpus: set[int]) -> None:
        self.result |= cpus
        self.free -= cpus
        self.needed -= len(cpus)

    def satisfied(self) -> bool:
        return self.needed < 1

    def take_full(self, kind: str, order: list[int]) -> None:
        """Take every fully free socket / NUMA node / core the request still needs whole."""
        if kind == "numa":
            free = [i for i in order if len(self.free_in(kind, i)) == len(self.all_by[kind][i])]
        else:
            uniform = self.per_socket if kind == "socket" else self.per_core
            free = [i for i in order if len(self.free_in(kind, i)) == uniform]
        for ident in free:
            whole = self.all_by[kind][ident]
            if self.needed >= len(whole):
                self.take(whole)

    def run(self) -> set[int]:
        if self.satisfied():
            return self.result
        if len(self.free) < self.needed:
            raise PolicyError(
                f"not enough CPUs available to satisfy request: requested={self.needed}, available={len(self.free)}"
            )
        levels = [("numa", self.sorted_numas), ("socket", self.sorted_sockets)]
        if not self.numa_first:
            levels.reverse()
        for kind, order in levels:
            self.take_full(kind, order())
            if self.satisfied():
                return self.result
        self.take_full("core", self.sorted_cores())
        if self.satisfied():
            return self.result
        for core in self.sorted_cores():
            for cpu in sorted(self.free_in("core", core)):
                self.take({cpu})
                if self.satisfied():
                    return self.result
        raise PolicyError("failed to allocate cpus")  # pragma: no cover - guarded by the size check


def take_by_topology(topology: Topology, available: CPUSet, count: int) -> CPUSet:
    """The CPUs a default kubelet static policy would give a ``count``-CPU container."""
    if count < 0:
        raise PolicyError(f"CPU count must not be negative, got {count}")
    return CPUSet(_Accumulator(topology, available, count).run())
