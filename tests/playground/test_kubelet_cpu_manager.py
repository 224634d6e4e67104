"""The playground's kubelet CPU manager steps: an agent restarted beside a ``static`` kubelet
refuses to start, in one line, and the scenario says whether that was expected."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from topodra.playground.runner import StepResult, resolve_topology, run_scenario
from topodra.playground.scenario import ScenarioError, builtin_scenario, parse_scenario
from topodra.playground.world import Playground


def _run(data: dict[str, Any]) -> list[StepResult]:
    sc = parse_scenario(data, "test.yaml", None)

    async def run() -> list[StepResult]:
        topo, _ = resolve_topology(sc.topology)
        async with Playground(topology=sc.machine(topo), model="cpu") as pg:
            return await run_scenario(pg, sc)

    return asyncio.run(run())


def test_the_builtin_scenario_refuses_then_starts() -> None:
    sc = builtin_scenario("kubelet-cpu-manager")

    async def run() -> list[StepResult]:
        topo, _ = resolve_topology(sc.topology)
        async with Playground(topology=sc.machine(topo), model="cpu") as pg:
            return await run_scenario(pg, sc)

    first, second, third = asyncio.run(run())
    assert first.ok
    assert "agent refused to start: the kubelet runs cpuManagerPolicy: static" in first.lines[-1]
    assert "\n" not in first.lines[-1]
    assert second.ok
    assert second.lines[-1] == "agent restarted"
    assert third.ok


def test_an_unexpected_refusal_fails_the_step() -> None:
    first, = _run({"topology": "synthetic:1s1d1n1l2c2t", "steps": [{"kubeletCpuManagerPolicy": "static", "restartAgent": True}]})
    assert not first.ok
    assert first.problems == [p for p in first.problems if p.startswith("the agent refused to start: the kubelet runs cpuManagerPolicy: static")]
    assert first.problems


def test_an_expected_refusal_that_does_not_come_fails_the_step() -> None:
    first, = _run({"topology": "synthetic:1s1d1n1l2c2t", "steps": [{"kubeletCpuManagerPolicy": "none", "restartAgent": True, "agentRefused": "static"}]})
    assert not first.ok
    assert "agent started; expected a refusal" in first.checks[0].message


@pytest.mark.parametrize(
    ("step", "message"),
    [
        ({"kubeletCpuManagerPolicy": "dynamic", "restartAgent": True}, "kubeletCpuManagerPolicy: must be none or static (got 'dynamic')"),
        ({"agentRefused": "static"}, "agentRefused needs restartAgent: true"),
        ({"restartAgent": True, "agentRefused": 3}, "agentRefused: must be the text the refusal contains (got 3)"),
    ],
)
def test_bad_kubelet_keys_are_one_line(step: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_scenario({"steps": [step]}, "test.yaml", None)
