"""``topodra policy pools`` and ``topodra policy place``, run in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from topodra.cli import app
from topodra.policy.commands import load_workload, parse_memory_quantity

runner = CliRunner()

WORKLOAD = """
config: {reservedCPUCount: 2}
claims: {gpu-cpus: "4-5"}
containers:
  - {name: db, cpu: "4", memory: 8Gi}
  - {name: web, cpu: 500m, cpuLimit: "2"}
  - {name: side}
  - {name: inf, cpu: "2", claims: [gpu-cpus]}
  - {name: proxy, namespace: kube-system, cpu: 100m}
"""


def write(tmp_path: Path, text: str, name: str = "w.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_pools_on_a_synthetic_machine() -> None:
    r = runner.invoke(app, ["policy", "pools", "--topology", "2s1d2n2l4c2t"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    for name in ("root", "package0", "numa3", "l3cache7"):
        assert name in r.output


def test_pools_unknown_topology_is_a_clear_error() -> None:
    r = runner.invoke(app, ["policy", "pools", "--topology", "no-such-machine"])
    assert r.exit_code == 1
    assert "'no-such-machine'" in r.output
    assert "or a fixture name" in r.output
    assert "Traceback" not in r.output


def test_pools_reports_bad_config(tmp_path: Path) -> None:
    cfg = write(tmp_path, "policy:\n  reservedCPUs: 0-x\n", "c.yaml")
    r = runner.invoke(app, ["policy", "pools", "--topology", "1s1d1n1l4c2t", "--config", str(cfg)])
    assert r.exit_code == 1
    assert "reservedCPUs" in r.output
    assert "0-x" in r.output


def test_place_json(tmp_path: Path) -> None:
    r = runner.invoke(app, ["policy", "place", str(write(tmp_path, WORKLOAD)), "--topology", "2s1d2n2l8c2t", "-f", "json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    got = out["containers"]
    assert got["default/inf/inf"] == {"cpus": "4-5", "mems": "0"}
    assert got["kube-system/proxy/proxy"]["cpus"] == "0,64"
    assert len(got["default/db/db"]["cpus"].split(",")) == 2  # 4 CPUs: two ranges of two siblings
    assert out["refused"] == {}
    assert out["snapshot"]["claims"] == {"gpu-cpus": "4-5"}


def test_place_table_and_refusal(tmp_path: Path) -> None:
    text = WORKLOAD + '  - {name: huge, cpu: "500"}\n'
    r = runner.invoke(app, ["policy", "place", str(write(tmp_path, text)), "--topology", "2s1d2n2l8c2t"],
                      env={"COLUMNS": "200"})
    assert r.exit_code == 1
    assert "refused" in r.output
    assert "no pool can supply 500 exclusive CPUs" in r.output
    assert "exclusive" in r.output


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("containers: [{name: a, cpu: lots}]", "containers[0].cpu"),
        ("containers: [{name: a, mem: 1Gi}]", "unknown keys ['mem']"),
        ("containers: [{name: a, memory: 1Gb}]", "containers[0].memory"),
        ("containers: [{name: a, qos: Gold}]", "'Gold' is not Guaranteed"),
        ("containers: [{name: a}, {name: a}]", "listed twice"),
        ("pods: []", "unknown keys ['pods']"),
        ("claims: {c: '0-x'}\ncontainers: []", "0-x"),
        ("config: {pinCPU: sometimes}\ncontainers: []", "sometimes"),
    ],
)
def test_place_bad_workloads(tmp_path: Path, text: str, fragment: str) -> None:
    r = runner.invoke(app, ["policy", "place", str(write(tmp_path, text)), "--topology", "1s1d1n1l4c2t"],
                      env={"COLUMNS": "200"})
    assert r.exit_code == 1
    assert fragment in r.output.replace("\n", "")


def test_qos_is_derived_like_kubernetes() -> None:
    _, _, reqs = load_workload(
        {
            "containers": [
                {"name": "g", "cpu": "2", "memory": "1Gi"},
                {"name": "b", "cpu": "1", "cpuLimit": "2"},
                {"name": "e"},
                {"name": "m", "memory": "1Gi", "memoryLimit": "2Gi"},
            ]
        }
    )
    assert [r.qos.value for r in reqs] == ["Guaranteed", "Burstable", "BestEffort", "Burstable"]
    assert reqs[0].cpu_limit_milli == 2000


def test_workload_reads_kubernetes_quantities() -> None:
    """Issue 11: `policy place` read 1K, truncated 1.1Gi and refused 1k and 2e0."""
    _, _, reqs = load_workload(
        {"containers": [{"name": "a", "cpu": "2e0", "memory": "1.1Gi"}, {"name": "b", "cpu": "1500m", "memory": "1k"}]}
    )
    assert [(r.cpu_request_milli, r.memory_request) for r in reqs] == [(2000, 1181116007), (1500, 1000)]
    with pytest.raises(ValueError, match=r"containers\[0\]\.memory: expected a memory quantity"):
        load_workload({"containers": [{"name": "a", "memory": "1K"}]})


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("512Mi", 512 << 20), ("1G", 10**9), ("1000", 1000), ("1.5Gi", 3 << 29), (7, 7),
        # the Kubernetes grammar (topodra.quantity): lower-case k, exponents; fractions round up, as Value()
        ("1k", 1000), ("2e0", 2), ("1.1Gi", 1181116007), ("0.5", 1), ("1e3", 1000),
    ],
)
def test_memory_quantities(text: object, size: int) -> None:
    assert parse_memory_quantity(text, "m") == size


@pytest.mark.parametrize("text", ["1Gb", "-1", "1m", "", True, "Gi", "1K", "500u", float("nan"), -5])
def test_bad_memory_quantities(text: object) -> None:
    with pytest.raises(ValueError, match="m: expected a memory quantity"):
        parse_memory_quantity(text, "m")
