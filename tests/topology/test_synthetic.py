"""The synthetic machine generator builds consistent topologies."""

from __future__ import annotations

import pytest

from topodra.cpuset import CPUSet
from topodra.topology import CoreType, MachineSpec, MemoryKind, synthetic_topology
from topodra.topology.synthetic import SpecError


def test_two_socket_server() -> None:
    t = synthetic_topology("2s1d2n2l8c2t")
    assert len(t.cpus) == 128
    assert t.packages() == [0, 1]
    assert t.numa_nodes() == [0, 1, 2, 3]
    assert len(t.l3_groups()) == 8
    assert len(t.cores()) == 64
    assert t.threads_per_core == 2
    # Linux-style numbering: CPU n and n+64 are SMT siblings.
    assert t.siblings(0) == CPUSet([0, 64])
    assert t.cpus_of_node(0) == CPUSet.parse("0-15,64-79")
    assert t.distance(0, 1) == 12
    assert t.distance(0, 2) == 32
    assert not t.hybrid


def test_hybrid_and_memory_only() -> None:
    t = synthetic_topology("1s6c2t8e+hbm")
    assert t.hybrid
    assert len(t.cpus_of_type(CoreType.P_CORE)) == 12
    assert len(t.cpus_of_type(CoreType.E_CORE)) == 8
    e = t.cpus_of_type(CoreType.E_CORE)
    assert all(len(t.siblings(c)) == 1 for c in e)
    # E-cores share an L2 in clusters of four.
    assert sorted(len(t.cpus_of_l2(t.cpu(c).l2 or 0)) for c in e)[0] == 4
    assert t.memory_only_nodes() == [1]
    assert t.nodes[1].kind is MemoryKind.HBM
    assert t.closest_cpu_node(1) == 0


def test_spec_parse_errors_name_the_problem() -> None:
    assert MachineSpec.parse("2s4c").cpu_count == 16
    with pytest.raises(SpecError, match="invalid machine spec"):
        MachineSpec.parse("2x")
    with pytest.raises(SpecError, match="repeats"):
        MachineSpec.parse("2s2s")
    with pytest.raises(SpecError, match="memory kind"):
        MachineSpec.parse("2s+dram2")
    with pytest.raises(SpecError, match="at least 1"):
        MachineSpec(sockets=0)
