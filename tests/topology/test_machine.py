"""The one machine loader: every form reads the machine it names, bad names fail in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from testkit.sysfs_writer import write_sysfs

from topodra.topology import read_topology, synthetic_topology
from topodra.topology.errors import TopologyError
from topodra.topology.fixtures import unpacked_fixture
from topodra.topology.machine import MachineSpecError, load_machine, machine_label

HYBRID = "20em64t-hybrid-1p6c2t+2ca4co1t"


def test_synthetic_forms_agree() -> None:
    assert load_machine("synthetic:2s1d1n1l2c2t") == synthetic_topology("2s1d1n1l2c2t")
    assert load_machine("2s1d1n1l2c2t") == synthetic_topology("2s1d1n1l2c2t")


def test_fixture_forms_agree() -> None:
    expected = read_topology(unpacked_fixture(HYBRID))
    assert load_machine(f"fixture:{HYBRID}") == expected
    assert load_machine(HYBRID) == expected


def test_directory_and_host_root(tmp_path: Path) -> None:
    topo = synthetic_topology("1s1d1n1l2c2t")
    write_sysfs(topo, tmp_path)
    assert load_machine(str(tmp_path)).online == topo.online
    assert load_machine(None, host_root=tmp_path).online == topo.online
    assert load_machine("host", host_root=tmp_path).online == topo.online


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("no-such-machine", "not 'host', a directory, a machine spec"),
        ("fixture:no-such-machine", "no such fixture"),
        ("-8", "cannot be negative"),
        ("synthetic:2x", "invalid machine spec"),
        ("fixture:", "invalid fixture name"),
        ("/nonexistent/dir", "topology '/nonexistent/dir': no such directory"),
    ],
)
def test_bad_specs_are_one_line_errors(spec: str, needle: str) -> None:
    with pytest.raises(MachineSpecError) as info:
        load_machine(spec)
    assert isinstance(info.value, TopologyError)
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


def test_labels() -> None:
    assert machine_label(None) == "this machine"
    assert machine_label("2s1d1n1l2c2t") == "synthetic:2s1d1n1l2c2t"
    assert machine_label(HYBRID) == f"fixture:{HYBRID}"
    assert machine_label("/host") == "sysfs at /host"
