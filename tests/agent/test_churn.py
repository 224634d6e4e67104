"""The node stays consistent under churn with the real agent process, and exclusive CPUs are not offered.

A bounded version of ``python -m benchmarks sync`` (the 1,000-operation soak).
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from testkit.churn import agent_offers, in_race, offered_cpus, run_churn

from topodra.agent.logs import JsonFormatter
from topodra.cpuset import CPUSet
from topodra.playground.world import Playground
from topodra.topology.synthetic import synthetic_topology

TOPO = "1s1d1n2l4c2t"  # 16 CPUs


@pytest.mark.slow
def test_randomized_churn_with_agent_restarts_ends_consistent() -> None:
    report = asyncio.run(run_churn(200, seed=3, restarts=2))
    assert report.operations == 200
    assert report.restarts == 2
    assert report.mismatches == {}, report.lines()
    assert report.double_held == []
    assert report.prepare_failures == []
    assert report.exclusive_moved == report.exclusive_moved_in_race
    assert report.unrepaired == 0  # every task that missed an update during its start got it afterwards
    assert sum(report.pods_started.values()) > 50


def _log_line(created: float, msg: str) -> str:
    record = logging.LogRecord("topodra.agent.agent", logging.INFO, __file__, 1, msg, None, None)
    record.created, record.msecs = created, (created % 1) * 1000
    return JsonFormatter().format(record)


def test_the_offer_history_is_read_from_every_agent_process_log(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    log.write_text("\n".join([
        _log_line(1000.25, "slices offer 0-3,6 (withdrawn 4-5, offered again -)"),
        _log_line(1000.5, "placed default/g/c on CPUs 4-5"),
        "not json at all",
        _log_line(1001.0, "slices offer  (withdrawn 0-3,6, offered again -)"),
        '{"ts": "2026-12-02T03:52:34.8', # cut by a killed process
        _log_line(1002.0, "slices offer 0-7 (withdrawn -, offered again 4-5,7)"),
    ]))
    got = agent_offers(log)
    assert [t for t, _ in got] == [1000.25, 1001.0, 1002.0]
    assert [str(o) for _, o in got] == ["0-3,6", "", "0-7"]
    assert json.loads(_log_line(1000.25, "x"))["ts"].endswith(".250Z")
    assert agent_offers(tmp_path / "missing.log") == []


def test_a_claim_allocated_from_an_offer_withdrawn_in_the_publish_delay_is_the_race() -> None:
    """A grant withdraws CPU 2 and a move offers it again inside one publish delay: no write ever
    left CPU 2 out, yet the scheduler allocated it while the node no longer offered it."""
    offers = [(10.0, CPUSet.parse("0-7")), (10.5, CPUSet.parse("0-1,3-7")), (10.56, CPUSet.parse("0-7"))]
    cpus = CPUSet.parse("2")
    assert in_race(cpus, allocated=10.52, failed=10.6, agent_offers=offers)  # the offer in force at the allocation
    assert in_race(cpus, allocated=10.2, failed=10.6, agent_offers=offers)  # withdrawn after it, before Prepare
    assert not in_race(cpus, allocated=10.57, failed=10.6, agent_offers=offers)  # offered all along: a bug
    assert not in_race(cpus, allocated=10.2, failed=10.45, agent_offers=offers)  # withdrawn only after the failure
    assert not in_race(CPUSet.parse("3"), allocated=10.2, failed=10.6, agent_offers=offers)


def _pod(name: str, *, cpus: int = 0, claim: int = 0) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "c", "image": "x"}
    spec: dict[str, Any] = {"containers": [c]}
    if cpus:
        c["resources"] = {"requests": {"cpu": str(cpus), "memory": "64Mi"}, "limits": {"cpu": str(cpus), "memory": "64Mi"}}
    if claim:
        spec["resourceClaims"] = [{"name": "cpus", "resourceClaimTemplateName": "one"}]
        c["resources"] = {"claims": [{"name": "cpus"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


ONE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "one"},
    "spec": {"spec": {"devices": {"requests": [{"name": "cpu", "exactly": {"deviceClassName": "native.cpu"}}]}}},
}


def test_claims_never_land_on_a_running_exclusive_container() -> None:
    """Claims fill the node next to an exclusive container: it never moves, no Prepare fails."""

    async def main() -> None:
        async with Playground(topology=synthetic_topology(TOPO)) as pg:
            assert pg.runtime is not None
            assert pg.agent is not None
            await pg.apply([ONE, _pod("web"), _pod("db", cpus=2)])
            db = next(c.id for c in pg.runtime.store.containers() if pg.runtime.store.pod(c.pod_sandbox_id).name == "db")
            exclusive = pg.runtime.store.container(db).cpus
            assert exclusive is not None
            assert len(exclusive) == 2
            await pg.agent.publisher.settle()
            assert offered_cpus(pg).isdisjoint(exclusive), "exclusive CPUs must leave the slices while held"
            lines = [(await pg.apply([_pod(f"claim-{i}", claim=1)]))[-1] for i in range(15)]
            assert sum(line.endswith("running") for line in lines) == 13  # 16 CPUs - 2 exclusive - the floor
            assert all("pending" in line for line in lines if not line.endswith("running")), lines
            assert pg.runtime.store.container(db).cpus == exclusive
            assert b"topodra_exclusive_moved_by_claim_total 0.0" in pg.agent.metrics.render()
            await pg.delete_pod("db")  # released: offered again (after dra.publishDelay)
            await pg.agent.publisher.settle()
            assert exclusive <= offered_cpus(pg)
            assert (await pg.apply([_pod("claim-late", claim=1)]))[-1].endswith("running")

    asyncio.run(main())


@pytest.mark.slow
def test_churn_on_a_containerd_2_3_runtime_never_hangs_it() -> None:
    """NRI v0.12.0 (containerd 2.3.x): delivery "replies" is chosen, the runtime's locks never
    deadlock, and every container's cgroup ends as the agent recorded it."""
    report = asyncio.run(run_churn(150, seed=5, restarts=1, nri_version="v0.12.0"))
    assert report.delivery == "replies"
    assert report.deadlocks == []
    assert report.mismatches == {}, report.lines()
    assert report.double_held == []
    assert report.unrepaired == 0
    assert sum(report.pods_started.values()) > 40


def test_with_claims_counted_as_node_cpu_shared_pods_never_ask_more_than_the_shared_cpus() -> None:
    """DRANodeAllocatableResources on: the agent publishes its mappings, the scheduler counts each
    claim's CPUs against the node, and at every quiet moment the running shared pods request no
    more CPU than the node's shared CPUs (``python -m benchmarks nodecpu`` runs it longer, beside
    the gate off)."""
    from topodra.gates import NODE_ALLOCATABLE

    report = asyncio.run(run_churn(60, seed=11, restarts=0, gates={NODE_ALLOCATABLE: True}, mix="node-cpu", sample_every=3))
    assert report.shared_samples >= 15
    assert report.shared_over == 0, report.lines()
    assert report.guaranteed_refused == 0
    assert report.mismatches == {}
    assert sum(report.pods_started.values()) > 10
