"""The upstream prototype's example works unchanged against our devices (real CEL)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from cel_expr_python import cel  # type: ignore[import-untyped]

from topodra.dra.attributes import Version, qualify
from topodra.dra.devices import DRIVER, Device, build_devices, device_class
from topodra.topology import CoreType, Topology, synthetic_topology
from topodra.topology.fixtures import unpacked_fixture
from topodra.topology.sysfs import read_topology

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "upstream-prototype.yaml"

#: The upstream prototype's example as published (tests/data/upstream-prototype).
UPSTREAM = ROOT / "tests" / "data" / "upstream-prototype" / "upstream-prototype.yaml"

HYBRID = synthetic_topology("1s1n2l4c2t4e")
INTEL_HYBRID_FIXTURE = "20em64t-hybrid-1p6c2t+2ca4co1t"  # a real Alder Lake: 6 P-cores x 2 threads + 8 E-cores


def _cel_device(device: Device) -> dict[str, Any]:
    """The `device` CEL variable: attributes grouped by domain (unqualified = driver's)."""
    attrs: dict[str, dict[str, Any]] = {}
    for name, value in device.attributes.items():
        domain, _, ident = qualify(name, DRIVER).rpartition("/")
        attrs.setdefault(domain, {})[ident] = value.text if isinstance(value, Version) else value
    return {"driver": DRIVER, "attributes": attrs}


def _matches(expression: str, device: Device) -> bool:
    env = cel.NewEnv(variables={"device": cel.Type.DYN})
    result = env.compile(expression).eval(data={"device": _cel_device(device)}).value()
    assert isinstance(result, bool), f"{expression!r} gave {result!r}"
    return result


def _templates() -> dict[str, dict[str, Any]]:
    docs = list(yaml.safe_load_all(EXAMPLE.read_text()))
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "ResourceClaimTemplate"}


def test_example_is_the_upstream_file_unchanged() -> None:
    assert EXAMPLE.read_bytes() == UPSTREAM.read_bytes()
    docs = list(yaml.safe_load_all(EXAMPLE.read_text()))
    assert [d["kind"] for d in docs] == ["ResourceClaimTemplate"] * 3 + ["Pod"]


def _real_hybrid() -> Topology:
    return read_topology(unpacked_fixture(INTEL_HYBRID_FIXTURE))


@pytest.mark.parametrize("machine", ["synthetic", "intel-hybrid-sysfs"])
@pytest.mark.parametrize(("template", "core_type"), [("p-cores", CoreType.P_CORE), ("e-cores", CoreType.E_CORE)])
def test_selectors_pick_the_right_core_type(machine: str, template: str, core_type: CoreType) -> None:
    topo = HYBRID if machine == "synthetic" else _real_hybrid()
    request = _templates()[template]["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert request["deviceClassName"] == DRIVER
    expressions = [s["cel"]["expression"] for s in request.get("selectors", [])]
    expressions += [s["cel"]["expression"] for s in device_class()["spec"]["selectors"]]
    devices = build_devices(topo)
    chosen = {d.name for d in devices if all(_matches(e, d) for e in expressions)}
    assert chosen == {f"cpu{c}" for c in topo.cpus_of_type(core_type)}
    assert chosen


def test_real_hybrid_machine_has_the_expected_split() -> None:
    topo = _real_hybrid()
    devices = {d.name: d for d in build_devices(topo)}
    p = [d for d in devices.values() if d.attributes["coreType"] == "P-core"]
    e = [d for d in devices.values() if d.attributes["coreType"] == "E-core"]
    assert (len(p), len(e)) == (12, 8)
    assert all("smtSibling" in d.attributes for d in p)
    assert not any("smtSibling" in d.attributes for d in e)


def test_any_cores_selects_everything() -> None:
    request = _templates()["any-cores"]["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert "selectors" not in request
    devices = build_devices(HYBRID)
    expr = device_class()["spec"]["selectors"][0]["cel"]["expression"]
    assert all(_matches(expr, d) for d in devices)
