"""The built-in ``node-cpu`` scenario: claimed CPUs and the node's cpu, without and with
DRANodeAllocatableResources, side by side (real agent, API server double, the simulator's checks)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from typer.testing import CliRunner

from topodra.cli import app
from topodra.embedded.store import KINDS
from topodra.playground.runner import StepResult, resolve_topology, run_scenario
from topodra.playground.scenario import ScenarioError, builtin_scenario, parse_scenario
from topodra.playground.world import Playground

PODS = KINDS[("", "pods")]


def _run(model: str, topology: str | None = None) -> tuple[list[str], dict[int, dict[str, Any]]]:
    """The failed expectations and problems, and per step what the API server holds."""
    sc = builtin_scenario("node-cpu")
    seen: dict[int, dict[str, Any]] = {}

    async def main() -> list[str]:
        topo, _ = resolve_topology(topology or sc.topology)
        async with Playground(topology=topo, model=model, gates=sc.gates) as pg:

            async def after(res: StepResult) -> None:
                pods = {p["metadata"]["name"]: p for p in pg.store.list(PODS)["items"]}
                seen[res.index] = {
                    "mappings": [d.get("nodeAllocatableResourceMappings") for s in pg.slices() for d in s["spec"].get("devices", [])],
                    "holder": (pods.get("holder") or {}).get("status", {}).get("nodeAllocatableResourceClaimStatuses"),
                    "online": len(topo.online),
                }

            results = await run_scenario(pg, sc, after_step=after)
        return [c.message for r in results for c in r.checks if not c.ok] + [p for r in results for p in r.problems]

    return asyncio.run(main()), seen


def test_without_the_gate_the_pod_is_refused_late_and_with_it_up_front() -> None:
    failed, seen = _run("cpu")
    assert failed == []
    online = seen[2]["online"]
    # before: no mappings published (the API server drops them), nothing in the holder's status
    assert set(map(str, seen[2]["mappings"])) == {"None"}
    assert seen[2]["holder"] is None
    # after the gate and the agent's restart: every device says it is one cpu, and the holder's
    # claim takes every CPU but the shared floor of the node's cpu
    assert seen[5]["mappings"] == [{"cpu": {"allocationMultiplier": "1"}}] * (online - 1)
    (status,) = seen[5]["holder"]
    assert status["containers"] == ["app"]
    assert status["resources"] == {"cpu": str(online - 1)}


@pytest.mark.slow
@pytest.mark.parametrize("model", ["cpu", "core", "core-or-thread"])
@pytest.mark.parametrize(
    "topology",
    ["fixture:16em64t-4s2c2t", "fixture:nvidiagpunumanodes", "fixture:16amd64-8n2c", "synthetic:1s1n1l4c8t", "synthetic:2s1d2n1l4c2t"],
)
def test_it_holds_for_every_model_and_machine_it_accepts(model: str, topology: str) -> None:
    failed, seen = _run(model, topology)
    assert failed == []
    assert seen[5]["holder"]  # the claim counted against the node's cpu


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "grouped"], "is written for cpu or core or core-or-thread devices; its expectations do not hold with --model grouped"),
        (["--topology", "fixture:8ia64-2s2c2t"], "needs a machine with at least 9 online CPUs (it has 8)"),
        (["--topology", "fixture:64amd64-4s2n4ca2co"], "needs a machine with at most 33 online CPUs (it has 64)"),
    ],
)
def test_what_it_does_not_hold_for_is_refused_in_one_line(args: list[str], message: str) -> None:
    r = CliRunner().invoke(app, ["playground", "--scenario", "node-cpu", *args])
    assert r.exit_code == 1
    lines = [line for line in r.output.splitlines() if line.strip()]  # the error line is on stderr
    assert len(lines) == 1
    assert message in " ".join(r.output.split())


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"featureGates": {"DRAFoo": True}, "steps": []}, "featureGates: unrecognized feature gate: DRAFoo"),
        ({"featureGates": {"DRANodeAllocatableResources": "yes"}, "steps": []}, "featureGates must map gate names to true or false"),
        ({"steps": [{"featureGates": {"Nope": False}}]}, "step 1: featureGates: unrecognized feature gate: Nope"),
        ({"requires": {"models": ["gpu"]}, "steps": []}, "requires.models must be a list of cpu, core, core-or-thread, grouped"),
        ({"requires": {"maxCpus": -1}, "steps": []}, "requires.maxCpus must be a whole number"),
    ],
)
def test_bad_gates_and_requirements_name_the_key(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(data, "f.yaml", lambda name: [])
