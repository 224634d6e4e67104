"""Keep a machine's group numbers stable while its CPUs go offline and online.

The reader numbers dies, clusters and cores (and packages, L2 and L3 groups when
the kernel gives no ids) by each group's lowest online CPU, so taking CPUs
offline can renumber every group after them, and a core coming back could take
the number another core had. Device names and attributes (``core5``, the
``core`` attribute a ``matchAttribute`` constraint compares) must not change
under a running node, so a re-read machine is renumbered after the CPUs seen
before: a group keeps the number its CPUs had, a group never seen gets a number
no earlier group had. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from topodra.topology.model import CacheInstance, CPUInfo, Topology

__all__ = ["carry_numbers"]

#: CPUInfo fields holding group numbers (cache ids for l2/l3).
_FIELDS = ("package", "die", "cluster", "core", "l2", "l3")
_CACHE_FIELD = {2: "l2", 3: "l3"}


def _renumber(field: str, seen: Mapping[int, CPUInfo], current: Mapping[int, CPUInfo]) -> dict[int, int]:
    """Current number -> carried number for one kind of group."""
    groups: dict[int, list[int]] = {}
    for c, info in sorted(current.items()):
        n = getattr(info, field)
        if n is not None:
            groups.setdefault(n, []).append(c)
    before: dict[int, int] = {}  # CPU -> its number when last seen
    taken: set[int] = set()
    for c, info in seen.items():
        n = getattr(info, field)
        if n is not None:
            before[c] = n
            taken.add(n)
    out: dict[int, int] = {}
    used: set[int] = set()
    fresh: list[int] = []
    for n, cpus in sorted(groups.items(), key=lambda kv: kv[1][0]):
        olds = [before[c] for c in cpus if c in before and before[c] not in used]
        if olds:
            got = min(set(olds), key=lambda o: (-olds.count(o), o))  # the number most of its CPUs had
            out[n] = got
            used.add(got)
        else:
            fresh.append(n)
    for n in fresh:  # groups never seen: their own number if nobody had it, else a new one
        if n in taken or n in used:
            n_new = max(taken | used | set(groups)) + 1
            while n_new in used:
                n_new += 1
        else:
            n_new = n
        out[n] = n_new
        used.add(n_new)
    return out


def carry_numbers(seen: Mapping[int, CPUInfo], current: Topology) -> Topology:
    """``current`` with its group numbers carried over from ``seen`` (every CPU seen before,
    as last seen: offline ones included); unchanged if nothing needs renumbering."""
    if not seen:
        return current
    maps = {f: _renumber(f, seen, current.cpus) for f in _FIELDS}
    if all(all(k == v for k, v in m.items()) for m in maps.values()):
        return current
    cpus: dict[int, CPUInfo] = {}
    for c, info in current.cpus.items():
        numbers: dict[str, Any] = {f: maps[f][getattr(info, f)] for f in _FIELDS if getattr(info, f) is not None}
        cpus[c] = replace(info, **numbers)
    caches: list[CacheInstance] = []
    for k in current.caches:
        field = _CACHE_FIELD.get(k.level)
        if field is not None and k.kind in ("Unified", "Data"):
            k = replace(k, id=maps[field].get(k.id, k.id))
        caches.append(k)
    return replace(current, cpus=cpus, caches=tuple(caches))
