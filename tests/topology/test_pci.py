"""PCIe roots and their local CPUs (topology.pci): Kubernetes' root rule, hwloc's locality.

Checked three ways: hwloc's recorded trees against Debian's ``lstopo-no-graphics --whole-io``
(host bridges and the CPUs of the object each one hangs below), trees the testkit writer makes
in any shape, and the path rule case by case as upstream's ``pci_linux_test.go`` states it.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from testkit.sysfs_writer import with_offline, write_sysfs

from topodra.cpuset import CPUSet
from topodra.topology import hwloc as hw
from topodra.topology import read_topology, synthetic_topology, topology_from_dict, topology_to_dict
from topodra.topology.fixtures import fixture_dir, unpacked_fixture
from topodra.topology.model import PCIDevice, PCIRoot, Topology
from topodra.topology.pci import resolve_pcie_root

#: hwloc's trees with PCI devices linked into sys/devices (nvidiagpunumanodes has plain folders)
PCI_FIXTURES = [
    "2pa-pcidomain32bits",
    "32em64t-2n8c+dax+nvme+mic+dimms",
    "40intel64-2g2n4c+pcilocality",
    "40intel64-4n10c+pci-conflicts",
    "fakepcilocalities",
]
#: Debian's hwloc is built without 32-bit PCI domains: it drops domain 10000 (the recorded
#: console of a build with them lists it; test_domains_above_ffff_as_hwloc_recorded_them)
LIVE_MISSES = {"2pa-pcidomain32bits": {"pci10000:00"}}


def host_bridges(root: Path) -> dict[str, CPUSet]:
    """hwloc's host bridges of a tree (as pcieRoot names) and the CPUs of the object each hangs below."""
    _lstopo()
    cmd = [hw.LSTOPO, "--disallowed", "--whole-io", "--input", str(root), "--if", "fsroot", "--of", "xml", "-"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HWLOC_")}
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env, timeout=60).stdout
    found: dict[str, CPUSet] = {}

    def walk(el: ET.Element, cpus: CPUSet) -> None:
        for child in el.findall("object"):
            if child.get("type") == "Bridge" and child.get("bridge_type", "").startswith("0-"):
                domain, buses = str(child.get("bridge_pci")).split(":")
                found[f"pci{domain}:{buses[1:3]}"] = cpus
            own = child.get("cpuset")
            walk(child, hw.parse_hwloc_bitmap(own) if own else cpus)

    walk(ET.fromstring(out), CPUSet())
    return found


def _lstopo() -> None:
    assert hw.lstopo_available(), f"{hw.LSTOPO} is needed: apt-get install hwloc (.ci/run does)"


def roots(t: Topology) -> dict[str, CPUSet]:
    return {r.name: r.cpus for r in t.pci_roots}


@pytest.mark.parametrize("name", PCI_FIXTURES)
def test_fixture_roots_are_hwlocs_host_bridges_with_their_locality(name: str) -> None:
    root = unpacked_fixture(name)
    ours = roots(read_topology(root))
    theirs = host_bridges(root)
    missed = LIVE_MISSES.get(name, set())
    assert {k: v for k, v in ours.items() if k not in missed} == theirs
    assert missed <= set(ours)


def test_domains_above_ffff_as_hwloc_recorded_them() -> None:
    console = (fixture_dir() / "2pa-pcidomain32bits.console").read_text()
    recorded = {f"pci{d}:{b}" for d, b in re.findall(r"HostBridge L#\d+ \(buses=([0-9a-f]+):\[([0-9a-f]{2})-", console)}
    t = read_topology(unpacked_fixture("2pa-pcidomain32bits"))
    assert set(roots(t)) == recorded == {"pci0000:00", "pci10000:00"}
    # local_cpus (a mask) wins over local_cpulist, as hwloc reads them: this tree's lists say 0-1
    assert roots(t) == {"pci0000:00": CPUSet([0]), "pci10000:00": CPUSet([1])}


def test_roots_of_a_two_socket_server() -> None:
    t = read_topology(unpacked_fixture("32em64t-2n8c+dax+nvme+mic+dimms"))
    by_name = {r.name: r for r in t.pci_roots}
    assert [r.name for r in t.pci_roots] == ["pci0000:00", "pci0000:7f", "pci0000:80", "pci0000:ff"]
    assert by_name["pci0000:00"].nodes == (0,)
    assert by_name["pci0000:80"].nodes == (1,)
    # 7f and ff hold only the sockets' uncore registers: no device another driver publishes
    assert [r.has_endpoint for r in t.pci_roots] == [True, False, True, False]
    assert t.pcie_roots_of(0) == ("pci0000:00",)
    assert t.pcie_roots_of(15) == ("pci0000:80",)


def test_cpus_of_one_socket_serve_every_root_of_it() -> None:
    t = read_topology(unpacked_fixture("40intel64-2g2n4c+pcilocality"))
    assert t.pcie_roots_of(0) == t.pcie_roots_of(39) == ("pci0000:00", "pci0000:40")


def test_bus_entries_that_are_no_symlinks_have_no_root() -> None:
    t = read_topology(unpacked_fixture("nvidiagpunumanodes"))
    assert t.pci_roots == ()
    assert any("not symlinks into sys/devices/pci" in w and "0004:05:00.0" in w for w in t.warnings)


def test_a_machine_without_pci_devices_has_no_roots() -> None:
    t = read_topology(unpacked_fixture("8em64t-2s2ca2c"))
    assert t.pci_roots == ()
    assert t.pcie_roots_of(0) == ()


# --- trees of any shape ------------------------------------------------------------------------


def _with_roots(t: Topology, *new: PCIRoot) -> Topology:
    return dataclasses.replace(t, pci_roots=new)


def test_synthetic_pci_roots_write_read_back_and_match_hwloc(fast_tmp: Path) -> None:
    t = synthetic_topology("2s1d2n1l4c2t+pci")
    assert [r.name for r in t.pci_roots] == ["pci0000:00", "pci0000:20", "pci0000:40", "pci0000:60"]
    write_sysfs(t, fast_tmp)
    back = read_topology(fast_tmp)
    assert back.pci_roots == t.pci_roots
    assert host_bridges(fast_tmp) == {r.name: t.cpus_of_node(i) for i, r in enumerate(t.pci_roots)}


def test_many_nodes_take_the_next_domain() -> None:
    t = synthetic_topology("1s1d10n1l1c1t+pci")
    assert [r.name for r in t.pci_roots][7:] == ["pci0000:e0", "pci0001:00", "pci0001:20"]


def test_a_cpu_local_to_several_roots_and_the_fallbacks(fast_tmp: Path) -> None:
    base = synthetic_topology("1s1d2n1l2c1t")  # CPUs 0-1 on node 0, 2-3 on node 1
    nic = PCIDevice("0000:00:02.0", 0x020000, CPUSet([0, 1]), 0)
    t = _with_roots(
        base,
        PCIRoot("pci0000:00", CPUSet([0, 1]), (nic,), (0,)),
        # no local_cpus: its numa_node tells
        PCIRoot("pci0000:40", CPUSet([2, 3]), (PCIDevice("0000:40:00.0", 0x030200, None, 1),), (1,)),
        # nothing tells: every CPU, as hwloc attaches it to the machine
        PCIRoot("pci0000:80", CPUSet(range(4)), (PCIDevice("0000:80:00.0", 0x010802),), (), locality_known=False),
        # only a bridge: no endpoint
        PCIRoot("pci0000:c0", CPUSet([2, 3]), (PCIDevice("0000:c0:00.0", 0x060400, CPUSet([2, 3]), 1),), (1,)),
    )
    write_sysfs(t, fast_tmp)
    back = read_topology(fast_tmp)
    assert back.pci_roots == t.pci_roots
    assert back.pcie_roots_of(0) == ("pci0000:00", "pci0000:80")
    assert back.pcie_roots_of(3) == ("pci0000:40", "pci0000:80")
    # hwloc reads local_cpus only: a device without them is local to the whole machine there
    # (the kernel writes them for every PCI device, so only hand-made trees differ)
    assert host_bridges(fast_tmp) == {**roots(back), "pci0000:40": CPUSet(range(4))}


def test_local_cpulist_alone_and_offline_cpus(fast_tmp: Path) -> None:
    base = synthetic_topology("1s1d2n1l2c1t+pci")
    write_sysfs(with_offline(base, CPUSet([3])), fast_tmp)
    for dev in (fast_tmp / "sys/bus/pci/devices").iterdir():
        (dev / "local_cpus").unlink()  # an old kernel: the list only
    t = read_topology(fast_tmp)
    assert roots(t) == {"pci0000:00": CPUSet([0, 1]), "pci0000:20": CPUSet([2])}


def test_garbage_is_dropped_with_a_warning(fast_tmp: Path) -> None:
    write_sysfs(synthetic_topology("1s1d1n1l2c1t+pci"), fast_tmp)
    dev = fast_tmp / "sys/bus/pci/devices/0000:00:01.0"
    (dev / "class").write_text("VGA\n")
    (dev / "local_cpus").write_text("zz\n")
    (dev / "numa_node").write_text("x\n")
    t = read_topology(fast_tmp)
    (r,) = t.pci_roots
    assert r.devices[1] == PCIDevice("0000:00:01.0", None, None, None)
    assert r.cpus == CPUSet([0, 1])  # the host bridge still tells
    assert sum("0000:00:01.0" in w for w in t.warnings) == 3


def test_links_the_rule_refuses(fast_tmp: Path) -> None:
    write_sysfs(synthetic_topology("1s1d1n1l2c1t+pci"), fast_tmp)
    links = fast_tmp / "sys/bus/pci/devices"
    gpu = links / "0000:00:01.0"
    gpu.unlink()
    gpu.symlink_to(fast_tmp / "sys/devices/pci0000:00/0000:00:01.0")  # absolute
    t = read_topology(fast_tmp)
    assert [d.address for r in t.pci_roots for d in r.devices] == ["0000:00:00.0"]
    assert any("(first 0000:00:01.0) are not symlinks" in w for w in t.warnings)


@pytest.mark.parametrize(
    ("address", "target", "root"),
    [
        # pci_linux_test.go's cases: valid (below an intermediate bridge), wrong prefix, wrong suffix
        ("0000:02:00.0", "../../../devices/pci0000:00/0000:01:00.0/0000:02:00.0", "pci0000:00"),
        ("0000:02:00.0", "../../../devices/invalid-pci-root/0000:01:00.0/0000:02:00.0", None),
        ("0000:02:00.0", "../../../devices/pci0000:00/0000:01:00.0/0000:00:13.1", None),
        ("0000:02:00.0", None, None),  # no such entry, or not a symlink
        ("0000:02:00.0", "/sys/devices/pci0000:00/0000:02:00.0", None),  # absolute: not resolved
        ("10000:00:04.0", "../../../devices/pci10000:00/10000:00:04.0", "pci10000:00"),
    ],
)
def test_the_root_rule(address: str, target: str | None, root: str | None) -> None:
    assert resolve_pcie_root(address, target) == root


def test_roots_survive_the_dict_form() -> None:
    t = read_topology(unpacked_fixture("32em64t-2n8c+dax+nvme+mic+dimms"))
    assert topology_from_dict(topology_to_dict(t)).pci_roots == t.pci_roots
    old = topology_to_dict(t)
    del old["pci_roots"]
    assert topology_from_dict(old).pci_roots == ()


def test_the_topology_command_shows_the_roots() -> None:
    from typer.testing import CliRunner

    from topodra.cli import app

    out = CliRunner().invoke(app, ["topology", "--topology", "fixture:32em64t-2n8c+dax+nvme+mic+dimms"], env={"COLUMNS": "120"})
    assert out.exit_code == 0, out.output
    row = next(line for line in out.output.splitlines() if line.strip().startswith("pci0000:80"))
    assert row.split("│")[1:] == [" 8-15       ", " 1          ", " 16      ", " 2         "]
