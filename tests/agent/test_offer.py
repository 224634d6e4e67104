"""What the slices offer, the node honours: the shared floor and withdrawn exclusive CPUs.

Random claims are allocated by the simulator's allocator from the agent's own
published slices and prepared by the DRA driver over the agent's policy;
shared and Guaranteed containers come and go in between.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from topodra.agent.agent import Agent
from topodra.cpuset import CPUSet
from topodra.dra.checkpoint import CheckpointStore
from topodra.dra.devices import DRIVER, DeviceModelConfig, device_class, offered_cpus, ordered_cpus
from topodra.dra.driver import ClaimRef, Driver
from topodra.dra.slices import build_slices
from topodra.policy.api import ContainerRequest, PolicyError, QoSClass
from topodra.sim.allocator import AllocatedState, Allocator, allocation_of_claim, write_allocation
from topodra.topology.synthetic import synthetic_topology

NODE = "node-a"
TOPO = synthetic_topology("1s1d1n1l3c2t")  # 6 CPUs: small enough to run out often


def _agent(make_agent: Callable[..., Agent], model: str = "cpu", floor: int = 1, reserved: str = "") -> Agent:
    policy = {"reservedCPUs": reserved} if reserved else {}
    return make_agent(TOPO, nodeName=NODE, devices={"model": model, "sharedFloor": floor}, policy=policy)


def _driver(agent: Agent, fetch: Callable[[str, str], Awaitable[dict[str, Any]]], **extra: Any) -> Driver:
    """A DRA driver over the agent's claim bridge, its CDI and checkpoint in the agent's directories."""
    cfg = agent.node.config
    return Driver(
        policy=agent.claims, lock=agent.node.lock, fetch_claim=fetch, cdi_dir=cfg.cdi_dir,
        checkpoint_path=cfg.state_dir / "cp.json", devices=agent.node.devices, pool=NODE, **extra,
    )


def _claim(uid: str, count: int, model: str, *, tolerate: bool = False) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": DRIVER}
    if tolerate:  # a system daemon's claim: it may get reserved CPUs
        exactly["tolerations"] = [{"key": "native.cpu/reserved", "operator": "Exists", "effect": "NoSchedule"}]
    if model == "grouped":
        exactly["capacity"] = {"requests": {"cpu": str(count)}}
    elif model == "core":
        exactly |= {"allocationMode": "ExactCount", "count": max(1, count // 2)}
    else:
        exactly |= {"allocationMode": "ExactCount", "count": count}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": "default", "name": f"claim-{uid}", "uid": uid},
        "spec": {"devices": {"requests": [{"name": "cpu", "exactly": exactly}]}},
    }


def _container(i: int, cpus: int) -> ContainerRequest:
    if cpus:
        return ContainerRequest(
            id=f"c{i}", name="c", pod_uid=f"p{i}", pod_name=f"p{i}", namespace="default",
            qos=QoSClass.GUARANTEED, cpu_request_milli=1000 * cpus, cpu_limit_milli=1000 * cpus,
        )
    return ContainerRequest(
        id=f"c{i}", name="c", pod_uid=f"p{i}", pod_name=f"p{i}", namespace="default",
        qos=QoSClass.BURSTABLE, cpu_request_milli=100,
    )


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("claim"), st.integers(1, 6)),
        st.tuples(st.just("tolerating"), st.integers(1, 6)),
        st.tuples(st.just("shared"), st.just(0)),
        st.tuples(st.just("guaranteed"), st.integers(1, 3)),
        st.tuples(st.just("release"), st.integers(0, 20)),
        st.tuples(st.just("remove"), st.integers(0, 20)),
    ),
    min_size=1,
    max_size=25,
)


async def _churn(
    make_agent: Callable[..., Agent], ops: list[tuple[str, int]], model: str, floor: int, reserved: str = ""
) -> list[str]:
    """Run the operations; returns every Prepare error."""
    agent = _agent(make_agent, model, floor, reserved)
    claims: dict[tuple[str, str], dict[str, Any]] = {}

    async def fetch(namespace: str, name: str) -> dict[str, Any]:
        return claims[(namespace, name)]

    driver = _driver(agent, fetch)
    state = AllocatedState()
    prepared: list[tuple[ClaimRef, dict[str, Any]]] = []
    containers: list[str] = []
    errors: list[str] = []
    node = {"metadata": {"name": NODE, "labels": {}}}
    for n, (op, arg) in enumerate(ops):
        if op in ("claim", "tolerating"):
            slices = build_slices(NODE, agent.publisher.offered_devices())
            claim = _claim(f"u{n}", arg, model, tolerate=op == "tolerating")
            result = Allocator(slices, [device_class()], state).allocate(node, [claim])
            if result is None:
                continue  # the scheduler finds no room: nothing to honour
            claim = write_allocation(claim, result[0], {"metadata": {"name": f"pod{n}", "uid": f"pod{n}"}})
            claims[("default", claim["metadata"]["name"])] = claim
            ref = ClaimRef("default", f"u{n}", claim["metadata"]["name"])
            before = {c: g.exclusive for c, g in agent.policy.grants().items() if g.exclusive}
            out = (await driver.prepare([ref]))[ref.uid]
            after = {c: g.exclusive for c, g in agent.policy.grants().items() if g.exclusive}
            assert after == before, "a claim from the offered slices moved an exclusive container"
            if out.error:
                errors.append(out.error)
                continue
            got = agent.policy.claimed(ref.uid)
            assert got is not None
            assert op == "tolerating" or got.isdisjoint(agent.policy.reserved_cpus), "a reserved CPU for an ordinary claim"
            alloc = allocation_of_claim(claim)
            assert alloc is not None
            state.add(alloc)
            prepared.append((ref, claim))
        elif op == "release" and prepared:
            ref, claim = prepared.pop(arg % len(prepared))
            await driver.unprepare([ref])
            alloc = allocation_of_claim(claim)
            assert alloc is not None
            state.remove(alloc)
        elif op in ("shared", "guaranteed"):
            try:
                agent.router.record(agent.policy.add(_container(n, arg)))
                containers.append(f"c{n}")
            except PolicyError:
                pass  # the node is full for it: the kubelet would refuse the pod too
        elif op == "remove" and containers:
            cid = containers.pop(arg % len(containers))
            agent.router.record(agent.policy.remove(cid), subject=cid)
        agent.publisher.refresh_offer()
        offered = agent.publisher.offer
        agent.publisher.refresh_offer(full=True)
        assert agent.publisher.offer == offered, "the offer kept up from changes equals one from every grant"
        stats = agent.policy.stats().total
        assert offered.isdisjoint(stats.allocated), "exclusive CPUs must not be on offer"
        published = CPUSet()
        for d in agent.publisher.offered_devices():
            published |= d.cpus
        assert published.isdisjoint(stats.allocated), "no published device may stand for an exclusive CPU"
        if floor and stats.shared:
            assert not stats.shared <= offered, "a shared CPU must stay off offer"
        unclaimed = agent.policy.reserved_cpus - agent.policy.claimed_cpus
        assert not unclaimed or not unclaimed <= published, "the last unclaimed reserved CPU must stay off offer"
        assert unclaimed or not agent.policy.reserved_cpus, "claims hold every reserved CPU"
    return errors


@pytest.mark.parametrize("model", ["cpu", "core", "grouped"])
def test_no_prepare_fails_for_what_the_slices_offered(make_agent: Callable[..., Agent], model: str) -> None:
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(OPS)
    def prop(ops: list[tuple[str, int]]) -> None:
        assert asyncio.run(_churn(make_agent, ops, model, floor=1)) == []

    prop()


@pytest.mark.parametrize("model", ["cpu", "core", "grouped"])
def test_no_prepare_fails_for_claims_tolerating_the_reserved_taint(make_agent: Callable[..., Agent], model: str) -> None:
    """Reserved CPUs are published tainted: claims tolerating the taint may get them, never the
    last one the system containers have; the others never get one."""

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(OPS)
    def prop(ops: list[tuple[str, int]]) -> None:
        assert asyncio.run(_churn(make_agent, ops, model, floor=1, reserved="0,3")) == []

    prop()


def test_a_tolerating_claim_gets_a_reserved_cpu_but_not_the_last(make_agent: Callable[..., Agent]) -> None:
    async def run() -> tuple[list[str], dict[str, CPUSet]]:
        agent_box: list[Agent] = []

        def make(topology: Any, **config: Any) -> Agent:
            agent_box.append(make_agent(topology, **config))
            return agent_box[0]

        errors = await _churn(make, [("tolerating", 4), ("tolerating", 1)], "cpu", floor=1, reserved="0,3")
        return errors, agent_box[0].policy.claims()

    errors, claims = asyncio.run(run())
    assert errors == []
    held = CPUSet()
    for cpus in claims.values():
        held |= cpus
    assert len(held & CPUSet([0, 3])) == 1  # one reserved CPU claimed, the other kept for the system
    assert len(held) == 4  # of 6 CPUs: all but the shared floor and the last reserved CPU (the 2nd claim finds none)


def test_without_the_floor_the_scheduler_allocates_what_prepare_refuses(make_agent: Callable[..., Agent]) -> None:
    """The issue's case, the reason for the floor: a shared container, then a claim of every CPU."""
    errors = asyncio.run(_churn(make_agent, [("shared", 0), ("claim", 6)], "cpu", floor=0))
    assert len(errors) == 1
    assert "no shared CPU" in errors[0]
    assert asyncio.run(_churn(make_agent, [("shared", 0), ("claim", 6)], "cpu", floor=1)) == []


@given(
    st.sets(st.integers(0, 5)), st.sets(st.integers(0, 5)), st.integers(0, 3),
    st.sampled_from(["topology-reversed", "topology", "cpu-id"]),
)
def test_offered_cpus_leaves_out_exclusive_and_the_floor(
    free: set[int], exclusive: set[int], floor: int, order: str
) -> None:
    free_set = CPUSet(free) - CPUSet(exclusive)
    cfg = DeviceModelConfig(shared_floor=floor, order=order)  # type: ignore[arg-type]
    got = offered_cpus(TOPO, cfg, candidates=TOPO.online, shared_free=free_set, exclusive=CPUSet(exclusive))
    assert got.isdisjoint(CPUSet(exclusive))
    assert len(free_set - got) == min(floor, len(free_set))
    assert TOPO.online - got == CPUSet(exclusive) | (free_set - got)


BIG = synthetic_topology("2s1d2n2l4c2t")  # 32 CPUs over two packages: the floor sits far along the order


@given(
    st.sets(st.integers(0, 31)), st.sets(st.integers(0, 31)), st.sets(st.integers(0, 31)), st.integers(0, 6),
    st.sampled_from(["topology-reversed", "topology", "cpu-id"]), st.sampled_from([list, tuple, None]),
)
def test_the_floor_is_the_last_free_cpus_in_device_order(
    candidates: set[int], free: set[int], exclusive: set[int], floor: int, order: str, pass_order: Any
) -> None:
    """The floor found by searching the order's tails (or where the last floor was) is the one a
    walk from the order's end finds."""
    cfg = DeviceModelConfig(shared_floor=floor, order=order)  # type: ignore[arg-type]
    ordered = ordered_cpus(BIG, BIG.online, order)
    walked: list[int] = []
    for cpu in reversed(ordered):
        if len(walked) == floor:
            break
        if cpu in free:
            walked.append(cpu)
    want = CPUSet(candidates) - CPUSet(exclusive) - CPUSet(walked)
    got = offered_cpus(
        BIG, cfg, candidates=CPUSet(candidates), shared_free=CPUSet(free), exclusive=CPUSet(exclusive),
        order=pass_order(ordered) if pass_order else None,
    )
    assert got == want


@pytest.mark.parametrize("step", ["prepare", "unprepare"])
def test_a_claim_cancelled_while_its_checkpoint_is_written_still_moves_its_containers(
    make_agent: Callable[..., Agent], monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """The kubelet's deadline cancels Prepare (or Unprepare) after the policy decided, while the
    checkpoint is written: the shared container it shrinks (or grows back) hears of it now, not
    at the next drift check 30 s later."""

    async def main() -> None:
        agent = _agent(make_agent)
        agent.router.record(agent.policy.add(_container(0, 0)))  # a shared container on every CPU
        claim = _claim("u1", 1, "cpu")
        result = Allocator(build_slices(NODE, agent.publisher.offered_devices()), [device_class()], AllocatedState()).allocate(
            {"metadata": {"name": NODE, "labels": {}}}, [claim]
        )
        assert result is not None
        claim = write_allocation(claim, result[0], {"metadata": {"name": "pod", "uid": "pod"}})
        pushed: list[set[str]] = []
        heard = asyncio.Event()

        async def on_changes(changes: dict[str, Any]) -> None:
            pushed.append(set(changes))
            heard.set()

        async def fetch(namespace: str, name: str) -> dict[str, Any]:
            return claim

        driver = _driver(agent, fetch, on_changes=on_changes)
        ref = ClaimRef("default", "u1", claim["metadata"]["name"])
        if step == "unprepare":
            assert (await driver.prepare([ref]))[ref.uid].error == ""
            pushed.clear()
            heard.clear()
        loop = asyncio.get_running_loop()
        saving, released = asyncio.Event(), threading.Event()

        def stuck_save(store: CheckpointStore, claims: object) -> None:  # in the driver's worker thread
            loop.call_soon_threadsafe(saving.set)
            released.wait(10)  # a checkpoint write outliving the kubelet's deadline

        monkeypatch.setattr(CheckpointStore, "save", stuck_save)
        call = asyncio.ensure_future(driver.prepare([ref]) if step == "prepare" else driver.unprepare([ref]))
        try:
            await saving.wait()
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            await asyncio.wait_for(heard.wait(), 5)  # pushed by itself, no other event needed
        finally:
            released.set()
        assert pushed == [{"c0"}]

    asyncio.run(main())
