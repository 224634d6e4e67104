"""The topology as a rich tree: packages > dies > NUMA nodes > L3 > L2 > cores > threads.

Levels are ordered by containment, not fixed: a NUMA node holding several
packages (old IA64) goes above them, an L3 spanning two sub-NUMA clusters
goes above the nodes. A level that groups CPUs exactly like its parent is
folded into the parent's line ("Package 0 · Die 0 · NUMA node 0"), and a
level the machine does not report (no L3) is left out. A group that crosses
its parent's boundary (it should not, but firmware lies) shows under each
parent, marked "split".
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

from rich.console import Group as RichGroup
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from topodra.cpuset import CPUSet
from topodra.topology.model import CoreType, CPUInfo, Topology

__all__ = ["render_topology", "topology_tree", "distance_table", "format_bytes"]


def format_bytes(n: int) -> str:
    """Binary units, one decimal: 31.0 GiB."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _ghz(khz: int | None) -> str:
    return "?" if khz is None else f"{khz / 1e6:.2f}".rstrip("0").rstrip(".")


@dataclass
class _Level:
    name: str
    key: Callable[[CPUInfo], Hashable | None]
    label: Callable[[Topology, Hashable, CPUSet], str]
    merged: list[_Level]

    def partition(self, t: Topology) -> dict[Hashable, CPUSet]:
        out: dict[Hashable, int] = {}
        for c in t.cpus.values():
            k = self.key(c)
            if k is not None:
                out[k] = out.get(k, 0) | (1 << c.id)
        return {k: CPUSet.from_mask(m) for k, m in out.items()}


def _cache_label(t: Topology, level: int, cid: Hashable, cpus: CPUSet) -> str:
    size = next(
        (k.size_bytes for k in t.caches if k.level == level and k.id == cid and k.kind != "Instruction"),
        None,
    )
    return f"L{level} #{cid}" + (f" {format_bytes(size)}" if size else "")


def _node_label(t: Topology, n: Hashable, cpus: CPUSet) -> str:
    assert isinstance(n, int)
    node = t.nodes.get(n)
    if node is None:
        return f"NUMA node {n}"
    if node.memory_bytes == 0:
        return f"NUMA node {n} · no memory"
    return f"NUMA node {n} · {format_bytes(node.memory_bytes)} {node.kind.value}"


def _core_label(t: Topology, core: Hashable, cpus: CPUSet) -> str:
    c = t.cpus[cpus.first()]
    parts = [f"Core {core} (core_id {c.core_id})"]
    if t.hybrid or c.core_type is not CoreType.STANDARD:
        parts.append(c.core_type.value)
    if c.max_freq_khz or c.base_freq_khz:
        parts.append(f"{_ghz(c.base_freq_khz)}/{_ghz(c.max_freq_khz)} GHz")
    if c.capacity is not None:
        parts.append(f"capacity {c.capacity}")
    if len(t.cpu_kinds()) > 1:
        parts.append(f"kind {c.kind}")
    return " · ".join(parts)


def _levels() -> list[_Level]:
    return [
        _Level("package", lambda c: c.package, lambda t, k, s: f"Package {k}", []),
        _Level("die", lambda c: c.die, lambda t, k, s: f"Die {k} (die_id {t.cpus[s.first()].die_id})", []),
        _Level("node", lambda c: c.node, _node_label, []),
        _Level("l3", lambda c: c.l3, lambda t, k, s: _cache_label(t, 3, k, s), []),
        _Level("l2", lambda c: c.l2, lambda t, k, s: _cache_label(t, 2, k, s), []),
        _Level("core", lambda c: c.core, _core_label, []),
    ]


def _refines(fine: dict[Hashable, CPUSet], coarse: dict[Hashable, CPUSet]) -> bool:
    """Every group of ``fine`` lies inside one group of ``coarse`` (same CPUs covered)."""
    owner: dict[int, Hashable] = {}
    for k, s in coarse.items():
        for c in s:
            owner[c] = k
    for s in fine.values():
        keys = {owner.get(c) for c in s}
        if len(keys) != 1 or None in keys:
            return False
    return True


def _ordered_levels(t: Topology) -> list[_Level]:
    levels = [lv for lv in _levels() if lv.partition(t)]
    parts = {lv.name: lv.partition(t) for lv in levels}
    # Fold levels identical to their predecessor into it.
    folded: list[_Level] = []
    for lv in levels:
        if (
            folded
            and lv.name != "core"
            and sorted(parts[lv.name].values(), key=CPUSet.first)
            == sorted(parts[folded[-1].name].values(), key=CPUSet.first)
        ):
            folded[-1].merged.append(lv)
        else:
            folded.append(lv)
    # Bubble coarser levels above finer ones.
    changed = True
    while changed:
        changed = False
        for i in range(len(folded) - 1):
            a, b = parts[folded[i].name], parts[folded[i + 1].name]
            if folded[i + 1].name != "core" and _refines(a, b) and not _refines(b, a):
                folded[i], folded[i + 1] = folded[i + 1], folded[i]
                changed = True
    return folded


def _thread_label(t: Topology, c: int) -> Text:
    text = Text(f"CPU {c}")
    if c in t.isolated:
        text.append(" isolated", style="yellow")
    if c in t.nohz_full:
        text.append(" nohz_full", style="yellow")
    return text


def topology_tree(t: Topology) -> Tree:
    """The CPU hierarchy as a rich Tree."""
    levels = _ordered_levels(t)
    parts = {lv.name: lv.partition(t) for lv in levels}
    root = Tree(Text(_machine_line(t), style="bold"))

    def grow(node: Tree, cpus: CPUSet, depth: int) -> None:
        if depth == len(levels):
            for c in cpus:
                node.add(_thread_label(t, c))
            return
        lv = levels[depth]
        groups: dict[Hashable, int] = {}
        loose = 0
        for c in cpus:
            k = lv.key(t.cpus[c])
            if k is None:
                loose |= 1 << c
            else:
                groups[k] = groups.get(k, 0) | (1 << c)
        for k, mask in sorted(groups.items(), key=lambda kv: (kv[1] & -kv[1]).bit_length()):
            inside = CPUSet.from_mask(mask)
            label = lv.label(t, k, inside)
            for extra in lv.merged:
                ek = extra.key(t.cpus[inside.first()])
                if ek is not None:
                    label += " · " + extra.label(t, ek, inside)
            whole = parts[lv.name][k]
            style = "cyan" if lv.name != "core" else ""
            text = Text(label, style=style)
            if whole != inside:
                text.append(f"  split: {whole.format()}", style="red")
            elif lv.name != "core":
                text.append(f"  cpus {inside.format()}", style="dim")
            grow(node.add(text), inside, depth + 1)
        if loose:
            grow(node, CPUSet.from_mask(loose), depth + 1)

    grow(root, t.online, 0)
    for n in t.memory_only_nodes():
        node = t.nodes[n]
        near = t.closest_cpu_node(n)
        extra = f", nearest CPU node {near}" if near is not None else ""
        root.add(
            Text(
                f"Memory-only NUMA node {n} · {format_bytes(node.memory_bytes)} {node.kind.value}{extra}",
                style="magenta",
            )
        )
    return root


def _machine_line(t: Topology) -> str:
    total = sum(n.memory_bytes for n in t.nodes.values())
    bits = [
        f"Machine: {len(t.cpus)} online CPUs ({t.online.format()})",
        f"{len(t.packages())} package(s)",
        f"{len(t.nodes)} NUMA node(s)",
        f"{len(t.cores())} cores",
        f"{format_bytes(total)}",
    ]
    if t.hybrid:
        kinds = ", ".join(f"{len(t.cpus_of_type(k))} {k.value}" for k in t.core_types())
        bits.append(f"hybrid: {kinds} (from {t.core_type_source.value})")
    return " · ".join(bits)


def distance_table(t: Topology) -> Table | None:
    """The NUMA distance matrix, or None on a single-node machine."""
    ids = t.numa_nodes()
    if len(ids) < 2:
        return None
    table = Table(title="NUMA distances", show_edge=False)
    table.add_column("node", justify="right", style="cyan")
    for b in ids:
        table.add_column(str(b), justify="right")
    for a in ids:
        table.add_row(str(a), *(str(t.distances.get((a, b), "-")) for b in ids))
    return table


def _sets_and_kinds(t: Topology) -> Table:
    table = Table(show_header=False, show_edge=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    for name, s in (
        ("possible", t.possible),
        ("present", t.present),
        ("online", t.online_cpus or t.online),
        ("offline", t.offline),
        ("isolated", t.isolated),
        ("nohz_full", t.nohz_full),
    ):
        table.add_row(name, s.format() or "-")
    table.add_row(
        "core types", f"{', '.join(k.value for k in t.core_types())} (source: {t.core_type_source.value})"
    )
    kinds = t.cpu_kinds()
    if len(kinds) > 1:
        table.add_row("CPU kinds", ", ".join(f"{i}: {k.format()}" for i, k in enumerate(kinds)) + " (0 = slowest)")
    for n in t.nodes.values():
        tier = f", tier {n.tier}" if n.tier is not None else ""
        table.add_row(f"node {n.id} memory", f"{n.kind.value}{tier}: {n.kind_reason}")
    return table


def pci_table(t: Topology) -> Table | None:
    """The PCIe roots and the CPUs local to each, or None without PCI data."""
    if not t.pci_roots:
        return None
    table = Table(title="PCIe roots", show_edge=False)
    for name in ("root", "local CPUs", "NUMA nodes", "devices", "endpoints"):
        table.add_column(name)
    for r in t.pci_roots:
        cpus = r.cpus.format() + ("" if r.locality_known else " (unknown: all)")
        ends = sum(d.is_endpoint for d in r.devices)
        table.add_row(r.name, cpus, ",".join(map(str, r.nodes)) or "-", str(len(r.devices)), str(ends))
    return table


def render_topology(t: Topology) -> RichGroup:
    """Everything ``topodra topology`` prints: tree, CPU sets, distances, PCIe roots, warnings."""
    parts: list[Tree | Table | Text] = [topology_tree(t), _sets_and_kinds(t)]
    for extra in (distance_table(t), pci_table(t)):
        if extra is not None:
            parts.append(extra)
    for w in t.warnings:
        parts.append(Text(f"warning: {w}", style="yellow"))
    return RichGroup(*parts)
