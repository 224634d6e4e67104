"""The agent's CreateContainer replies, written straight from the policy's placements, are the
bytes upb writes for the checked updates they stand for, and carry the policy's current sets."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from topodra.agent.agent import Agent
from topodra.cpuset import CPUSet
from topodra.nri import convert
from topodra.nri.proto import api_pb2
from topodra.nri.stub import Stub
from topodra.nri.types import (
    Container,
    ContainerAdjustment,
    ContainerState,
    ContainerUpdate,
    LinuxResources,
    Pod,
)
from topodra.policy.api import Assignment
from topodra.topology.synthetic import synthetic_topology

TOPO = synthetic_topology("1s1d2n1l4c2t")  # 16 CPUs, two memory nodes


def _objects(i: int, cpus: int) -> tuple[Pod, Container]:
    qos = "" if cpus else "burstable/"
    res = LinuxResources(
        cpu_shares=1024 * cpus or 256, cpu_quota=100_000 * cpus or None, cpu_period=100_000, memory_limit=64 << 20
    )
    pod = Pod(id=f"s{i}", name=f"pod{i}", uid=f"u{i}", namespace="ns", cgroup_parent=f"/kubepods/{qos}podu{i}")
    ctr = Container(
        id=f"c{i}", pod_sandbox_id=pod.id, name="app", state=ContainerState.CREATED, resources=res,
        cgroups_path=f"/kubepods/{qos}podu{i}/c{i}",
    )
    return pod, ctr


def _payload(pod: Pod, ctr: Container) -> bytes:
    req = api_pb2.CreateContainerRequest()
    convert.pod_to_proto(pod, req.pod)
    convert.container_to_proto(ctr, req.container)
    return req.SerializeToString()


def _reference(agent: Agent, created: str, ids: list[str]) -> bytes:
    """The reply the checked dataclasses make through upb, from the policy's current sets."""
    pb = api_pb2.CreateContainerResponse()
    mine = agent.policy.assignment(created)
    assert mine is not None
    convert.adjustment_to_proto(ContainerAdjustment(cpus=mine.cpus, mems=mine.mems or None), pb.adjust)
    updates = []
    for cid in ids:
        a = agent.policy.assignment(cid)
        assert a is not None
        updates.append(ContainerUpdate(cid, cpus=a.cpus, mems=a.mems or None))
    convert.updates_to_proto(updates, pb.update)
    return pb.SerializeToString()


ops = st.lists(st.tuples(st.sampled_from(["create", "stop", "remove"]), st.integers(0, 9), st.integers(0, 3)), max_size=30)


@pytest.mark.parametrize("delivery", ["unsolicited", "replies"])
def test_create_replies_are_the_reference_bytes_of_the_current_sets(
    make_agent: Callable[..., Agent], delivery: str
) -> None:
    """Random creations (shared and exclusive), stops and removals; with no runtime connection the
    changes of removals ride on the next creation's reply. Each reply: every container whose set
    changed, none twice, not the new one, in the reference's bytes."""

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(ops)
    @example([("create", 0, 0), ("create", 1, 0), ("create", 2, 1), ("remove", 2, 0), ("create", 3, 0)])
    @example([("create", 0, 0), ("create", 1, 2), ("create", 2, 0), ("remove", 1, 0), ("create", 3, 1)])
    def prop(steps: list[tuple[str, int, int]]) -> None:
        async def main() -> None:
            agent = make_agent(TOPO, nri={"delivery": delivery})
            stub = Stub(agent.nri, name="t", idx="10", env={})
            live: dict[int, tuple[Pod, Container]] = {}
            for op, i, cpus in steps:
                if op == "create" and i not in live:
                    pod, ctr = _objects(i, cpus)
                    before = agent.policy.assignments()
                    reply, status = await stub.handle("CreateContainer", _payload(pod, ctr))
                    if status is not None:  # no room for it: refused, nothing moved
                        assert agent.policy.assignments() == before
                        continue
                    live[i] = (pod, ctr)
                    ids = [u.container_id for u in api_pb2.CreateContainerResponse.FromString(reply).update]
                    assert reply == _reference(agent, ctr.id, ids)
                    assert len(set(ids)) == len(ids)
                    assert ctr.id not in ids
                    moved = {c for c, a in agent.policy.assignments().items() if c in before and before[c] != a}
                    assert moved <= set(ids)
                elif op == "stop" and i in live:
                    await agent.nri.stop_container(*live[i])
                elif op == "remove" and i in live:
                    await agent.nri.remove_container(*live.pop(i))
                await asyncio.sleep(0)

        asyncio.run(main())

    prop()


def test_notes_are_formatted_when_read_with_the_time_they_were_made(
    make_agent: Callable[..., Agent], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = make_agent(TOPO)
    caplog.set_level(logging.INFO, logger="topodra.agent.agent")
    made = time.mktime((2026, 1, 2, 3, 4, 5, 0, 0, -1))
    monkeypatch.setattr(time, "time", lambda: made)
    agent.notes.note("moved %s to %s (%d%%)", "c1", TOPO.online, 50)
    agent.notes.note("100% verbatim %s")
    monkeypatch.undo()
    assert agent.events[-2:] == ["03:04:05 moved c1 to 0-15 (50%)", "03:04:05 100% verbatim %s"]
    assert [r.getMessage() for r in caplog.records] == ["moved c1 to 0-15 (50%)", "100% verbatim %s"]
    for i in range(450):
        agent.notes.note("n%d", i)
    assert len(agent.events) == 200
    assert agent.events[-1].endswith(" n449")
    assert agent.notes.recent(2)[0].endswith(" n448")
    assert agent.notes.recent(0) == []


def test_placements_follow_each_containers_own_assignment(make_agent: Callable[..., Agent]) -> None:
    """Followers of two pools in one change set, a container the runtime never reported, the one
    excluded: each placement carries its own container's sets, runs share the set objects."""
    agent = make_agent(TOPO)
    one, two = Assignment(CPUSet.parse("2-7"), CPUSet({0})), Assignment(CPUSet.parse("8-15"), CPUSet())
    for cid in ("a", "b", "c", "d", "e"):
        agent.node.containers[cid] = Container(cid, "p")
    changes = {"d": one, "a": one, "c": two, "b": one, "e": two, "ghost": one}
    got = agent.router.placements(changes, exclude="e")
    assert got == [("a", one.cpus, one.mems), ("b", one.cpus, one.mems), ("c", two.cpus, None), ("d", one.cpus, one.mems)]
    assert got[0][1] is got[1][1] is got[3][1]
    assert agent.router.updates(changes) == [ContainerUpdate(c, cpus=a.cpus, mems=a.mems or None) for c, a in sorted(changes.items()) if c != "ghost"]


def test_create_latencies_are_observed_after_the_reply(make_agent: Callable[..., Agent]) -> None:
    async def main() -> None:
        agent = make_agent(TOPO)
        count = 'topodra_nri_event_seconds_count{event="CreateContainer"}'
        for i in range(3):
            await agent.nri.create_container(*_objects(i, i % 2))
        assert f"{count} 0.0" in agent.metrics.render().decode()  # not on the reply path
        await asyncio.sleep(0)
        assert f"{count} 3.0" in agent.metrics.render().decode()
        await agent.nri.create_container(*_objects(3, 0))
        await agent.stop()  # stopping observes what is left
        assert f"{count} 4.0" in agent.metrics.render().decode()

    asyncio.run(main())
