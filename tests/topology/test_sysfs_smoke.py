"""read_topology on real trees: the structure hwloc's fixture names promise."""

from __future__ import annotations

import pytest

from topodra.cpuset import CPUSet
from topodra.topology import CoreType, CoreTypeSource, MemoryKind, read_topology
from topodra.topology.fixtures import fixture_names, unpacked_fixture


def test_hybrid_laptop_has_p_and_e_cores() -> None:
    t = read_topology(unpacked_fixture("20em64t-hybrid-1p6c2t+2ca4co1t"))
    assert len(t.cpus) == 20
    assert t.core_type_source is CoreTypeSource.BASE_FREQUENCY
    assert t.cpu_kinds() == [CPUSet.parse("12-19"), CPUSet.parse("0-11")]  # 5.0 and 5.2 GHz: one kind
    assert t.cpus_of_type(CoreType.P_CORE) == CPUSet.parse("0-11")
    assert t.cpus_of_type(CoreType.E_CORE) == CPUSet.parse("12-19")
    assert t.siblings(4) == CPUSet([4, 5])
    # E-cores: clusters of four sharing an L2.
    assert t.cpus_of_l2(t.cpu(12).l2 or 0) == CPUSet.parse("12-15")
    assert t.cpu(4).max_freq_khz == 5_200_000
    assert t.cpu(12).base_freq_khz == 1_400_000


def test_offline_cpus_are_out_of_the_model_but_in_the_sets() -> None:
    t = read_topology(unpacked_fixture("16em64t-4s2c2t-offlines"))
    assert t.offline == CPUSet([2, 5, 13, 14])
    assert 2 not in t.cpus
    assert len(t.packages()) == 4


def test_gpu_memory_nodes_are_memory_only_hbm() -> None:
    t = read_topology(unpacked_fixture("nvidiagpunumanodes"))
    assert t.memory_only_nodes() == [250, 251, 252, 253, 254, 255]
    assert all(t.nodes[n].kind is MemoryKind.HBM for n in t.memory_only_nodes())
    assert t.online == CPUSet.parse("0-15,88-103")


@pytest.mark.parametrize("name", fixture_names())
def test_every_fixture_reads(name: str) -> None:
    t = read_topology(unpacked_fixture(name))
    assert t.cpus
    covered = CPUSet()
    for p in t.packages():
        covered |= t.cpus_of_package(p)
    assert covered == t.online
