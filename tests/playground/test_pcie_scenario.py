"""The pcie-root scenario: a GPU of another driver and CPUs of its PCIe root, on every model and
machine it accepts; the fake GPU driver's Prepare; refusals in one line."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from typer.testing import CliRunner

from topodra.cli import app
from topodra.dra.claims import ClaimRef
from topodra.dra.devices import MODELS
from topodra.embedded.gpudriver import FakeGpuDriver
from topodra.gates import LIST_TYPE_ATTRIBUTES
from topodra.playground.runner import resolve_topology, run_scenario
from topodra.playground.scenario import builtin_scenario
from topodra.playground.world import Playground
from topodra.sim.gpus import GPU_DRIVER, gpu_devices
from topodra.topology.machine import load_machine

SCENARIO = builtin_scenario("pcie-root")


def _run(machine: str | None, model: str) -> list[str]:
    async def run() -> list[str]:
        topo, _ = resolve_topology(machine or SCENARIO.topology)
        assert SCENARIO.unmet(topo) is None
        async with Playground(topology=topo, model=model, gpus=SCENARIO.gpus) as pg:
            results = await run_scenario(pg, SCENARIO)
        assert sum(len(r.checks) for r in results) == 5
        return [c.message for r in results for c in r.checks if not c.ok] + [p for r in results for p in r.problems]

    return asyncio.run(run())


@pytest.mark.parametrize("model", MODELS)
def test_holds_on_every_model(model: str) -> None:
    assert _run(None, model) == []


def test_holds_on_a_four_socket_machine() -> None:
    assert _run("fakepcilocalities", "cpu") == []


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("machine", ["fakepcilocalities", "synthetic:2s1d2n1l4c2t+pci", "synthetic:1s1d2n1l2c2t+pci"])
def test_holds_on_every_model_and_machine(machine: str, model: str) -> None:
    assert _run(machine, model) == []


@pytest.mark.parametrize(
    ("machine", "needs"),
    [
        ("synthetic:2s1d2n1l4c2t", "2 PCIe roots holding a device, a made-up GPU each, with CPUs local to that root alone (it has no PCI data)"),
        ("nvidiagpunumanodes", "(it has no PCI data)"),
        # both roots are local to every CPU: no CPU carries a pcieRoot that matchAttribute can match
        ("40intel64-2g2n4c+pcilocality", "with CPUs local to that root alone (it has 0)"),
        ("2pa-pcidomain32bits", "at least 4 online CPUs (it has 2)"),
    ],
)
def test_a_machine_it_cannot_use_is_one_clear_line(machine: str, needs: str) -> None:
    r = CliRunner().invoke(app, ["playground", "-s", "pcie-root", "--topology", machine], env={"COLUMNS": "400"})
    assert r.exit_code == 1
    lines = [line for line in r.output.splitlines() if "error:" in line]
    assert len(lines) == 1, r.output
    assert needs in lines[0]
    assert "expectation(s)" not in r.output


def test_a_playground_with_gpus_on_a_machine_without_them_is_an_error() -> None:
    from topodra.playground.world import PlaygroundError

    async def run() -> None:
        async with Playground(topology=load_machine("synthetic:1s1d1n1l2c2t"), gpus=True):
            pass

    with pytest.raises(PlaygroundError, match=r"no gpu\.example\.com device on this machine: it has no PCI data"):
        asyncio.run(run())


def _claim(uid: str, results: list[dict[str, Any]] | None) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": "c", "namespace": "ns", "uid": uid}}
    if results is not None:
        obj["status"] = {"allocation": {"devices": {"results": results}}}
    return obj


def test_the_fake_gpu_driver_prepares_only_what_is_its_own() -> None:
    devices = gpu_devices(load_machine("synthetic:1s1d2n1l2c2t+pci"))
    claims = {
        "ok": _claim("ok", [
            {"request": "gpu", "driver": GPU_DRIVER, "pool": "n", "device": "gpu1"},
            {"request": "cpus", "driver": "native.cpu", "pool": "n", "device": "cpu3"},
        ]),
        "free": _claim("free", None),
        "other": _claim("other", [{"request": "gpu", "driver": GPU_DRIVER, "pool": "m", "device": "gpu0"}]),
        "ghost": _claim("ghost", [{"request": "gpu", "driver": GPU_DRIVER, "pool": "n", "device": "gpu7"}]),
    }

    async def fetch(namespace: str, name: str) -> dict[str, Any]:
        return claims[name]

    async def run() -> dict[str, Any]:
        drv = FakeGpuDriver(devices, pool="n", fetch_claim=fetch)
        got = await drv.prepare([ClaimRef("ns", uid, uid) for uid in claims])
        assert set(drv.prepared) == {"ok"}
        await drv.unprepare([ClaimRef("ns", "ok", "ok")])
        assert drv.prepared == {}
        return got

    got = asyncio.run(run())
    assert [(d.request, d.pool, d.device) for d in got["ok"].devices] == [("gpu", "n", "gpu1")]
    assert got["ok"].cdi_ids == ()
    assert "is not allocated" in got["free"].error
    assert "belongs to another pool" in got["other"].error
    assert "has no device 'gpu7'" in got["ghost"].error


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"gpus": "yes"}, "gpus must be true or false, got 'yes'"),
        ({"requires": {"gpus": 2}}, "requires.gpus needs gpus: true"),
        ({"gpus": True, "requires": {"gpus": -1}}, "requires.gpus must be a whole number"),
        ({"steps": [{"expect": {"p/c": {"pcieLocal": "x"}}}]}, "pcieLocal must be true or false"),
    ],
)
def test_bad_scenario_settings_are_named(data: dict[str, Any], needle: str) -> None:
    from topodra.playground.scenario import ScenarioError, parse_scenario

    with pytest.raises(ScenarioError, match=needle):
        parse_scenario({"steps": [{"title": "x"}], **data}, "s.yaml", lambda name: [])


def test_list_attributes_reach_the_agent_and_the_api_server() -> None:
    """With ``DRAListTypeAttributes`` on, the agent publishes a CPU serving both roots with the list of them, and
    the API server double stores it (a real one does with the gate on)."""

    async def run() -> list[object]:
        async with Playground(topology=load_machine("fixture:40intel64-2g2n4c+pcilocality"), gpus=True, gates={LIST_TYPE_ATTRIBUTES: True}) as pg:
            devices = [d for s in pg.slices() if s["spec"]["driver"] == "native.cpu" for d in s["spec"]["devices"]]
            return [d["attributes"]["resource.kubernetes.io/pcieRoot"] for d in devices]

    roots = asyncio.run(run())
    assert len(roots) == 39  # one CPU kept back as the shared floor
    assert all(r == {"strings": ["pci0000:00", "pci0000:40"]} for r in roots)
