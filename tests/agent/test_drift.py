"""Reading a container's applied cpuset from fake cgroup trees: v1/v2 x cgroupfs/systemd, path or pid."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topodra.agent.drift import AppliedCpuset, CgroupReader, cgroup_dir, parse_proc_cgroup, systemd_path
from topodra.cpuset import CPUSet
from topodra.policy.api import Assignment

CID = "4f1c2d3e5a6b7c8d"
UID = "0a1b2c3d_0000_4000_8000_000000000001"

CGROUPFS = f"/kubepods/burstable/pod{UID}/{CID}"
SYSTEMD = f"kubepods-burstable-pod{UID}.slice:cri-containerd:{CID}"
SYSTEMD_DIR = (
    f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID}.slice/cri-containerd-{CID}.scope"
)


class _Subject:
    """The checker's view of an agent: fixed cgroup paths, assignments from ``assignments``."""

    def __init__(self, assignments: Callable[[str], Assignment | None], unpushed: Iterable[str] = ()) -> None:
        self.assignments = assignments
        self.unpushed = unpushed
        self.repaired: list[list[str]] = []

    def assignment(self, container_id: str) -> Assignment | None:
        return self.assignments(container_id)

    def cgroup_of(self, container_id: str) -> tuple[str, int] | None:
        return CGROUPFS, 0

    def container_ids(self) -> list[str]:
        return [CID]

    def awaits_push(self, container_id: str) -> bool:
        return container_id in self.unpushed

    async def settled(self) -> None:
        return None

    def repair(self, container_ids: list[str]) -> None:
        self.repaired.append(container_ids)


def _tree(root: Path, version: int, rel: str, cpus: str = "2-3", mems: str = "0") -> Path:
    if version == 2:
        root.mkdir(parents=True, exist_ok=True)
        (root / "cgroup.controllers").write_text("cpuset cpu memory\n")
        d = root / rel
    else:
        (root / "cpuset").mkdir(parents=True, exist_ok=True)
        (root / "memory").mkdir()
        d = root / "cpuset" / rel
    d.mkdir(parents=True)
    (d / "cpuset.cpus").write_text(cpus + "\n")
    (d / "cpuset.mems").write_text(mems + "\n")
    return d


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize(("cgroups_path", "rel"), [(CGROUPFS, CGROUPFS.lstrip("/")), (SYSTEMD, SYSTEMD_DIR)])
def test_reads_from_the_cgroups_path(tmp_path: Path, version: int, cgroups_path: str, rel: str) -> None:
    root = tmp_path / "sys/fs/cgroup"
    _tree(root, version, rel)
    reader = CgroupReader(root)
    assert reader.available
    assert reader.read(CID, cgroups_path) == AppliedCpuset(CPUSet.parse("2-3"), CPUSet.parse("0"))


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("rel", [CGROUPFS.lstrip("/"), SYSTEMD_DIR])
def test_reads_through_the_pid(tmp_path: Path, version: int, rel: str) -> None:
    root = tmp_path / "sys/fs/cgroup"
    _tree(root, version, rel, cpus="5", mems="1")
    proc = tmp_path / "proc" / "4242"
    proc.mkdir(parents=True)
    if version == 2:
        proc.joinpath("cgroup").write_text(f"0::/{rel}\n")
    else:
        proc.joinpath("cgroup").write_text(f"12:memory:/{rel}\n7:cpuset:/{rel}\n1:name=systemd:/x\n")
    reader = CgroupReader(root, proc_root=tmp_path / "proc")
    assert reader.read(CID, "", 4242) == AppliedCpuset(CPUSet([5]), CPUSet([1]))
    # A recycled pid now in another container's cgroup is not taken for this one.
    assert reader.read("someone-else", "", 4242) is None


def test_missing_or_bad_cgroups_read_as_unknown(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    d = _tree(root, 2, CGROUPFS.lstrip("/"))
    reader = CgroupReader(root, proc_root=tmp_path / "proc")
    assert reader.read(CID, "/kubepods/besteffort/podX/other") is None
    assert reader.read(CID, "", 99) is None  # no such process
    assert reader.read(CID) is None  # nothing to go by
    (d / "cpuset.cpus").write_text("garbage\n")
    assert reader.read(CID, CGROUPFS) is None
    (d / "cpuset.cpus").write_text("\n")  # v2: not set, the parent's CPUs
    got = reader.read(CID, CGROUPFS)
    assert got is not None
    assert got.differs(Assignment(CPUSet([1])))
    assert not CgroupReader(tmp_path / "nowhere").available


def test_systemd_paths() -> None:
    assert systemd_path(SYSTEMD) == SYSTEMD_DIR
    assert systemd_path("system.slice:docker:abc") == "system.slice/docker-abc.scope"
    assert systemd_path(":cri-containerd:abc") == "cri-containerd-abc.scope"
    assert systemd_path("-.slice:crio:abc") == "crio-abc.scope"
    with pytest.raises(ValueError, match="not a slice"):
        systemd_path("notaslice:crio:abc")
    assert cgroup_dir(Path("/nowhere"), "bad:path") is None


def test_proc_cgroup_prefers_the_cpuset_line() -> None:
    assert parse_proc_cgroup("3:cpu,cpuacct:/a\n5:cpuset:/b\n0::/c\n") == "/b"
    assert parse_proc_cgroup("0::/c\n") == "/c"
    assert parse_proc_cgroup("2:memory:/m\n") is None


@given(st.sets(st.integers(0, 63), min_size=1), st.sets(st.integers(0, 63), min_size=1), st.booleans())
def test_differs_compares_cpus_and_pinned_mems(a: set[int], b: set[int], pin: bool) -> None:
    got = AppliedCpuset(CPUSet(a), CPUSet([0]))
    want = Assignment(CPUSet(b), CPUSet([1]) if pin else CPUSet())
    assert got.differs(want) == (a != b or pin)


def test_a_decision_made_during_the_read_is_not_drift(tmp_path: Path) -> None:
    """A claim prepared while the checker reads the cgroup changes the assignment; the cgroup
    still holds the old one because the push is on its way: checked again later, not repaired."""
    import asyncio

    from topodra.agent.drift import DriftChecker

    _tree(tmp_path, 2, CGROUPFS.lstrip("/"), cpus="0-7")
    assignment = {CID: Assignment(CPUSet.parse("0-7"), CPUSet())}

    class Reader(CgroupReader):
        def read(self, container_id: str, cgroups_path: str = "", pid: int = 0) -> AppliedCpuset | None:
            got = super().read(container_id, cgroups_path, pid)
            assignment[CID] = Assignment(CPUSet.parse("0-3"), CPUSet())  # decided meanwhile
            return got

    subject = _Subject(assignment.get)
    repaired = subject.repaired
    checker = DriftChecker(Reader(tmp_path), subject)
    assert asyncio.run(checker.check([CID])) == []
    assert repaired == []
    assert checker.pending == {CID}, "checked again after the push"
    # The next pass reads the cgroup against an unchanged decision: a real difference is repaired.
    checker.reader = CgroupReader(tmp_path)
    assert asyncio.run(checker.check([CID])) == [CID]
    assert repaired == [[CID]]


def test_a_decision_not_pushed_yet_is_not_drift(tmp_path: Path) -> None:
    """A claim's changes wait for its checkpoint before they are pushed: meanwhile the cgroup
    holds the old set, and the check leaves it alone."""
    import asyncio

    from topodra.agent.drift import DriftChecker

    _tree(tmp_path, 2, CGROUPFS.lstrip("/"), cpus="0-7")
    unpushed = {CID}
    subject = _Subject(lambda cid: Assignment(CPUSet.parse("0-3"), CPUSet()), unpushed)
    repaired = subject.repaired
    checker = DriftChecker(CgroupReader(tmp_path), subject)
    assert asyncio.run(checker.check([CID])) == []
    unpushed.clear()  # pushed, and the runtime did not apply it: now it is drift
    assert asyncio.run(checker.check([CID])) == [CID]
    assert repaired == [[CID]]


def test_a_claim_change_keeps_the_check_off_only_until_its_push_or_the_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Prepare cancelled between its decision and its push never pushes: then the drift check
    must deliver the set, so the mark does not outlive a short grace."""
    import asyncio
    import time

    from topodra.agent.agent import Agent
    from topodra.agent.config import parse_config
    from topodra.agent.router import UNPUSHED_GRACE
    from topodra.topology.synthetic import synthetic_topology

    agent = Agent(parse_config({"nodeName": "n", "metricsAddress": ""}), topology=synthetic_topology("1s1d1n1l2c2t"))
    assignment = Assignment(CPUSet.parse("0-1"), CPUSet())
    agent.router.decided({CID: assignment})
    assert agent.router.awaits_push(CID)
    asyncio.run(agent.claims.changed({CID: assignment}))
    assert not agent.router.awaits_push(CID), "pushed: checked again like any container"
    agent.router.decided({CID: assignment})
    decided_at = time.monotonic()
    monkeypatch.setattr(time, "monotonic", lambda: decided_at + UNPUSHED_GRACE)  # decided long ago, never pushed
    assert not agent.router.awaits_push(CID)
