"""Where every device of a simulated cluster sits: node, position, and the node's shape class.

The scheduler memoises Filter answers per node class (same device shapes in
the same order, same allocations by position) and moves a memoised allocation
to another node of the class by position. This module computes those classes
and positions once, from the allocator's pools.

It does the work per distinct slice device list, not per device: nodes of one
machine share their parsed device lists, so a cluster of 50,000 nodes x 256
devices costs a few dictionary entries per node instead of 12.8 million
(``device_at`` and ``where`` answer from the shared tables).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import repeat
from typing import Any

from topodra.sim.allocator import Allocator
from topodra.sim.objects import Device, DeviceID, Node

__all__ = ["NodeLayouts"]


@dataclass(slots=True)
class _DeviceList:
    """What one parsed slice device list contributes: shapes, names, shared-capacity totals."""

    devices: list[Device]  # kept so that the id() key stays valid
    shapes: tuple[str, ...]
    names: tuple[str, ...]
    capacity: dict[int, dict[str, Fraction]]  # index -> capacity totals of allowMultipleAllocations devices
    multi: tuple[int, ...]  # indexes of devices that allow multiple allocations


@dataclass(slots=True)
class _Names:
    """One naming of a node's device positions: (pool index, device name) per position."""

    names: list[tuple[int, str]] = field(default_factory=list)
    position: dict[tuple[int, str], int] = field(default_factory=dict)
    capacity: dict[int, dict[str, Fraction]] = field(default_factory=dict)
    multi: frozenset[int] = frozenset()
    plain: list[str] | None = None  # the device names alone, by position (made on first need)


class NodeLayouts:
    """Shape classes (``template_of``) and device positions of every node."""

    def __init__(self, allocator: Allocator, nodes: Sequence[Node]) -> None:
        self.template_of: list[int] = []  # node -> shape template (what the memo keys on)
        self.template_count = 0
        self._names_of: list[int] = []  # node -> naming
        self._namings: list[_Names] = []
        self._pools_of: list[tuple[tuple[str, str], ...]] = []  # node -> usable pools (driver, name) by index
        self._pool_nodes: dict[tuple[str, str], list[tuple[int, int]]] = {}  # pool -> (node, pool index)
        lists: dict[int, _DeviceList] = {}
        templates: dict[tuple[Any, ...], int] = {}
        namings: dict[tuple[Any, ...], int] = {}
        for i, node in enumerate(nodes):
            layout: list[Any] = []
            naming: list[tuple[int, _DeviceList]] = []
            usable: list[tuple[str, str]] = []
            for p in allocator.pools_for(node):
                if not p.usable:
                    layout.append((p.driver, "incomplete" if p.incomplete else "invalid"))
                    continue
                pidx = len(usable)
                usable.append((p.driver, p.name))
                self._pool_nodes.setdefault((p.driver, p.name), []).append((i, pidx))
                shapes = []
                for s in p.slices:
                    info = lists.get(id(s.devices))
                    if info is None or info.devices is not s.devices:
                        info = lists[id(s.devices)] = _describe(s.devices)
                    shapes.append((s.per_device_node_selection, bool(s.node_name), info.shapes))
                    naming.append((pidx, info))
                counters = json.dumps({k: {c: str(q) for c, q in v.items()} for k, v in p.counter_sets.items()}, sort_keys=True) if p.counter_sets else "{}"
                layout.append((p.driver, tuple(shapes), counters))
            self.template_of.append(templates.setdefault(tuple(layout), len(templates)))
            nkey = tuple((pidx, info.names, info.shapes) for pidx, info in naming)
            n = namings.get(nkey)
            if n is None:
                n = namings[nkey] = len(self._namings)
                self._namings.append(_naming(naming))
            self._names_of.append(n)
            self._pools_of.append(tuple(usable))
        self.template_count = len(templates)

    def device_count(self, node: int) -> int:
        return len(self._namings[self._names_of[node]].names)

    def device_at(self, node: int, position: int) -> DeviceID:
        pidx, name = self._namings[self._names_of[node]].names[position]
        driver, pool = self._pools_of[node][pidx]
        return (driver, pool, name)

    def device_ids(self, node: int, positions: Sequence[int]) -> Iterable[DeviceID]:
        """``device_at`` for many positions of one node at once (a bulk fill of the cluster state)."""
        naming = self._namings[self._names_of[node]]
        pools = self._pools_of[node]
        if len(pools) == 1:  # the usual case: built without a Python loop per device
            driver, pool = pools[0]
            if naming.plain is None:
                naming.plain = [name for _, name in naming.names]
            return zip(repeat(driver), repeat(pool), map(naming.plain.__getitem__, positions))
        return [(*pools[naming.names[p][0]], naming.names[p][1]) for p in positions]

    def where(self, device: DeviceID) -> tuple[int, int] | None:
        """(node, position) of a device in a node-local pool (the last node that lists it), else None."""
        for node, pidx in reversed(self._pool_nodes.get((device[0], device[1]), ())):
            pos = self._namings[self._names_of[node]].position.get((pidx, device[2]))
            if pos is not None:
                return node, pos
        return None

    def pool_positions(self, pool: tuple[str, str]) -> list[tuple[int, int, dict[tuple[int, str], int]]]:
        """(node, pool index, positions by (pool index, device name)) of a pool, last node first:
        ``where`` for many devices of one pool at once."""
        return [(node, pidx, self._namings[self._names_of[node]].position) for node, pidx in reversed(self._pool_nodes.get(pool, ()))]

    def multi_positions(self, node: int) -> frozenset[int]:
        """Positions of the node's devices that allow multiple allocations."""
        return self._namings[self._names_of[node]].multi

    def capacity_of(self, node: int, position: int) -> dict[str, Fraction]:
        """Capacity totals of a device that allows multiple allocations (empty for others)."""
        return self._namings[self._names_of[node]].capacity.get(position, {})


def _describe(devices: list[Device]) -> _DeviceList:
    caps = {k: {n: c.value.amount for n, c in d.capacity.items()} for k, d in enumerate(devices) if d.allow_multiple and d.capacity}
    multi = tuple(k for k, d in enumerate(devices) if d.allow_multiple)
    return _DeviceList(devices, tuple(d.shape for d in devices), tuple(d.name for d in devices), caps, multi)


def _naming(parts: list[tuple[int, _DeviceList]]) -> _Names:
    out = _Names()
    multi: list[int] = []
    for pidx, info in parts:
        base = len(out.names)
        multi.extend(base + k for k in info.multi)
        for k, name in enumerate(info.names):
            out.position[(pidx, name)] = base + k
            out.names.append((pidx, name))
        for k, totals in info.capacity.items():
            out.capacity[base + k] = totals
    out.multi = frozenset(multi)
    return out
