"""The NRI warm-up (agent/warmup.py): a scratch copy of the node answers a node-like mix before
the runtime connects, every call without an error, and nothing of it reaches the real agent's
state, its log, its peers or an armed crash point."""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from topodra import faults
from topodra.agent.agent import Agent
from topodra.agent.config import parse_config
from topodra.agent.warmup import scratch_node, warm_up, warm_up_calls
from topodra.cpuset import CPUSet
from topodra.embedded.runtime import EmbeddedRuntime
from topodra.nri.stub import Stub
from topodra.nri.types import Container, ContainerState, LinuxResources, Pod
from topodra.topology.synthetic import synthetic_topology


@pytest.fixture
def base() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="tdwu-", dir="/tmp"))  # unix socket paths are short
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _config(base: Path, **extra: object) -> dict[str, object]:
    return {
        "nodeName": "n1",
        "stateDir": str(base / "state"),
        "cdiDir": str(base / "cdi"),
        "metricsAddress": "",
        "nri": {"socket": str(base / "nri.sock")},
        "dra": {"enabled": False},
        **extra,
    }


@pytest.mark.parametrize(
    ("machine", "policy"),
    [
        ("1s1d1n1l4c2t", {}),  # 8 CPUs
        ("2s1d2n2l16c2t", {}),  # 256 CPUs
        ("1s1d1n1l4c2t4e", {}),  # hybrid: P-cores and E-cores
        ("2s1d2n2l4c2t", {"reservedCPUs": "0-3"}),
    ],
)
def test_every_call_of_the_mix_is_answered_on_the_scratch_agent(
    base: Path, machine: str, policy: dict[str, object]
) -> None:
    cfg = parse_config(_config(base, policy=policy))
    scratch = scratch_node(cfg, synthetic_topology(machine))
    answered = asyncio.run(warm_up(scratch))
    assert answered == len(list(warm_up_calls()))
    assert not scratch.state.containers  # every one stopped again
    assert not scratch.state.policy.grants()


def test_the_started_agent_keeps_nothing_of_the_warm_up_and_logs_none_of_it(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    cfg = parse_config(_config(base))
    topology = synthetic_topology("2s1d2n2l4c2t")

    async def main() -> None:
        async with EmbeddedRuntime(base / "nri.sock") as runtime:
            agent = Agent(cfg, topology=topology)
            calls: list[str] = []
            real_handle = Stub.handle

            async def counting(self: Stub, method: str, payload: bytes = b"", *, timeout_nano: int = 0) -> object:
                calls.append(method)
                return await real_handle(self, method, payload, timeout_nano=timeout_nano)

            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(Stub, "handle", counting)
                await agent.start()
            try:
                assert calls == [m for m, _ in warm_up_calls()]  # it ran, before the start returned
                await runtime.wait_for_plugins(1)
                assert not agent.node.containers
                assert not agent.policy.grants()
                assert not [e for e in agent.events if "warm-up" in e]
                assert agent.publisher.offer == Agent(cfg, topology=topology).publisher.offer  # nothing withdrawn by the scratch's grants
                # the node's own first container is placed as on any start
                pod = Pod(id="p", name="p", uid="u", namespace="d", cgroup_parent="/kubepods/podu")
                assert (await runtime.run_pod_sandbox(pod)).ok
                ctr = Container(
                    id="c", pod_sandbox_id="p", name="c", state=ContainerState.CREATED,
                    resources=LinuxResources(cpu_shares=2048, cpu_quota=200_000, cpu_period=100_000, memory_limit=1 << 28),
                    cgroups_path="/kubepods/podu/c",
                )
                result = await runtime.create_container(ctr)
                assert result.ok
                placed = agent.policy.assignment("c")
                assert placed is not None
                assert len(placed.cpus) == 2
            finally:
                await agent.stop()

    asyncio.run(main())
    scratch_lines = [r for r in caplog.records if "warm-up" in r.getMessage() and r.levelno >= logging.INFO]
    assert not scratch_lines  # the scratch's notes and offers are not the node's
    assert any("NRI warm-up: 33 calls" in r.getMessage() for r in caplog.records)


def test_an_armed_crash_point_neither_fires_nor_counts_during_the_warm_up(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fired(code: int) -> None:  # instead of leaving the test process
        raise AssertionError(f"a crash point fired during the warm-up (exit {code})")

    monkeypatch.setattr("topodra.faults.os._exit", fired)
    monkeypatch.setenv(faults.ENV, "create.placed@2,stop.removed")
    faults.rearm()
    try:
        scratch = scratch_node(parse_config(_config(base)), synthetic_topology("2s1d2n2l4c2t"))
        assert asyncio.run(warm_up(scratch)) == len(list(warm_up_calls()))  # still alive
        assert faults.armed() == {"create.placed": 2, "stop.removed": 1}
    finally:
        monkeypatch.delenv(faults.ENV)
        faults.rearm()


def test_on_a_node_too_small_for_the_mix_the_warm_up_logs_one_line_without_a_traceback(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    scratch = scratch_node(parse_config(_config(base)), synthetic_topology("1s1d1n1l2c1t"))  # 2 CPUs
    answered = asyncio.run(warm_up(scratch))
    total = len(list(warm_up_calls()))
    assert 0 < answered < total  # the node cannot hold the mix's exclusive containers
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [(r.name, r.exc_info) for r in loud] == [("topodra.agent.warmup", None)]
    message = loud[0].getMessage()
    assert f"ran {answered} of its {total} calls" in message
    assert "CreateContainer was refused" in message
    assert "no pool can supply" in message


def test_a_failing_warm_up_costs_the_start_nothing(base: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def broken(self: Stub, method: str, payload: bytes = b"", *, timeout_nano: int = 0) -> object:
        raise RuntimeError("boom")

    scratch = scratch_node(parse_config(_config(base)), synthetic_topology("1s1d1n1l4c2t"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Stub, "handle", broken)
        assert asyncio.run(warm_up(scratch)) == 0
    assert any("NRI warm-up failed" in r.getMessage() for r in caplog.records)


def test_the_mix_places_exclusive_and_shared_containers(base: Path) -> None:
    """The mix walks the paths a node's first containers take: exclusive grants, shared and
    best-effort placements (then a resize and the stops)."""
    from topodra.nri.proto import api_pb2

    scratch = scratch_node(parse_config(_config(base)), synthetic_topology("2s1d2n2l4c2t"))
    plugin_stub = Stub(scratch.nri, socket_path="", name="t", idx="10", env={}, reconnect=False)
    exclusive = shared = 0

    async def main() -> None:
        nonlocal exclusive, shared
        for method, payload in warm_up_calls():
            reply, status = await plugin_stub.handle(method, payload)
            assert status is None
            if method == "CreateContainer":
                answer = api_pb2.CreateContainerResponse.FromString(reply)
                cpus = CPUSet.parse(answer.adjust.linux.resources.cpu.cpus)
                exclusive += len(cpus) <= 2
                shared += len(cpus) > 2

    asyncio.run(main())
    assert exclusive == 4  # the Guaranteed ones
    assert shared == 12  # Burstable on a socket's shared CPUs, BestEffort on an L3's
