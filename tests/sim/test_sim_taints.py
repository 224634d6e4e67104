"""The simulator with tainted devices: reserved CPUs are published tainted, ordinary claims never
get them, claims tolerating the taint do; ``--taint`` changes how they are published."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from topodra.cli import app
from topodra.sim.cluster import ClusterError, ClusterSpec, build_cluster
from topodra.sim.run import RunConfig, run_simulation
from topodra.sim.workload import parse_workload

TEMPLATE = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: four}}
spec:
  spec:
    devices:
      requests:
      - name: cpu
        exactly:
          deviceClassName: native.cpu
          count: 4{tolerations}
---
apiVersion: v1
kind: Pod
metadata: {{name: quad}}
spec:
  resourceClaims: [{{name: cpus, resourceClaimTemplateName: four}}]
  containers:
  - name: app
    image: busybox
    resources:
      claims: [{{name: cpus}}]
"""
TOLERATING = """
          tolerations:
          - {key: native.cpu/reserved, operator: Exists, effect: NoSchedule}"""


def _run(tolerations: str = "", **taints: str) -> tuple[int, list[str], set[str]]:
    wl = parse_workload(TEMPLATE.format(tolerations=tolerations), "four")
    config = RunConfig(nodes=1, machines={"16": 1}, pods=4, reserved_cpus=2, taints=taints, keep_going=True)
    summary, results = run_simulation(config, workload=wl)
    devices = {d.device for r in results for a in r.allocations for d in a.results}
    return summary.scheduled, [r.failure or "" for r in results if r.failure], devices


def test_ordinary_claims_never_get_the_reserved_cpus() -> None:
    scheduled, failures, devices = _run()
    assert scheduled == 3  # 14 untainted CPUs: three claims of four
    assert failures == ["0/1 nodes are available: no node can allocate the claims"]
    assert not devices & {"cpu0", "cpu1"}


def test_claims_tolerating_the_taint_get_them() -> None:
    scheduled, failures, devices = _run(TOLERATING)
    assert (scheduled, failures) == (4, [])
    assert {"cpu0", "cpu1"} <= devices


def test_untainted_or_withdrawn_as_configured() -> None:
    assert _run(reserved="Untainted")[0] == 4
    assert _run(TOLERATING, reserved="Withdraw")[0] == 3  # not published: a toleration cannot help


def test_cluster_slices_carry_the_taints() -> None:
    c = build_cluster(ClusterSpec(nodes=1, machines={"16": 1}, reserved_cpus=2))
    tainted = {d["name"]: d["taints"] for s in c.slices for d in s["spec"]["devices"] if d.get("taints")}
    assert tainted == {n: [{"key": "native.cpu/reserved", "effect": "NoSchedule"}] for n in ("cpu0", "cpu1")}
    with pytest.raises(ClusterError, match="unknown reason 'reserve'"):
        build_cluster(ClusterSpec(nodes=1, machines={"16": 1}, taints={"reserve": "None"}))


def test_cli_taint_option() -> None:
    r = CliRunner().invoke(app, ["sim", "run", "-n", "1", "--cpus", "16", "--taint", "reserved"])
    assert r.exit_code == 2
    assert "--taint 'reserved': must be REASON=TREATMENT" in r.output
    r = CliRunner().invoke(app, ["sim", "run", "-n", "1", "--cpus", "16", "--taint", "isolated=Sometimes"])
    assert r.exit_code == 2
    assert "taints.isolated must be one of NoSchedule, NoExecute, None, Withdraw, Untainted" in r.output
