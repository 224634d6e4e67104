"""Our reading of every hwloc fixture against hwloc's own reading.

Two references: the output hwloc recorded for each tree (``NAME.console`` or
``NAME.xml``, named by ``NAME.test``) and Debian's ``lstopo-no-graphics`` run
live on the unpacked tree. Compared per level: packages, NUMA nodes (CPUs and
memory), L3 and L2 groups, cores, PUs, CPU kinds and distances. Where our
model differs from hwloc on purpose, ``hwloc.DIFFERENCES`` says why, and a
test below pins down what we do instead.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from typer.testing import CliRunner

from topodra.cli import app
from topodra.cpuset import CPUSet
from topodra.topology import CoreType, MemoryKind, read_topology
from topodra.topology import hwloc as hw
from topodra.topology.fixtures import fixture_dir, fixture_names, unpacked_fixture

EXPECTATIONS = [hw.parse_test_file(p) for p in sorted(fixture_dir().glob("*.test"))]


def _describe(checks: list[hw.Check]) -> str:
    return "\n".join(f"{c.level}: {c.detail}" for c in checks if not c.accepted)


def test_every_tarball_has_an_expectation() -> None:
    covered = {e.fixture for e in EXPECTATIONS}
    assert set(fixture_names()) <= covered
    assert len(EXPECTATIONS) >= len(fixture_names())


@pytest.mark.parametrize("e", EXPECTATIONS, ids=lambda e: e.name)
def test_recorded_expectation(e: hw.ExpectationFile) -> None:
    root = unpacked_fixture(e.fixture)
    checks = hw.check_expectation(e, read_topology(root), fixture_dir(), root)
    assert {"pus", "numa_nodes"} <= {c.level for c in checks}
    assert all(c.accepted for c in checks), _describe(checks)


def _lstopo() -> None:
    assert hw.lstopo_available(), (
        f"{hw.LSTOPO} is needed for the live comparison: apt-get install hwloc (.ci/run does)"
    )


@pytest.mark.parametrize("name", fixture_names())
def test_live_lstopo(name: str) -> None:
    _lstopo()
    root = unpacked_fixture(name)
    checks = hw.check_live(name, read_topology(root), root)
    assert all(c.accepted for c in checks), _describe(checks)


def test_match_rate_is_reported_and_high(capsys: pytest.CaptureFixture[str]) -> None:
    _lstopo()
    checks: list[hw.Check] = []
    for name in fixture_names():
        root = unpacked_fixture(name)
        t = read_topology(root)
        for e in EXPECTATIONS:
            if e.fixture == name:
                checks += hw.check_expectation(e, t, fixture_dir(), root)
        checks += hw.check_live(name, t, root)
    ok, documented, total = hw.match_rate(checks)
    with capsys.disabled():
        print(
            f"\nhwloc match rate: {ok}/{total} = {100 * ok / total:.1f} % equal, {documented} documented differences"
        )
    assert ok + documented == total
    assert ok / total >= 0.95


# --- the deliberate differences, pinned down ------------------------------------------


def _recorded(name: str) -> hw.HwlocReading:
    e = next(e for e in EXPECTATIONS if e.name == name)
    text = (fixture_dir() / e.target).read_text()
    return hw.parse_xml(text) if e.target.endswith(".xml") else hw.parse_console(text)


def test_bulldozer_compute_units_are_cores_with_two_threads() -> None:
    t = read_topology(unpacked_fixture("64amd64-4s2n4ca2co"))
    theirs = set(_recorded("64amd64-4s2n4ca2co").cores)
    assert len(theirs) == 64
    for core in t.cores():
        cpus = t.cpus_of_core(core)
        assert len(cpus) == 2
        # Each of our cores is exactly two of hwloc's, whose core_ids differ.
        assert {CPUSet([c]) for c in cpus} <= theirs
        assert len({t.cpu(c).core_id for c in cpus}) == 2


def test_buggy_numa_keeps_the_kernels_nodes() -> None:
    t = read_topology(unpacked_fixture("8em64t-2s2ca2c-buggynuma"))
    assert all(t.cpus_of_node(n) == CPUSet([n]) for n in range(8))
    assert any("several NUMA nodes list the same CPUs" in w for w in t.warnings)
    (only,) = _recorded("8em64t-2s2ca2c-buggynuma").numa_nodes.values()
    assert only == t.online


def test_overlapping_fake_nodes_and_three_cpu_kinds() -> None:
    t = read_topology(unpacked_fixture("fakeheterocpunuma"))
    # Every CPU on exactly one node.
    seen = CPUSet()
    for n in t.numa_nodes():
        assert not seen & t.cpus_of_node(n)
        seen |= t.cpus_of_node(n)
    assert seen == t.online
    # hwloc's three kinds (capacity 234/1025, base 2.5/1.2 GHz) are ours; hwloc cannot rank
    # them (two share a capacity, two a base frequency), topodra orders by capacity, then base.
    assert set(_recorded("fakeheterocpunuma").cpu_kinds) == set(t.cpu_kinds())
    assert t.cpu_kinds() == [CPUSet.parse("8-11"), CPUSet.parse("0-7"), CPUSet.parse("12-23")]
    assert t.cpus_of_type(CoreType.E_CORE) == CPUSet.parse("8-11")


def test_gpu_memory_nodes_match_the_kept_expectation() -> None:
    root = unpacked_fixture("nvidiagpunumanodes")
    e = next(e for e in EXPECTATIONS if e.name == "nvidiagpunumanodes-kept")
    checks = hw.check_expectation(e, read_topology(root), fixture_dir(), root)
    assert all(c.ok for c in checks), _describe(checks)


def test_conflicting_masks_are_resolved_by_majority() -> None:
    t = read_topology(unpacked_fixture("40intel64-4n10c+pci-conflicts"))
    assert sorted(t.cpus_of_package(p) for p in t.packages()) == sorted(
        CPUSet(range(k, 40, 4)) for k in range(4)
    )
    assert sorted(t.cpus_of_l3(g) for g in t.l3_groups()) == sorted(CPUSet(range(k, 40, 4)) for k in range(4))
    assert any(w.startswith("package sibling lists disagree") for w in t.warnings)
    assert any(w.startswith("L3 unified cache sibling lists disagree") for w in t.warnings)


# --- the comparison can fail ----------------------------------------------------------


def test_compare_catches_wrong_groups_and_kinds() -> None:
    root = unpacked_fixture("20em64t-hybrid-1p6c2t+2ca4co1t")
    t = read_topology(root)
    h = hw.run_lstopo(root) if hw.lstopo_available() else _recorded("20em64t-hybrid-1p6c2t+2ca4co1t")
    assert all(c.ok for c in hw.compare(t, h))
    # Make every CPU one kind of P-core, and merge two L2 groups: both must be caught.
    cpus = {c: dataclasses.replace(i, core_type=CoreType.P_CORE, kind=0) for c, i in t.cpus.items()}
    cpus[12] = dataclasses.replace(cpus[12], l2=t.cpu(16).l2)
    bad = dataclasses.replace(t, cpus=cpus)
    failed = {c.level for c in hw.compare(bad, h) if not c.ok}
    assert failed == {"cpu_kinds", "l2"}


def test_compare_catches_memory_and_distance_errors() -> None:
    t = read_topology(unpacked_fixture("16amd64-8n2c"))
    h = _recorded("16amd64-8n2c")
    nodes = dict(t.nodes)
    nodes[3] = dataclasses.replace(nodes[3], memory_bytes=nodes[3].memory_bytes * 2)
    distances = dict(t.distances)
    distances[(0, 7)] = 99
    bad = dataclasses.replace(t, nodes=nodes, distances=distances)
    failed = {c.level: c.detail for c in hw.compare(bad, h) if not c.ok}
    assert set(failed) == {"numa_nodes", "distances"}
    assert "node 3: memory" in failed["numa_nodes"]


def test_compare_catches_wrong_dies_and_memory_kinds() -> None:
    dies = read_topology(unpacked_fixture("fakecpuid1f-64intel64-2p4d2n2c2t"))
    h = _recorded("fakecpuid1f-64intel64-2p4d2n2c2t")
    assert len(h.dies) == 8
    merged = {c: dataclasses.replace(i, die=i.package) for c, i in dies.cpus.items()}  # a die per package
    failed = {c.level: c.detail for c in hw.compare(dataclasses.replace(dies, cpus=merged), h) if not c.ok}
    assert set(failed) == {"dies"}

    t = read_topology(unpacked_fixture("nvidiagpunumanodes"))
    h = _recorded("nvidiagpunumanodes-kept")
    assert h.node_subtypes[255] == "GPUMemory"
    assert all(c.ok for c in hw.compare(t, h) if c.level == "memory_kinds")
    nodes = dict(t.nodes)
    nodes[255] = dataclasses.replace(nodes[255], kind=MemoryKind.DRAM)
    failed = {c.level: c.detail for c in hw.compare(dataclasses.replace(t, nodes=nodes), h) if not c.ok}
    assert failed == {"memory_kinds": "node 255: ours DRAM vs hwloc GPUMemory"}


# --- parsers --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0x00000001", "0"),
        ("0x0000ff00", "8-15"),
        ("0x000000ff,,0x0", "64-71"),
        ("0x00000001,0x00000000", "32"),
        ("0x0", ""),
    ],
)
def test_hwloc_bitmap(text: str, cpus: str) -> None:
    assert hw.parse_hwloc_bitmap(text) == CPUSet.parse(cpus)


def test_hwloc_bitmap_rejects_garbage() -> None:
    with pytest.raises(hw.HwlocParseError, match="not an hwloc bitmap"):
        hw.parse_hwloc_bitmap("0xzz")


def test_console_parser_handles_wrapped_attributes_and_rejects_garbage() -> None:
    text = (
        'Machine (P#0 DMIChassisAssetTag="a\nb")\n'
        "  Package L#0 (P#0)\n"
        "    NUMANode L#0 (P#0 local=2048MiB)\n"
        "    Core L#0 (P#0)\n      PU L#0 (P#0)\n      PU L#1 (P#4)\n"
        "depth 0: 1 Machine\n"
    )
    r = hw.parse_console(text)
    assert r.cores == [CPUSet([0, 4])]
    assert r.numa_nodes == {0: CPUSet([0, 4])}
    assert r.node_memory[0][0] == 2048 << 20
    with pytest.raises(hw.HwlocParseError, match="expected the Machine line"):
        hw.parse_console("Package L#0 (P#0)\n")
    with pytest.raises(hw.HwlocParseError, match="PU without P#"):
        hw.parse_console("Machine (P#0)\n  PU L#0\n")


def test_cgroup_allowed_reads_what_hwloc_reads() -> None:
    assert hw.cgroup_allowed(unpacked_fixture("16amd64-8n2c-cpusets")) == (
        CPUSet.parse("0-6,12-15"),
        CPUSet.parse("1-4"),
    )
    # cgroup v2 (cpuset.cpus.effective)
    assert hw.cgroup_allowed(unpacked_fixture("32amd64-4s2n4c-cgroup2"))[0] == CPUSet.parse("0-5")
    # v1 reads the configured cpuset.cpus, not cpuset.effective_cpus (as hwloc does)
    assert hw.cgroup_allowed(unpacked_fixture("nvidiagpunumanodes"))[0] == CPUSet.parse("0-175")
    assert hw.cgroup_allowed(unpacked_fixture("16amd64-8n2c")) == (None, None)


def test_test_file_parser(tmp_path: Path) -> None:
    p = tmp_path / "x.test"
    p.write_text('# a comment\nsource: a.tar.bz2\ntarget: a.console\noptions: - -v --merge\nenv: K="v 1"\n')
    e = hw.parse_test_file(p)
    assert (e.fixture, e.target, e.options, dict(e.env)) == ("a", "a.console", ("--merge",), {"K": "v 1"})
    assert e.filtered
    p.write_text("source: a.tar.bz2\n")
    with pytest.raises(hw.HwlocParseError, match="target"):
        hw.parse_test_file(p)


# --- the command ----------------------------------------------------------------------


def test_topology_check_command_reports_match_rate() -> None:
    r = CliRunner().invoke(app, ["topology-check", "--fixture", "64amd64-4s2n4ca2co"])
    assert r.exit_code == 0, r.output
    assert "documented differences" in r.output
    assert "Bulldozer" in r.output


def test_topology_check_fails_on_an_unexplained_difference(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(hw.DIFFERENCES, "64amd64-4s2n4ca2co")
    r = CliRunner().invoke(app, ["topology-check", "--fixture", "64amd64-4s2n4ca2co", "--no-live"])
    assert r.exit_code == 1
    assert "1 unexplained" in r.output


def test_topology_check_shows_progress_per_fixture_when_not_a_terminal() -> None:
    r = CliRunner().invoke(
        app, ["topology-check", "--fixture", "64amd64-4s2n4ca2co", "--fixture", "16amd64-8n2c", "--no-live"]
    )
    assert r.exit_code == 0, r.output
    assert "comparing 64amd64-4s2n4ca2co (1/2)" in r.stderr
    assert "comparing 16amd64-8n2c (2/2)" in r.stderr
