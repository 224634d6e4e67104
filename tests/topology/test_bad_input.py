"""Broken trees: a clear error naming the file, or a documented fallback. Never a traceback."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from testkit.sysfs_writer import write_sysfs
from typer.testing import CliRunner

from topodra.cli import app
from topodra.cpuset import CPUSet
from topodra.topology import TopologyError, read_topology, synthetic_topology

CPU = "sys/devices/system/cpu"
NODE = "sys/devices/system/node"


@pytest.fixture
def tree(fast_tmp: Path) -> Path:
    """A healthy 2-node, 8-CPU machine."""
    return write_sysfs(synthetic_topology("1s1d2n1l2c2t"), fast_tmp / "root")


def put(root: Path, rel: str, content: str | bytes) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        p.write_bytes(content)
    else:
        p.write_text(content)


@pytest.mark.parametrize(
    ("rel", "content", "problem"),
    [
        (f"{CPU}/online", "0-3,x\n", "expected a CPU list"),
        (f"{CPU}/online", "7-2\n", "runs backwards"),
        (f"{CPU}/present", "0-99999\n", "exceeds"),
        (f"{CPU}/isolated", "one\n", "expected a CPU list"),
        # physical_package_id is read once per package: from its lowest CPU
        (f"{CPU}/cpu0/topology/physical_package_id", "zero\n", "expected an integer"),
        (f"{CPU}/cpu1/topology/core_id", "1.5\n", "expected an integer"),
        (f"{CPU}/cpu2/topology/core_cpus", "zz,00\n", "expected a hex CPU mask"),
        (f"{CPU}/cpu0/cache/index2/type", "Victim\n", "expected Data, Instruction or Unified"),
        (f"{CPU}/cpu0/cache/index0/level", "L1\n", "expected an integer"),
        (f"{NODE}/node1/cpumap", "not-hex\n", "expected a hex CPU mask"),
        (f"{NODE}/node1/meminfo", "Node 1 MemFree: 5 kB\n", "has no 'Node N MemTotal: X kB' line"),
        (f"{NODE}/node1/meminfo", "Node 1 MemTotal: lots kB\n", "MemTotal is not a number"),
        (f"{NODE}/node0/distance", "10 far\n", "expected distances"),
        (f"{CPU}/cpu3/topology/core_id", b"\xff\xfe1\n", "is not ASCII text"),
    ],
)
def test_garbage_names_the_file_and_content(tree: Path, rel: str, content: str | bytes, problem: str) -> None:
    put(tree, rel, content)
    with pytest.raises(TopologyError) as exc:
        read_topology(tree)
    err = exc.value
    assert err.path == str(tree / rel)
    assert problem in str(err)
    assert str(tree / rel) in str(err)


def test_a_directory_where_a_file_belongs(tree: Path) -> None:
    os.remove(tree / CPU / "online")
    (tree / CPU / "online").mkdir()
    with pytest.raises(TopologyError, match="expected a file, found a directory"):
        read_topology(tree)


def test_not_a_sysfs_root(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="not the root of a sysfs tree"):
        read_topology(tmp_path)


def test_no_online_cpu(tree: Path) -> None:
    put(tree, f"{CPU}/online", "\n")
    with pytest.raises(TopologyError, match="no online CPU"):
        read_topology(tree)


# --- documented fallbacks -----------------------------------------------------------


def test_informational_garbage_is_dropped_with_a_warning(tree: Path) -> None:
    put(tree, f"{CPU}/cpu1/cpufreq/cpuinfo_max_freq", "fast\n")
    put(tree, f"{CPU}/cpu0/cache/index3/size", "big\n")
    t = read_topology(tree)
    assert t.cpu(1).max_freq_khz is None
    assert t.cpu(0).max_freq_khz == 5_000_000
    assert any("cpuinfo_max_freq" in w and "fast" in w for w in t.warnings)
    assert any("index3/size" in w for w in t.warnings)


def test_a_short_distance_row_drops_the_whole_matrix(tree: Path) -> None:
    # hwloc's rule (hwloc_parse_nodes_distances): every row or none
    put(tree, f"{NODE}/node0/distance", "10\n")
    t = read_topology(tree)
    assert t.distances == {}
    assert t.distance(0, 1) == 20  # the model's default for unknown pairs
    assert any("has 1 distances for 2 online nodes; no NUMA distances are used" in w for w in t.warnings)


def test_extra_distance_values_are_ignored(tree: Path) -> None:
    before = read_topology(tree).distances
    put(tree, f"{NODE}/node0/distance", "10 12 14\n")
    t = read_topology(tree)
    assert t.distances == {**before, (0, 0): 10, (0, 1): 12}


def test_a_missing_distance_file_drops_the_whole_matrix(tree: Path) -> None:
    os.remove(tree / NODE / "node1" / "distance")
    t = read_topology(tree)
    assert t.distances == {}
    assert any("node1/distance is missing" in w for w in t.warnings)


def test_missing_meminfo_is_zero_memory(tree: Path) -> None:
    os.remove(tree / NODE / "node1" / "meminfo")
    t = read_topology(tree)
    assert t.nodes[1].memory_bytes == 0
    assert any("node1/meminfo is missing" in w for w in t.warnings)


def test_no_numa_folder_is_one_node_with_all_memory(tree: Path) -> None:
    shutil.rmtree(tree / NODE)
    t = read_topology(tree)
    assert t.numa_nodes() == [0]
    assert t.cpus_of_node(0) == t.online
    assert t.nodes[0].memory_bytes == 2 * 64 << 30
    assert t.nodes[0].kind_reason == "no NUMA information"


def test_no_numa_folder_and_no_meminfo(tree: Path) -> None:
    shutil.rmtree(tree / NODE)
    os.remove(tree / "proc" / "meminfo")
    t = read_topology(tree)
    assert t.nodes[0].memory_bytes == 0
    assert any("memory size unknown" in w for w in t.warnings)


def test_cpu_without_topology_folder(tree: Path) -> None:
    shutil.rmtree(tree / CPU / "cpu5" / "topology")
    t = read_topology(tree)
    # Nothing says CPU 5 shares a core, but the other CPUs still report it
    # in their package: it joins the package most CPUs put it in.
    assert t.siblings(5) == CPUSet([5])
    assert t.siblings(1) == CPUSet([1])
    assert t.cpus_of_package(t.cpu(5).package) == t.online
    assert any("core sibling lists disagree" in w for w in t.warnings)


def test_missing_caches_cpufreq_and_online_file(tree: Path) -> None:
    for c in range(8):
        shutil.rmtree(tree / CPU / f"cpu{c}" / "cache")
        shutil.rmtree(tree / CPU / f"cpu{c}" / "cpufreq")
    os.remove(tree / CPU / "online")
    put(tree, f"{CPU}/cpu6/online", "0\n")
    t = read_topology(tree)
    assert t.l3_groups() == []
    assert t.cpu(0).l3 is None
    assert t.cpu(0).max_freq_khz is None
    assert t.online == CPUSet.parse("0-5,7")


def test_online_cpu_without_folder_is_left_out(tree: Path) -> None:
    shutil.rmtree(tree / CPU / "cpu7")
    t = read_topology(tree)
    assert 7 not in t.cpus
    assert any("without a cpuN directory" in w for w in t.warnings)


def test_nohz_full_null_means_none(tree: Path) -> None:
    put(tree, f"{CPU}/nohz_full", "(null)\n")
    assert read_topology(tree).nohz_full == CPUSet()
    put(tree, f"{CPU}/nohz_full", "2-3\n")
    assert read_topology(tree).nohz_full == CPUSet([2, 3])


def test_trailing_nul_is_tolerated(tree: Path) -> None:
    put(tree, f"{NODE}/online", "0-1\n\x00")
    assert read_topology(tree).numa_nodes() == [0, 1]


def test_cpu_in_no_node_goes_to_the_lowest_node(tree: Path) -> None:
    put(tree, f"{NODE}/node0/cpumap", "00000000,00000000\n")
    put(tree, f"{NODE}/node0/cpulist", "\n")
    for c in range(8):
        for link in (tree / CPU / f"cpu{c}").glob("node*"):
            link.unlink()
    t = read_topology(tree)
    assert t.cpus_of_node(0) == t.online - t.cpus_of_node(1)
    assert any("is in no NUMA node's cpumap and has no cpu0/nodeN link" in w for w in t.warnings)


def test_cli_reports_the_file_not_a_traceback(tree: Path) -> None:
    put(tree, f"{CPU}/cpu0/topology/physical_package_id", "zero\n")
    r = CliRunner().invoke(app, ["topology", "--topology", str(tree)])
    assert r.exit_code == 1
    assert "physical_package_id" in r.output
    assert "'zero'" in r.output
    assert "Traceback" not in r.output
