"""hwloc's reading of a sysfs tree, and a comparison with ours.

hwloc is the reference implementation of topology discovery; its test trees
come with the output ``lstopo`` printed for them (``NAME.console`` from
``lstopo -v``, or ``NAME.xml``), and Debian's ``lstopo-no-graphics`` can read
any unpacked tree. This module parses both formats into an
:class:`HwlocReading` (CPU sets of packages, NUMA nodes, L3 and L2 caches,
cores, PUs and CPU kinds) and :func:`compare` checks a :class:`Topology`
against it, level by level. Used by the tests and by
``topodra topology-check`` to report the match rate. No I/O here except
:func:`run_lstopo`, which runs the tool.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from topodra.cpuset import CPUSet
from topodra.topology.memkind import SUBTYPE_KINDS
from topodra.topology.model import MemoryKind, Topology

__all__ = [
    "DIFFERENCES",
    "LIVE_ENV",
    "Check",
    "Difference",
    "check_expectation",
    "check_live",
    "match_rate",
    "cgroup_allowed",
    "ExpectationFile",
    "HwlocParseError",
    "HwlocReading",
    "compare",
    "lstopo_available",
    "parse_console",
    "parse_hwloc_bitmap",
    "parse_test_file",
    "parse_xml",
    "restrict",
    "run_lstopo",
]

LEVELS = (
    "packages",
    "dies",
    "numa_nodes",
    "memory_kinds",
    "l3",
    "l2",
    "cores",
    "pus",
    "cpu_kinds",
    "distances",
)

#: hwloc's NUMA node subtypes and the memory kind topodra gives such a node: those of
#: hwloc 2.9 (topology.memkind.SUBTYPE_KINDS) and the CXL ones hwloc names since 2.10.
#: SPM (specific-purpose memory) says nothing by itself and is left out.
NODE_SUBTYPE_KINDS: Mapping[str, MemoryKind] = {
    **SUBTYPE_KINDS,
    "CXL-DRAM": MemoryKind.CXL,
    "CXL-NVM": MemoryKind.CXL,
}


class HwlocParseError(ValueError):
    """hwloc output that does not parse; names the file/line."""


@dataclass
class HwlocReading:
    """CPU sets per level as hwloc saw them. Levels hwloc did not show are absent."""

    packages: list[CPUSet] = field(default_factory=list)
    dies: list[CPUSet] = field(default_factory=list)
    numa_nodes: dict[int, CPUSet] = field(default_factory=dict)  # os index -> locality
    node_subtypes: dict[int, str] = field(default_factory=dict)  # os index -> "GPUMemory", "NVM", ...
    node_memory: dict[int, tuple[int, int]] = field(default_factory=dict)  # os index -> (bytes, tolerance)
    l3: list[CPUSet] = field(default_factory=list)
    l2: list[CPUSet] = field(default_factory=list)
    cores: list[CPUSet] = field(default_factory=list)
    pus: CPUSet = field(default_factory=CPUSet)
    cpu_kinds: list[CPUSet] = field(default_factory=list)
    #: each kind's efficiency rank (console output; -1 = hwloc could not rank), None = not shown
    cpu_kind_efficiency: list[int | None] = field(default_factory=list)
    distances: dict[tuple[int, int], int] = field(default_factory=dict)  # by node os index
    seen: set[str] = field(default_factory=set)  # which LEVELS the output showed
    node_logical: dict[int, int] = field(default_factory=dict)  # console L# -> os index


def parse_hwloc_bitmap(text: str) -> CPUSet:
    """hwloc's bitmap text: comma-separated 32-bit words, ``0x`` prefixed, high word
    first; hwloc leaves a zero word empty ("0x000000ff,,0x0")."""
    body = text.strip()
    if body in ("", "0x0"):
        return CPUSet()
    mask = 0
    for w in body.split(","):
        if w == "":
            mask <<= 32
            continue
        hexdigits = w[2:] if w.startswith("0x") else w
        if not re.fullmatch(r"[0-9a-fA-F]{1,8}", hexdigits):
            raise HwlocParseError(f"not an hwloc bitmap: {text!r}")
        mask = (mask << 32) | int(hexdigits, 16)
    return CPUSet.from_mask(mask)


# --- console (lstopo -v) ------------------------------------------------------------

_LINE = re.compile(
    r"^(?P<indent> *)(?P<type>[A-Za-z][\w\[\]]*(?:\([^)]*\))?)(?: L#(?P<logical>\d+))?(?: \((?P<attrs>.*)\))?"
)
_UNITS = {
    "B": 1,
    "KiB": 1 << 10,
    "MiB": 1 << 20,
    "GiB": 1 << 30,
    "TiB": 1 << 40,
    "KB": 1 << 10,
    "MB": 1 << 20,
    "GB": 1 << 30,
    "TB": 1 << 40,
}


@dataclass
class _Obj:
    type: str
    attrs: str
    depth: int
    logical: int | None = None
    children: list[_Obj] = field(default_factory=list)
    pu: int | None = None
    parent: _Obj | None = None

    def pus(self) -> CPUSet:
        mask = 0
        stack = [self]
        while stack:
            o = stack.pop()
            if o.pu is not None:
                mask |= 1 << o.pu
            stack.extend(o.children)
        return CPUSet.from_mask(mask)


def _os_index(attrs: str) -> int | None:
    m = re.search(r"(?:^| )P#(\d+)", attrs)
    return int(m.group(1)) if m else None


def parse_console(text: str, where: str = "console") -> HwlocReading:
    """Parse ``lstopo -v`` console output."""
    try:
        return _parse_console(text, where)
    except ValueError as e:  # a CPU id out of range, a bad bitmap
        if isinstance(e, HwlocParseError):
            raise
        raise HwlocParseError(f"{where}: {e}") from None


def _parse_console(text: str, where: str) -> HwlocReading:
    lines = _join_wrapped(text.splitlines())
    root: _Obj | None = None
    stack: list[_Obj] = []
    kinds: list[tuple[CPUSet, int]] = []
    matrix: list[list[int]] = []
    in_matrix = False
    tree_done = False
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if line.lstrip().startswith("depth ") or line.startswith("Special depth"):
            tree_done = True
        if tree_done:
            m = re.match(r"CPU kind #\d+ efficiency (-?\d+) cpuset (\S+)", line)
            if m:
                kinds.append((parse_hwloc_bitmap(m.group(2)), int(m.group(1))))
            if line.startswith("Relative latency matrix") and "NUMANode" in line and "logical" in line:
                in_matrix = not matrix
                continue
            if in_matrix:
                fields = line.split()
                if (
                    fields
                    and all(f.isdigit() for f in fields[1:])
                    and (fields[0] == "index" or fields[0].isdigit())
                ):
                    matrix.append([-1 if f == "index" else int(f) for f in fields])
                    continue
                in_matrix = False
            continue
        m = _LINE.match(line)
        if m is None or len(m.group("indent")) % 2:
            raise HwlocParseError(f"{where}:{n}: unexpected line {line!r}")
        depth = len(m.group("indent")) // 2
        typ = m.group("type")
        attrs = m.group("attrs") or ""
        obj = _Obj(typ, attrs, depth, int(m.group("logical")) if m.group("logical") else None)
        if typ == "PU":
            obj.pu = _os_index(attrs)
            if obj.pu is None:
                raise HwlocParseError(f"{where}:{n}: PU without P#: {line!r}")
        if root is None:
            if typ != "Machine" and not typ.startswith("System"):
                raise HwlocParseError(f"{where}:{n}: expected the Machine line first, got {line!r}")
            root = obj
            stack = [obj]
            continue
        while stack and stack[-1].depth >= depth:
            stack.pop()
        if not stack:
            raise HwlocParseError(f"{where}:{n}: line is not inside the Machine: {line!r}")
        stack[-1].children.append(obj)
        obj.parent = stack[-1]
        stack.append(obj)
    if root is None:
        raise HwlocParseError(f"{where}: no Machine line")
    reading = _reading_from_tree(root, kinds)
    if matrix:
        reading.distances = _console_distances(matrix, reading.node_logical, where)
        reading.seen.add("distances")
    return reading


def _console_distances(
    matrix: list[list[int]], logical_to_os: Mapping[int, int], where: str
) -> dict[tuple[int, int], int]:
    """The console matrix is by logical index; map it to node os indexes."""
    header, rows = matrix[0][1:], matrix[1:]
    out: dict[tuple[int, int], int] = {}
    for row in rows:
        a, values = row[0], row[1:]
        if len(values) != len(header) or a not in logical_to_os:
            raise HwlocParseError(f"{where}: malformed latency matrix row {row}")
        for b, v in zip(header, values, strict=True):
            if b not in logical_to_os:
                raise HwlocParseError(f"{where}: latency matrix names unknown node L#{b}")
            out[(logical_to_os[a], logical_to_os[b])] = v
    return out


def _join_wrapped(lines: list[str]) -> list[str]:
    """Rejoin object lines whose ``(...)`` attributes hold a newline (quoted DMI strings)."""
    out: list[str] = []
    depth = 0
    for line in lines:
        if depth > 0 and out:
            out[-1] += "\n" + line
        else:
            out.append(line)
        depth = max(0, depth + line.count("(") - line.count(")"))
    return out


def _reading_from_tree(root: _Obj, kinds: list[tuple[CPUSet, int]]) -> HwlocReading:
    r = HwlocReading(cpu_kinds=[k for k, _ in kinds], cpu_kind_efficiency=[e for _, e in kinds])
    if kinds:
        r.seen.add("cpu_kinds")
    r.pus = root.pus()
    r.seen.add("pus")
    stack: list[tuple[_Obj, _Obj]] = [(c, root) for c in root.children]
    while stack:
        o, parent = stack.pop()
        base = o.type.split("(")[0]
        if base == "NUMANode":
            idx = _os_index(o.attrs)
            if idx is not None and o.logical is not None:
                r.node_logical[o.logical] = idx
            subtype = o.type[len(base) :].strip("()")
            if idx is not None and subtype:
                r.node_subtypes[idx] = subtype
            if idx is not None:
                # A NUMA node hangs below the object whose CPUs are local to it
                # (through memory-side caches, which have no CPUs of their own).
                holder: _Obj | None = parent
                while holder is not None and holder.type.startswith("MemCache"):
                    holder = holder.parent
                r.numa_nodes[idx] = (holder or root).pus()
                m = re.search(r"local=(\d+)(B|[KMGT]i?B)", o.attrs)
                if m:
                    unit = _UNITS[m.group(2)]
                    r.node_memory[idx] = (int(m.group(1)) * unit, unit // 2 + unit // 100)
            r.seen.add("numa_nodes")
        elif base == "Package":
            r.packages.append(o.pus())
            r.seen.add("packages")
        elif base == "Die":
            r.dies.append(o.pus())
            r.seen.add("dies")
        elif base == "L3Cache" or base == "L3dCache":
            r.l3.append(o.pus())
            r.seen.add("l3")
        elif base == "L2Cache" or base == "L2dCache":
            r.l2.append(o.pus())
            r.seen.add("l2")
        elif base == "Core":
            r.cores.append(o.pus())
            r.seen.add("cores")
        stack.extend((c, o) for c in o.children)
    return r


# --- XML (lstopo --of xml, and the .xml expectations) -----------------------------------


def parse_xml(text: str, where: str = "xml") -> HwlocReading:
    """Parse hwloc's XML export (v2 layout: NUMA nodes inside their parent)."""
    try:
        return _parse_xml(text, where)
    except ValueError as e:  # int() of a bad attribute, a bad bitmap
        if isinstance(e, HwlocParseError):
            raise
        raise HwlocParseError(f"{where}: {e}") from None


def _parse_xml(text: str, where: str) -> HwlocReading:
    try:
        doc = ET.fromstring(text)
    except ET.ParseError as e:
        raise HwlocParseError(f"{where}: not XML: {e}") from None
    machine = doc.find("object")
    if machine is None:
        raise HwlocParseError(f"{where}: no top object")
    r = HwlocReading()

    def cpuset(el: ET.Element) -> CPUSet:
        return parse_hwloc_bitmap(el.get("cpuset", "0x0"))

    r.pus = CPUSet()
    for el in machine.iter("object"):
        typ = el.get("type", "")
        if typ == "PU":
            r.pus |= cpuset(el)
            r.seen.add("pus")
        elif typ == "Package":
            r.packages.append(cpuset(el))
            r.seen.add("packages")
        elif typ == "Die":
            r.dies.append(cpuset(el))
            r.seen.add("dies")
        elif typ == "NUMANode":
            idx = int(el.get("os_index", "-1"))
            r.numa_nodes[idx] = cpuset(el)
            if el.get("subtype"):
                r.node_subtypes[idx] = el.get("subtype", "")
            mem = el.get("local_memory")
            if mem is not None:
                r.node_memory[idx] = (int(mem), 0)
            r.seen.add("numa_nodes")
        elif typ == "L3Cache" or (typ == "Cache" and el.get("depth") == "3"):
            if el.get("cache_type", "0") in ("0", "1"):
                r.l3.append(cpuset(el))
                r.seen.add("l3")
        elif typ == "L2Cache" or (typ == "Cache" and el.get("depth") == "2"):
            if el.get("cache_type", "0") in ("0", "1"):
                r.l2.append(cpuset(el))
                r.seen.add("l2")
        elif typ == "Core":
            r.cores.append(cpuset(el))
            r.seen.add("cores")
    for dist in doc.iter("distances2"):
        if (
            dist.get("type") != "NUMANode"
            or dist.get("indexing") != "os"
            or "NUMALatency" not in dist.get("name", "NUMALatency")
        ):
            continue
        ids = [int(x) for el in dist.iter("indexes") for x in (el.text or "").split()]
        values = [int(x) for v in dist.iter("u64values") for x in (v.text or "").split()]
        if len(values) != len(ids) * len(ids):
            raise HwlocParseError(f"{where}: distances2 has {len(values)} values for {len(ids)} nodes")
        for i, a in enumerate(ids):
            for j, b in enumerate(ids):
                r.distances[(a, b)] = values[i * len(ids) + j]
        r.seen.add("distances")
    for kind in doc.iter("cpukind"):
        r.cpu_kinds.append(parse_hwloc_bitmap(kind.get("cpuset", "0x0")))
        r.cpu_kind_efficiency.append(None)  # the XML export leaves the ranking to its reader
        r.seen.add("cpu_kinds")
    return r


# --- the .test files ----------------------------------------------------------------


@dataclass(frozen=True)
class ExpectationFile:
    """One ``NAME.test``: which tarball, which expected output, under which options."""

    name: str
    source: str  # tarball file name
    target: str  # .console or .xml file name
    options: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    comment: str = ""

    @property
    def fixture(self) -> str:
        return self.source.removesuffix(".tar.bz2")

    @property
    def filtered(self) -> bool:
        """Options that hide objects: levels may be partly missing from the output."""
        return any(o.startswith(("--merge", "--filter", "--no-caches", "--ignore")) for o in self.options)

    @property
    def disallowed_shown(self) -> bool:
        return "--disallowed" in self.options


def parse_test_file(path: Path) -> ExpectationFile:
    """Read hwloc's ``NAME.test`` (``source:``, ``target:``, ``options:``, ``env:`` lines)."""
    source = target = ""
    options: list[str] = []
    env: dict[str, str] = {}
    comments: list[str] = []
    for line in path.read_text().splitlines():
        key, _, value = line.partition(":")
        value = value.strip()
        if line.startswith("#"):
            comments.append(line.lstrip("# "))
        elif key == "source":
            source = value
        elif key == "target":
            target = value
        elif key == "options":
            options = [o for o in value.split() if o not in ("-", "-v")]
        elif key == "env" and "=" in value:
            k, _, v = value.partition("=")
            env[k.strip()] = v.strip().strip('"')
    if not source or not target:
        raise HwlocParseError(f"{path}: needs 'source:' and 'target:' lines")
    return ExpectationFile(path.stem, source, target, tuple(options), env, " ".join(comments))


# --- comparison ---------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """One compared level: ``ok`` and, when not, what differs.

    ``documented`` is the reason when this level is a known, deliberate
    difference between topodra's model and hwloc's (see :data:`DIFFERENCES`).
    """

    level: str
    ok: bool
    detail: str = ""
    documented: str = ""

    @property
    def accepted(self) -> bool:
        return self.ok or bool(self.documented)


def _groups(sets: Iterable[CPUSet]) -> set[CPUSet]:
    return {s for s in sets if s}


def _ours(t: Topology, level: str) -> set[CPUSet]:
    if level == "packages":
        return _groups(t.cpus_of_package(p) for p in t.packages())
    if level == "dies":
        return _groups(t.cpus_of_die(d) for d in t.dies())
    if level == "l3":
        return _groups(t.cpus_of_l3(g) for g in t.l3_groups())
    if level == "l2":
        return _groups(t.cpus_of_l2(g) for g in t.l2_groups())
    if level == "cores":
        return _groups(t.cpus_of_core(c) for c in t.cores())
    raise KeyError(level)


def restrict(t: Topology, level: str, allowed: CPUSet) -> set[CPUSet]:
    """Our groups of ``level`` cut down to ``allowed`` CPUs (as hwloc shows a cgroup)."""
    return _groups(g & allowed for g in _ours(t, level))


def _describe(missing: set[CPUSet], extra: set[CPUSet]) -> str:
    def fmt(s: set[CPUSet]) -> str:
        items = sorted(s, key=CPUSet.first)
        shown = ", ".join(f"{{{x.format()}}}" for x in items[:6])
        return shown + (f" (+{len(items) - 6})" if len(items) > 6 else "")

    parts = []
    if missing:
        parts.append(f"hwloc has {fmt(missing)} we lack")
    if extra:
        parts.append(f"we have {fmt(extra)} hwloc lacks")
    return "; ".join(parts)


def compare(
    t: Topology,
    h: HwlocReading,
    *,
    subset: bool | Collection[str] = False,
    allowed_cpus: CPUSet | None = None,
    allowed_nodes: CPUSet | None = None,
    documented: Mapping[str, str] | None = None,
) -> list[Check]:
    """Compare ``t`` with hwloc's reading, level by level.

    hwloc hides what the tree's cgroup forbids (``allowed_cpus`` and
    ``allowed_nodes``, see :func:`cgroup_allowed`); topodra reads the whole
    machine, so our groups are cut down to the PUs hwloc shows before
    comparing. ``subset`` (all levels, or the named ones): hwloc's output was
    filtered (``--merge``, ``--filter``) or dropped objects, so each group it
    shows must be one of ours but we may have more. ``documented`` maps a level
    to the reason it differs on purpose; the check is still made and reported.
    """
    checks = _Checks(subset, documented or {})
    allowed = h.pus
    _check_pus(checks, t.online if allowed_cpus is None else t.online & allowed_cpus, allowed)
    _check_groups(checks, t, h, allowed)
    if "numa_nodes" in h.seen:
        checks.add("numa_nodes", *_compare_nodes(t, h, allowed, allowed_nodes, checks.partial("numa_nodes")))
    _check_memory_kinds(checks, t, h)
    if "distances" in h.seen:
        _check_distances(checks, t, h)
    _check_cpu_kinds(checks, t, h, allowed)
    return checks.found


@dataclass
class _Checks:
    """The checks found so far, and how each level is to be compared."""

    subset: bool | Collection[str]
    documented: Mapping[str, str]
    found: list[Check] = field(default_factory=list)

    def partial(self, level: str) -> bool:
        return self.subset is True or (not isinstance(self.subset, bool) and level in self.subset)

    def add(self, level: str, ok: bool, detail: str = "") -> None:
        self.found.append(Check(level, ok, detail, self.documented.get(level, "")))


def _check_pus(checks: _Checks, ours: CPUSet, allowed: CPUSet) -> None:
    if checks.partial("pus"):
        checks.add("pus", allowed <= ours, "" if allowed <= ours else f"hwloc PUs {allowed - ours} not online here")
    else:
        checks.add("pus", ours == allowed, "" if ours == allowed else f"ours {ours.format()} vs hwloc {allowed.format()}")


def _check_groups(checks: _Checks, t: Topology, h: HwlocReading, allowed: CPUSet) -> None:
    # hwloc shows a Die level only where dies differ from packages (die_cpus
    # of more than one PU, not equal to the package); then they must match.
    for level in ("packages", "dies", "l3", "l2", "cores"):
        if level not in h.seen:
            continue
        theirs = _groups(getattr(h, level))
        mine = restrict(t, level, allowed)
        missing = theirs - mine
        if checks.partial(level) and level in checks.documented:
            # A documented partial comparison: report the exact result, and
            # accept it only when every group hwloc shows is one of ours.
            reason = checks.documented[level] if not missing else ""
            checks.found.append(Check(level, theirs == mine, _describe(missing, mine - theirs), reason))
        elif checks.partial(level):
            checks.add(level, not missing, _describe(missing, set()))
        else:
            checks.add(level, theirs == mine, _describe(missing, mine - theirs))


def _check_memory_kinds(checks: _Checks, t: Topology, h: HwlocReading) -> None:
    node_kinds = {n: NODE_SUBTYPE_KINDS[st] for n, st in h.node_subtypes.items() if st in NODE_SUBTYPE_KINDS}
    node_kinds = {n: k for n, k in node_kinds.items() if n in t.nodes}
    if node_kinds:
        wrong_kinds = [
            f"node {n}: ours {t.nodes[n].kind} vs hwloc {h.node_subtypes[n]}"
            for n, k in sorted(node_kinds.items())
            if t.nodes[n].kind is not k
        ]
        checks.add("memory_kinds", not wrong_kinds, "; ".join(wrong_kinds))


def _check_distances(checks: _Checks, t: Topology, h: HwlocReading) -> None:
    wrong = [
        f"{a}->{b}: ours {t.distances.get((a, b))} vs hwloc {v}"
        for (a, b), v in sorted(h.distances.items())
        if t.distances.get((a, b)) != v
    ]
    more = f" (+{len(wrong) - 6})" if len(wrong) > 6 else ""
    checks.add("distances", not wrong, "; ".join(wrong[:6]) + more)


def _check_cpu_kinds(checks: _Checks, t: Topology, h: HwlocReading, allowed: CPUSet) -> None:
    # hwloc lists CPU kinds only when it can tell CPUs apart; one kind (or none) = not hybrid.
    kinds = [(k & allowed, e) for k, e in zip(h.cpu_kinds, h.cpu_kind_efficiency, strict=True) if k & allowed]
    ours = [k & allowed for k in t.cpu_kinds() if k & allowed]
    if len(kinds) <= 1:
        several = len(ours) > 1
        checks.add("cpu_kinds", not several, "we see several CPU kinds, hwloc one" if several else "")
        return
    theirs = {k for k, _ in kinds}
    classified = CPUSet.from_mask(sum(k.mask for k in theirs))
    mine = [k & classified for k in ours if k & classified]
    problems = [_describe(theirs - set(mine), set(mine) - theirs)] if theirs != set(mine) else []
    ranks = [e for _, e in kinds]
    if not problems and all(e is not None and e >= 0 for e in ranks):
        # hwloc ranked them (efficiency 0 = least performant): our order must be the same.
        by_rank = [k for _, k in sorted((e or 0, k.first()) for k, e in kinds)]
        if [k.first() for k in mine] != by_rank:
            problems.append("kinds ranked differently: ours " + ", ".join(f"{{{k.format()}}}" for k in mine))
    checks.add("cpu_kinds", not problems, "; ".join(problems))


def _compare_nodes(
    t: Topology, h: HwlocReading, allowed: CPUSet, allowed_nodes: CPUSet | None, partial: bool
) -> tuple[bool, str]:
    bad = []
    for idx, cpus in sorted(h.numa_nodes.items()):
        node = t.nodes.get(idx)
        if node is None:
            bad.append(f"node {idx} missing")
            continue
        # hwloc gives a CPU-less node the locality of its parent object; our
        # model keeps it CPU-less (nearness is in the distances), so only its
        # memory is compared.
        if node.cpus & t.online and (node.cpus & t.online & allowed) != (cpus & allowed):
            bad.append(f"node {idx}: ours {(node.cpus & allowed).format()} vs hwloc {cpus.format()}")
        mem = h.node_memory.get(idx)
        if mem is not None and abs(node.memory_bytes - mem[0]) > mem[1]:
            bad.append(f"node {idx}: memory {node.memory_bytes} vs hwloc {mem[0]}")
    if not partial:
        visible = [n for n in t.nodes if allowed_nodes is None or n in allowed_nodes]
        extra = [n for n in visible if n not in h.numa_nodes]
        if extra:
            bad.append(f"we have nodes {extra} hwloc does not show")
    return not bad, "; ".join(bad)


# --- deliberate differences ---------------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    """A level where topodra's reading differs from hwloc's on purpose, and why.

    ``subset``: the level is still compared, but only hwloc's groups must be
    among ours. ``where``: "static" (the recorded expectation), "live" (Debian's
    lstopo) or "both".
    """

    level: str
    reason: str
    subset: bool = False
    where: str = "both"


#: Deliberate differences, by fixture (tarball) or expectation (``.test``) name.
DIFFERENCES: dict[str, tuple[Difference, ...]] = {
    "40intel64-4n10c+pci-conflicts": (
        Difference(
            "packages",
            "the tree was edited so CPU 3's package mask overlaps other packages; hwloc drops the "
            "conflicting 4th package, topodra keeps it and puts each CPU where most CPUs report it",
            subset=True,
        ),
        Difference(
            "l3",
            "CPU 2's L3 mask was edited to overlap other L3s; hwloc drops that L3, topodra keeps it "
            "with the CPUs most CPUs report in it",
            subset=True,
        ),
    ),
    "64amd64-4s2n4ca2co": (
        Difference(
            "cores",
            "AMD Bulldozer compute units: the kernel reports the two integer cores of a unit as SMT "
            "siblings (thread_siblings) and schedules them so; topodra follows the kernel, hwloc "
            "splits them by core_id",
        ),
    ),
    "8em64t-2s2ca2c-buggynuma": (
        Difference(
            "numa_nodes",
            "all 8 nodes list every CPU (buggy firmware); hwloc merges them into one node, topodra "
            "keeps the 8 nodes the kernel allocates from and puts each CPU on its cpuN/nodeM link",
        ),
    ),
    "fakeheterocpunuma": (
        Difference(
            "numa_nodes",
            "hand-made overlapping node cpumaps, shown by hwloc only with "
            "HWLOC_DEBUG_ALLOW_OVERLAPPING_NODE_CPUSETS; in topodra each CPU is on exactly one node",
        ),
    ),
    "nvidiagpunumanodes": (
        Difference(
            "numa_nodes",
            "hwloc hides NVIDIA GPU memory nodes unless HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES=1 (the "
            "-kept expectation, which matches); topodra keeps them as memory-only HBM nodes",
            where="static",
        ),
    ),
}

#: Environment for live lstopo runs, so hwloc shows what topodra models.
LIVE_ENV: dict[str, dict[str, str]] = {
    "nvidiagpunumanodes": {"HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES": "1"},
}


def _differences(name: str, where: str) -> tuple[dict[str, str], set[str]]:
    documented: dict[str, str] = {}
    subset: set[str] = set()
    for d in DIFFERENCES.get(name, ()):
        if d.where in (where, "both"):
            documented[d.level] = d.reason
            if d.subset:
                subset.add(d.level)
    return documented, subset


def check_expectation(e: ExpectationFile, t: Topology, expected_dir: Path, root: Path) -> list[Check]:
    """Compare ``t`` (read from ``root``) with the recorded expectation ``e``."""
    target = expected_dir / e.target
    text = target.read_text()
    h = parse_xml(text, str(target)) if target.suffix == ".xml" else parse_console(text, str(target))
    allowed_cpus, allowed_nodes = (None, None) if e.disallowed_shown else cgroup_allowed(root)
    documented, subset = _differences(e.name, "static")
    if e.fixture != e.name:
        more, more_subset = _differences(e.fixture, "static")
        documented = {**more, **documented}
        subset |= more_subset
    return compare(
        t,
        h,
        subset=True if e.filtered else subset,
        allowed_cpus=allowed_cpus,
        allowed_nodes=allowed_nodes,
        documented=documented,
    )


def check_live(name: str, t: Topology, root: Path) -> list[Check]:
    """Compare ``t`` with Debian's ``lstopo-no-graphics --disallowed --input ROOT``."""
    h = run_lstopo(root, env=LIVE_ENV.get(name))
    documented, subset = _differences(name, "live")
    return compare(t, h, subset=subset, documented=documented)


def match_rate(checks: Iterable[Check]) -> tuple[int, int, int]:
    """(checks that match, checks that differ only as documented, all checks)."""
    ok = documented = total = 0
    for c in checks:
        total += 1
        if c.ok:
            ok += 1
        elif c.documented:
            documented += 1
    return ok, documented, total


# --- cgroups: what hwloc hides ---------------------------------------------------------


def cgroup_allowed(root: Path) -> tuple[CPUSet | None, CPUSet | None]:
    """The CPUs and memory nodes the tree's own process was confined to.

    hwloc hides everything else unless ``--disallowed`` is given; this finds
    the same cpuset files it reads: the cgroup v2 ``cpuset.*.effective`` files
    when a cgroup2 mount and path exist, else the cgroup v1/legacy cpuset
    files (``cpuset.cpus`` or, with ``noprefix`` or the old cpuset fs,
    ``cpus``). (None, None) when the tree holds no such files.
    """

    def read(rel: str) -> str | None:
        try:
            return (root / rel.lstrip("/")).read_text().strip().strip("\x00")
        except OSError:
            return None

    v1_path = v2_path = None
    for line in (read("proc/self/cgroup") or "").splitlines():
        num, _, rest = line.partition(":")
        ctrls, _, path = rest.partition(":")
        if num == "0" and ctrls == "":
            v2_path = path
        elif "cpuset" in ctrls.split(","):
            v1_path = path
    legacy = read("proc/self/cpuset")
    mounts = [line.split() for line in (read("proc/mounts") or "").splitlines()]
    candidates: list[tuple[str, str, str]] = []
    for m in mounts:
        if len(m) < 4:
            continue
        point, fstype, opts = m[1], m[2], m[3].split(",")
        v2 = v2_path or legacy
        if fstype == "cgroup2" and v2:
            candidates.append((f"{point}/{v2}", "cpuset.cpus.effective", "cpuset.mems.effective"))
    for m in mounts:
        if len(m) < 4:
            continue
        point, fstype, opts = m[1], m[2], m[3].split(",")
        v1 = v1_path or legacy
        if not v1:
            continue
        if fstype == "cpuset" or (fstype == "cgroup" and "cpuset" in opts and "noprefix" in opts):
            candidates.append((f"{point}/{v1}", "cpus", "mems"))
        elif fstype == "cgroup" and "cpuset" in opts:
            # As hwloc: v1 uses the configured sets, not cpuset.effective_*.
            candidates.append((f"{point}/{v1}", "cpuset.cpus", "cpuset.mems"))
    for base, cpus_file, mems_file in candidates:
        cpus = read(f"{base}/{cpus_file}")
        if cpus is None:
            continue
        mems = read(f"{base}/{mems_file}")
        return CPUSet.parse(cpus), CPUSet.parse(mems) if mems is not None else None
    return None, None


# --- running lstopo -----------------------------------------------------------------

LSTOPO = "lstopo-no-graphics"


def lstopo_available() -> bool:
    return shutil.which(LSTOPO) is not None


def run_lstopo(
    root: Path,
    *,
    disallowed: bool = True,
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
    console: bool = False,
) -> HwlocReading:
    """hwloc's reading of the tree at ``root`` (``lstopo-no-graphics --input ROOT --of xml``).

    ``disallowed`` shows CPUs and nodes a cgroup in the tree forbids, as
    topodra reads the whole machine regardless of its own cgroup. ``console``
    reads ``--of console -v`` instead, which also gives each CPU kind's
    efficiency rank (the XML export leaves ranking to its reader).
    """
    exe = shutil.which(LSTOPO)
    if exe is None:
        raise FileNotFoundError(f"{LSTOPO} is not installed (Debian package 'hwloc')")
    out_format = ["console", "-v"] if console else ["xml"]
    cmd = [exe, "--input", str(root), "--if", "fsroot", "--of", *out_format, "-"]
    if disallowed:
        cmd.insert(1, "--disallowed")
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("HWLOC_")}
    run_env.update(env or {})
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=run_env, check=False)
    if out.returncode != 0:
        raise HwlocParseError(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()[:300]}")
    where = f"lstopo --input {root}"
    return parse_console(out.stdout, where) if console else parse_xml(out.stdout, where)
