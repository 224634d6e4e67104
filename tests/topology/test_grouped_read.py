"""One read per core, cluster, die, package and cache instance, with the same result.

The reader asks the lowest CPU of each group for the group's sibling mask, ids,
cache files and frequencies (issue 15 item 3). These tests pin down that it
reads that little on a kernel-shaped tree, and that its answer is exactly what
reading every CPU gives, on every recorded machine and on made-up trees of
every style; trees that are not consistent fall back to reading every CPU.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from testkit.sysfs_writer import TreeStyle, write_sysfs

from topodra.topology import Topology, read_topology, synthetic_topology
from topodra.topology import sysfs as sysfs_mod
from topodra.topology.fixtures import fixture_names, unpacked_fixture
from topodra.topology.sysfs_tree import SysfsTree

CPU = "sys/devices/system/cpu"


def _per_cpu(root: Path) -> Topology:
    """The reading that asks every CPU (what the reader falls back to)."""
    reader = sysfs_mod._Reader(SysfsTree(root))
    reader.read_grouped = lambda online: None  # type: ignore[method-assign]
    return reader.read()


def _grouped_applies(root: Path) -> bool:
    reader = sysfs_mod._Reader(SysfsTree(root))
    return reader.read_grouped(read_topology(root).online) is not None


@pytest.mark.parametrize("name", fixture_names())
def test_fixture_reads_the_same_as_per_cpu(name: str) -> None:
    root = unpacked_fixture(name)
    assert read_topology(root) == _per_cpu(root)


def test_most_fixtures_take_the_grouped_path() -> None:
    names = fixture_names()
    fast = [n for n in names if _grouped_applies(unpacked_fixture(n))]
    # the hand-edited conflict trees must not: their masks overlap
    assert "40intel64-4n10c+pci-conflicts" not in fast
    assert len(fast) >= len(names) - 3


STYLES = [
    TreeStyle(),
    TreeStyle(caches=False),
    TreeStyle(cpufreq=False),
    TreeStyle(die_cluster_files=False),
    TreeStyle(list_files=False),
    TreeStyle(sibling_masks=False),
    TreeStyle(online_file=False),
]


@pytest.mark.parametrize("spec", ["1s1d2n1l2c2t", "2s2d1n2l3c2t", "1s1d1n2l4c1t4e+hbm"])
@pytest.mark.parametrize(
    "style", STYLES, ids=lambda s: ",".join(k for k, v in vars(s).items() if not v) or "full"
)
def test_synthetic_reads_the_same_as_per_cpu(fast_tmp: Path, spec: str, style: TreeStyle) -> None:
    root = write_sysfs(synthetic_topology(spec), fast_tmp / "root", style)
    assert read_topology(root) == _per_cpu(root)


def test_one_read_per_core_and_per_cache_instance(fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = synthetic_topology("2s1d2n2l4c2t")  # 64 CPUs, 32 cores, 8 L3
    root = write_sysfs(t, fast_tmp / "root")
    reads: Counter[str] = Counter()
    text = SysfsTree.text

    def counting(self: SysfsTree, rel: str) -> str | None:
        reads[re.sub(r"\d+", "N", rel)] += 1
        return text(self, rel)

    monkeypatch.setattr(SysfsTree, "text", counting)
    got = read_topology(root)
    assert len(got.cpus) == 64
    cores, l3s = len({i.core for i in t.cpus.values()}), len(t.l3_groups())
    assert reads[f"{CPU}/cpuN/topology/core_cpus"] == cores
    assert reads[f"{CPU}/cpuN/topology/package_cpus"] == 2
    assert reads[f"{CPU}/cpuN/cpufreq/cpuinfo_max_freq"] == cores
    # L1d, L1i and L2 per core, L3 per instance
    assert reads[f"{CPU}/cpuN/cache/indexN/shared_cpu_map"] == 3 * cores + l3s
    assert reads[f"{CPU}/cpuN/cache/indexN/level"] == 4  # once per index
    assert sum(reads.values()) < 12 * len(t.cpus)


def test_a_mask_that_overlaps_an_earlier_group_reads_every_cpu(fast_tmp: Path) -> None:
    root = write_sysfs(synthetic_topology("1s1d1n1l4c2t"), fast_tmp / "root")
    # CPU 2's core now claims CPU 1 too (CPU 1's core is {1, 5})
    (root / CPU / "cpu2/topology/core_cpus").write_text("00000000,00000046\n")
    assert not _grouped_applies(root)
    t = read_topology(root)
    assert t == _per_cpu(root)
    assert any("core sibling lists disagree" in w for w in t.warnings)
