"""Synthetic clusters (built with the agent's device model), workloads, runs, sweeps and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from topodra.cli import app
from topodra.dra.devices import DeviceModelConfig, build_devices
from topodra.dra.slices import build_slices
from topodra.sim.cluster import ClusterError, ClusterSpec, build_cluster, machine_for_cpus, topology_for
from topodra.sim.run import RunConfig, run_simulation
from topodra.sim.sweep import SweepConfig, run_sweep, write_outputs
from topodra.sim.workload import WorkloadError, builtin_workloads, load_workload, parse_workload
from topodra.topology.model import CoreType

ROOT = Path(__file__).resolve().parents[2]


def _upstream_example() -> Path:
    p = ROOT / "tests" / "data" / "upstream-prototype" / "upstream-prototype.yaml"
    assert p.is_file(), f"{p} not found"
    return p


@pytest.mark.parametrize("cpus", [64, 256, 512])
def test_machine_for_cpus_is_hybrid_with_that_many_cpus(cpus: int) -> None:
    topo = topology_for(str(cpus))
    assert len(topo.online) == cpus
    assert set(topo.core_types()) == {CoreType.P_CORE, CoreType.E_CORE}
    assert all(len(topo.cpus_of_l3(g)) == 16 for g in topo.l3_groups())


def test_machine_errors_name_the_value() -> None:
    with pytest.raises(ClusterError, match="--cpus 100"):
        machine_for_cpus(100)
    with pytest.raises(ClusterError, match="'2x'"):
        topology_for("2x")
    with pytest.raises(ClusterError, match="model"):
        build_cluster(ClusterSpec(nodes=1, model="per-thread"))


@pytest.mark.parametrize("model", ["cpu", "core", "grouped"])
def test_cluster_slices_are_what_the_agent_publishes(model: str) -> None:
    c = build_cluster(ClusterSpec(nodes=3, machines={"2s1d1n2l4c2t": 1}, model=model))
    topo = topology_for("2s1d1n2l4c2t")
    # as the agent publishes them to a 1.36 API server with its default gates: without mappings
    config = DeviceModelConfig(model=model, node_allocatable="off")  # type: ignore[arg-type]
    expected = build_slices("node-00002", build_devices(topo, config))
    got = [s for s in c.slices if s["spec"]["nodeName"] == "node-00002"]
    assert got == expected
    assert c.classes[0]["metadata"]["name"] == "native.cpu"
    assert c.api_bytes == 3 * sum(len(json.dumps(s, separators=(",", ":"))) for s in expected)


def test_machine_mix_and_fixture_machines() -> None:
    c = build_cluster(ClusterSpec(nodes=4, machines={"64": 3, "fixture:16amd64-8n2c": 1}))
    assert sorted(c.machine_of.values()).count("64") == 3
    assert c.devices_per_machine["fixture:16amd64-8n2c"] == 16


def test_background_fill_occupies_the_fraction() -> None:
    c = build_cluster(ClusterSpec(nodes=2, machines={"64": 1}, fill=0.5))
    held = [r for a in c.background for r in a.results]
    assert len(held) == 64  # half of 2 x 64 CPUs
    g = build_cluster(ClusterSpec(nodes=2, machines={"64": 1}, model="grouped", fill=0.5))
    used = sum(int(r.consumed_capacity["cpu"].amount) for a in g.background for r in a.results if r.consumed_capacity)
    assert 60 <= used <= 64


def test_upstream_example_loads_unchanged_and_schedules() -> None:
    wl = parse_workload(_upstream_example().read_text(), "upstream")
    assert set(wl.templates) == {"any-cores", "p-cores", "e-cores"}
    summary, results = run_simulation(RunConfig(nodes=4, machines={"64": 1}, pods=20), workload=wl)
    assert summary.scheduled == 20
    res = results[0].allocations[0].results
    assert len(res) == 1
    assert res[0].driver == "native.cpu"


def test_builtin_workloads_all_schedule_on_their_models() -> None:
    names = builtin_workloads()
    assert {"prototype", "p-cores", "cpus-4", "cpus-32", "numa-8", "l3-8", "first-available", "grouped"} <= set(names)
    for name in names:
        wl = load_workload(name)
        for model in ("cpu", "core", "grouped"):
            try:
                wl.pods_for(model)
            except WorkloadError:
                continue
            gpus = name == "gpu-aligned"  # its claims take a GPU too: machines with PCI roots
            machines = {"1s1d2n1l8c2t+pci": 1.0} if gpus else {"64": 1.0}
            s, _ = run_simulation(RunConfig(nodes=3, machines=machines, model=model, pods=6, gpus=gpus), workload=wl)
            assert s.scheduled >= 1, (name, model, s.failure_reasons)


def test_workload_errors_are_clear() -> None:
    with pytest.raises(WorkloadError, match="no ResourceClaimTemplate 'nope'"):
        parse_workload(
            yaml.safe_dump({"kind": "Pod", "metadata": {"name": "p"}, "spec": {"resourceClaims": [{"name": "c", "resourceClaimTemplateName": "nope"}]}})
        )
    with pytest.raises(WorkloadError, match="no Pod"):
        parse_workload("kind: ResourceClaimTemplate\nmetadata: {name: t}\nspec: {spec: {}}\n")
    with pytest.raises(WorkloadError, match="unsupported kind 'Deployment2'"):
        parse_workload("kind: Deployment2\nmetadata: {name: d}\n")
    with pytest.raises(WorkloadError, match="no workload file"):
        load_workload("does-not-exist")


def test_churn_deletes_and_reuses_devices() -> None:
    text = (Path(__file__).parent / "data" / "churn.yaml").read_text()
    wl = parse_workload(text, "churn")
    s, _ = run_simulation(RunConfig(nodes=1, machines={"64": 1}, pods=40), workload=wl)
    assert s.deleted > 0
    assert s.failed_unschedulable == 0  # without deletions 40 x 4 CPUs would not fit on 64
    assert s.scheduled == 40


def test_sweep_writes_csv_json_plots_and_report(tmp_path: Path) -> None:
    summaries = run_sweep(SweepConfig(nodes=[3, 6], cpus=[64], models=["cpu", "grouped"], pods=6, processes=1))
    assert [(s.model, s.nodes) for s in summaries] == [("cpu", 3), ("cpu", 6), ("grouped/numa", 3), ("grouped/numa", 6)]
    files = write_outputs(summaries, tmp_path)
    names = {f.name for f in files}
    assert {"results.csv", "results.json", "latency_vs_nodes.png", "latency_vs_cpus.png", "per_model.png", "report.md"} <= names
    assert (tmp_path / "latency_vs_nodes.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| cpu | 64 | 3 |" in (tmp_path / "report.md").read_text()
    assert len((tmp_path / "results.csv").read_text().splitlines()) == 5


def test_cli_run_json_and_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    r = runner.invoke(app, ["sim", "run", "--nodes", "4", "--cpus", "64", "--pods", "8", "--json", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout[r.stdout.index("{") :])
    assert data["scheduled"] == 8
    assert (tmp_path / "pods.csv").is_file()
    r = runner.invoke(app, ["sim", "run", "--model", "bogus"])
    assert r.exit_code == 2
    assert "bogus" in r.output
    r = runner.invoke(app, ["sim", "run", "--cpus", "100"])
    assert r.exit_code == 2
    assert "multiple of 16" in r.output


def test_cli_allocate_prints_status_allocation(tmp_path: Path) -> None:
    c = build_cluster(ClusterSpec(nodes=1, machines={"2s1d1n1l2c2t": 1}))
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "two", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "cpu", "exactly": {"deviceClassName": "native.cpu", "count": 2}}]}},
    }
    f = tmp_path / "objs.yaml"
    f.write_text(yaml.safe_dump_all([*c.slices, *c.classes, claim]))
    r = CliRunner().invoke(app, ["sim", "allocate", str(f), "--node", "node-00000"])
    assert r.exit_code == 0, r.output
    out = yaml.safe_load(r.stdout)
    # Devices are listed topology-reversed: first fit takes both threads of the last core.
    assert [x["device"] for x in out["status"]["allocation"]["devices"]["results"]] == ["cpu3", "cpu7"]


_GARBAGE = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["kind", "metadata", "name", "spec", "resourceClaims", "resourceClaimTemplateName", "pods", "mix", "churn", "labels"]), inner, max_size=4),
    max_leaves=10,
)


@given(st.lists(_GARBAGE, max_size=3))
def test_workload_parser_rejects_garbage_with_workload_error(docs: list[object]) -> None:
    text = yaml.safe_dump_all(docs)
    try:
        wl = parse_workload(text, "fuzz")
    except WorkloadError:
        return
    assert wl.pods


def test_background_fill_uses_a_few_patterns_per_machine() -> None:
    c = build_cluster(ClusterSpec(nodes=40, machines={"64": 1}, fill=0.25, fill_patterns=3))
    shapes = {tuple(sorted(r.device for r in a.results)) for a in c.background}
    assert 1 <= len(shapes) <= 3
    assert all(len(s) == 16 for s in shapes)


@pytest.mark.parametrize(("model", "workload"), [("cpu", "l3-8"), ("core", "first-available"), ("grouped", "grouped")])
def test_memoised_runs_equal_plain_runs_on_generated_clusters(model: str, workload: str) -> None:
    from topodra.sim.scheduler import Scheduler

    c = build_cluster(ClusterSpec(nodes=12, machines={"64": 1}, model=model, fill=0.3, fill_patterns=3))
    wl = load_workload(workload)
    runs = []
    for memo in (True, False):
        s = Scheduler(c.nodes, c.slices, c.classes, memo=memo)
        s.preallocate(c.background)
        out = []
        for n, p in enumerate(wl.generate(model, 30)):
            r = s.schedule(p)
            out.append((r.node, r.failure_kind, r.calls, r.visits, [a.to_api() for a in r.allocations]))
            if n % 4 == 3:
                s.delete(p.name)
        runs.append(out)
    assert runs[0] == runs[1]


def test_run_on_exported_objects_respects_existing_allocations(tmp_path: Path) -> None:
    c = build_cluster(ClusterSpec(nodes=2, machines={"1s1d1n1l4c2t1e": 1}))  # 8 P-core CPUs + 1 E-core
    taken = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "old", "namespace": "default"},
        "spec": {},
        "status": {"allocation": {"devices": {"results": [{"request": "r", "driver": "native.cpu", "pool": "node-00000", "device": f"cpu{i}"} for i in range(9)]}}},
    }
    f = tmp_path / "cluster.yaml"
    f.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [*c.nodes, *c.slices, *c.classes, taken]}))
    r = CliRunner().invoke(app, ["sim", "run", "--objects", str(f), "--workload", "p-cores", "--pods", "9", "--json"])
    assert r.exit_code == 1, r.output  # one pod could not be scheduled
    data = json.loads(r.stdout[r.stdout.index("{") :])
    assert data["nodes"] == 2
    assert data["machines"] == "objects"
    assert data["scheduled"] == 8  # node-00000 is taken; node-00001 has 8 P-core CPUs
    assert data["failed_unschedulable"] == 1


@pytest.mark.parametrize("command", [["run", "--pods", "2"], ["sweep", "--model", "cpu", "--pods", "2"]])
def test_an_out_path_that_is_a_file_is_one_line_before_any_work(tmp_path: Path, command: list[str]) -> None:
    taken = tmp_path / "taken"
    taken.write_text("not a directory\n")
    r = CliRunner().invoke(app, ["sim", *command, "--nodes", "2", "--cpus", "8", "--out", str(taken)])
    assert r.exit_code == 2, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    assert f"--out {taken}: exists and is not a directory" in r.output
    assert taken.read_text() == "not a directory\n"


def test_a_piped_run_prints_a_progress_line_every_interval_and_a_short_one_none() -> None:
    from topodra.sim.cli import PipedProgress

    now = [0.0]
    lines: list[str] = []
    progress = PipedProgress(interval=5.0, clock=lambda: now[0], write=lines.append)
    for done, t in [(200, 1.0), (400, 4.9), (600, 5.1), (800, 7.0), (1000, 10.2)]:
        now[0] = t
        progress(done, 1000)
    assert lines == ["scheduling: 600 of 1000 pods (5 s)", "scheduling: 1000 of 1000 pods (10 s)"]


def test_a_negative_cpu_count_is_refused_as_a_count() -> None:
    r = CliRunner().invoke(app, ["sim", "run", "--nodes", "2", "--cpus", "-8"])
    assert r.exit_code == 2, r.output
    assert "--cpus" in r.output
    assert "topology" not in r.output
