"""Deployment artifacts: manifests and the Helm chart validate against the Kubernetes schemas,
carry the mounts the agent needs, and their agent configuration parses."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from topodra.agent.config import parse_config

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "deploy" / "manifests" / "topodra.yaml"
CHART = ROOT / "deploy" / "helm" / "topodra"
K8S_VERSION = "1.34.0"


def _tool(name: str) -> str:
    exe = Path(sys.executable).with_name(name)
    found = str(exe) if exe.exists() else shutil.which(name)
    assert found, f"{name} is not installed (pip install -e '.[dev]')"
    return found


def _validate(path: Path) -> None:
    r = subprocess.run(
        [_tool("kubernetes-validate"), "-k", K8S_VERSION, "--strict", str(path)], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "passed" in r.stdout + r.stderr


def _render(tmp_path: Path, *extra: str) -> Path:
    r = subprocess.run(
        [_tool("helm"), "template", "topodra", str(CHART), "-n", "topodra", "--kube-version", K8S_VERSION, *extra],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    out = tmp_path / "rendered.yaml"
    out.write_text(r.stdout)
    return out


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _daemonset_checks(docs: list[dict[str, Any]]) -> None:
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    paths = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    for needed in ("/var/run/nri", "/var/run/cdi", "/var/lib/kubelet/plugins", "/var/lib/kubelet/plugins_registry", "/sys"):
        assert needed in paths, needed
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    # Kubelet plugin paths must be the same inside and outside the container.
    assert {"/var/lib/kubelet/plugins", "/var/lib/kubelet/plugins_registry", "/var/run/cdi", "/var/run/nri"} <= mounts
    env = {e["name"] for e in pod["containers"][0]["env"]}
    assert "NODE_NAME" in env
    cm = next(d for d in docs if d["kind"] == "ConfigMap")
    cfg = parse_config(yaml.safe_load(cm["data"]["config.yaml"]), "configmap")
    assert cfg.sysfs_root == Path("/host")
    dc = next(d for d in docs if d["kind"] == "DeviceClass")
    assert dc["metadata"]["name"] == "native.cpu"
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    for need in (
        ("resource.k8s.io", "resourceslices", "create"),
        ("resource.k8s.io", "resourceslices", "watch"),
        ("resource.k8s.io", "resourceslices", "delete"),
        ("resource.k8s.io", "resourceclaims", "get"),
        ("", "nodes", "get"),
    ):
        assert need in granted, need


def test_plain_manifests_validate() -> None:
    _validate(MANIFESTS)
    _daemonset_checks(_docs(MANIFESTS))


def test_helm_chart_renders_and_validates(tmp_path: Path) -> None:
    rendered = _render(tmp_path)
    _validate(rendered)
    _daemonset_checks(_docs(rendered))


def test_helm_values_reach_the_config(tmp_path: Path) -> None:
    rendered = _render(tmp_path, "--set", "config.devices.model=grouped", "--set", "deviceClass.create=false")
    docs = _docs(rendered)
    assert not any(d["kind"] == "DeviceClass" for d in docs)
    cm = next(d for d in docs if d["kind"] == "ConfigMap")
    assert parse_config(yaml.safe_load(cm["data"]["config.yaml"])).devices.model == "grouped"


def test_validator_rejects_a_broken_manifest(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    docs = _docs(MANIFESTS)
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    ds["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["mountPath"] = 17
    bad.write_text(yaml.safe_dump(ds))
    r = subprocess.run([_tool("kubernetes-validate"), "-k", K8S_VERSION, "--strict", str(bad)], capture_output=True, text=True)
    assert r.returncode != 0


@pytest.mark.parametrize("path", ["Dockerfile"])
def test_dockerfile_runs_the_agent(path: str) -> None:
    text = (ROOT / path).read_text()
    assert 'ENTRYPOINT ["topodra"]' in text
    assert '"agent"' in text
