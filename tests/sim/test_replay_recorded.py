"""Replay + diff against allocations recorded from a real kube-scheduler 1.36 (tests/data/sched-recorded)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from topodra.gates import parse_feature_gates
from topodra.sim.diff import diff_replay, load_recorded
from topodra.sim.replay import replay
from topodra.yamldocs import expand_lists, load_documents

RECORDED = Path(__file__).resolve().parents[1] / "data" / "sched-recorded"
SCENARIOS = [
    "v1-core-siblings",
    "v2-mixed-nodes",
    "v3-shared-claim-lifecycle",
    "v4-kubectl-dump",
    "v5-core-or-thread",
    "v6-device-taints",
    "v7-device-taint-eviction",
    "v8-device-taint-rules",
    "v9-opaque-params",
]
#: recorded with kube-controller-manager running without its device-taint-eviction-controller
#: (their result.json "gates"): NoExecute taints evicted nothing there
NO_TAINT_EVICTION = {"v6-device-taints", "v8-device-taint-rules"}


def _objects(*files: Path) -> list[tuple[object, str]]:
    return [(d.obj, d.source) for f in files for d in expand_lists(load_documents(f))]


def _inputs(scenario: str) -> list[tuple[object, str]]:
    return _objects(RECORDED / scenario / "cluster.yaml", RECORDED / scenario / "workload.yaml")


@pytest.mark.parametrize(
    ("scenario", "log"),
    [(s, "result.json") for s in SCENARIOS] + [("v2-mixed-nodes", "result.rerun-1.json"), ("v2-mixed-nodes", "result.rerun-2.json")],
)
def test_replay_matches_every_recorded_step(scenario: str, log: str) -> None:
    recorded = load_recorded(RECORDED / scenario / log)
    report = diff_replay(_inputs(scenario), recorded, evictions=scenario not in NO_TAINT_EVICTION)
    assert [r for r in report.rows if r.verdict not in ("match", "tie")] == []
    assert report.matches == len(recorded.outcomes)


def test_ties_are_the_only_steps_that_follow_the_recording() -> None:
    # The recorded run and its reruns broke the m-07 tie differently; both are matched, and only
    # through steps the replay itself scores as ties (the scores are compared on every step).
    for log in ("result.json", "result.rerun-1.json"):
        report = diff_replay(_inputs("v2-mixed-nodes"), load_recorded(RECORDED / "v2-mixed-nodes" / log))
        tied = {r.key for r in report.rows if r.verdict == "tie"}
        assert "create m-07-1to2-c4" in tied
        assert "create m-00-ge4-c2" not in tied


def test_without_hints_a_tie_goes_to_the_first_best_node_in_scan_order() -> None:
    steps = {s.pod: s for s in replay(_inputs("v2-mixed-nodes")).steps}
    assert steps["m-07-1to2-c4"].top == ["xeon40", "ia8"]
    assert steps["m-07-1to2-c4"].node == "xeon40"
    assert steps["m-01-ge2-c6"].scores == {"ia16": 398, "xeon40": 399}


def test_the_kubectl_dump_replays_to_itself_and_matches_the_workload() -> None:
    dump = RECORDED / "v4-kubectl-dump" / "dump.yaml"
    recorded = load_recorded(dump)
    assert recorded.form == "state"
    for inputs in (_objects(dump), _inputs("v4-kubectl-dump")):
        report = diff_replay(inputs, recorded)
        assert report.mismatches == 0
        assert report.matches == 9
    r = replay(_objects(dump))
    # bound pods keep their recorded devices; the two pending ones fail again with the scheduler's words
    assert [s.op for s in r.steps].count("bound") == 7
    assert sorted(r.pending) == ["recorded/a-01-one", "recorded/z-06-trio"]
    assert r.final_pods()["z-06-trio"].failure == (
        "0/2 nodes are available: 1 cannot allocate all claims, 1 node(s) didn't match Pod's node affinity/selector."
    )


def test_a_wrong_device_is_a_mismatch(tmp_path: Path) -> None:
    text = (RECORDED / "v1-core-siblings" / "result.json").read_text().replace('"cpu6"', '"cpu7"', 1)
    (tmp_path / "result.json").write_text(text)
    report = diff_replay(_inputs("v1-core-siblings"), load_recorded(tmp_path / "result.json"))
    bad = [r for r in report.rows if r.verdict == "MISMATCH"]
    assert [(r.key, r.differs) for r in bad] == [("create s8-02-pair", ("claim c0 devices",))]


def test_the_copied_tolerations_are_compared(tmp_path: Path) -> None:
    """An allocation result keeps a copy of its request's tolerations (a status field): a replay
    that writes other tolerations than the real scheduler did is a mismatch."""
    text = (RECORDED / "v1-core-siblings" / "result.json").read_text()
    tolerated = '"device": "cpu6", "tolerations": [{"key": "k", "operator": "Exists"}]'
    (tmp_path / "result.json").write_text(text.replace('"device": "cpu6"', tolerated, 1))
    report = diff_replay(_inputs("v1-core-siblings"), load_recorded(tmp_path / "result.json"))
    bad = [r for r in report.rows if r.verdict == "MISMATCH"]
    assert [(r.key, r.differs) for r in bad] == [("create s8-02-pair", ("claim c0 devices",))]


def test_each_plugins_score_is_compared(tmp_path: Path) -> None:
    # move 1 point between two plugins of one node: the total stays, the per-plugin scores differ
    doc = json.loads((RECORDED / "v2-mixed-nodes" / "result.json").read_text())
    step = next(s for s in doc["steps"] if s.get("name") == "m-01-ge2-c6")
    plugins = step["scores"]["ia16"]["plugins"]
    plugins["NodeResourcesFit"] -= 1
    plugins["ImageLocality"] += 1
    (tmp_path / "result.json").write_text(json.dumps(doc))
    report = diff_replay(_inputs("v2-mixed-nodes"), load_recorded(tmp_path / "result.json"))
    bad = [(r.key, r.differs) for r in report.rows if r.verdict == "MISMATCH"]
    assert bad == [("create m-01-ge2-c6", ("plugin scores",))]


def test_a_tie_row_names_the_tied_nodes() -> None:
    report = diff_replay(_inputs("v2-mixed-nodes"), load_recorded(RECORDED / "v2-mixed-nodes" / "result.json"))
    row = next(r for r in report.rows if r.key == "create m-07-1to2-c4")
    assert row.verdict == "tie"
    assert sorted(row.tied) == ["ia8", "xeon40"]
    assert report.as_dict()["rows"][report.rows.index(row)]["tie"] == list(row.tied)


def test_the_pcie_root_recording_replays_with_its_gate() -> None:
    """v13-pcie-root ran with DRAListTypeAttributes on: CEL sees lists, matchAttribute matches none."""
    scenario = RECORDED / "v13-pcie-root"
    recorded = load_recorded(scenario / "result.json")
    report = diff_replay(_inputs("v13-pcie-root"), recorded, gates=parse_feature_gates(json.loads((scenario / "result.json").read_text())["gates"]))
    assert [r for r in report.rows if r.verdict not in ("match", "tie")] == []
    assert report.matches == len(recorded.outcomes) == 48
    steps = {s.pod: s for s in report.replay.steps if s.op == "create"}
    # two CPUs carrying the same list do not match each other; a GPU skips the roots only lists name
    assert steps["k-12-pkg0-cpus2-root"].node is None
    assert [d for c in steps["p-00-gpu-cpus2-root"].claims for d in c.devices] == ["gpu1", "cpu3", "cpu1"]
    # without the gate every selector on a device with a list fails
    off = diff_replay(_inputs("v13-pcie-root"), recorded)
    assert "unsupported attribute value" in (off.replay.steps[0].failure or "")


def test_allocation_config_is_written_and_compared_as_the_real_scheduler_wrote_it(tmp_path: Path) -> None:
    """v9: class configs name every request of their class, a claim config naming two requests is
    there twice, a subrequest's as ``req/sub``; the replay writes each entry as the real scheduler
    did, and the diff compares them (a changed source is a mismatch of that claim's config)."""
    log = RECORDED / "v9-opaque-params" / "result.json"
    recorded = {s["name"]: s for s in json.loads(log.read_text())["steps"] if s.get("op") == "create"}
    steps = {s.pod: s for s in replay(_inputs("v9-opaque-params")).steps if s.op != "delete"}
    for pod in ("o-01-claim-named", "o-02-class-and-claim", "o-03-first-available", "o-04-other-driver"):
        (claim,) = steps[pod].claims
        assert claim.allocation is not None
        assert claim.allocation["devices"]["config"] == recorded[pod]["claims"][0]["config"], pod
    twice = [c for c in recorded["o-01-claim-named"]["claims"][0]["config"] if c.get("requests") == ["a", "b"]]
    assert len(twice) == 2
    (tmp_path / "result.json").write_text(log.read_text().replace('"FromClass"', '"FromClaim"', 1))
    report = diff_replay(_inputs("v9-opaque-params"), load_recorded(tmp_path / "result.json"))
    bad = [(r.key, r.differs) for r in report.rows if r.verdict == "MISMATCH"]
    assert bad == [("create o-02-class-and-claim", ("claim c0 config",))]


def test_the_eviction_controller_is_what_separates_v6_from_v7() -> None:
    """v6 was recorded without kube-controller-manager's device-taint-eviction-controller: with
    it, p-05 (a NoExecute taint tolerated without an effect) would be evicted right after its
    binding, as v7 records for e-09; the recording's later deletion of p-05 then finds no pod."""
    steps = replay(_inputs("v7-device-taint-eviction")).steps
    assert [s.pod for s in steps if s.op == "evicted"] == [
        "e-00-plain1", "e-01-reserved-cpu6", "e-02-pkg0-2", "e-05-offline-no-effect",  # at the taint's write
        "e-04-offline-2s",  # its 2 s passed in the 6 s wait
        "e-09-offline-no-effect", "e-10-offline-and-reserved",  # right after their binding
    ]
    with pytest.raises(ValueError, match="delete Pod p-05-reserved-default-op: no such object"):
        replay(_inputs("v6-device-taints"))


def test_the_cli_replays_without_the_eviction_controller_when_told() -> None:
    from typer.testing import CliRunner

    from topodra.cli import app

    files = [str(RECORDED / "v6-device-taints" / f) for f in ("cluster.yaml", "workload.yaml")]
    recorded = str(RECORDED / "v6-device-taints" / "result.json")
    r = CliRunner().invoke(app, ["sim", "diff", *files, "-r", recorded, "--no-taint-eviction", "-o", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["mismatches"] == 0
    r = CliRunner().invoke(app, ["sim", "diff", *files, "-r", recorded])
    assert r.exit_code == 2
    assert "delete Pod p-05-reserved-default-op: no such object" in " ".join(r.output.split())
