"""Random machines written as sysfs trees read back to the same structure.

Each example builds a synthetic machine, renumbers its CPUs sparsely, takes
some offline, isolates some, writes it with a random mix of what old kernels,
containers and VMs leave out, and checks read_topology recovers it.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Mapping

from hypothesis import given
from hypothesis import strategies as st
from testkit.sysfs_writer import TreeStyle, format_hexmask, write_sysfs

from topodra.cpuset import CPUSet, parse_hexmask
from topodra.topology import (
    CacheInstance,
    CoreType,
    CoreTypeSource,
    MachineSpec,
    MemoryKind,
    NUMANode,
    Topology,
    read_topology,
    synthetic_topology,
)

from .conftest import FAST_TMP


def relabel(t: Topology, new: Mapping[int, int]) -> Topology:
    """The same machine with CPU c renamed new[c]."""

    def m(s: CPUSet) -> CPUSet:
        return CPUSet(new[c] for c in s)

    cpus = {new[c]: dataclasses.replace(i, id=new[c], siblings=m(i.siblings)) for c, i in t.cpus.items()}
    nodes = {n: dataclasses.replace(node, cpus=m(node.cpus)) for n, node in t.nodes.items()}
    caches = tuple(dataclasses.replace(k, cpus=m(k.cpus)) for k in t.caches)
    return dataclasses.replace(
        t,
        cpus=dict(sorted(cpus.items())),
        nodes=nodes,
        caches=caches,
        possible=m(t.possible),
        present=m(t.present),
        online_cpus=m(t.online_cpus),
    )


def take_offline(t: Topology, off: CPUSet, isolated: CPUSet) -> Topology:
    """Offline CPUs leave ``cpus`` and every sibling set, as the kernel does."""
    online = t.online - off
    cpus = {
        c: dataclasses.replace(i, siblings=i.siblings & online, isolated=c in isolated)
        for c, i in t.cpus.items()
        if c in online
    }
    caches = tuple(dataclasses.replace(k, cpus=k.cpus & online) for k in t.caches if k.cpus & online)
    return dataclasses.replace(t, cpus=cpus, caches=caches, online_cpus=online, isolated=isolated & online)


@st.composite
def machines(draw: st.DrawFn) -> tuple[Topology, TreeStyle]:
    spec = MachineSpec(
        sockets=draw(st.integers(1, 2)),
        dies_per_socket=draw(st.integers(1, 2)),
        numa_per_die=draw(st.integers(1, 2)),
        l3_per_numa=draw(st.integers(1, 2)),
        cores_per_l3=draw(st.integers(1, 3)),
        threads_per_core=draw(st.integers(1, 2)),
        e_cores_per_l3=draw(st.sampled_from([0, 0, 4])),
        memory_only=tuple(draw(st.lists(st.sampled_from(list(MemoryKind)[1:]), max_size=2, unique=True))),
        smt_numbering=draw(st.sampled_from(["spread", "adjacent"])),
    )
    t = synthetic_topology(spec)
    n = len(t.cpus)
    gaps = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    ids, nxt = [], 0
    for g in gaps:
        nxt += g
        ids.append(nxt)
        nxt += 1
    order = draw(st.permutations(ids))
    t = relabel(t, dict(zip(sorted(t.cpus), order, strict=True)))
    off = CPUSet(draw(st.lists(st.sampled_from(sorted(t.cpus)), max_size=n - 1, unique=True)))
    isolated = CPUSet(draw(st.lists(st.sampled_from(sorted(t.cpus)), max_size=3, unique=True)))
    t = take_offline(t, off, isolated)
    style = TreeStyle(
        caches=draw(st.booleans()),
        cpufreq=draw(st.booleans()),
        numa=draw(st.booleans()),
        die_cluster_files=draw(st.booleans()),
        dies_and_clusters=draw(st.booleans()),
        list_files=draw(st.booleans()),
        sibling_masks=draw(st.booleans()),
        online_file=draw(st.booleans()),
        core_type_evidence=draw(st.sampled_from(["pmu", "capacity", "cppc", "frequency"])),
        memory_evidence=draw(st.booleans()),
    )
    return t, style


def partition(t: Topology, groups: list[int], of: str) -> set[CPUSet]:
    return {getattr(t, f"cpus_of_{of}")(g) for g in groups}


@given(machines())
def test_written_tree_reads_back(case: tuple[Topology, TreeStyle]) -> None:
    want, style = case
    with tempfile.TemporaryDirectory(dir=FAST_TMP) as root:
        write_sysfs(want, root, style)
        got = read_topology(root)
    assert got.online == want.online
    assert got.offline == want.offline
    assert got.isolated == want.isolated
    assert all(got.cpu(c).isolated == (c in want.isolated) for c in got.cpus)
    assert partition(got, got.packages(), "package") == partition(want, want.packages(), "package")
    assert partition(got, got.cores(), "core") == partition(want, want.cores(), "core")
    assert all(got.siblings(c) == want.siblings(c) for c in want.cpus)
    if style.die_cluster_files and style.dies_and_clusters:
        assert partition(got, got.dies(), "die") == partition(want, want.dies(), "die")
    elif style.die_cluster_files:  # the kernel says "no dies": one per package
        assert all(
            got.cpus_of_die(got.cpu(c).die) == got.cpus_of_package(got.cpu(c).package) for c in got.cpus
        )
    if style.caches:
        assert partition(got, got.l2_groups(), "l2") == partition(want, want.l2_groups(), "l2")
        assert partition(got, got.l3_groups(), "l3") == partition(want, want.l3_groups(), "l3")
        assert {(k.level, k.kind, k.cpus, k.id) for k in got.caches} == {
            (k.level, k.kind, k.cpus, k.id) for k in want.caches
        }
    else:
        assert got.l2_groups() == []
        assert got.caches == ()
    if style.cpufreq:
        assert all(got.cpu(c).max_freq_khz == want.cpu(c).max_freq_khz for c in want.cpus)
    else:
        assert all(got.cpu(c).max_freq_khz is None for c in got.cpus)
    # Core types and kinds: P/E recovered from the evidence hwloc reads (PMU lists, capacity,
    # cpufreq); CPPC highest_perf alone is not read, as hwloc does not.
    if want.hybrid and (style.core_type_evidence in ("pmu", "capacity") or style.cpufreq):
        assert got.cpus_of_type(CoreType.P_CORE) == want.cpus_of_type(CoreType.P_CORE)
        assert got.cpus_of_type(CoreType.E_CORE) == want.cpus_of_type(CoreType.E_CORE)
        assert got.cpu_kinds() == want.cpu_kinds()
        assert got.core_type_source is not CoreTypeSource.NONE
    else:
        assert got.core_types() == [CoreType.STANDARD]
        assert got.cpu_kinds() == [got.online]
    # NUMA: nodes, their CPUs, memory, distances and memory kinds.
    total = sum(n.memory_bytes for n in want.nodes.values())
    if style.numa:
        assert got.numa_nodes() == want.numa_nodes()
        for n in want.nodes.values():
            g: NUMANode = got.nodes[n.id]
            assert g.cpus & got.online == n.cpus & want.online
            assert g.memory_bytes == n.memory_bytes
            if style.memory_evidence or n.kind is MemoryKind.DRAM:
                assert g.kind is n.kind, (n, g)
            else:  # nothing in the tree says what it is: the kernel's default tier
                assert g.kind is MemoryKind.DRAM, (n, g)
        assert all(got.distance(a, b) == want.distance(a, b) for a in want.nodes for b in want.nodes)
        assert all(got.cpu(c).node == want.cpu(c).node for c in want.cpus)
    else:
        assert got.numa_nodes() == [0]
        assert got.nodes[0].memory_bytes == total
        assert got.cpus_of_node(0) == want.online


def test_hexmask_format_matches_the_kernel() -> None:
    assert format_hexmask(CPUSet.parse("0-3")) == "00000000,0000000f"
    assert format_hexmask(CPUSet([64])) == "00000001,00000000,00000000"
    assert parse_hexmask(format_hexmask(CPUSet.parse("1,5,200-203"))) == CPUSet.parse("1,5,200-203")


def test_cache_instance_type_is_what_the_writer_writes() -> None:
    # Guard for the round trip: the writer writes CacheInstance.kind verbatim.
    assert {k.kind for k in synthetic_topology("1s2c2t").caches} <= {"Data", "Instruction", "Unified"}
    assert CacheInstance(1, "Data", 0, CPUSet([0])).kind == "Data"
