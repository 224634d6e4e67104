"""The Python port of the kubelet's ``takeByTopologyNUMAPacked`` answers as the kubelet's own Go
code did, grant for grant (``tests/data/kubelet-grants/``, recorded by ``testkit.kubelet_harness``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from testkit.kubelet_harness import GrantSequence, grants_from_json, replay_python

DATA = Path(__file__).resolve().parents[1] / "data" / "kubelet-grants"
FILES = sorted(DATA.glob("*.json"))


def test_recordings_cover_the_benchmark_machines_and_the_fixtures() -> None:
    names = {f.stem for f in FILES}
    assert {"bench-memorysidecaches", "bench-256ia64-64n2s2c", "bench-synthetic"} <= names
    assert len(names) >= 30


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_port_equals_the_kubelet_grant_for_grant(path: Path) -> None:
    raw = json.loads(path.read_text())
    go = grants_from_json(raw["grants"])
    port = replay_python(GrantSequence.from_json(raw))
    assert len(port) == len(go)
    for mine, theirs in zip(port, go, strict=True):
        assert (mine.id, mine.cpus, bool(mine.error)) == (theirs.id, theirs.cpus, bool(theirs.error)), mine.id
        if theirs.error:
            assert mine.error == theirs.error
