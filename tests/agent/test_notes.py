"""Notes reach /state at once and the log right after the step that made them, in order."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest

from topodra.agent.agent import Agent
from topodra.nri.types import Container, ContainerState, LinuxResources, Pod
from topodra.topology.synthetic import synthetic_topology

TOPO = synthetic_topology("1s1d1n1l4c2t")


def _create(i: int, cpus: int) -> tuple[Pod, Container]:
    qos = "" if cpus else "burstable/"
    res = LinuxResources(cpu_shares=1024 * cpus or 256, cpu_quota=100_000 * cpus or None, cpu_period=100_000,
                         memory_limit=64 << 20)
    pod = Pod(id=f"s{i}", name=f"pod{i}", uid=f"u{i}", namespace="ns", cgroup_parent=f"/kubepods/{qos}podu{i}")
    ctr = Container(id=f"c{i}", pod_sandbox_id=pod.id, name="app", state=ContainerState.CREATED, resources=res,
                    cgroups_path=f"/kubepods/{qos}podu{i}/c{i}")
    return pod, ctr


def test_notes_are_logged_after_the_reply_in_order(make_agent: Callable[..., Agent], caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        agent = make_agent(TOPO)
        caplog.set_level(logging.INFO, logger="topodra.agent.agent")
        for i, cpus in enumerate((0, 2, 0)):
            await agent.nri.create_container(*_create(i, cpus))
        placed = [e.split(" ", 1)[1] for e in agent.events if "placed" in e]
        assert [p.split(" ")[1] for p in placed] == ["ns/pod0/app", "ns/pod1/app", "ns/pod2/app"]
        logged = [r.getMessage() for r in caplog.records if "placed" in r.getMessage()]
        assert logged == []  # the handlers returned before any log line was written
        await asyncio.sleep(0)
        logged = [r.getMessage() for r in caplog.records if "placed" in r.getMessage()]
        assert logged == placed
        await agent.nri.create_container(*_create(3, 1))
        await agent.stop()  # stopping writes what is left
        assert [r.getMessage() for r in caplog.records if "pod3" in r.getMessage()] == [agent.events[-1].split(" ", 1)[1]]

    asyncio.run(main())


def test_a_note_without_a_loop_is_logged_at_once(make_agent: Callable[..., Agent], caplog: pytest.LogCaptureFixture) -> None:
    agent = make_agent(TOPO)
    caplog.set_level(logging.INFO, logger="topodra.agent.agent")
    agent.notes.note("hello")
    assert [r.getMessage() for r in caplog.records] == ["hello"]
