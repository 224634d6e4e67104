"""Topology discovery: read a Linux sysfs tree into the immutable model.

``read_topology(root)`` reads ``<root>/sys/devices/system/{cpu,node}`` (and a
few neighbours: memory tiers, DAX devices, the hybrid PMU lists) and builds a
:class:`~topodra.topology.model.Topology`. ``root`` is ``/`` on a live machine
or the folder of an unpacked tree (``topodra.topology.fixtures``).

Error policy, in one rule: a file that exists but cannot be parsed raises
:class:`TopologyError` naming the file and its content, except for purely
informational values (frequencies, capacities, CPPC, cache sizes), which are
dropped with a warning. Files that are missing, and facts that disagree
between files, get a documented fallback and a warning in
``Topology.warnings``; see ``docs/topology.md`` for the list.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field

from topodra.cpuset import CPUSet
from topodra.topology.coretypes import CoreTypeInputs, CpuKinds, classify_cpu_kinds
from topodra.topology.errors import TopologyError
from topodra.topology.memkind import NodeMemoryFacts, classify_memory, is_knl, knl_mcdram_nodes
from topodra.topology.model import (
    CacheInstance,
    CPUInfo,
    MemoryKind,
    NUMANode,
    Topology,
)
from topodra.topology.pci import read_pci_roots
from topodra.topology.sysfs_tree import SysfsTree

__all__ = ["read_topology", "TopologyError"]

CPU_DIR = "sys/devices/system/cpu"
NODE_DIR = "sys/devices/system/node"
TIER_DIR = "sys/devices/virtual/memory_tiering"
DAX_DIR = "sys/bus/dax/devices"
CXL_DIR = "sys/bus/cxl/devices"
NVIDIA_DIR = "proc/driver/nvidia/gpus"
_EMPTY = CPUSet()
_DISTANCES = re.compile(r"(?:[0-9]+\s*)*")  # "10 21 21 10"


def read_topology(root: str | os.PathLike[str] = "/") -> Topology:
    """Read the machine's topology from the sysfs tree below ``root``."""
    return _Reader(SysfsTree(root)).read()


# --- per-CPU raw facts --------------------------------------------------------------


@dataclass
class _CacheRaw:
    """One cpuN/cache/indexK; ``id`` and ``size`` are read only for the CPU
    that represents its group (they are the same for every CPU sharing it)."""

    level: int
    kind: str
    shared: CPUSet
    dir: str


@dataclass
class _CPURaw:
    id: int
    package_id: int | None = None
    die_id: int | None = None
    cluster_id: int | None = None
    core_id: int | None = None
    core_mask: CPUSet | None = None
    package_mask: CPUSet | None = None
    die_mask: CPUSet | None = None
    cluster_mask: CPUSet | None = None
    caches: list[_CacheRaw] = field(default_factory=list)
    base_freq: int | None = None
    min_freq: int | None = None
    max_freq: int | None = None
    capacity: int | None = None
    nominal_freq: int | None = None  # kHz, from CPPC nominal_freq (MHz)


# --- partitions ---------------------------------------------------------------------


class _Partition:
    """A partition of the online CPUs into groups, numbered by lowest CPU."""

    __slots__ = ("groups", "of")

    def __init__(self, masks: Iterable[int]) -> None:
        """``masks``: one int bitmask per group, disjoint."""
        ordered = sorted(masks, key=lambda m: m & -m)
        self.groups = [CPUSet.from_mask(m) for m in ordered]
        of: dict[int, int] = {}
        for i, m in enumerate(ordered):
            while m:
                low = m & -m
                of[low.bit_length() - 1] = i
                m ^= low
        self.of = of

    def refine(self, other: _Partition) -> _Partition:
        """Split every group along ``other``'s groups (so it nests inside them)."""
        groups, of = other.groups, other.of
        if all(g.mask & ~groups[of[g.first()]].mask == 0 for g in self.groups):
            return self  # already nested: nothing to split
        keyed: dict[tuple[int, int], int] = {}
        for c, g in self.of.items():
            k = (g, of[c])
            keyed[k] = keyed.get(k, 0) | (1 << c)
        return _Partition(keyed.values())


def _group(
    online: CPUSet,
    mask_of: Callable[[int], CPUSet | None],
    key_of: Callable[[int], Hashable | None],
    what: str,
    warnings: list[str],
) -> _Partition:
    """Group CPUs by their sysfs sibling masks, else by an id key, else alone.

    Masks win because they are what the kernel's scheduler uses, and ids are
    often only unique per package. When the masks disagree (CPU a lists b but b
    does not list a: hand-edited or buggy firmware), each CPU joins the group
    that the most CPUs report it in (ties: its own report), and a warning says so.
    """
    by_key: dict[Hashable, int] = {}
    for c in online:
        if mask_of(c) is None:
            k = key_of(c)
            if k is not None:
                by_key[k] = by_key.get(k, 0) | (1 << c)
    claim: dict[int, int] = {}
    claimers: dict[int, int] = {}
    for c in online:
        mask = mask_of(c)
        if mask is not None:
            want = (mask.mask & online.mask) | (1 << c)
        else:
            k = key_of(c)
            want = by_key[k] if k is not None else 1 << c
        claim[c] = want
        claimers[want] = claimers.get(want, 0) | (1 << c)
    if all(members == m for m, members in claimers.items()):
        return _Partition(claimers)
    votes = {m: members.bit_count() for m, members in claimers.items()}
    chosen: dict[int, int] = {}
    for c in online:
        bit = 1 << c
        best = max(
            (m for m in claimers if m & bit),
            key=lambda m: (votes[m], m == claim[c], -((m & -m).bit_length())),
        )
        chosen[best] = chosen.get(best, 0) | bit
    first_bad = min(c for c in online if claimers[claim[c]] != claim[c])
    warnings.append(
        f"{what} sibling lists disagree between CPUs (first at CPU {first_bad}); "
        "each CPU is grouped where most CPUs report it"
    )
    return _Partition(chosen.values())


#: The sibling-mask files of each level (hex masks first, as hwloc reads them), its
#: id file and its name, from the core outwards.
_GROUP_LEVELS = (
    (("core_cpus", "thread_siblings", "core_cpus_list", "thread_siblings_list"), "core_id", "core"),
    (("cluster_cpus", "cluster_cpus_list"), "cluster_id", "cluster"),
    (("die_cpus", "die_cpus_list"), "die_id", "die"),
    (
        ("package_cpus", "core_siblings", "package_cpus_list", "core_siblings_list"),
        "physical_package_id",
        "package",
    ),
)


@dataclass
class _CacheGroups:
    """The instances of one cache (level, type): their partition, ids and raw reads."""

    part: _Partition
    ids: list[int]
    of_cpu: dict[int, _CacheRaw]


def _cache_of(parts: Mapping[tuple[int, str], _CacheGroups], c: int, level: int, *kinds: str) -> int | None:
    """The id of CPU ``c``'s cache at ``level``, of the first of ``kinds`` it has."""
    for kind in kinds:
        got = parts.get((level, kind))
        if got is not None and c in got.part.of:
            return got.ids[got.part.of[c]]
    return None


class _Grouping:
    """Packages, dies, cores and clusters: from the per-group read when it ran, else
    grouped CPU by CPU (warnings for disagreeing masks go to ``warnings``)."""

    def __init__(self, raw: Mapping[int, _CPURaw], known: Mapping[Hashable, list[int]], warnings: list[str]) -> None:
        self.raw = raw
        self.known = known
        self.warnings = warnings

    def partition(
        self,
        cpus: CPUSet,
        mask_of: Callable[[int], CPUSet | None],
        key_of: Callable[[int], Hashable | None],
        what: str,
        known_as: Hashable,
    ) -> _Partition:
        """The groups the per-group read found, else grouped CPU by CPU."""
        got = self.known.get(known_as)
        return _Partition(got) if got is not None else _group(cpus, mask_of, key_of, what, self.warnings)

    def packages(self, online: CPUSet) -> _Partition:
        raw = self.raw
        if all(raw[c].package_mask is None and _valid(raw[c].package_id) is None for c in online):
            return _Partition([online.mask])  # nothing known: one package
        return self.partition(
            online,
            lambda c: raw[c].package_mask,
            lambda c: _valid(raw[c].package_id),
            "package",
            "package",
        )

    def dies(self, online: CPUSet, pkg: _Partition) -> _Partition:
        raw = self.raw
        return self.partition(
            online,
            lambda c: raw[c].die_mask,
            lambda c: (pkg.of[c], raw[c].die_id) if raw[c].die_id is not None else (pkg.of[c],),
            "die",
            "die",
        ).refine(pkg)

    def cores(self, online: CPUSet, die: _Partition) -> _Partition:
        raw = self.raw
        return self.partition(
            online,
            lambda c: raw[c].core_mask,
            lambda c: (die.of[c], raw[c].core_id) if _valid(raw[c].core_id) is not None else None,
            "core",
            "core",
        ).refine(die)

    def clusters(
        self, online: CPUSet, die: _Partition, core: _Partition, caches: Mapping[tuple[int, str], _CacheGroups]
    ) -> _Partition:
        """Clusters from sysfs; with no cluster files at all, the L2 groups (else the cores)."""
        raw = self.raw
        l2 = caches.get((2, "Unified")) or caches.get((2, "Data"))
        if l2 is not None and CPUSet(l2.part.of) == online:
            fallback: _Partition = l2.part.refine(die)
        else:
            fallback = core
        cluster = self.partition(
            online,
            lambda c: raw[c].cluster_mask,
            lambda c: (die.of[c], raw[c].cluster_id) if _valid(raw[c].cluster_id) is not None else None,
            "cluster",
            "cluster",
        ).refine(die)
        if all(raw[c].cluster_mask is None and _valid(raw[c].cluster_id) is None for c in online):
            return fallback
        return cluster

    def package_ids(self, pkg: _Partition) -> list[int]:
        """sysfs physical_package_id per group when valid and distinct, else the index."""
        ids: list[int] = []
        for g in pkg.groups:
            got = {self.raw[c].package_id for c in g}
            if len(got) != 1:
                break
            (pid,) = got
            if pid is None or pid < 0:
                break
            ids.append(pid)
        if len(ids) == len(pkg.groups) and len(set(ids)) == len(ids):
            return ids
        return list(range(len(pkg.groups)))


# --- the reader ---------------------------------------------------------------------


class _Reader:
    def __init__(self, tree: SysfsTree) -> None:
        self.t = tree
        self.warnings: list[str] = []
        # Groups the one-read-per-group path already knows (by level name or
        # cache (level, type)), so assembling need not rebuild them per CPU.
        self.known: dict[Hashable, list[int]] = {}

    def warn(self, msg: str) -> None:
        self.warnings.append(msg)

    def soft_int(self, rel: str) -> int | None:
        """An informational integer: garbage is dropped with a warning."""
        try:
            return self.t.int(rel)
        except TopologyError as e:
            self.warn(f"ignored: {e}")
            return None

    # --- CPUs -----------------------------------------------------------------
    def read(self) -> Topology:
        t = self.t
        dirs = t.numbered(CPU_DIR, "cpu")
        online_file = t.cpulist(f"{CPU_DIR}/online")
        if not dirs and online_file is None:
            raise TopologyError(
                t.shown(CPU_DIR),
                "no cpuN directories and no 'online' file: not the root of a sysfs tree?",
            )
        have_dir = CPUSet(dirs)
        if online_file is not None:
            online = online_file
            missing = online - have_dir
            if missing:
                self.warn(
                    f"{t.shown(CPU_DIR)}/online lists CPUs {missing} without a cpuN directory; "
                    "they are left out"
                )
                online = online & have_dir
        else:
            online = CPUSet(c for c in dirs if t.text(f"{CPU_DIR}/cpu{c}/online") != "0")
        if not online:
            raise TopologyError(t.shown(f"{CPU_DIR}/online"), "no online CPU")
        present = t.cpulist(f"{CPU_DIR}/present")
        if present is None:
            present = have_dir | online
        possible = t.cpulist(f"{CPU_DIR}/possible")
        if possible is None:
            possible = present
        isolated = t.cpulist(f"{CPU_DIR}/isolated") or _EMPTY
        nohz_text = t.text(f"{CPU_DIR}/nohz_full")
        nohz = _EMPTY
        if nohz_text is not None and nohz_text != "(null)":
            nohz = t.cpulist(f"{CPU_DIR}/nohz_full") or _EMPTY

        raw = self.read_grouped(online)
        if raw is None:  # not a consistent kernel tree: read every CPU and vote
            self.known = {}
            raw = {c: self.read_cpu(c) for c in online}
        self.drop_lone_masks(online, raw)
        nodes, distances, node_of = self.read_nodes(online, raw)
        kinds = classify_cpu_kinds(
            CoreTypeInputs(
                online=online,
                pmu_core=t.cpulist("sys/devices/cpu_core/cpus"),
                pmu_atom=t.cpulist("sys/devices/cpu_atom/cpus"),
                pmu_lowpower=t.cpulist("sys/devices/cpu_lowpower/cpus"),
                capacity=_known({c: r.capacity for c, r in raw.items()}),
                base_freq_khz=_known({c: r.base_freq for c, r in raw.items()}),
                max_freq_khz=_known({c: r.max_freq for c, r in raw.items()}),
            )
        )
        if kinds.unknown:
            self.warn(
                f"CPUs {kinds.unknown} report no capacity, frequency or PMU type while others do: "
                "their CPU kind is unknown and ranked lowest"
            )
        final, caches = self.assemble_cpus(online, raw, node_of, kinds, isolated)
        pci_roots = read_pci_roots(t, online, {n: node.cpus for n, node in nodes.items()}, self.warn)
        return Topology(
            cpus=final,
            nodes=nodes,
            distances=distances,
            caches=caches,
            possible=possible,
            present=present,
            online_cpus=online,
            isolated=isolated,
            nohz_full=nohz,
            core_type_source=kinds.source,
            source=f"sysfs:{os.fspath(t.root)}",
            warnings=tuple(self.warnings),
            pci_roots=pci_roots,
        )

    # --- one read per group -----------------------------------------------------
    def read_grouped(self, online: CPUSet) -> dict[int, _CPURaw] | None:
        """Per-CPU facts read once per core, cluster, die, package and cache instance.

        The kernel writes the same sibling mask, ids, cache files and
        frequencies for every CPU of a group, so the lowest CPU of each group
        answers for all of them (hwloc reads the same way). Which files exist is
        learned from the first online CPU. None when the tree is not such a
        consistent kernel tree (a CPU without a topology folder, a missing mask,
        a group that overlaps an earlier one, cores with different cache
        layouts): the caller then reads every CPU and resolves disagreements.
        """
        t = self.t
        cpus = list(online)
        top0 = f"{CPU_DIR}/cpu{cpus[0]}"
        entries = set(t.listdir(top0))
        if "topology" not in entries:
            return None
        files = set(t.listdir(f"{top0}/topology"))
        if not all(t.isdir(f"{CPU_DIR}/cpu{c}/topology") for c in cpus):
            return None
        raw = {c: _CPURaw(c) for c in cpus}
        core_of: dict[int, int] = {}
        for names, id_name, level in _GROUP_LEVELS:
            mask_name = next((n for n in names if n in files), None)
            id_file = id_name if id_name in files else None
            if mask_name is None:
                if id_file is not None:
                    return None  # grouping by ids needs every CPU's id
                continue
            if not self.read_level_groups(level, mask_name, id_file, cpus, online.mask, raw, core_of):
                return None
        # the lowest CPU of each core (every CPU when there are no core masks)
        core_reps = [c for c in cpus if _lowest_bit(core_of.get(c, 1 << c)) == 1 << c]
        if not self.read_grouped_caches(cpus, online.mask, core_reps, core_of, raw):
            return None
        for c in core_reps:
            self.read_cpu_values(c, entries, raw[c])
            _share_core_values(raw, c, core_of.get(c, 1 << c))
        return raw

    def read_level_groups(
        self,
        level: str,
        mask_name: str,
        id_file: str | None,
        cpus: list[int],
        om: int,
        raw: Mapping[int, _CPURaw],
        core_of: dict[int, int],
    ) -> bool:
        """One level's masks and ids, read at the lowest CPU of each group.

        Fills ``raw`` (and ``core_of`` for the core level) and records the groups in
        ``known``; False when a mask is missing, leaves out its own CPU or overlaps
        an earlier group.
        """
        t = self.t
        # AMD Bulldozer compute units: the two cores of a unit are listed as
        # siblings but keep their own core_id; hwloc tells the case apart by
        # comparing the first two siblings' core_id, and so does topodra.
        thread_ids: bool | None = None
        covered = 0
        for c in cpus:
            if covered >> c & 1:
                continue
            rel = f"{CPU_DIR}/cpu{c}/topology/{mask_name}"
            mask = t.cpulist(rel) if mask_name.endswith("_list") else t.cpumask(rel)
            if mask is None or not mask.mask >> c & 1:
                return False
            want = mask.mask & om
            if want & covered:
                return False
            covered |= want
            self.known.setdefault(level, []).append(want)
            ident = t.int(f"{CPU_DIR}/cpu{c}/topology/{id_file}") if id_file else None
            if level == "core" and id_file and thread_ids is None and want != 1 << c:
                second = _lowest_bit(want & ~(1 << c)).bit_length() - 1
                thread_ids = t.int(f"{CPU_DIR}/cpu{second}/topology/{id_file}") != ident
            for m in CPUSet.from_mask(want):
                r = raw[m]
                if level == "core":
                    if thread_ids and m != c:
                        ident = t.int(f"{CPU_DIR}/cpu{m}/topology/{id_file}")
                    r.core_mask, r.core_id = mask, ident
                    core_of[m] = want
                elif level == "cluster":
                    r.cluster_mask, r.cluster_id = mask, ident
                elif level == "die":
                    r.die_mask, r.die_id = mask, ident
                else:
                    r.package_mask, r.package_id = mask, ident
        return True

    def read_grouped_caches(
        self,
        cpus: list[int],
        om: int,
        core_reps: list[int],
        core_of: Mapping[int, int],
        raw: Mapping[int, _CPURaw],
    ) -> bool:
        """Caches read once per instance; False when cores differ in cache layout."""
        t = self.t
        layout: set[int] | None = None
        for c in core_reps:
            got = set(t.numbered(f"{CPU_DIR}/cpu{c}/cache", "index"))
            if layout is None:
                layout = got
            elif got != layout:
                return False
        seen: set[tuple[int, str]] = set()
        for k in sorted(layout or ()):
            d0 = f"{CPU_DIR}/cpu{cpus[0]}/cache/index{k}"
            level = t.int(f"{d0}/level")
            kind = t.text(f"{d0}/type") or "Unified"  # hwloc's default when type is missing
            if level is None:
                return False
            if kind not in ("Data", "Instruction", "Unified"):
                raise TopologyError(t.shown(f"{d0}/type"), "expected Data, Instruction or Unified", kind)
            covered = 0
            groups: list[int] = []
            for c in cpus:
                if covered >> c & 1:
                    continue
                d = f"{CPU_DIR}/cpu{c}/cache/index{k}"
                shared = t.cpus_mask_first(f"{d}/shared_cpu_map", f"{d}/shared_cpu_list")
                if shared is None:
                    return False
                # empty shared_cpu_map (IA64 L3): private to the core
                want = ((shared.mask & om) | (1 << c)) if shared else core_of.get(c, 1 << c)
                if want & covered:
                    return False
                covered |= want
                groups.append(want)
                cache = _CacheRaw(level, kind, shared, d)
                for m in CPUSet.from_mask(want):
                    raw[m].caches.append(cache)
            # one index per (level, type) on every known machine; if not, the
            # assembler groups that pair itself
            if (level, kind) in seen:
                self.known.pop((level, kind), None)
            else:
                seen.add((level, kind))
                self.known[(level, kind)] = groups
        return True

    def read_cpu_values(self, c: int, entries: set[str], r: _CPURaw) -> None:
        """Frequencies, CPPC and capacity of one CPU (informational: garbage is dropped)."""
        base = f"{CPU_DIR}/cpu{c}"
        if "cpufreq" in entries:
            r.base_freq = self.soft_int(f"{base}/cpufreq/base_frequency")
            r.min_freq = self.soft_int(f"{base}/cpufreq/cpuinfo_min_freq")
            r.max_freq = self.soft_int(f"{base}/cpufreq/cpuinfo_max_freq")
        if "acpi_cppc" in entries and r.base_freq is None:
            # The base frequency shown when cpufreq has none; CPU kinds use only
            # cpufreq's, as hwloc 2.9 does.
            nominal = self.soft_int(f"{base}/acpi_cppc/nominal_freq")
            if nominal:
                r.nominal_freq = nominal * 1000  # MHz -> kHz
        if "cpu_capacity" in entries:
            r.capacity = self.soft_int(f"{base}/cpu_capacity")

    def drop_lone_masks(self, online: CPUSet, raw: Mapping[int, _CPURaw]) -> None:
        """Die and cluster masks that hold only their own CPU say nothing.

        Kernels print them for architectures without dies or clusters (the
        generic ``topology_die_cpumask`` and ``topology_cluster_cpumask`` are
        the CPU alone); hwloc ignores a die or cluster of one PU, and so does
        topodra: such a CPU is grouped by its id, else as if the files were absent
        (taken literally, they would split every SMT core into threads).
        """
        om = online.mask
        lone_die = lone_cluster = False
        for c, r in raw.items():
            bit = 1 << c
            if r.die_mask is not None and r.die_mask.mask & om | bit == bit:
                r.die_mask, lone_die = None, True
            if r.cluster_mask is not None and r.cluster_mask.mask & om | bit == bit:
                r.cluster_mask, lone_cluster = None, True
        if lone_die:
            self.known.pop("die", None)
        if lone_cluster:
            self.known.pop("cluster", None)

    def node_links(self, c: int) -> list[int]:
        """The nodes of the cpuN/nodeM links (read only when the cpumaps leave doubt)."""
        entries = self.t.listdir(f"{CPU_DIR}/cpu{c}")
        return sorted(
            int(e[4:]) for e in entries if e.startswith("node") and e[4:].isdigit() and e[4:].isascii()
        )

    def read_cpu(self, c: int) -> _CPURaw:
        t = self.t
        base = f"{CPU_DIR}/cpu{c}"
        r = _CPURaw(c)
        entries = set(t.listdir(base))
        if "topology" in entries:
            topo = f"{base}/topology"
            files = set(t.listdir(topo))

            def ids(name: str) -> int | None:
                return t.int(f"{topo}/{name}") if name in files else None

            def mask(*names: str) -> CPUSet | None:
                for name in names:
                    if name in files:
                        rel = f"{topo}/{name}"
                        return t.cpulist(rel) if name.endswith("_list") else t.cpumask(rel)
                return None

            r.package_id = ids("physical_package_id")
            r.die_id = ids("die_id")
            r.cluster_id = ids("cluster_id")
            r.core_id = ids("core_id")
            # Hex masks first, as hwloc reads them: hand-edited trees keep the
            # masks right when the *_list twins go stale; the kernel writes both.
            r.core_mask = mask("core_cpus", "thread_siblings", "core_cpus_list", "thread_siblings_list")
            r.package_mask = mask("package_cpus", "core_siblings", "package_cpus_list", "core_siblings_list")
            r.die_mask = mask("die_cpus", "die_cpus_list")
            r.cluster_mask = mask("cluster_cpus", "cluster_cpus_list")
        if "cache" in entries:
            for _, idx in sorted(t.numbered(f"{base}/cache", "index").items()):
                cache = self.read_cache(f"{base}/cache/{idx}")
                if cache is not None:
                    r.caches.append(cache)
        self.read_cpu_values(c, entries, r)
        return r

    def read_cache(self, d: str) -> _CacheRaw | None:
        t = self.t
        level = t.int(f"{d}/level")
        kind = t.text(f"{d}/type") or "Unified"  # hwloc's default when type is missing
        shared = t.cpus_mask_first(f"{d}/shared_cpu_map", f"{d}/shared_cpu_list")
        if level is None or shared is None:
            self.warn(f"{t.shown(d)}: incomplete (level or shared_cpu_map missing); ignored")
            return None
        if kind not in ("Data", "Instruction", "Unified"):
            raise TopologyError(t.shown(f"{d}/type"), "expected Data, Instruction or Unified", kind)
        return _CacheRaw(level, kind, shared, d)

    def cache_size(self, k: _CacheRaw) -> int | None:
        rel = f"{k.dir}/size"
        text = self.t.text(rel)
        if not text:
            return None
        size = _parse_size(text)
        if size is None:
            self.warn(f"ignored: {self.t.shown(rel)}: not a cache size ({text!r})")
        return size

    def cache_ids(self, part: _Partition, of_cpu: Mapping[int, _CacheRaw]) -> list[int]:
        """sysfs cache ids when every group has one and they are unique; else the
        lowest CPU of each group's shared_cpu_list (as on ARM, where ``id`` is absent)."""
        reps = [of_cpu[g.first()] for g in part.groups]
        sys_ids = [self.t.int(f"{k.dir}/id") for k in reps]
        if None not in sys_ids and len(set(sys_ids)) == len(sys_ids):
            return [i for i in sys_ids if i is not None]
        lowest = [k.shared.first() if k.shared else g.first() for k, g in zip(reps, part.groups, strict=True)]
        if len(set(lowest)) == len(lowest):
            return lowest
        return [g.first() for g in part.groups]

    # --- grouping -------------------------------------------------------------
    def assemble_cpus(
        self,
        online: CPUSet,
        raw: Mapping[int, _CPURaw],
        node_of: Mapping[int, int],
        kinds: CpuKinds,
        isolated: CPUSet,
    ) -> tuple[dict[int, CPUInfo], tuple[CacheInstance, ...]]:
        grouping = _Grouping(raw, self.known, self.warnings)
        pkg = grouping.packages(online)
        die = grouping.dies(online, pkg)
        core = grouping.cores(online, die)
        caches = self.cache_partitions(online, raw, grouping, core)
        cluster = grouping.clusters(online, die, core, caches)
        core = core.refine(cluster)
        pkg_ids = grouping.package_ids(pkg)
        cpus: dict[int, CPUInfo] = {}
        for c in online:
            r = raw[c]
            cpus[c] = CPUInfo(
                id=c,
                package=pkg_ids[pkg.of[c]],
                die=die.of[c],
                die_id=_valid(r.die_id) or 0,  # -1: the architecture has no dies
                cluster=cluster.of[c],
                cluster_id=r.cluster_id if r.cluster_id is not None else -1,
                core=core.of[c],
                core_id=_or(_valid(r.core_id), core.of[c]),
                siblings=core.groups[core.of[c]],
                node=node_of[c],
                l1d=_cache_of(caches, c, 1, "Data", "Unified"),
                l1i=_cache_of(caches, c, 1, "Instruction"),
                l2=_cache_of(caches, c, 2, "Unified", "Data"),
                l3=_cache_of(caches, c, 3, "Unified", "Data"),
                base_freq_khz=r.base_freq or r.nominal_freq,
                min_freq_khz=r.min_freq,
                max_freq_khz=r.max_freq,
                capacity=r.capacity,
                core_type=kinds.core_types[c],
                kind=kinds.kind_of[c],
                isolated=c in isolated,
            )
        return cpus, self.cache_instances(caches)

    def cache_partitions(
        self, online: CPUSet, raw: Mapping[int, _CPURaw], grouping: _Grouping, core: _Partition
    ) -> dict[tuple[int, str], _CacheGroups]:
        """Caches: one partition per (level, type); ids from sysfs or lowest CPU."""
        parts: dict[tuple[int, str], _CacheGroups] = {}
        kinds = sorted({(k.level, k.kind) for r in raw.values() for k in r.caches})
        for level, kind in kinds:
            of_cpu: dict[int, _CacheRaw] = {}
            for c in online:
                for k in raw[c].caches:
                    if k.level == level and k.kind == kind:
                        of_cpu[c] = k
                        break
            covered = CPUSet(of_cpu)
            # An empty shared_cpu_map (IA64 kernels do this for L3) means the
            # cache is private to the core, as hwloc reads it.
            part = grouping.partition(
                covered,
                lambda c, m=of_cpu: m[c].shared or core.groups[core.of[c]],  # type: ignore[misc]
                lambda c: None,
                f"L{level} {kind.lower()} cache",
                (level, kind),
            )
            parts[(level, kind)] = _CacheGroups(part, self.cache_ids(part, of_cpu), of_cpu)
        return parts

    def cache_instances(self, parts: Mapping[tuple[int, str], _CacheGroups]) -> tuple[CacheInstance, ...]:
        caches: list[CacheInstance] = []
        for (level, kind), got in parts.items():
            for i, g in enumerate(got.part.groups):
                size = self.cache_size(got.of_cpu[g.first()])
                caches.append(CacheInstance(level=level, kind=kind, id=got.ids[i], cpus=g, size_bytes=size))
        caches.sort(key=lambda k: (k.level, k.kind, k.cpus.first()))
        return tuple(caches)

    # --- NUMA -----------------------------------------------------------------
    def read_nodes(
        self,
        online: CPUSet,
        raw: Mapping[int, _CPURaw],
    ) -> tuple[dict[int, NUMANode], dict[tuple[int, int], int], dict[int, int]]:
        """The NUMA nodes, their distances, and the node of each online CPU."""
        t = self.t
        node_dirs = t.numbered(NODE_DIR, "node")
        if not node_dirs:
            total = self.proc_memtotal()
            return (
                {0: NUMANode(0, online, total, MemoryKind.DRAM, None, "no NUMA information")},
                {(0, 0): 10},
                dict.fromkeys(online, 0),
            )
        online_nodes = t.cpulist(f"{NODE_DIR}/online")  # node lists share the CPU list format
        node_ids = self.online_node_ids(node_dirs, online_nodes)
        node_set = set(node_ids)
        listed: dict[int, CPUSet] = {}
        memory: dict[int, int] = {}
        for n in node_ids:
            d = f"{NODE_DIR}/node{n}"
            got = t.cpus_mask_first(f"{d}/cpumap", f"{d}/cpulist")
            listed[n] = got if got is not None else _EMPTY
            memory[n] = self.node_memtotal(n)
        # Which node each CPU is on: the node that lists it; where several (or
        # none) do, the cpuN/nodeM link decides.
        node_of: dict[int, int] = {}
        overlap = False
        holders_of: dict[int, list[int]] = {}
        for n in node_ids:
            for c in listed[n] & online:
                holders_of.setdefault(c, []).append(n)
        for c in online:
            holders = holders_of.get(c, [])
            if len(holders) == 1:
                node_of[c] = holders[0]
                continue
            linked = self.node_links(c)
            links = [n for n in linked if n in node_set]
            overlap = overlap or len(holders) > 1
            if len(links) == 1:
                node_of[c] = links[0]
            elif holders:
                node_of[c] = holders[0]
            else:
                node_of[c] = node_ids[0]
                gone = [n for n in linked if n not in node_set]
                if gone:
                    self.warn(
                        f"CPU {c} belongs to NUMA node {gone[0]} (link cpu{c}/node{gone[0]}), which is "
                        f"offline; put on node {node_of[c]}"
                    )
                else:
                    self.warn(
                        f"CPU {c} is in no NUMA node's cpumap and has no cpu{c}/nodeN link; "
                        f"put on node {node_of[c]}"
                    )
        if overlap:
            self.warn(
                "several NUMA nodes list the same CPUs (buggy firmware); such a CPU is on the node "
                "of its cpuN/nodeM link, else on the lowest node listing it"
            )
        on_node: dict[int, int] = dict.fromkeys(node_ids, 0)
        for c, n in node_of.items():
            on_node[n] |= 1 << c
        # A node's CPUs are its online CPUs, as in hwloc: look_sysfscpu (topology-linux.c) puts
        # only online CPUs in the root cpuset and the core cuts every object's cpuset, NUMA
        # nodes included, down to it. x86 cpumaps may still name offline CPUs; a node whose
        # CPUs are all offline is memory-only until they return.
        cpu_sets = {n: CPUSet.from_mask(on_node[n]) for n in node_ids}
        order = list(online_nodes) if online_nodes is not None else node_ids
        distances = self.read_distances(node_ids, order)
        kinds = self.memory_kinds(node_ids, cpu_sets, memory, distances)
        nodes: dict[int, NUMANode] = {}
        for n in node_ids:
            kind, reason, tier = kinds[n]
            nodes[n] = NUMANode(n, cpu_sets[n], memory[n], kind, tier, reason)
        return nodes, distances, node_of

    def online_node_ids(self, node_dirs: Mapping[int, str], online_nodes: CPUSet | None) -> list[int]:
        """The nodes to model: those in ``node/online`` (as hwloc reads them) that have a folder."""
        if online_nodes is None:
            return sorted(node_dirs)
        ids = [n for n in online_nodes if n in node_dirs]
        shown = self.t.shown(f"{NODE_DIR}/online")
        missing = [n for n in online_nodes if n not in node_dirs]
        if missing:
            self.warn(f"{shown} lists nodes {CPUSet(missing)} without a nodeN folder; they are left out")
        offline = sorted(set(node_dirs) - set(online_nodes))
        if not ids:
            self.warn(f"{shown} lists no node with a folder; every nodeN folder is used")
            return sorted(node_dirs)
        if offline:
            self.warn(
                f"NUMA nodes {CPUSet(offline)} have a folder but are not in {shown} (offline); left out"
            )
        return ids

    def node_memtotal(self, n: int) -> int:
        rel = f"{NODE_DIR}/node{n}/meminfo"
        text = self.t.text(rel)
        if text is None:
            self.warn(f"{self.t.shown(rel)} is missing; node {n} memory taken as 0")
            return 0
        for line in text.splitlines():
            parts = line.split()
            # "Node 0 MemTotal:       16384 kB"
            if len(parts) >= 4 and parts[2] == "MemTotal:":
                if not parts[3].isdigit():
                    raise TopologyError(self.t.shown(rel), "MemTotal is not a number", line)
                return int(parts[3]) * 1024
        raise TopologyError(self.t.shown(rel), "has no 'Node N MemTotal: X kB' line", text)

    def proc_memtotal(self) -> int:
        rel = "proc/meminfo"
        text = self.t.text(rel)
        if text is None:
            self.warn("no NUMA nodes and no proc/meminfo: memory size unknown (0)")
            return 0
        for line in text.splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] == "MemTotal:":
                if not parts[1].isdigit():
                    raise TopologyError(self.t.shown(rel), "MemTotal is not a number", line)
                return int(parts[1]) * 1024
        raise TopologyError(self.t.shown(rel), "has no 'MemTotal: X kB' line", text[:80])

    def read_distances(self, node_ids: list[int], order: list[int]) -> dict[tuple[int, int], int]:
        """SLIT rows, each in the order of ``node/online``; all rows or none.

        As hwloc does, a missing or short row drops the whole matrix (a partial
        one would mix measured and made-up distances); extra values are ignored.
        """
        t = self.t
        out: dict[tuple[int, int], int] = {}
        wanted = set(node_ids)
        for n in node_ids:
            rel = f"{NODE_DIR}/node{n}/distance"
            text = t.text(rel)
            if text is None:
                self.warn(f"{t.shown(rel)} is missing; no NUMA distances are used")
                return {}
            if not _DISTANCES.fullmatch(text):
                raise TopologyError(t.shown(rel), "expected distances (integers)", text)
            fields = text.split()
            if len(fields) < len(order):
                self.warn(
                    f"{t.shown(rel)} has {len(fields)} distances for {len(order)} online nodes; "
                    "no NUMA distances are used"
                )
                return {}
            for m, v in zip(order, fields, strict=False):
                if m in wanted:
                    out[(n, m)] = int(v)
        return out

    def memory_kinds(
        self,
        node_ids: list[int],
        cpu_sets: Mapping[int, CPUSet],
        memory: Mapping[int, int],
        distances: Mapping[tuple[int, int], int],
    ) -> dict[int, tuple[MemoryKind, str, int | None]]:
        t = self.t
        tiers: dict[int, int] = {}
        for tier, name in sorted(t.numbered(TIER_DIR, "memory_tier").items()):
            nl = t.cpulist(f"{TIER_DIR}/{name}/nodelist")
            for n in nl or ():
                tiers.setdefault(n, tier)
        dax = _dax_nodes(self)
        cxl_present = bool(t.listdir(CXL_DIR))
        gpus = self.gpu_memory_nodes()
        mcdram: list[int] = []
        if is_knl(t.text("proc/cpuinfo") or ""):
            mcdram = knl_mcdram_nodes(node_ids, [n for n in node_ids if not cpu_sets[n]], distances)
        # Fake NUMA (numa=fake=) splits nodes without updating HMAT, so hwloc (2.10 and
        # later) ignores HMAT then; so does topodra.
        fake_numa = "numa=fake=" in (t.text("proc/cmdline") or "")
        facts = []
        for n in node_ids:
            perf = {} if fake_numa else _hmat(self, n)
            rbw, wbw = perf.get("read_bandwidth"), perf.get("write_bandwidth")
            dk = dax.get(n)
            facts.append(
                NodeMemoryFacts(
                    id=n,
                    has_cpus=bool(cpu_sets[n]),
                    memory_bytes=memory[n],
                    tier=tiers.get(n),
                    dax=dk[0] if dk else "",
                    dax_cxl=dk[1] if dk else False,
                    dax_evidence=dk[2] if dk else "",
                    bandwidth=(rbw + wbw) // 2 if rbw and wbw else None,
                    read_bandwidth=rbw,
                    read_latency=perf.get("read_latency"),
                    memory_side_cache=t.isdir(f"{NODE_DIR}/node{n}/memory_side_cache"),
                    gpu=gpus.get(n, ""),
                    mcdram=n in mcdram,
                )
            )
        got = classify_memory(facts, cxl_present)
        return {n: (got[n][0], got[n][1], tiers.get(n)) for n in node_ids}

    def gpu_memory_nodes(self) -> dict[int, str]:
        """NUMA nodes that hold NVIDIA GPU memory, with the GPU's PCI address.

        The driver's ``proc/driver/nvidia/gpus/<bus>/numa_status`` says
        ``Node: N`` (POWER9 and Grace systems); hwloc reads the same file.
        """
        out: dict[int, str] = {}
        for bus in sorted(self.t.listdir(NVIDIA_DIR)):
            rel = f"{NVIDIA_DIR}/{bus}/numa_status"
            text = self.t.text(rel)
            for line in (text or "").splitlines():
                key, _, value = line.partition(":")
                if key.strip() == "Node":
                    if value.strip().isdigit() and value.strip().isascii():
                        out.setdefault(int(value), bus)
                    else:
                        self.warn(f"ignored: {self.t.shown(rel)}: not a node number ({line!r})")
                    break
        return out


# --- helpers ------------------------------------------------------------------------


def _hmat(r: _Reader, n: int) -> dict[str, int]:
    """HMAT figures of node ``n`` from its best CPU initiators (0 = unknown is left out).

    access1 ranks CPU initiators only; access0 may rank a generic initiator
    (an accelerator) first. hwloc reads access1, else access0.
    """
    d = f"{NODE_DIR}/node{n}"
    access = "access1" if r.t.isdir(f"{d}/access1/initiators") else "access0"
    out: dict[str, int] = {}
    for name in ("read_bandwidth", "write_bandwidth", "read_latency"):
        value = r.soft_int(f"{d}/{access}/initiators/{name}")
        if value:
            out[name] = value
    return out

def _dax_nodes(r: _Reader) -> dict[int, tuple[str, bool, str]]:
    """Nodes of kmem-bound DAX devices: hwloc's DAXType ("NVM" on an NVDIMM bus, else
    "SPM"), whether the device is on a CXL region, and the evidence."""
    t = r.t
    root = t.realpath(".")
    out: dict[int, tuple[str, bool, str]] = {}
    for name in sorted(t.listdir(DAX_DIR)):
        target = r.soft_int(f"{DAX_DIR}/{name}/target_node")
        if target is None or target < 0 or not t.exists(f"sys/bus/dax/drivers/kmem/{name}"):
            continue
        path = os.path.relpath(t.realpath(f"{DAX_DIR}/{name}"), root)
        dax_type = "NVM" if "ndbus" in path else "SPM"
        cxl = any(p.startswith(("ACPI0017", "decoder", "cxl")) for p in path.split("/"))
        where = (
            "an NVDIMM region" if dax_type == "NVM" else "a CXL region" if cxl else "soft-reserved memory"
        )
        out.setdefault(target, (dax_type, cxl, f"DAX device {name} on {where} (kmem)"))
    return out



def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def _lowest_bit(mask: int) -> int:
    return mask & -mask


def _valid(ident: int | None) -> int | None:
    """A sysfs id, or None for the kernel's "no such level" value -1."""
    return ident if ident is not None and ident >= 0 else None


def _known(values: Mapping[int, int | None]) -> dict[int, int]:
    """The CPUs that have a value."""
    return {c: v for c, v in values.items() if v is not None}


def _share_core_values(raw: Mapping[int, _CPURaw], rep: int, core: int) -> None:
    """Copy the frequencies and capacity read at ``rep`` to the other CPUs of its core."""
    src = raw[rep]
    for m in CPUSet.from_mask(core & ~(1 << rep)):
        r = raw[m]
        r.base_freq, r.min_freq, r.max_freq = src.base_freq, src.min_freq, src.max_freq
        r.capacity, r.nominal_freq = src.capacity, src.nominal_freq


def _parse_size(text: str) -> int | None:
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    body, unit = (text[:-1], text[-1].upper()) if text and text[-1].upper() in mult else (text, "")
    if not body.isdigit() or not body.isascii():
        return None
    return int(body) * mult.get(unit, 1)
