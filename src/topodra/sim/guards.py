"""Guards for huge inputs: refuse a run that will not fit the machine before building it, and
know when the rest of the pods cannot be scheduled.

The memory estimate is linear in nodes, published devices and pods, with per-item figures
measured on synthetic clusters (peak RSS of ``sim run`` at 5,000-65,000 nodes of 256 CPUs,
empty and half filled): it errs on the high side, and only a run estimated above the memory
the machine has available is refused.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from topodra.sim.cluster import ClusterError, topology_for

__all__ = ["BASE_BYTES", "NODE_BYTES", "DEVICE_BYTES", "POD_BYTES", "estimate_bytes", "available_bytes", "check_memory", "Exhaustion"]

#: the interpreter, numpy and the simulator's modules
BASE_BYTES = 120 << 20
#: per node: its Node, slice objects, layout entries, class id and free share
NODE_BYTES = 8 << 10
#: per published device: its share of the slices, positions and the in-use bitmap (and the fill)
DEVICE_BYTES = 40
#: per pod: its result, claims and allocations (kept for the summary and pods.csv)
POD_BYTES = 4 << 10


def estimate_bytes(nodes: int, devices_per_node: float, pods: int) -> int:
    """The peak memory a synthetic run of ``nodes`` nodes with ``devices_per_node`` devices each
    and ``pods`` pods is expected to need (bytes, rounded up)."""
    return int(BASE_BYTES + nodes * (NODE_BYTES + devices_per_node * DEVICE_BYTES) + pods * POD_BYTES)


def devices_per_node(machines: Iterable[str]) -> float:
    """An upper bound on the devices a node of these machines publishes: its online CPUs (the
    per-CPU model; the core and grouped models publish fewer)."""
    return float(max(len(topology_for(m).online) for m in machines))


def available_bytes() -> int | None:
    """Memory the machine can give a new process: MemAvailable from /proc/meminfo, else the
    physical memory; None where neither is known."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def check_memory(nodes: int, machines: Iterable[str], pods: int, available: int | None = None) -> None:
    """Raise ClusterError (one line naming both figures) when the run's estimate exceeds the
    memory available (``available``: the machine's, when not given)."""
    have = available_bytes() if available is None else available
    if have is None:
        return
    need = estimate_bytes(nodes, devices_per_node(machines), pods)
    if need > have:
        raise ClusterError(
            f"{nodes} nodes and {pods} pods need about {_gib(need)} of memory; this machine has {_gib(have)} available (use fewer nodes or pods)"
        )


class Exhaustion:
    """Knows when no later pod can be scheduled: without deletions the cluster only fills up,
    so a kind of pod (same claim specs) that was unschedulable once stays unschedulable, and
    once every kind of the workload was, so is every pod still to come."""

    def __init__(self, kinds: Iterable[str], deletes: bool) -> None:
        self._left = set(kinds)
        self._active = not deletes

    def failed(self, kind: str) -> bool:
        """Note that a pod of ``kind`` was unschedulable; True when no later pod can be scheduled."""
        if not self._active:
            return False
        self._left.discard(kind)
        return not self._left
