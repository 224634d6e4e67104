"""The synthetic background fill, built compactly and put into the scheduler in bulk, is the
same cluster state and gives the same runs as the fill made of allocation objects."""

from __future__ import annotations

import numpy as np
import pytest

from topodra.sim.cluster import ClusterSpec, build_cluster
from topodra.sim.run import _preallocate
from topodra.sim.scheduler import Scheduler
from topodra.sim.workload import load_workload


def _state(s: Scheduler) -> tuple[object, ...]:
    return (s._kid.tolist(), s._held.tolist(), sorted(s.state.devices), dict(s.state.capacity), s._key_ids)


@pytest.mark.parametrize(("model", "machines", "workload"), [("cpu", {"64": 1.0, "32": 1.0}, "l3-8"), ("core", {"64": 1.0}, "first-available"), ("grouped", {"64": 1.0}, "grouped")])
@pytest.mark.parametrize("patterns", [3, 40])
def test_bulk_fill_equals_the_fill_as_allocations(model: str, machines: dict[str, float], workload: str, patterns: int) -> None:
    c = build_cluster(ClusterSpec(nodes=40, machines=machines, model=model, fill=0.4, fill_patterns=patterns, seed=7))
    wl = load_workload(workload)
    slow = Scheduler(c.nodes, c.slices, list(c.classes) + list(wl.classes))
    slow.preallocate(c.background)
    bulk = Scheduler(c.nodes, c.slices, list(c.classes) + list(wl.classes))
    _preallocate(bulk, c)
    assert _state(bulk) == _state(slow)
    assert len(bulk.state.devices) + len(bulk.state.capacity) > 0
    for p in wl.generate(model, 40):
        a, b = slow.schedule(p), bulk.schedule(p)
        assert (a.node, a.failure, [x.to_api() for x in a.allocations]) == (b.node, b.failure, [x.to_api() for x in b.allocations])


def test_fill_patterns_take_the_fraction_and_differ() -> None:
    c = build_cluster(ClusterSpec(nodes=200, machines={"64": 1.0}, fill=0.5, fill_patterns=200))
    assert c.fill is not None
    held = [c.fill.indexes(i) for i in range(200)]
    assert all(len(h) == 32 and len(np.unique(h)) == 32 for h in held)  # half of 64 per-CPU devices, no repeats
    assert len({tuple(sorted(h.tolist())) for h in held}) > 100  # nodes pick among 200 patterns
    again = build_cluster(ClusterSpec(nodes=200, machines={"64": 1.0}, fill=0.5, fill_patterns=200))
    assert again.fill is not None
    assert [h.tolist() for h in held] == [again.fill.indexes(i).tolist() for i in range(200)]


def test_bulk_fill_rejects_positions_off_the_node() -> None:
    c = build_cluster(ClusterSpec(nodes=2, machines={"16": 1.0}))
    s = Scheduler(c.nodes, c.slices, c.classes)
    with pytest.raises(ValueError, match="out of range"):
        s.preallocate_positions([(0, [3, 16])])
    assert not s.state.devices
    assert not s._held.any()
