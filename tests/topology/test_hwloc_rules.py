"""hwloc's Linux rules, one tree per rule (docs/topology.md, "Rule by rule").

Each test writes a kernel-shaped tree with sysfs_writer, changes what the rule
is about, and checks topodra reads it as hwloc's topology-linux.c does (or,
where the docs say the difference is deliberate, as documented).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

from testkit.sysfs_writer import TreeStyle, format_hexmask, with_offline, write_sysfs

from topodra.cpuset import CPUSet
from topodra.topology import MemoryKind, read_topology, synthetic_topology
from topodra.topology.serialize import topology_from_dict, topology_to_dict

CPU = "sys/devices/system/cpu"
NODE = "sys/devices/system/node"
MASKS_ONLY = TreeStyle(list_files=False)


def put(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text + "\n")


def test_lone_die_and_cluster_masks_do_not_split_smt_cores(fast_tmp: Path) -> None:
    # Architectures without dies or clusters (ppc64 SMT8, s390) print each
    # CPU alone in die_cpus/cluster_cpus and -1 as the id; hwloc ignores a die
    # or cluster of one PU ("die with single PU ... ignore the die").
    t = synthetic_topology("1s1d1n1l4c2t")
    root = write_sysfs(t, fast_tmp / "root", MASKS_ONLY)
    for c in t.cpus:
        for name in ("die_cpus", "cluster_cpus"):
            put(root, f"{CPU}/cpu{c}/topology/{name}", format_hexmask(CPUSet([c])))
        for name in ("die_id", "cluster_id"):
            put(root, f"{CPU}/cpu{c}/topology/{name}", "-1")
    got = read_topology(root)
    assert [got.siblings(c) for c in sorted(got.cpus)] == [t.siblings(c) for c in sorted(t.cpus)]
    assert len({i.die for i in got.cpus.values()}) == 1
    # no cluster information: the L2 groups stand in, as without the files
    assert {got.cpus_of_cluster(i.cluster) for i in got.cpus.values()} == {
        k.cpus for k in got.caches if k.level == 2
    }
    # die_id -1 is "no die", and the snapshot form takes it back
    assert {i.die_id for i in got.cpus.values()} == {0}
    assert topology_from_dict(topology_to_dict(got)) == got


def test_lone_cluster_masks_with_real_ids_group_by_id(fast_tmp: Path) -> None:
    # x86 without SMT: cluster_cpus is the CPU alone, cluster_id the L2 id.
    t = synthetic_topology("1s1d1n1l4c1t")
    root = write_sysfs(t, fast_tmp / "root", MASKS_ONLY)
    for c in t.cpus:
        put(root, f"{CPU}/cpu{c}/topology/cluster_cpus", format_hexmask(CPUSet([c])))
        put(root, f"{CPU}/cpu{c}/topology/cluster_id", str(c // 2))
    got = read_topology(root)
    assert {got.cpus_of_cluster(i.cluster) for i in got.cpus.values()} == {CPUSet([0, 1]), CPUSet([2, 3])}


def test_package_id_minus_one_without_masks_is_one_package(fast_tmp: Path) -> None:
    t = synthetic_topology("1s1d1n1l4c1t")
    root = write_sysfs(t, fast_tmp / "root", TreeStyle(sibling_masks=False, die_cluster_files=False))
    for c in t.cpus:
        put(root, f"{CPU}/cpu{c}/topology/physical_package_id", "-1")
        put(root, f"{CPU}/cpu{c}/topology/core_id", "-1")
    got = read_topology(root)
    assert got.cpus_of_package(got.cpu(0).package) == got.online
    assert all(got.siblings(c) == CPUSet([c]) for c in got.cpus)  # -1 is no core id, not one big core
    assert topology_from_dict(topology_to_dict(got)) == got


def test_cpu_of_an_offline_node_is_named_as_such(fast_tmp: Path) -> None:
    t = synthetic_topology("1s1d2n1l2c2t")
    root = write_sysfs(t, fast_tmp / "root")
    gone = t.cpus_of_node(1)
    shutil.rmtree(root / NODE / "node1")  # the kernel removes an offline node's folder
    put(root, f"{NODE}/online", "0")
    got = read_topology(root)
    assert got.numa_nodes() == [0]
    c = gone.first()
    assert (
        f"CPU {c} belongs to NUMA node 1 (link cpu{c}/node1), which is offline; put on node 0" in got.warnings
    )
    assert not any("has no" in w and "link" in w for w in got.warnings)
    assert got.cpus_of_node(0) == got.online


def test_nodes_come_from_node_online_as_in_hwloc(fast_tmp: Path) -> None:
    t = synthetic_topology("1s1d2n1l2c2t+hbm")
    root = write_sysfs(t, fast_tmp / "root")
    hbm = max(t.nodes)
    put(root, f"{NODE}/online", "0-1")
    got = read_topology(root)
    assert got.numa_nodes() == [0, 1]
    assert any(f"NUMA nodes {hbm} have a folder but are not in" in w for w in got.warnings)
    # distance rows hold a value per online node: the extra column is ignored
    assert got.distances[(0, 1)] == t.distances[(0, 1)]


def test_hmat_reads_access1_before_access0(fast_tmp: Path) -> None:
    # Linux 5.10+: access0 ranks the best initiator, which may be a generic
    # initiator (an accelerator); access1 ranks CPUs only. hwloc reads access1.
    t = synthetic_topology("1s1d1n1l2c2t")
    root = write_sysfs(t, fast_tmp / "root")
    node1 = root / NODE / "node1"
    put(root, f"{NODE}/node1/cpumap", "0")
    put(root, f"{NODE}/node1/meminfo", "Node 1 MemTotal:       67108864 kB")
    put(root, f"{NODE}/online", "0-1")
    put(root, f"{NODE}/node0/distance", "10 20")
    put(root, f"{NODE}/node1/distance", "20 10")
    for node, access, bw, lat in (
        (0, "access1", 100_000, 90),
        (1, "access0", 400_000, 40),
        (1, "access1", 100_000, 95),
    ):
        put(root, f"{NODE}/node{node}/{access}/initiators/read_bandwidth", str(bw))
        put(root, f"{NODE}/node{node}/{access}/initiators/read_latency", str(lat))
    assert node1.is_dir()
    got = read_topology(root)
    assert got.nodes[1].kind is MemoryKind.DRAM, got.nodes[1].kind_reason
    # with only access0 (older kernels) the generic initiator's view is all there is
    shutil.rmtree(node1 / "access1")
    assert read_topology(root).nodes[1].kind is MemoryKind.HBM


def test_nvidia_gpu_memory_nodes_are_hbm(fast_tmp: Path) -> None:
    t = synthetic_topology("1s1d1n1l2c2t+hbm")
    root = write_sysfs(t, fast_tmp / "root", TreeStyle(memory_evidence=False))
    gpu_node = max(t.nodes)
    assert read_topology(root).nodes[gpu_node].kind is MemoryKind.DRAM  # nothing says otherwise
    put(root, "proc/driver/nvidia/gpus/0004:04:00.0/numa_status", f"Node:      {gpu_node}\nStatus:    online")
    got = read_topology(root).nodes[gpu_node]
    assert got.kind is MemoryKind.HBM
    assert "NVIDIA GPU 0004:04:00.0" in got.kind_reason


def test_memory_only_node_without_evidence_is_dram_whatever_its_size(fast_tmp: Path) -> None:
    t = synthetic_topology("2s1d1n1l2c2t+hbm")  # small CPU-less nodes
    root = write_sysfs(t, fast_tmp / "root", TreeStyle(memory_evidence=False))
    got = read_topology(root)
    assert {got.nodes[n].kind for n in got.memory_only_nodes()} == {MemoryKind.DRAM}
    assert os.path.isdir(root / NODE)


def test_a_cache_without_type_is_unified(fast_tmp: Path) -> None:
    t = synthetic_topology("1s1d1n1l2c2t")
    root = write_sysfs(t, fast_tmp / "root")
    for c in t.cpus:
        os.remove(root / CPU / f"cpu{c}/cache/index3/type")  # the L3
    got = read_topology(root)
    assert [(k.level, k.kind) for k in got.caches if k.level == 3] == [(3, "Unified")]
    assert got.cpu(0).l3 is not None


def test_fake_numa_ignores_hmat(fast_tmp: Path) -> None:
    t = synthetic_topology("1s1d1n1l2c2t")
    root = write_sysfs(t, fast_tmp / "root")
    put(root, f"{NODE}/node1/cpumap", "0")
    put(root, f"{NODE}/node1/meminfo", "Node 1 MemTotal:       67108864 kB")
    put(root, f"{NODE}/online", "0-1")
    put(root, f"{NODE}/node0/distance", "10 20")
    put(root, f"{NODE}/node1/distance", "20 10")
    for node, bw in ((0, 100_000), (1, 400_000)):
        put(root, f"{NODE}/node{node}/access1/initiators/read_bandwidth", str(bw))
    assert read_topology(root).nodes[1].kind is MemoryKind.HBM
    put(root, "proc/cmdline", "BOOT_IMAGE=/vmlinuz numa=fake=2 quiet")
    assert read_topology(root).nodes[1].kind is MemoryKind.DRAM


def test_node_cpumap_naming_offline_cpus_keeps_only_online_ones(fast_tmp: Path) -> None:
    # x86 cpumaps may still list offline CPUs; hwloc's node cpuset is its online CPUs only
    # (lstopo-no-graphics 2.9.0 on this tree: NUMANode P#0 cpuset 0-1, NUMANode P#1 with
    # no PU below it), so a node whose CPUs are all offline is memory-only.
    t = synthetic_topology("1s1d2n1l2c2t")
    off = with_offline(t, CPUSet([2, 3, 4, 5, 6, 7]))
    off = dataclasses.replace(off, nodes={n: dataclasses.replace(x, cpus=t.nodes[n].cpus) for n, x in off.nodes.items()})
    root = write_sysfs(off, fast_tmp / "root")
    assert CPUSet.parse((root / NODE / "node1/cpulist").read_text().strip()) == t.nodes[1].cpus
    got = read_topology(root)
    assert got.nodes[0].cpus == CPUSet([0, 1])
    assert got.nodes[1].cpus == CPUSet()
    assert got.memory_only_nodes() == [1]
    assert got.closest_cpu_node(1) == 0
