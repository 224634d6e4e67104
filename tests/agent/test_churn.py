"""The node stays consistent under churn with the real agent process, and exclusive CPUs are not offered.

A bounded version of ``python -m benchmarks sync`` (the 1,000-operation soak).
"""

from __future__ import annotations

import asyncio
from typing import Any

from topodra.playground.world import Playground
from topodra.testing.churn import _offered, run_churn
from topodra.topology.synthetic import synthetic_topology

TOPO = "1s1d1n2l4c2t"  # 16 CPUs


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
            db = next(c.id for c in pg.runtime.containers() if pg.runtime.pod(c.pod_sandbox_id).name == "db")
            exclusive = pg.runtime.container(db).cpus
            assert exclusive is not None
            assert len(exclusive) == 2
            await pg.agent.settle_offer()
            assert _offered(pg).isdisjoint(exclusive), "exclusive CPUs must leave the slices while held"
            lines = [(await pg.apply([_pod(f"claim-{i}", claim=1)]))[-1] for i in range(15)]
            assert sum(line.endswith("running") for line in lines) == 13  # 16 CPUs - 2 exclusive - the floor
            assert all("pending" in line for line in lines if not line.endswith("running")), lines
            assert pg.runtime.container(db).cpus == exclusive
            assert b"topodra_exclusive_moved_by_claim_total 0.0" in pg.agent.metrics.render()
            await pg.delete_pod("db")  # released: offered again (after dra.publishDelay)
            await pg.agent.settle_offer()
            assert exclusive <= _offered(pg)
            assert (await pg.apply([_pod("claim-late", claim=1)]))[-1].endswith("running")

    asyncio.run(main())
