"""One huge NodePrepareResources must not stall the agent (issue 13, item 1).

A kubelet call with thousands of claims the API server does not know, whose fetches are held up, is in
flight while: /healthz answers, another pod's claim is prepared and its container created, and a
plain pod starts. The huge call keeps at most ``FETCH_CONCURRENCY`` fetches in flight and answers
every claim. Latency figures (healthz, CreateContainer p99 against idle) are in
``python -m benchmarks dra``, not here.
"""

from __future__ import annotations

import asyncio
import socket
from collections import Counter
from typing import Any

import pytest
from testkit.crashsoak import TEMPLATES, soak_pod

from topodra.dra.driver import FETCH_CONCURRENCY
from topodra.dra.proto import dra_v1_pb2
from topodra.kube.client import RESOURCE_CLAIMS, KubeClient, Resource
from topodra.playground.world import Playground
from topodra.topology.synthetic import synthetic_topology

FLOOD = 2_000  # 20,000 in the benchmark; the bound is the same


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _get(port: int, path: str) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    raw = await reader.read()
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


@pytest.mark.slow
def test_a_flood_of_unknown_claims_leaves_the_agent_responsive(monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        port = _free_port()
        topo = synthetic_topology("1s1d1n1l4c2t4e")
        async with Playground(topology=topo, agent_overrides={"metricsAddress": f"127.0.0.1:{port}"}) as pg:
            assert pg.agent is not None
            assert pg.agent.claims.driver is not None
            assert pg.kubelet is not None
            real_get = KubeClient.get
            gate = asyncio.Event()
            saturated = asyncio.Event()
            in_flight = [0, 0]  # now, most

            async def gated(kube: KubeClient, resource: Resource, name: str, namespace: str | None = None) -> Any:
                if resource is RESOURCE_CLAIMS and name.startswith("flood-"):  # the driver's fetches
                    in_flight[0] += 1
                    in_flight[1] = max(in_flight)
                    if in_flight[0] >= FETCH_CONCURRENCY:
                        saturated.set()
                    try:
                        await gate.wait()
                    finally:
                        in_flight[0] -= 1
                return await real_get(kube, resource, name, namespace)

            monkeypatch.setattr(KubeClient, "get", gated)
            await pg.apply(TEMPLATES)
            stub = pg.kubelet.plugins["native.cpu"].stub
            request = dra_v1_pb2.NodePrepareResourcesRequest(
                claims=[dra_v1_pb2.Claim(namespace="default", uid=f"f{i}", name=f"flood-{i}") for i in range(FLOOD)]
            )
            async def call() -> Any:
                return await stub.NodePrepareResources(request, timeout=120)

            flood = asyncio.create_task(call())
            await asyncio.wait_for(saturated.wait(), 60)

            status, body = await asyncio.wait_for(_get(port, "/healthz"), 10)
            assert (status, body) == (200, b"ok\n")
            lines = await asyncio.wait_for(pg.apply([soak_pod("claimer", {}, "one-cpu"), soak_pod("web", {"requests": {"cpu": "250m"}})]), 60)
            assert lines == ["pod/claimer created", "pod/web created", "pod/claimer running", "pod/web running"]
            assert len(pg.cpus_of("claimer")) == 1
            assert not flood.done(), "the flood was still in flight the whole time"
            assert in_flight[1] == FETCH_CONCURRENCY

            gate.set()
            answer = await asyncio.wait_for(flood, 120)
            assert len(answer.claims) == FLOOD
            # Each unknown claim is refused: not found, or not fetched within the call's deadline
            # (30 s: 20,000 fetches through HTTP may not all fit on a loaded machine).
            kinds = Counter("not found" if "not found" in c.error else "deadline" if "deadline" in c.error else c.error for c in answer.claims.values())
            assert set(kinds) <= {"not found", "deadline"}, kinds
            assert in_flight[1] == FETCH_CONCURRENCY

    asyncio.run(main())
