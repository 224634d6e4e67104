"""Bad input of every kind to every command: one clear error line, a non-zero exit, never a
traceback, a hang or a silent success. The table below is the whole check; a case names the
message it must show where the wording itself was wrong before (misleading or repeated)."""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from topodra.cli import app

pytestmark = pytest.mark.timeout(120)

_CLAIM = """apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: t}
spec:
  spec:
    devices:
      requests:
      - name: cpu
        exactly:
          deviceClassName: native.cpu
          selectors:
          - cel: {expression: 'device.attributes["native.cpu"].numaNode == '}
---
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  resourceClaims: [{name: c, resourceClaimTemplateName: t}]
  containers: [{name: c, image: x, resources: {claims: [{name: c}]}}]
"""
_BOMB = "a: &a [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n" for p, n in zip("abcde", "bcdef", strict=True)
) + "g: [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
_SLICE = "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: s}\nspec: {driver: 'bad driver', pool: {name: p, generation: 0, resourceSliceCount: 1}, nodeName: n}\n"

FILES: dict[str, str | bytes] = {
    "bin": b"\x00\xbc\xff" + bytes(range(256)),
    "empty": "",
    "badyaml": "a: [1,\n  b: }\n",
    "list": "- 1\n- 2\n",
    "scalar": "42\n",
    "configmap": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\n",
    "deep": "[" * 200 + "]" * 200 + "\n",
    "bomb": _BOMB,
    "nul": "a: b\x00\n",
    "badcel": _CLAIM,
    "unknownfield": "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c, image: x, resourcez: {}}]\n",
    "workload_bad": "kind: Workload\nspec:\n  pods: -5\n",
    "workload_nopod": "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c, image: x, resources: {requests: {cpu: '1e30'}}}]\n",
    "place_bad": "containers:\n- {name: a, cpu: '-3'}\n",
    "place_mem": "containers:\n- {name: b, memory: 1m}\n",
    "place_keys": "containerz: []\n",
    "place_two": "containers: []\n---\ncontainers: []\n",
    "scenario_keys": "title: x\nsteps:\n- titel: y\n  aply: []\n",
    "scenario_top": "title: x\nmodles: [cpu]\nsteps: []\n",
    "scenario_expect": "title: x\nsteps:\n- apply: []\n  expect: {a/b: {count: -1}}\n",
    "scenario_models": "title: x\nrequires: {models: [gpu]}\nsteps: []\n",
    "agent_list": "- a\n",
    "agent_keys": "nodeNmae: n1\npolicy: {reservedCPU: '0'}\n",
    "agent_big": "hotplug: {interval: 1e400}\n",
    "agent_reserved_all": "policy: {reservedCPUs: '0-1'}\ntopology: 1s2c1t\n",
    "agent_server": "kube: {server: 'not a url'}\n",
    "agent_ok": "nodeName: n1\nkube: {server: 'http://127.0.0.1:1'}\nstateAddress: 'unix:/nonexistent/state.sock'\n",
    "policy_keys": "reservedCPU: 1\n",
    "policy_section_list": "policy: [1]\n",
    "devices_keys": "groupBy: nope\nmodle: 1\n",
    "replay_kind": "apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n",
    "replay_no_pod": "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n",
    "pod_negative_cpu": "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, resources: {requests: {cpu: '-1'}}}]}\n",
    "slice_bad": _SLICE,
    "outfile": "x",
}

#: (id, command line with {name} for a file above, "{dir}" a directory, "{missing}" no file;
#: text the output must contain, or "")
CASES: list[tuple[str, str, str]] = [
    # topology
    ("topology: unknown name", "topology --topology nosuch", "or a fixture name (topodra topology --list-fixtures)"),
    ("topology: unknown fixture", "topology --topology fixture:nosuch", "topology 'fixture:nosuch': no such fixture"),
    ("topology: negative", "topology --topology -8", "cannot be negative"),
    ("topology: zero cores", "topology --topology 1s0c1t", "c (cores per L3 group) must be at least 1 (got 0)"),
    ("topology: huge", "topology --topology 1000s1000c64t", "exceed the kernel limit"),
    ("topology: bad spec", "topology --topology synthetic:zz", "invalid machine spec"),
    ("topology: directory not sysfs", "topology --topology {dir}", "no cpuN directories"),
    ("topology: missing directory", "topology --topology /nonexistent/dir", "no such directory"),
    ("topology: a file", "topology --topology {empty}", "a file, not a directory"),
    ("topology: bad format", "topology -f xml", ""),
    ("topology-check: missing root", "topology-check --root /nonexistent", ""),
    ("topology-check: unknown fixture", "topology-check --fixture nosuch", ""),
    # agent
    ("agent: missing file", "agent --check --config {missing}", "cannot read"),
    ("agent: directory", "agent --check --config {dir}", "Is a directory"),
    ("agent: binary", "agent --check --config {bin}", "not a text file"),
    ("agent: bad YAML", "agent --check --config {badyaml}", "invalid YAML"),
    ("agent: a list", "agent --check --config {agent_list}", "(top level): must be a mapping"),
    ("agent: deep", "agent --check --config {deep}", "nested deeper than 64 levels"),
    ("agent: alias bomb", "agent --check --config {bomb}", "aliases expand to more than"),
    ("agent: huge number", "agent --check --config {agent_big}", "hotplug.interval"),
    ("agent: NUL", "agent --check --config {nul}", "U+0000"),
    ("agent: misspelt keys", "agent --check --config {agent_keys}", "unknown key; did you mean"),
    ("agent: every CPU reserved", "agent --check --config {agent_reserved_all}", "policy: no CPU left"),
    ("agent: kube.server not a URL", "agent --check --config {agent_server}", "kube.server: must be an http:// or https:// URL"),
    ("agent: no agent for --state", "agent --state --config {agent_ok}", "no agent answers"),
    # policy
    ("policy pools: binary config", "policy pools --config {bin}", "not a text file"),
    ("policy pools: directory config", "policy pools --config {dir}", ""),
    ("policy pools: missing config", "policy pools --config {missing}", "cannot read"),
    ("policy pools: bad YAML", "policy pools --config {badyaml}", "invalid YAML"),
    ("policy pools: a list", "policy pools --config {list}", "must be a mapping of policy settings"),
    ("policy pools: a number", "policy pools --config {scalar}", "must be a mapping of policy settings"),
    ("policy pools: alias bomb", "policy pools --config {bomb}", "aliases expand to more than"),
    ("policy pools: misspelt key", "policy pools --topology 1s2c1t --config {policy_keys}", "unknown key; did you mean reservedCPUs?"),
    ("policy pools: section not a mapping", "policy pools --topology 1s2c1t --config {policy_section_list}", "policy: must be a mapping"),
    ("policy pools: unknown machine", "policy pools --topology nosuch", ""),
    ("policy pools: agent's keys misspelt", "policy pools --topology 1s2c1t --config {agent_keys}", "nodeNmae: unknown key"),
    ("policy place: missing", "policy place {missing}", ""),
    ("policy place: directory", "policy place {dir}", ""),
    ("policy place: binary", "policy place {bin}", "not a text file"),
    ("policy place: empty", "policy place {empty}", "expected a mapping with 'containers', got nothing"),
    ("policy place: bad YAML", "policy place {badyaml}", "invalid YAML"),
    ("policy place: a list", "policy place {list}", ""),
    ("policy place: negative CPU", "policy place {place_bad} --topology 1s4c1t", "which is negative"),
    ("policy place: milli-bytes", "policy place {place_mem} --topology 1s4c1t", "did you mean M or Mi?"),
    ("policy place: unknown keys", "policy place {place_keys}", "unknown keys"),
    ("policy place: two documents", "policy place {place_two}", "holds 2 YAML documents"),
    ("policy place: bad format", "policy place {place_bad} -f xml", ""),
    # dra
    ("dra devices: every CPU reserved", "dra devices --topology 1s2c1t --reserved 0-1", "leaves no CPU"),
    ("dra devices: bad reserved list", "dra devices --topology 1s2c1t --reserved x-y", "--reserved"),
    ("dra devices: huge CPU id", "dra devices --topology 1s2c1t --reserved 99999999999999", "exceeds"),
    ("dra devices: negative CPU id", "dra devices --topology 1s2c1t --reserved -3", "has no start"),
    ("dra devices: unknown model", "dra devices --model gpu", ""),
    ("dra devices: binary config", "dra devices --topology 1s2c1t --config {bin}", "not a text file"),
    ("dra devices: config a list", "dra devices --topology 1s2c1t --config {list}", "must be a mapping of device model settings"),
    ("dra devices: config directory", "dra devices --topology 1s2c1t --config {dir}", ""),
    ("dra devices: missing config", "dra devices --topology 1s2c1t --config {missing}", "cannot read"),
    ("dra devices: misspelt keys", "dra devices --topology 1s2c1t --config {devices_keys}", "modle: unknown key; did you mean model?"),
    ("dra slices: generation 0", "dra slices --topology 1s2c1t --generation 0", ""),
    ("dra slices: bad node name", "dra slices --topology 1s2c1t --node Bad_Node!", "DNS subdomain"),
    ("dra slices: table format", "dra slices --topology 1s2c1t -f table", ""),
    ("dra deviceclass: table format", "dra deviceclass -f table", ""),
    ("dra apiserver: port too big", "dra apiserver --port 70000", ""),
    ("dra apiserver: negative port", "dra apiserver --port -1", ""),
    ("dra apiserver: binary --load", "dra apiserver --port 0 --load {bin}", "not a text file"),
    ("dra apiserver: missing --load", "dra apiserver --port 0 --load {missing}", "cannot read"),
    ("dra apiserver: bad YAML --load", "dra apiserver --port 0 --load {badyaml}", "invalid YAML"),
    ("dra apiserver: bad CEL --load", "dra apiserver --port 0 --load {badcel}", "compilation failed"),
    ("dra apiserver: unserved kind", "dra apiserver --port 0 --load {configmap}", "ConfigMap"),
    ("dra apiserver: invalid slice", "dra apiserver --port 0 --load {slice_bad}", "spec.driver"),
    # sim run
    ("sim run: negative --cpus", "sim run --cpus -8", ""),
    ("sim run: zero --cpus", "sim run --cpus 0", ""),
    ("sim run: huge --cpus", "sim run --nodes 1 --cpus 99999999999", ""),
    ("sim run: zero --nodes", "sim run --nodes 0", ""),
    ("sim run: huge --nodes", "sim run --nodes 100000000000 --cpus 16 --pods 1", "GiB"),
    ("sim run: negative --topology", "sim run --topology -8", "cannot be negative"),
    ("sim run: unknown --topology", "sim run --topology nosuch", "or a fixture name"),
    ("sim run: unknown fixture", "sim run --topology fixture:nosuch", "no such fixture"),
    ("sim run: missing directory", "sim run --topology /nonexistent/x", "no such directory"),
    ("sim run: weight not a number", "sim run --topology 16=abc", "weight must be a number"),
    ("sim run: negative weight", "sim run --topology 16=-1", ""),
    ("sim run: zero CPUs", "sim run --topology 0", ""),
    ("sim run: unknown model", "sim run --model gpu", ""),
    ("sim run: unknown group", "sim run --model grouped:rack", ""),
    ("sim run: unknown order", "sim run --order random", ""),
    ("sim run: unknown scoring", "sim run --scoring best", ""),
    ("sim run: missing workload file", "sim run --nodes 2 --cpus 16 --workload {missing}", "cannot read"),
    ("sim run: unknown workload", "sim run --nodes 2 --cpus 16 --workload nosuch", "no built-in workload"),
    ("sim run: workload directory", "sim run --nodes 2 --cpus 16 --workload {dir}", "is a directory, not a workload file"),
    ("sim run: binary workload", "sim run --nodes 2 --cpus 16 --workload {bin}", "not a text file"),
    ("sim run: empty workload", "sim run --nodes 2 --cpus 16 --workload {empty}", "has no Pod"),
    ("sim run: bad YAML workload", "sim run --nodes 2 --cpus 16 --workload {badyaml}", "invalid YAML"),
    ("sim run: ConfigMap workload", "sim run --nodes 2 --cpus 16 --workload {configmap}", "has no Pod"),
    ("sim run: negative spec.pods", "sim run --nodes 2 --cpus 16 --workload {workload_bad}", "spec.pods"),
    ("sim run: pod with no claim", "sim run --nodes 2 --cpus 16 --workload {workload_nopod}", "claims no resources"),
    ("sim run: CEL that does not compile", "sim run --nodes 2 --cpus 16 --workload {badcel}", "CEL does not compile"),
    ("sim run: negative --pods", "sim run --pods -1", ""),
    ("sim run: --fill 2", "sim run --fill 2", ""),
    ("sim run: --fill nan", "sim run --fill nan", ""),
    ("sim run: zero fill patterns", "sim run --fill-patterns 0", ""),
    ("sim run: negative reserved", "sim run --reserved-cpus -1", ""),
    ("sim run: every CPU reserved", "sim run --nodes 2 --cpus 16 --reserved-cpus 16", "leaves no CPU"),
    ("sim run: percentage 101", "sim run --percentage-of-nodes-to-score 101", ""),
    ("sim run: zero scheduler cores", "sim run --scheduler-cores 0", ""),
    ("sim run: --out is a file", "sim run --nodes 2 --cpus 16 --out {outfile}", "exists and is not a directory"),
    ("sim run: --out cannot be made", "sim run --nodes 2 --cpus 16 --out /proc/topodra-out", "cannot create the directory"),
    ("sim run: missing --objects", "sim run --nodes 2 --cpus 16 --objects {missing}", "cannot read"),
    ("sim run: --objects directory", "sim run --nodes 2 --cpus 16 --objects {dir}", "cannot read"),
    ("sim run: binary --objects", "sim run --nodes 2 --cpus 16 --objects {bin}", "not a text file"),
    ("sim run: empty --objects", "sim run --nodes 2 --cpus 16 --objects {empty}", "no ResourceSlice"),
    ("sim run: seed not a number", "sim run --seed abc", ""),
    # sim sweep
    ("sim sweep: nodes not numbers", "sim sweep --nodes a,b", ""),
    ("sim sweep: zero nodes", "sim sweep --nodes 0", ""),
    ("sim sweep: negative nodes", "sim sweep --nodes -3", ""),
    ("sim sweep: empty CPU list", "sim sweep --cpus ,", ""),
    ("sim sweep: unknown model", "sim sweep --model cpu,gpu", ""),
    ("sim sweep: --out is a file", "sim sweep --nodes 2 --cpus 16 --out {outfile}", "exists and is not a directory"),
    ("sim sweep: negative processes", "sim sweep --processes -1", ""),
    ("sim sweep: workload directory", "sim sweep --nodes 2 --cpus 16 --workload {dir}", "is a directory"),
    # sim allocate / replay / diff
    ("sim allocate: no such node", "sim allocate --node nosuch {allocate}", "--node nosuch: no such node (the files name n1)"),
    ("sim allocate: no claim", "sim allocate --node n {badcel}", "nothing to allocate"),
    ("sim allocate: missing file", "sim allocate --node n {missing}", "cannot read"),
    ("sim allocate: binary file", "sim allocate --node n {bin}", "not a text file"),
    ("sim allocate: empty file", "sim allocate --node n {empty}", "nothing to allocate"),
    ("sim allocate: directory", "sim allocate --node n {dir}", "Is a directory"),
    ("sim replay: empty", "sim replay {empty}", "nothing to replay"),
    ("sim replay: binary", "sim replay {bin}", "not a text file"),
    ("sim replay: directory", "sim replay {dir}", "Is a directory"),
    ("sim replay: missing", "sim replay {missing}", "cannot read"),
    ("sim replay: unreplayed kind", "sim replay {replay_kind}", "is not replayed"),
    ("sim replay: no Pod", "sim replay {replay_no_pod}", "1 object(s) and no Pod among them, nothing to schedule"),
    ("sim replay: bad YAML", "sim replay {badyaml}", "invalid YAML"),
    ("sim replay: bad --output", "sim replay {badcel} -o xml", "--output"),
    ("sim replay: deep list", "sim replay {deep}", "expected a Kubernetes object"),
    ("sim diff: missing --recorded file", "sim diff {badcel} --recorded {missing}", "cannot read"),
    ("sim diff: no --recorded", "sim diff {empty}", ""),
    # playground
    ("playground: binary file", "playground {bin}", "not a text file"),
    ("playground: directory", "playground {dir}", "Is a directory"),
    ("playground: missing file", "playground {missing}", "cannot read"),
    ("playground: empty file", "playground {empty}", "nothing to apply"),
    ("playground: bad YAML", "playground {badyaml}", "invalid YAML"),
    ("playground: negative cpu request", "playground {pod_negative_cpu}", "requests[cpu]: Invalid value: \"-1\": must be greater than or equal to 0"),
    ("playground: a list", "playground {list}", "expected a Kubernetes object"),
    ("playground: unserved kind", "playground {configmap}", "not supported by the playground"),
    ("playground: CEL that does not compile", "playground {badcel}", "compilation failed"),
    ("playground: unknown field", "playground {unknownfield}", 'strict decoding error: unknown field "spec.containers[0].resourcez"'),
    ("playground: scenario step keys", "playground {scenario_keys}", "unknown key(s) aply, titel"),
    ("playground: scenario keys", "playground {scenario_top}", "unknown key(s) modles"),
    ("playground: scenario count", "playground {scenario_expect}", "must be a whole number (got -1)"),
    ("playground: scenario models", "playground {scenario_models}", "requires.models must be a list of"),
    ("playground: unknown model", "playground --model gpu", ""),
    ("playground: unknown scenario", "playground -s nosuch", "no built-in scenario"),
    ("playground: unknown topology", "playground --topology nosuch", ""),
    ("playground: negative topology", "playground --topology -3", "cannot be negative"),
    ("playground: a model the scenario does not hold for", "playground -s grouped --model cpu", "do not hold with --model cpu"),
    ("playground: too small a machine", "playground -s grouped --topology host-2cpu", "needs a machine with"),
    ("playground: alias bomb", "playground {bomb}", ""),
    ("playground: deep list", "playground {deep}", ""),
    # nri-logger
    ("nri-logger: missing socket", "nri-logger --socket /nonexistent/nri.sock --no-reconnect", "cannot connect"),
    ("nri-logger: bad index", "nri-logger --idx 999 --no-reconnect", ""),
    ("nri-logger: bad name", "nri-logger --name 'bad name!' --no-reconnect", ""),
    ("nri-logger: unknown event", "nri-logger --events Nonsense --no-reconnect", "unknown NRI event"),
    ("nri-logger: --log-file a directory", "nri-logger --log-file {dir} --socket /nonexistent/nri.sock --no-reconnect", "cannot append"),
    # the command line itself
    ("unknown command", "frobnicate", ""),
    ("unknown option", "sim run --frob", ""),
    ("missing argument", "sim replay", ""),
]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("bad")
    out: dict[str, str] = {"dir": str(d / "adir"), "missing": str(d / "nope.yaml")}
    (d / "adir").mkdir()
    for name, content in FILES.items():
        p = d / name
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)
        p.chmod(0o644)
        out[name] = str(p)
    out["allocate"] = _allocate_input(d)
    return out


def _allocate_input(d: Path) -> str:
    """Slices of node n1, the DeviceClass and one claim (what ``sim allocate`` reads)."""
    runner = CliRunner()
    slices = runner.invoke(app, ["dra", "slices", "--topology", "1s2c1t", "--node", "n1"]).output
    klass = runner.invoke(app, ["dra", "deviceclass"]).output
    claim = "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: c, namespace: default}\nspec:\n  devices:\n    requests:\n    - name: cpu\n      exactly: {deviceClassName: native.cpu, count: 1}\n"
    p = d / "allocate.yaml"
    p.write_text(f"{slices}---\n{klass}---\n{claim}")
    return str(p)


def test_the_table_is_large_and_every_case_named_once() -> None:
    assert len(CASES) >= 150
    assert len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize(("cid", "line", "expect"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_clear_error(files: dict[str, str], cid: str, line: str, expect: str) -> None:
    argv = [a.format(**files) if "{" in a else a for a in shlex.split(line)]
    argv = ["synthetic:1s1d1n1l1c2t" if a == "host-2cpu" else a for a in argv]  # a 2-CPU machine anywhere
    r = CliRunner().invoke(app, argv, env={"COLUMNS": "300"})
    out = r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), f"{cid}: {r.exception!r}"
    assert "Traceback" not in out, out
    assert r.exit_code != 0, f"{cid}: exit 0\n{out}"
    errors = [ln for ln in out.splitlines() if ln.startswith(("error:", "Error:")) or ln.strip().startswith("✘")]
    assert errors, f"{cid}: no error line\n{out}"
    assert expect in out, f"{cid}: wanted {expect!r}\n{out}"


@pytest.mark.parametrize(
    ("argv", "wait"),
    [
        (["sim", "run", "--nodes", "3000", "--cpus", "64", "--pods", "200000"], 4.0),
        (["sim", "sweep", "--nodes", "2000,5000", "--cpus", "64,128", "--processes", "1"], 4.0),
    ],
    ids=["sim run", "sim sweep"],
)
def test_ctrl_c_stops_a_long_run_with_exit_130(tmp_path: Path, argv: list[str], wait: float) -> None:
    """Ctrl-C mid-run: a prompt stop, exit 130, no traceback (never a silent exit 0)."""
    if argv[1] == "sweep":
        argv = [*argv, "--out", str(tmp_path / "sweep")]
    p = subprocess.Popen(
        [sys.executable, "-m", "topodra", *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    time.sleep(wait)
    p.send_signal(signal.SIGINT)
    try:
        out, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, out
    assert "Traceback" not in out

