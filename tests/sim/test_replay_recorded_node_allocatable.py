"""v10-node-allocatable: a real kube-scheduler 1.36 with DRANodeAllocatableResources on
(tests/data/sched-recorded), replayed and compared pod by pod: node, devices, the pods'
``status.nodeAllocatableResourceClaimStatuses`` and the failure messages word for word."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from topodra.gates import parse_feature_gates
from topodra.sim.diff import diff_replay, load_recorded
from topodra.sim.replay import replay
from topodra.yamldocs import expand_lists, load_documents

SCENARIO = Path(__file__).resolve().parents[1] / "data" / "sched-recorded" / "v10-node-allocatable"
RESULT = json.loads((SCENARIO / "result.json").read_text())
GATES = parse_feature_gates(RESULT["gates"])


def _inputs() -> list[tuple[object, str]]:
    files = (SCENARIO / "cluster.yaml", SCENARIO / "workload.yaml")
    return [(d.obj, d.source) for f in files for d in expand_lists(load_documents(f))]


def test_every_recorded_step_matches_with_the_recorded_gates() -> None:
    recorded = load_recorded(SCENARIO / "result.json")
    report = diff_replay(_inputs(), recorded, gates=GATES)
    assert [r for r in report.rows if r.verdict not in ("match", "tie")] == []
    assert report.matches == len(recorded.outcomes) == 60
    # the statuses are compared on every bound pod that has them
    with_statuses = [s for s in RESULT["steps"] if s.get("nodeAllocatableResourceClaimStatuses")]
    assert len(with_statuses) >= 15
    assert all(o.node_allocatable is not None for o in recorded.outcomes if o.op == "create" and o.node is not None)


def test_the_statuses_are_the_schedulers_for_every_model() -> None:
    steps = {s.pod: s for s in replay(_inputs(), gates=GATES).steps if s.op in ("create", "scheduled-later")}

    def resources(pod: str) -> list[tuple[list[str], dict[str, Any]]]:
        return [(st["containers"], st["resources"]) for st in steps[pod].node_allocatable]

    assert resources("a-07-two-ctrs") == [(["ctr0", "ctr1"], {"cpu": "1"})]  # per CPU device, both containers
    assert resources("b-00-pcores2") == [(["ctr0"], {"cpu": "4"})]  # two P-cores of two threads
    assert resources("b-01-ecores3") == [(["ctr0"], {"cpu": "3"})]  # three single-thread E-cores
    assert resources("c-00-grp3") == [(["ctr0"], {"cpu": "3"})]  # the consumed capacity
    assert steps["a-05-besteffort"].node_allocatable == []  # no claim, no status


def test_without_the_gate_the_recording_is_not_what_happens() -> None:
    # the claims' CPUs are free node cpu to a scheduler without the gate: pods the real one refused
    # are bound
    report = diff_replay(_inputs(), load_recorded(SCENARIO / "result.json"))
    refused_then_bound = {r.key for r in report.rows if r.verdict == "MISMATCH" and "node" in r.differs}
    assert "create a-02-guaranteed1" in refused_then_bound
    assert "create b-04-guaranteed6" in refused_then_bound
