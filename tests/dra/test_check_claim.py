"""``topodra dra check-claim``: the per-claim parameters checked offline, one line per problem."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from topodra.cli import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

BAD = """\
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: cls}
spec:
  config:
  - opaque:
      driver: native.cpu
      parameters: {apiVersion: native.cpu/v1alpha1, kind: CpuConfig, memoryNodes: interleave}
  - opaque:
      driver: gpu.example.com
      parameters: {anything: 1}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: bad}
spec:
  devices:
    requests:
    - name: cpus
      exactly: {deviceClassName: native.cpu, count: 2}
    config:
    - requests: [cpu]
      opaque:
        driver: native.cpu
        parameters: {apiVersion: native.cpu/v1, kind: CpuConfig, wholeCores: 1, cpuset: "9-", numaPlacement: spread}
"""


def invoke(*args: str) -> tuple[int, list[str]]:
    r = CliRunner().invoke(app, ["dra", "check-claim", *args], env={"COLUMNS": "300"})
    return r.exit_code, r.output.splitlines()


def test_the_example_is_clean_and_says_what_it_checked() -> None:
    code, lines = invoke(str(EXAMPLES / "cpu-config.yaml"))
    assert code == 0, lines
    assert lines == [f"{EXAMPLES / 'cpu-config.yaml'}: 3 configurations of native.cpu in 3 object(s): ok"]


def test_one_line_per_problem_with_file_line_path_and_value(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(BAD)
    code, lines = invoke(str(f))
    assert code == 1
    assert lines == [
        f'{f}:1: DeviceClass/cls spec.config[0].opaque.parameters.memoryNodes: must be local or all (got "interleave")',
        f'{f}:13: ResourceClaim/bad spec.devices.config[0].opaque.parameters.apiVersion: must be native.cpu/v1alpha1, '
        'the version this driver reads (got "native.cpu/v1")',
        f"{f}:13: ResourceClaim/bad spec.devices.config[0].opaque.parameters.wholeCores: must be true or false (got 1)",
        f'{f}:13: ResourceClaim/bad spec.devices.config[0].opaque.parameters.cpuset: is not a CPU list: '
        + lines[3].split("is not a CPU list: ", 1)[1],
        f"{f}:13: ResourceClaim/bad spec.devices.config[0].requests[0]: names no request of the claim (it has cpus) "
        '(got "cpu")',
    ]
    assert lines[3].endswith('(got "9-")')


def test_model_reports_the_fields_that_do_not_apply(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(BAD.split("---\n")[1].replace("native.cpu/v1,", "native.cpu/v1alpha1,").replace("wholeCores: 1, cpuset: \"9-\", ", "").replace("[cpu]", "[cpus]"))
    assert invoke(str(f)) == (0, [f"{f}: 1 configuration of native.cpu in 1 object(s): ok"])
    code, lines = invoke(str(f), "--model", "core")
    assert code == 1
    assert lines == [
        f"{f}:1: ResourceClaim/bad spec.devices.config[0].opaque.parameters.numaPlacement: does not apply to core "
        "devices, whose CPUs the scheduler chooses; use a constraint matchAttribute: resource.kubernetes.io/numaNode "
        '(got "spread")'
    ]
    assert invoke(str(f), "--model", "grouped")[0] == 0


def test_an_allocated_claims_merge_is_checked_as_prepare_merges_it(tmp_path: Path) -> None:
    f = tmp_path / "allocated.yaml"
    f.write_text(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: c}\n"
        "spec: {devices: {requests: [{name: cpus, exactly: {deviceClassName: native.cpu}}]}}\n"
        "status:\n  allocation:\n    devices:\n"
        "      results: [{request: cpus, driver: native.cpu, pool: n, device: numa0}]\n"
        "      config:\n"
        "      - {source: FromClass, requests: [cpus], opaque: {driver: native.cpu, parameters: "
        "{apiVersion: native.cpu/v1alpha1, kind: CpuConfig, numaPlacement: spread}}}\n"
        "      - {source: FromClaim, opaque: {driver: native.cpu, parameters: "
        "{apiVersion: native.cpu/v1alpha1, kind: CpuConfig, cpuset: 0-3}}}\n"
    )
    code, lines = invoke(str(f))
    assert code == 1
    assert lines == [
        f"{f}:1: ResourceClaim/c status.allocation.devices.config (merged for request 'cpus').numaPlacement: "
        "cannot be set with cpuset: the CPUs are already chosen (got \"spread\")"
    ]


def test_unreadable_or_empty_input_is_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: [\n")
    code, lines = invoke(str(broken))
    assert code == 1
    assert len(lines) == 1
    assert lines[0].startswith(f"{broken}:2:1: invalid YAML")
    pods = tmp_path / "pod.yaml"
    pods.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
    assert invoke(str(pods)) == (1, [f"{pods}: no DeviceClass, ResourceClaim or ResourceClaimTemplate to check"])
    assert invoke(str(tmp_path / "missing.yaml"))[0] != 0


def test_the_example_is_accepted_by_the_api_server_double() -> None:
    """The objects validate as resource.k8s.io/v1 (a real 1.36 API server accepted them too)."""
    import yaml

    from topodra.embedded.store import Store

    docs = [d for d in yaml.safe_load_all((EXAMPLES / "cpu-config.yaml").read_text()) if d]
    stored = Store().load(docs)
    assert [o["kind"] for o in stored] == ["DeviceClass", "ResourceClaimTemplate", "ResourceClaimTemplate"]
    assert stored[0]["spec"]["config"][0]["opaque"]["parameters"]["wholeCores"] is True


def test_what_the_api_server_refuses_is_reported_in_its_words(tmp_path: Path) -> None:
    f = tmp_path / "refused.yaml"
    f.write_text(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: c}\n"
        "spec: {devices: {requests: [{name: r, exactly: {deviceClassName: native.cpu, count: -3}}]}}\n"
        "---\napiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: Bad_Name}\nspec: {}\n"
    )
    code, lines = invoke(str(f))
    assert code == 1
    assert lines[0] == f"{f}:1: ResourceClaim/c spec.devices.requests[0].exactly.count: Invalid value: -3: must be greater than zero"
    assert lines[1].startswith(f"{f}:6: DeviceClass/Bad_Name metadata.name: Invalid value:")
    assert len(lines) == 2
