"""Deployment artifacts: the plain `helm template` works, manifests and chart validate against the
Kubernetes schemas, every chart value is used once and reaches what it names, the plain manifests
are the chart rendered, and the admission policy lets an agent write only its own node's slices.

`python tests/agent/test_deploy.py --write` regenerates deploy/manifests/topodra.yaml from the chart.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from topodra.agent.config import parse_config
from topodra.agent.config_check import check_on_machine
from topodra.topology.synthetic import synthetic_topology

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "deploy" / "manifests" / "topodra.yaml"
CHART = ROOT / "deploy" / "helm" / "topodra"
EXAMPLE_RBAC = ROOT / "examples" / "rbac.yaml"
K8S_VERSION = "1.34.0"
#: Namespaced kinds in our artifacts (a fresh cluster has only these namespaces).
NAMESPACED = {"ServiceAccount", "ConfigMap", "DaemonSet", "Service", "ServiceMonitor", "Role", "RoleBinding"}
BUILTIN_NAMESPACES = {"default", "kube-system", "kube-public"}


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


def _helm_template(*extra: str) -> str:
    r = subprocess.run(
        [_tool("helm"), "template", "topodra", str(CHART), "-n", "topodra", *extra], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def _render(tmp_path: Path, *extra: str) -> Path:
    out = tmp_path / "rendered.yaml"
    out.write_text(_helm_template(*extra))
    return out


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _rendered(*extra: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(_helm_template(*extra)) if d]


def _one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind]
    return doc


def _pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = _one(docs, "DaemonSet")["spec"]["template"]["spec"]
    return spec


def _config(docs: list[dict[str, Any]]) -> Any:
    return parse_config(yaml.safe_load(_one(docs, "ConfigMap")["data"]["config.yaml"]), "configmap")


def _daemonset_checks(docs: list[dict[str, Any]]) -> None:
    pod = _pod(docs)
    cfg = _config(docs)
    # The shipped configuration also passes the machine checks (--check, start, reload).
    check_on_machine(cfg, synthetic_topology("1s4c2t"), "configmap")
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    # Host paths come from the agent's configuration and are mounted at the same path inside:
    # the kubelet, the runtime and the CDI specs name them as the host sees them.
    expected = {
        "nri": str(cfg.nri.socket.parent),
        "cdi": str(cfg.cdi_dir),
        "kubelet-plugins": str(cfg.kubelet_root / "plugins"),
        "kubelet-registry": str(cfg.kubelet_root / "plugins_registry"),
        "kubelet-cpu-manager-state": str(cfg.cpu_manager_state),
        "state": str(cfg.state_dir),
    }
    for name, path in expected.items():
        assert host[name] == path, name
        assert mounts[name] == path, name
    assert host["sys"] == "/sys"
    assert mounts["sys"] == str(cfg.sysfs_root / "sys")
    # The cgroup tree is writable where the agent looks for it (delivery "replies" writes cpusets).
    assert host["cgroup"] == "/sys/fs/cgroup"
    assert mounts["cgroup"] == str(cfg.sysfs_root / "sys" / "fs" / "cgroup")
    read_only = {m["name"] for m in pod["containers"][0]["volumeMounts"] if m.get("readOnly")}
    assert "sys" in read_only
    assert "kubelet-cpu-manager-state" in read_only
    assert "cgroup" not in read_only
    env = {e["name"] for e in pod["containers"][0]["env"]}
    assert "NODE_NAME" in env
    # The configuration file is mounted read-only for everyone: the agent refuses one that
    # group or others could rewrite.
    (cm_volume,) = [v for v in pod["volumes"] if "configMap" in v]
    assert cm_volume["configMap"]["defaultMode"] & 0o022 == 0
    # The probes and the metrics port follow metricsAddress.
    port = int(cfg.metrics_address.rpartition(":")[2])
    (container_port,) = pod["containers"][0]["ports"]
    assert container_port["containerPort"] == port
    assert pod["containers"][0]["livenessProbe"]["httpGet"]["port"] == container_port["name"]
    # /state is not on the metrics address (a unix socket in stateDir by default).
    assert cfg.state_listen != cfg.metrics_address
    dc = _one(docs, "DeviceClass")
    assert dc["metadata"]["name"] == "native.cpu"
    role = _one(docs, "ClusterRole")
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    for need in (
        ("resource.k8s.io", "resourceslices", "create"),
        ("resource.k8s.io", "resourceslices", "watch"),
        ("resource.k8s.io", "resourceslices", "delete"),
        ("resource.k8s.io", "resourceclaims", "get"),
        ("", "nodes", "get"),
    ):
        assert need in granted, need
    _claim_status_rbac_checks(role["rules"])
    _admission_policy_checks(docs)


#: Every API call the agent makes, as (group, resource, verb, resourceName): what the ClusterRole of
#: the chart, the plain manifests and examples/rbac.yaml grant, and nothing more (the example
#: says why each). tests/dra/test_e2e.py and tests/agent/test_claim_status.py run the driver and
#: the agent under these roles with every call checked.
AGENT_API = frozenset({
    ("", "nodes", "get", ""),
    *(("resource.k8s.io", "resourceslices", verb, "") for verb in ("list", "watch", "create", "update", "delete")),
    ("resource.k8s.io", "resourceclaims", "get", ""),
    ("resource.k8s.io", "resourceclaims", "list", ""),
    ("resource.k8s.io", "resourceclaims/status", "update", ""),
    ("resource.k8s.io", "resourceclaims/status", "patch", ""),
    ("resource.k8s.io", "resourceclaims/driver", "associated-node:patch", "native.cpu"),
    ("resource.k8s.io", "resourceclaims/driver", "associated-node:update", "native.cpu"),
})


def _grants(docs: list[dict[str, Any]]) -> set[tuple[str, str, str, str]]:
    """Everything the ClusterRole among ``docs`` grants, one (group, resource, verb, name) each."""
    return {
        (group, resource, verb, name)
        for rule in _one(docs, "ClusterRole")["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        for name in rule.get("resourceNames") or [""]
    }


def _claim_status_rbac_checks(rules: list[dict[str, Any]]) -> None:
    """Writing status.devices: resourceclaims/status, and from 1.36 the per-driver verbs, for our
    driver only and only on the agent's own node (associated-node, never arbitrary-node)."""
    from topodra.embedded.apiserver import Authorizer

    auth = Authorizer(rules)
    for verb in ("patch", "update"):
        assert auth.allows("resource.k8s.io", "resourceclaims/status", verb)
        assert auth.allows("resource.k8s.io", "resourceclaims/driver", f"associated-node:{verb}", "native.cpu")
        assert not auth.allows("resource.k8s.io", "resourceclaims/driver", f"associated-node:{verb}", "gpu.example.com")
        assert not auth.allows("resource.k8s.io", "resourceclaims/driver", f"arbitrary-node:{verb}", "native.cpu")


def _fresh_cluster_order(docs: list[dict[str, Any]]) -> None:
    """`kubectl apply -f` on a fresh cluster: each namespace exists before anything lands in it."""
    created: set[str] = set()
    for d in docs:
        if d["kind"] == "Namespace":
            created.add(d["metadata"]["name"])
        elif d["kind"] in NAMESPACED:
            ns = d["metadata"].get("namespace", "default")
            assert ns in created | BUILTIN_NAMESPACES, f"{d['kind']} {d['metadata']['name']} lands in missing namespace {ns}"
        for subject in d.get("subjects", []):
            if subject.get("kind") == "ServiceAccount":
                assert subject["namespace"] in created | BUILTIN_NAMESPACES


# --- the plain helm command, the chart's values ------------------------------------------------------


def test_plain_helm_template_works(tmp_path: Path) -> None:
    """Exactly what a newcomer types, from the repository root, with no --kube-version."""
    r = subprocess.run([_tool("helm"), "template", "deploy/helm/topodra"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "plain.yaml"
    out.write_text(r.stdout)
    _validate(out)
    _daemonset_checks(_docs(out))


def test_helm_chart_renders_and_validates(tmp_path: Path) -> None:
    rendered = _render(tmp_path, "--set", "metrics.serviceMonitor.enabled=true")
    docs = _docs(rendered)
    _daemonset_checks(docs)
    # kubernetes-validate has no schema for prometheus-operator's CRD: check the rest with it and
    # the ServiceMonitor by hand.
    monitor = _one(docs, "ServiceMonitor")
    rendered.write_text(yaml.safe_dump_all([d for d in docs if d["kind"] != "ServiceMonitor"]))
    _validate(rendered)
    service = _one(docs, "Service")
    assert service["metadata"]["labels"].items() >= monitor["spec"]["selector"]["matchLabels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"] == "metrics"
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == ["topodra"]
    pod_labels = _one(docs, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert pod_labels.items() >= service["spec"]["selector"].items()


def test_values_are_set_once() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    # Was: kubeletRoot twice, metricsPort beside config.metricsAddress.
    assert "kubeletRoot" not in values
    assert "metricsPort" not in values
    for key in ("podSecurityContext", "securityContext", "affinity", "tolerations", "priorityClassName", "nodeSelector"):
        assert key in values, key
    assert values["metrics"]["service"]["enabled"] is True
    assert values["metrics"]["serviceMonitor"]["enabled"] is False


@pytest.mark.parametrize(
    ("setting", "needle"),
    [
        ("metricsPort=9402", "Additional property metricsPort is not allowed"),
        ("kubeletRoot=/var/lib/kubelet", "Additional property kubeletRoot is not allowed"),
        ("metrics.servicemonitor.enabled=true", "Additional property servicemonitor is not allowed"),
        ("config.stateDir=var/lib/topodra", "config.stateDir: Does not match pattern"),
    ],
)
def test_retired_and_misspelt_values_are_errors(setting: str, needle: str) -> None:
    """The values schema is closed: a value the chart no longer reads is an error, not ignored."""
    r = subprocess.run(
        [_tool("helm"), "template", "topodra", str(CHART), "--set", setting], capture_output=True, text=True
    )
    assert r.returncode != 0
    assert needle in r.stderr, r.stderr


def test_helm_values_reach_the_config_and_the_pod(tmp_path: Path) -> None:
    rendered = _render(
        tmp_path,
        "--set", "config.devices.model=grouped",
        "--set", "deviceClass.create=false",
        "--set", "config.kubeletRoot=/data/kubelet",
        "--set", "config.stateDir=/data/topodra",
        "--set", "config.cdiDir=/data/cdi",
        "--set", "config.nri.socket=/run/nri2/nri.sock",
        "--set", "config.metricsAddress=:9500",
        "--set", "priorityClassName=node-critical-ish",
        "--set", "podSecurityContext.runAsUser=0",
        "--set", "tolerations[0].key=dedicated",
        "--set", "tolerations[0].operator=Exists",
        "--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=cpu",
        "--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
    )
    _validate(rendered)
    docs = _docs(rendered)
    assert not any(d["kind"] == "DeviceClass" for d in docs)
    cfg = _config(docs)
    assert cfg.devices.model == "grouped"
    assert cfg.kubelet_root == Path("/data/kubelet")
    _daemonset_checks([*docs, {"kind": "DeviceClass", "metadata": {"name": "native.cpu"}}])
    pod = _pod(docs)
    assert pod["priorityClassName"] == "node-critical-ish"
    assert pod["securityContext"]["runAsUser"] == 0
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["key"] == "cpu"
    assert _one(docs, "Service")["spec"]["ports"][0]["port"] == 9500


def test_metrics_off_means_no_port_probe_or_service() -> None:
    docs = _rendered("--set", "config.metricsAddress=", "--set", "metrics.serviceMonitor.enabled=true")
    container = _pod(docs)["containers"][0]
    assert "ports" not in container
    assert "livenessProbe" not in container
    assert not any(d["kind"] in ("Service", "ServiceMonitor") for d in docs)


def test_container_runs_locked_down() -> None:
    container = _pod(_rendered())["containers"][0]
    sc = container["securityContext"]
    assert sc["privileged"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert _pod(_rendered())["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"


# --- plain manifests and the example RBAC ---------------------------------------------------------------


def _plain(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chart's output as plain manifests: no Helm bookkeeping, with the Namespace first."""
    out: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "topodra"}}]
    for d in docs:
        for meta in _metadata(d):
            labels = meta.get("labels", {})
            for key in ("helm.sh/chart", "app.kubernetes.io/managed-by"):
                labels.pop(key, None)
            meta.get("annotations", {}).pop("checksum/config", None)
            if meta.get("annotations") == {}:
                del meta["annotations"]
        out.append(d)
    return out


def _metadata(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield doc["metadata"]
    template = doc.get("spec", {}).get("template")
    if template is not None:
        yield template["metadata"]


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _str)


@cache
def _expected_manifests() -> str:
    header = (
        "# topodra node agent: plain manifests, the Helm chart (deploy/helm/topodra) rendered with its\n"
        "# defaults for release and namespace `topodra`. Regenerate: python tests/agent/test_deploy.py --write\n"
        "# kubectl apply -f deploy/manifests/topodra.yaml\n"
    )
    docs = _plain(_rendered())
    return header + "---\n".join(yaml.dump(d, Dumper=_Dumper, sort_keys=False, width=120) for d in docs)


def test_plain_manifests_validate() -> None:
    _validate(MANIFESTS)
    docs = _docs(MANIFESTS)
    _daemonset_checks(docs)
    _fresh_cluster_order(docs)


def test_plain_manifests_are_the_chart_rendered() -> None:
    assert MANIFESTS.read_text() == _expected_manifests(), "run: python tests/agent/test_deploy.py --write"


def test_example_rbac_applies_on_a_fresh_cluster() -> None:
    docs = _docs(EXAMPLE_RBAC)
    _validate(EXAMPLE_RBAC)
    _fresh_cluster_order(docs)
    assert docs[0] == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "topodra"}}
    _claim_status_rbac_checks(_one(docs, "ClusterRole")["rules"])
    _admission_policy_checks(docs)


def test_example_rbac_grants_exactly_what_the_agent_uses() -> None:
    assert _grants(_docs(EXAMPLE_RBAC)) == AGENT_API


def test_chart_rbac_grants_exactly_what_the_agent_uses() -> None:
    """The ClusterRole `helm template` renders (and the plain manifests, the chart rendered)."""
    assert _grants(_rendered()) == AGENT_API
    assert _grants(_docs(MANIFESTS)) == AGENT_API


def test_claim_status_rbac_check_catches_a_missing_driver_rule() -> None:
    role = _one(_docs(MANIFESTS), "ClusterRole")
    rules = [r for r in role["rules"] if "resourceclaims/driver" not in r["resources"]]
    with pytest.raises(AssertionError):
        _claim_status_rbac_checks(rules)
    wide = [*rules, {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/driver"], "verbs": ["*"]}]
    with pytest.raises(AssertionError):
        _claim_status_rbac_checks(wide)


def test_fresh_cluster_order_catches_a_missing_namespace() -> None:
    docs = [d for d in _docs(EXAMPLE_RBAC) if d["kind"] != "Namespace"]
    with pytest.raises(AssertionError, match="missing namespace topodra"):
        _fresh_cluster_order(docs)


def test_validator_rejects_a_broken_manifest(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    ds = _one(_docs(MANIFESTS), "DaemonSet")
    ds["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["mountPath"] = 17
    bad.write_text(yaml.safe_dump(ds))
    r = subprocess.run([_tool("kubernetes-validate"), "-k", K8S_VERSION, "--strict", str(bad)], capture_output=True, text=True)
    assert r.returncode != 0


def test_dockerfile_runs_the_agent() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["topodra"]' in text
    assert '"agent"' in text


# --- the admission policy, evaluated ---------------------------------------------------------------------

def _slice(node: str | None, driver: str = "native.cpu") -> dict[str, Any]:
    spec: dict[str, Any] = {"driver": driver, "pool": {"name": node or "shared", "generation": 1, "resourceSliceCount": 1}}
    if node is not None:
        spec["nodeName"] = node
    else:
        spec["allNodes"] = True
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "s"}, "spec": spec}


def _request(op: str, user: str, node: str | None = "n1") -> dict[str, Any]:
    extra = {"authentication.kubernetes.io/node-name": [node]} if node is not None else {}
    return {"operation": op, "userInfo": {"username": user, "extra": extra}}


def _admit(policy: dict[str, Any], request: dict[str, Any], obj: Any, old: Any) -> tuple[bool, str]:
    """The API server's evaluation of a ValidatingAdmissionPolicy with failurePolicy Fail:
    unmatched requests pass; an expression that errors denies."""
    from cel_expr_python import cel  # type: ignore[import-untyped]
    from cel_expr_python.ext import ext_optional  # type: ignore[import-untyped]
    from google.protobuf import descriptor_pool

    T = cel.Type
    env = cel.NewEnv(
        descriptor_pool.DescriptorPool(),
        variables={"request": T.DYN, "object": T.DYN, "oldObject": T.DYN, "variables": T.DYN},
        extensions=[ext_optional.ExtOptional()],
    )
    data: dict[str, Any] = {"request": request, "object": obj, "oldObject": old, "variables": {}}

    def plain(value: Any) -> Any:
        if hasattr(value, "value") and callable(value.value):  # the runtime's wrappers
            value = value.value()
        if isinstance(value, list):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {plain(k): plain(v) for k, v in value.items()}
        return value

    def run(expression: str) -> Any:
        result = env.compile(expression).eval(data=data)
        if result.type() == T.ERROR:
            raise RuntimeError(str(result))
        return plain(result)

    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    if not all(run(m["expression"]) is True for m in spec.get("matchConditions", [])):
        return True, "not matched"
    try:
        for var in spec.get("variables", []):
            data["variables"] = {**data["variables"], var["name"]: run(var["expression"])}
        for rule in spec["validations"]:
            if run(rule["expression"]) is not True:
                return False, str(run(rule["messageExpression"])) if "messageExpression" in rule else rule["message"]
    except Exception as err:  # an evaluation error fails closed
        return False, f"error: {err}"
    return True, "allowed"


def _admission_policy_checks(docs: list[dict[str, Any]]) -> None:
    policy = _one(docs, "ValidatingAdmissionPolicy")
    binding = _one(docs, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["resourceslices"]
    assert set(rule["operations"]) == {"CREATE", "UPDATE", "DELETE"}
    sa = _one(docs, "ServiceAccount")["metadata"]
    agent = f"system:serviceaccount:{sa['namespace']}:{sa['name']}"
    mine, theirs = _slice("n1"), _slice("n2")
    allowed = [
        (_request("CREATE", agent), mine, None),
        (_request("UPDATE", agent), mine, mine),
        (_request("DELETE", agent), None, mine),
        (_request("CREATE", "system:serviceaccount:kube-system:other", node=None), theirs, None),
        (_request("DELETE", "admin", node=None), None, theirs),
    ]
    denied = [
        (_request("CREATE", agent), theirs, None, "may only write the ResourceSlices of its own node"),
        (_request("UPDATE", agent), theirs, theirs, "its own node"),
        (_request("UPDATE", agent), mine, theirs, "its own node"),  # taking over another node's slice
        (_request("UPDATE", agent), theirs, mine, "its own node"),  # handing its slice to another node
        (_request("DELETE", agent), None, theirs, "its own node"),
        (_request("CREATE", agent), _slice(None), None, "its own node"),  # a cluster-wide slice
        (_request("CREATE", agent), _slice("n1", driver="gpu.example.com"), None, "native.cpu"),
        (_request("CREATE", agent, node=None), mine, None, "names no node"),
        # a token without extra: the policy's own message, not the evaluation's "no such key"
        ({"operation": "CREATE", "userInfo": {"username": agent}}, mine, None, "names no node"),
    ]
    for request, obj, old in allowed:
        ok, why = _admit(policy, request, obj, old)
        assert ok, (request, why)
    for request, obj, old, needle in denied:
        ok, why = _admit(policy, request, obj, old)
        assert not ok, request
        assert needle in why, why


def test_admission_policy_fails_closed_on_a_bad_expression() -> None:
    policy = _one(_rendered(), "ValidatingAdmissionPolicy")
    agent = "system:serviceaccount:topodra:topodra"
    assert _admit(policy, _request("CREATE", agent), _slice("n1"), None)[0] is True
    policy["spec"]["validations"][1]["expression"] = "variables.touched.all(s, s.spec.nodeName.no_such == 1)"
    assert _admit(policy, _request("CREATE", agent), _slice("n1"), None)[0] is False


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        MANIFESTS.write_text(_expected_manifests())
        print(f"wrote {MANIFESTS.relative_to(ROOT)}")
    else:
        print(__doc__)
