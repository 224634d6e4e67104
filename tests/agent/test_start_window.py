"""Item: an update that reaches a container while it starts must still reach its task.

containerd stores an update that arrives during StartContainer in the spec but
never applies it to the task (the embedded runtime does the same); the agent
re-sends the assignment after PostStartContainer and checks the cgroup.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml

from topodra.playground.runner import resolve_topology
from topodra.playground.world import Playground

EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "upstream-prototype" / "upstream-prototype.yaml"


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }


def run(body: Callable[[Playground], Awaitable[None]], **kw: Any) -> None:
    async def main() -> None:
        topo, _ = resolve_topology(None)
        async with Playground(topology=topo, cgroups=True, **kw) as pg:
            await body(pg)

    asyncio.run(main())


def _applied_equals_assigned(pg: Playground) -> dict[str, tuple[str, str]]:
    """Containers whose task (cgroup) runs elsewhere than the agent decided: id -> (task, agent)."""
    assert pg.runtime is not None
    assert pg.agent is not None
    wrong = {}
    for c in pg.runtime.store.containers():
        applied = pg.runtime.store.applied(c.id)
        want = pg.agent.policy.assignment(c.id)
        if applied is None or want is None:
            continue
        if applied[0] != want.cpus:
            wrong[c.id] = (str(applied[0]), str(want.cpus))
    return wrong


def test_a_claim_prepared_while_a_container_starts_still_reaches_its_cgroup() -> None:
    """The issue's case: a BestEffort pod starting while a claim pod is prepared."""

    async def body(pg: Playground) -> None:
        assert pg.runtime is not None
        assert pg.agent is not None
        fired = False

        async def window(container_id: str) -> None:
            nonlocal fired
            if fired:
                return
            fired = True
            # The claim is prepared (the agent pushes the shrunk shared set) while web is starting.
            await pg.apply(list(yaml.safe_load_all(EXAMPLE.read_text())))

        pg.runtime.start_gate = window
        await pg.apply([_pod("web")])
        assert fired
        assert pg.runtime.lost_updates, "the runtime should have dropped the push made during the start"
        await pg.settle()  # no drift check needed: the agent re-sent it after PostStartContainer
        assert _applied_equals_assigned(pg) == {}
        assert b"topodra_start_window_repushes_total 1.0" in pg.agent.metrics.render()
        web = next(c.id for c in pg.runtime.store.containers() if c.name == "c")
        claimed = next(iter(pg.agent.policy.claims().values()))
        applied = pg.runtime.store.applied(web)
        assert applied is not None
        assert applied[0] is not None
        assert applied[0].isdisjoint(claimed)

    run(body)


def test_drift_found_in_the_cgroup_is_repaired_and_counted() -> None:
    """Whatever made a cgroup differ (a lost update before a restart, another writer), the check repairs it."""

    async def body(pg: Playground) -> None:
        assert pg.runtime is not None
        assert pg.agent is not None
        assert pg.agent.drift is not None
        await pg.apply([_pod("web"), _pod("db")])
        web = next(c for c in pg.runtime.store.containers() if c.name == "c")
        assert pg.runtime.cgroup_root is not None
        cpus_file = pg.runtime.cgroup_root / web.cgroups_path.lstrip("/") / "cpuset.cpus"
        cpus_file.write_text("0\n")  # someone else rewrote the cgroup
        await pg.agent.drift.check(list(pg.agent.node.containers))
        assert pg.agent.drift.drifts == 1  # found once (by this pass or a background one), repaired
        await pg.settle()
        assert _applied_equals_assigned(pg) == {}
        assert cpus_file.read_text().strip() == str(pg.agent.policy.assignment(web.id).cpus)  # type: ignore[union-attr]
        assert b"topodra_cpuset_drift_total 1.0" in pg.agent.metrics.render()
        assert await pg.agent.drift.check(list(pg.agent.node.containers)) == []

    run(body)


def test_a_rejected_batch_is_counted_and_only_what_still_differs_is_sent_again() -> None:
    """containerd fails a whole UpdateContainers when one container of it has exited, after applying the
    others: the agent counts it and does not re-send the applied ones nor the exited one."""

    async def body(pg: Playground) -> None:
        assert pg.runtime is not None
        assert pg.agent is not None
        assert pg.agent.router.pusher is not None
        await pg.apply([_pod("web"), _pod("db")])
        await pg.settle()  # a start-window repair of web or db is pushed before the count starts
        pods = {p.id: p.name for p in pg.runtime.store.pods()}
        by_pod = {pods[c.pod_sandbox_id]: c.id for c in pg.runtime.store.containers()}
        pg.runtime.exit_container(by_pod["web"])  # its StopContainer event has not come yet
        calls_before = sum("requested container updates" in line for line in pg.runtime.log)
        await pg.apply(list(yaml.safe_load_all(EXAMPLE.read_text())))  # db and web shrink: one batch
        await pg.settle()
        stats = pg.agent.router.pusher.stats
        assert stats.rejected_calls == 1
        assert b"topodra_unsolicited_updates_failed_total 1.0" in pg.agent.metrics.render()
        sent = [line for line in pg.runtime.log if "requested container updates" in line][calls_before:]
        assert len(sent) == 1, f"nothing of the rejected batch needed sending again: {sent} {pg.agent.events[-12:]}"
        assert _applied_equals_assigned(pg) == {}

    run(body)


def test_an_update_lost_before_an_agent_restart_is_found_in_the_cgroup() -> None:
    """The agent that pushed during the start dies before PostStartContainer; its successor's Synchronize
    reports the spec (the new value), so only the cgroup shows the task still runs on the old CPUs."""

    async def body(pg: Playground) -> None:
        assert pg.runtime is not None
        fired = False

        async def window(container_id: str) -> None:
            nonlocal fired
            if fired:
                return
            fired = True
            await pg.apply(list(yaml.safe_load_all(EXAMPLE.read_text())))  # the push is lost
            await pg.restart_agent()  # a new agent, before the start ends

        pg.runtime.start_gate = window
        await pg.apply([_pod("web")])
        assert pg.runtime.lost_updates
        assert pg.agent is not None
        assert pg.agent.drift is not None
        drift = pg.agent.drift
        await asyncio.wait_for(_until(lambda: drift.drifts >= 1), 5)  # the check after PostStartContainer
        await pg.settle()
        assert _applied_equals_assigned(pg) == {}
        assert drift.drifts == 1
        assert pg.runtime.unrepaired == frozenset()

    run(body)


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.005)
