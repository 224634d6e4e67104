"""``topodra sim replay|diff|allocate|run`` as users meet them: output, one-line errors, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from topodra.cli import app
from topodra.sim.cluster import ClusterSpec, build_cluster

RECORDED = Path(__file__).resolve().parents[1] / "data" / "sched-recorded"
V1 = RECORDED / "v1-core-siblings"
V3 = RECORDED / "v3-shared-claim-lifecycle"


def invoke(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(app, ["sim", *args])
    return r.exit_code, r.stdout, r.stderr


def test_replay_prints_every_step_in_the_claim_status_shape() -> None:
    code, out, _ = invoke("replay", str(V3 / "cluster.yaml"), str(V3 / "workload.yaml"))
    assert code == 1  # other-2 is still pending at the end
    steps = list(yaml.safe_load_all(out))
    assert [s["op"] for s in steps].count("scheduled-later") == 2
    first = steps[0]
    assert first["node"] == "reorder16"
    results = first["claims"][0]["allocation"]["devices"]["results"]
    assert [(r["request"], r["driver"], r["pool"], r["device"]) for r in results] == [
        ("cpus", "native.cpu", "reorder16", "cpu2"),
        ("cpus", "native.cpu", "reorder16", "cpu6"),
    ]
    assert first["claims"][0]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["reorder16"]
    assert steps[-1]["failure"] == "0/1 nodes are available: 1 cannot allocate all claims."


def test_replay_exits_0_when_every_pod_is_scheduled(tmp_path: Path) -> None:
    docs = list(yaml.safe_load_all((V3 / "workload.yaml").read_text()))
    kept = [d for d in docs if d.get("metadata", {}).get("name") != "other-2"]
    (tmp_path / "w.yaml").write_text(yaml.safe_dump_all(kept))
    code, out, _ = invoke("replay", str(V3 / "cluster.yaml"), str(tmp_path / "w.yaml"), "-o", "json")
    assert code == 0
    assert json.loads(out)[-1]["pod"] == "other-1"


def test_diff_matches_a_recording_and_fails_on_a_mismatch(tmp_path: Path) -> None:
    code, out, _ = invoke("diff", str(V1 / "cluster.yaml"), str(V1 / "workload.yaml"), "--recorded", str(V1 / "result.json"))
    assert code == 0
    assert "18 match, 0 mismatch" in out
    (tmp_path / "r.json").write_text((V1 / "result.json").read_text().replace('"smt24-0"', '"smt8-0"'))
    code, out, _ = invoke("diff", str(V1 / "cluster.yaml"), str(V1 / "workload.yaml"), "-r", str(tmp_path / "r.json"), "-o", "json")
    assert code == 1
    report = json.loads(out)
    assert report["mismatches"] > 0
    assert {"node"} <= {d for row in report["rows"] for d in row["differs"]}


def test_bad_yaml_is_one_line_with_file_line_column(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Pod\nmetadata:\n  name: [unclosed\n")
    for cmd in (["replay", str(bad)], ["allocate", str(bad), "--node", "n"], ["diff", str(bad), "-r", str(V1 / "result.json")]):
        code, _, err = invoke(*cmd)
        assert code == 2, cmd
        assert err.strip().startswith(f"error: {bad}:4:1: invalid YAML"), err
        assert len(err.strip().splitlines()) == 1


def test_replay_names_the_document_of_a_bad_object(tmp_path: Path) -> None:
    f = tmp_path / "x.yaml"
    f.write_text("apiVersion: v1\nkind: Node\nmetadata: {name: n}\n---\nop: delete\nkind: Pod\nname: ghost\n")
    code, _, err = invoke("replay", str(f))
    assert code == 2
    assert f"{f}:5: delete Pod ghost: no such object" in err


def test_allocate_reads_a_kubectl_list(tmp_path: Path) -> None:
    c = build_cluster(ClusterSpec(nodes=1, machines={"2s1d1n1l2c2t": 1}))
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "two", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "cpu", "exactly": {"deviceClassName": "native.cpu", "count": 2}}]}},
    }
    f = tmp_path / "list.yaml"
    f.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [*c.nodes, *c.slices, *c.classes, claim]}))
    code, out, _ = invoke("allocate", str(f), "--node", "node-00000")
    assert code == 0
    assert [x["device"] for x in yaml.safe_load(out)["status"]["allocation"]["devices"]["results"]] == ["cpu3", "cpu7"]
    empty = tmp_path / "empty.yaml"
    empty.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [*c.slices, *c.classes]}))
    code, _, err = invoke("allocate", str(empty), "--node", "node-00000")
    assert code == 2
    assert "no ResourceClaim" in err


def test_run_exit_codes() -> None:
    code, _, _ = invoke("run", "--nodes", "2", "--cpus", "16", "--workload", "cpus-4", "--pods", "2", "--json")
    assert code == 0
    # 32 P-core CPUs per pod on 16-CPU nodes: every pod fails
    code, out, _ = invoke("run", "--nodes", "2", "--cpus", "16", "--workload", "cpus-32", "--pods", "2", "--json")
    assert code == 1
    assert json.loads(out[out.index("{") :])["scheduled"] == 0
    code, _, _ = invoke("run", "--model", "bogus")
    assert code == 2
    code, out, _ = invoke("run", "--help")
    assert "Exit codes" in out


def test_the_shipped_replay_example_matches_its_recording() -> None:
    ex = Path(__file__).resolve().parents[2] / "examples" / "replay"
    code, out, _ = invoke("diff", str(ex / "cluster.yaml"), str(ex / "workload.yaml"), "-r", str(ex / "recorded.json"))
    assert code == 0, out
    assert "16 match, 0 mismatch" in out


def test_replaying_an_empty_file_is_an_error_not_a_silent_success(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from topodra.cli import app

    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing here\n")
    r = CliRunner().invoke(app, ["sim", "replay", str(empty)])
    assert r.exit_code == 2, r.output
    assert "nothing to replay" in " ".join(r.output.split())


def test_streamed_steps_are_the_text_of_the_whole_list() -> None:
    from topodra.sim.replay import replay
    from topodra.yamldocs import expand_lists, load_documents

    docs = [d for f in (V3 / "cluster.yaml", V3 / "workload.yaml") for d in expand_lists(load_documents(f))]
    steps = [s.as_dict() for s in replay((d.obj, d.source) for d in docs).steps]
    code, out, _ = invoke("replay", str(V3 / "cluster.yaml"), str(V3 / "workload.yaml"))
    assert code == 1
    assert out == yaml.safe_dump_all(steps, sort_keys=False)
    code, out, _ = invoke("replay", str(V3 / "cluster.yaml"), str(V3 / "workload.yaml"), "-o", "json")
    assert out == json.dumps(steps, indent=2) + "\n"


def test_a_bad_object_ends_the_replay_before_the_rest_is_read(tmp_path: Path) -> None:
    f = tmp_path / "x.yaml"
    node = "apiVersion: v1\nkind: Node\nmetadata: {name: n}\n"
    pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c}]}\n"
    # the file ends in broken YAML: the error must be the object's, read before it
    f.write_text(f"{node}---\n{pod}---\nop: delete\nkind: Pod\nname: ghost\n---\nbroken: [\n")
    code, out, err = invoke("replay", str(f), "-o", "json")
    assert code == 2
    assert err.strip() == f"error: {f}:10: delete Pod ghost: no such object"
    assert [s["pod"] for s in json.loads(out)] == ["p"]  # the steps before it, as valid JSON


def test_replay_progress_follows_the_input(tmp_path: Path) -> None:
    from topodra.sim.replayio import ReplayProgress, replay_files

    seen: list[ReplayProgress] = []
    r, objects = replay_files(
        [V3 / "cluster.yaml", V3 / "workload.yaml"], on_steps=lambda steps: None, progress=lambda p: seen.append(ReplayProgress(**vars(p)))
    )
    assert objects == len(seen) > 5
    total = (V3 / "cluster.yaml").stat().st_size + (V3 / "workload.yaml").stat().st_size
    assert [p.read for p in seen] == sorted(p.read for p in seen)
    assert seen[-1].read == seen[-1].total == total
    assert seen[-1].pending == len(r.pending) == 1
    assert seen[-1].pods > 0
    assert seen[-1].line().startswith("replay: read 0.0 of 0.0 MB, ")
    assert r.steps == []  # handed on, not kept


def test_a_workload_whose_first_pod_claims_nothing_fails_before_the_rest_is_read(tmp_path: Path) -> None:
    f = tmp_path / "big.yaml"
    pod = "apiVersion: v1\nkind: Pod\nmetadata: {{name: p{}}}\nspec:\n  resourceClaims: [{{name: c, resourceClaimTemplateName: t}}]\n"
    first = "apiVersion: v1\nkind: Pod\nmetadata: {name: first}\nspec: {containers: [{name: c}]}\n"
    f.write_text("---\n".join([first, *(pod.format(i) for i in range(2000)), "broken: [\n"]))
    code, _, err = invoke("run", "--nodes", "2", "--cpus", "16", "--workload", str(f))
    assert code == 2
    assert " ".join(err.split()) == f"error: workload big: {f}:1: Pod first claims no resources (spec.resourceClaims is empty)"
    f.write_text(pod.format(0) + "---\nbroken: [\n")
    code, _, err = invoke("run", "--nodes", "2", "--cpus", "16", "--workload", str(f))
    assert code == 2
    assert " ".join(err.split()).startswith(f"error: {f}:8:1: invalid YAML: ")
