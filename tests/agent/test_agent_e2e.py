"""The agent end to end: NRI runtime double, kubelet over gRPC, API server over HTTP.

These drive the real agent with the playground's embedded runtime, kubelet and
scheduler (the simulator's allocator), all over real sockets.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from topodra.agent.http import get
from topodra.cpuset import CPUSet
from topodra.nri.types import Container, ContainerState, Pod
from topodra.playground.runner import resolve_topology
from topodra.playground.world import Playground
from topodra.topology.model import CoreType

EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "upstream-prototype" / "upstream-prototype.yaml"


def _pod(name: str, cpu: str | None = None, limit: str | None = None) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if cpu:
        res["requests"] = {"cpu": cpu, "memory": "64Mi"}
    if limit:
        res["limits"] = {"cpu": limit, "memory": "64Mi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": res}]},
    }


def run(body: Callable[[Playground], Awaitable[None]], **kw: Any) -> None:
    async def main() -> None:
        topo, _ = resolve_topology(None)
        async with Playground(topology=topo, **kw) as pg:
            await body(pg)

    asyncio.run(main())


def test_release_reaches_the_runtime_with_no_further_container_event() -> None:
    """Unprepare pushes the widened shared sets at once: an unsolicited UpdateContainers."""

    async def body(pg: Playground) -> None:
        assert pg.runtime is not None
        assert pg.kubelet is not None
        await pg.apply([_pod("web", "250m", "1")])
        await pg.apply(list(yaml.safe_load_all(EXAMPLE.read_text())))
        claimed = pg.cpus_of("pcore-test", "ctr0")
        assert claimed <= pg.topology.cpus_of_type(CoreType.P_CORE)
        assert len(claimed) == 1
        assert pg.cpus_of("web").isdisjoint(claimed)
        # Stop the claiming pod's containers ourselves, then call only NodeUnprepareResources:
        # nothing else happens on the runtime side, so only an unsolicited update can widen web.
        pod = pg.store.get(*_pod_key("pcore-test"))
        run_ = pg.kubelet.pods[pod["metadata"]["uid"]]
        for cid in run_.containers.values():
            assert (await pg.runtime.stop_container(cid)).ok
            assert (await pg.runtime.remove_container(cid)).ok
        changes = pg.runtime.store.subscribe()
        events_before = _nri_events(pg)
        await pg.kubelet.unprepare_claims(pod)
        change = await asyncio.wait_for(changes.get(), 5)
        assert change.source == "unsolicited"
        assert change.cpus == pg.topology.online
        assert pg.cpus_of("web") == pg.topology.online
        # No NRI event was delivered in between: the update came on its own.
        assert _nri_events(pg) == events_before

    run(body)


def _pod_key(name: str) -> tuple[Any, str, str]:
    from topodra.embedded.store import KINDS

    return KINDS[("", "pods")], "default", name


def _nri_events(pg: Playground) -> list[str]:
    assert pg.runtime is not None
    return [line for line in pg.runtime.log if "->" in line or "event" in line.lower()]


def test_restart_in_between_changes_nothing() -> None:
    async def body(pg: Playground) -> None:
        await pg.apply([_pod("web", "500m"), _pod("db", "2", "2")])
        await pg.apply(list(yaml.safe_load_all(EXAMPLE.read_text())))
        before = {(r.pod, r.container): r.cpus for r in pg.rows()}
        claims_before = dict(pg.agent.policy.claims()) if pg.agent else {}
        await pg.restart_agent()
        assert {(r.pod, r.container): r.cpus for r in pg.rows()} == before
        assert pg.agent is not None
        assert pg.agent.policy.claims() == claims_before
        assert pg.agent.policy.assignment(_cid(pg, "pcore-test")) is not None
        # The restarted agent still frees the claim at once.
        await pg.delete_pod("pcore-test")
        assert pg.cpus_of("web") == pg.topology.online - pg.cpus_of("db")

    run(body)


def _cid(pg: Playground, pod: str) -> str:
    assert pg.runtime is not None
    pods = {p.id: p.name for p in pg.runtime.store.pods()}
    return next(c.id for c in pg.runtime.store.containers() if pods.get(c.pod_sandbox_id) == pod)


@pytest.mark.parametrize(
    ("env_value", "message"),
    [
        ("DRA_CPUSET_{uid}=0-3", "forged or stale"),  # the claim is prepared, the value is not
        ("DRA_CPUSET_0a1b2c3d-0000-4000-8000-000000000000=2", "not prepared on this node"),
        ("DRA_CPUSET_{uid}=zz", "invalid"),
    ],
)
def test_forged_claim_variable_is_refused(env_value: str, message: str) -> None:
    async def body(pg: Playground) -> None:
        assert pg.runtime is not None
        await pg.apply(list(yaml.safe_load_all(EXAMPLE.read_text())))
        uid = next(iter(pg.agent.policy.claims())) if pg.agent else ""
        claimed = pg.cpus_of("pcore-test", "ctr0")
        assert claimed != CPUSet.parse("0-3")
        # A container of the claiming pod with a made-up value, or one naming an unknown claim,
        # must not get those CPUs.
        sandbox = next(p for p in pg.runtime.store.pods() if p.name == "pcore-test")
        ctr = Container(id="forger-ctr", pod_sandbox_id=sandbox.id, name="sidecar",
                        state=ContainerState.CREATED, env=(env_value.format(uid=uid),))
        result = await pg.runtime.create_container(ctr)
        assert not result.ok
        assert message in (result.error or "")

    run(body)


def test_claim_variable_of_another_pod_is_refused() -> None:
    async def body(pg: Playground) -> None:
        assert pg.runtime is not None
        await pg.apply(list(yaml.safe_load_all(EXAMPLE.read_text())))
        uid = next(iter(pg.agent.policy.claims())) if pg.agent else ""
        claimed = pg.cpus_of("pcore-test", "ctr0")
        sandbox = Pod(id="thief-sandbox", name="thief", uid="thief-uid", namespace="default")
        assert (await pg.runtime.run_pod_sandbox(sandbox)).ok
        ctr = Container(id="thief-ctr", pod_sandbox_id="thief-sandbox", name="c",
                        state=ContainerState.CREATED, env=(f"DRA_CPUSET_{uid}={claimed}",))
        result = await pg.runtime.create_container(ctr)
        assert not result.ok
        assert "not a consumer" in (result.error or "")

    run(body)


def _shared_claim_pods() -> list[dict[str, Any]]:
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "both"},
        "spec": {"devices": {"requests": [{"name": "cpus", "exactly": {"deviceClassName": "native.cpu", "count": 2}}]}},
    }
    pods = []
    for name in ("user-1", "user-2"):
        pod = _pod(name)
        pod["spec"]["resourceClaims"] = [{"name": "c", "resourceClaimName": "both"}]
        pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "c"}]}
        pods.append(pod)
    return [claim, *pods]


def test_a_claim_shared_by_two_pods_is_prepared_once_and_pins_both() -> None:
    """As the real kubelet does, the second pod of a claim already prepared on the node gets no
    NodePrepareResources: the agent admits its containers from the claim's reservedFor, keeps
    the claim while either pod runs, and releases it after the last."""

    async def body(pg: Playground) -> None:
        assert pg.agent is not None
        [claim, first, second] = _shared_claim_pods()
        await pg.apply([claim, first])
        await pg.apply([second])
        assert pg.pod_errors == {}
        cpus = pg.cpus_of("user-1")
        assert len(cpus) == 2
        assert pg.cpus_of("user-2") == cpus
        uid = next(iter(pg.agent.policy.claims()))
        assert pg.kubelet is not None
        assert len(pg.kubelet.claim_infos[("default", "both")].pods) == 2
        await pg.delete_pod("user-1")
        assert pg.agent.policy.claims() == {uid: cpus}
        assert pg.cpus_of("user-2") == cpus
        # A restart keeps the second pod's containers on the claim (its consumer was recorded).
        await pg.restart_agent()
        assert pg.agent is not None
        assert pg.cpus_of("user-2") == cpus
        await pg.delete_pod("user-2")
        assert pg.agent.policy.claims() == {}

    run(body)


def test_a_pod_sharing_a_claim_started_while_the_agent_was_away_is_pinned_at_synchronize() -> None:
    async def body(pg: Playground) -> None:
        assert pg.agent is not None
        [claim, first, second] = _shared_claim_pods()
        await pg.apply([claim, first])
        cpus = pg.cpus_of("user-1")
        await pg.agent.stop()
        pg.agent = None
        await pg.apply([second])  # no NRI plugin: the runtime starts it as the kubelet asks
        assert pg.pod_errors == {}
        await pg.restart_agent()
        assert pg.cpus_of("user-2") == cpus
        assert pg.cpus_of("user-1") == cpus

    run(body)


def test_config_reload_applies_policy_and_pushes() -> None:
    async def body(pg: Playground) -> None:
        assert pg.agent is not None
        await pg.apply([_pod("web", "500m")])
        assert pg.cpus_of("web") == pg.topology.online
        new = pg.agent.node.config.model_copy(
            update={"policy": pg.agent.node.config.policy.model_copy(update={"reserved_cpus": CPUSet([0, 1])})}
        )
        changes = await pg.agent.reload(new)
        assert "web" not in changes  # keyed by container id
        await pg.settle()
        assert pg.cpus_of("web") == pg.topology.online - CPUSet([0, 1])

    run(body)


def test_metrics_and_state_endpoints() -> None:
    async def body(pg: Playground) -> None:
        assert pg.agent is not None
        await pg.apply([_pod("web", "500m")])
        await pg.apply(list(yaml.safe_load_all(EXAMPLE.read_text())))
        await pg.delete_pod("pcore-test")
        status, _, text = pg.agent.metrics_page()
        body_text = text.decode()
        assert status == 200
        assert 'topodra_dra_prepare_total{result="ok"} 1.0' in body_text
        assert 'topodra_dra_unprepare_total{result="ok"} 1.0' in body_text
        assert "topodra_unsolicited_updates_sent_total 2.0" in body_text  # shrink at Prepare, widen at Unprepare
        assert 'topodra_nri_event_seconds_count{event="CreateContainer"} 2.0' in body_text
        assert 'topodra_cpus{kind="P-core",pool="root",use="shared"}' in body_text
        state = pg.agent.state()
        assert state["claims"] == {}
        assert state["push_idle"] is True
        # /state is not on the metrics endpoint but on the local socket the playground names.
        (where,) = [w for what, w in pg.endpoints() if what == "agent /state"]
        sock = where.split()[2]
        status, raw = await get(f"unix:{sock}", "/state")
        assert status == 200
        assert json.loads(raw) == json.loads(json.dumps(pg.agent.state()))

    run(body)


def test_state_names_the_cpus_the_slices_offer() -> None:
    """``/state``'s ``offer``: the CPUs of the published devices, without an exclusive grant's."""

    async def body(pg: Playground) -> None:
        assert pg.agent is not None
        await pg.apply([_pod("solo", "2", "2")])
        held = pg.cpus_of("solo")
        assert len(held) == 2
        await pg.agent.publisher.settle()
        published = CPUSet()
        for s in pg.slices():
            for d in s["spec"].get("devices") or []:
                published |= CPUSet([d["attributes"]["cpu"]["int"]])
        offer = CPUSet.parse(pg.agent.state()["offer"])
        assert offer == published
        assert offer.isdisjoint(held)

    run(body)


def test_replies_delivery_defers_to_the_next_event_reply() -> None:
    """Delivery "replies" (runtimes whose NRI may deadlock on unsolicited updates): with no cgroup
    to write, the changes ride on the next reply, and no UpdateContainers is ever sent."""

    async def body(pg: Playground) -> None:
        await pg.apply([_pod("web", "500m")])
        await pg.apply(list(yaml.safe_load_all(EXAMPLE.read_text())))
        claimed = pg.cpus_of("pcore-test", "ctr0")
        assert pg.agent is not None
        assert pg.agent.router.pusher is not None
        # The shrink rode on the claiming container's CreateContainer reply, not a push.
        assert pg.cpus_of("web").isdisjoint(claimed)
        assert pg.last_source[_cid(pg, "web")] == "update"
        await pg.delete_pod("pcore-test")
        # Released, but nothing pushed: web waits for the next event...
        assert pg.cpus_of("web").isdisjoint(claimed)
        await pg.apply([_pod("later", "100m")])
        # ...which carries it.
        assert claimed <= pg.cpus_of("web")
        assert pg.runtime is not None
        assert not [line for line in pg.runtime.log if "requested container updates" in line]

    run(body, agent_overrides={"nri": {"delivery": "replies"}})


def _claim_pod(name: str, count: int) -> list[dict[str, Any]]:
    """A pod whose only container runs on a claim of ``count`` CPUs (no CPU request of its own)."""
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": f"{name}-cpus"},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "cpu", "exactly": {"deviceClassName": "native.cpu", "count": count}}
        ]}}},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "resourceClaims": [{"name": "cpus", "resourceClaimTemplateName": f"{name}-cpus"}],
            "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "cpus"}]}}],
        },
    }
    return [template, pod]


def test_a_guaranteed_pod_refused_for_claimed_cpus_is_told_why_in_one_line(caplog: pytest.LogCaptureFixture) -> None:
    """The scheduler does not count claimed CPUs against the node's CPU: a Guaranteed pod that
    needs them is refused, and the CRI error (the pod's event) says so, with the policy's figures,
    on one line; the agent logs the refusal as one warning line, without a traceback."""
    from topodra.nri.types import LinuxResources
    from topodra.topology.synthetic import synthetic_topology

    topology = synthetic_topology("1s1d1n1l4c1t")  # 4 CPUs, one of them the shared floor

    async def body(pg: Playground) -> None:
        assert pg.runtime is not None
        assert pg.agent is not None
        await pg.apply(_claim_pod("holder", 3))
        claimed = pg.cpus_of("holder", "c")
        assert len(claimed) == 3
        sandbox = Pod(id="g-sandbox", name="g", uid="g-uid", namespace="default", cgroup_parent="/kubepods/podg-uid")
        assert (await pg.runtime.run_pod_sandbox(sandbox)).ok
        two_cpus = LinuxResources(cpu_shares=2048, cpu_quota=200_000, cpu_period=100_000, memory_limit=1 << 28)
        ctr = Container(id="g-ctr", pod_sandbox_id="g-sandbox", name="c", state=ContainerState.CREATED,
                        resources=two_cpus)
        caplog.clear()
        result = await pg.runtime.create_container(ctr)
        assert not result.ok
        error = result.error or ""
        assert "\n" not in error
        total = len(pg.topology.online)
        assert f"no CPU left for 2 exclusive CPU(s): {len(claimed)} of {total} CPUs are held by DRA claims" in error
        assert f"the rest can give at most {total - len(claimed)}" in error
        assert "the scheduler counts claimed CPUs as free node CPU" in error
        refusals = [r for r in caplog.records if r.name == "topodra.nri.stub" and r.levelno >= logging.WARNING]
        assert [(r.levelno, r.exc_info) for r in refusals] == [(logging.WARNING, None)]
        assert "no CPU left for 2 exclusive CPU(s)" in refusals[0].getMessage()

    async def main() -> None:
        async with Playground(topology=topology) as pg:
            await body(pg)

    caplog.set_level(logging.WARNING)
    asyncio.run(main())
