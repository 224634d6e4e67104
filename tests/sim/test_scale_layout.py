"""Node layouts computed per shared device list agree with the plain per-device reference.

``NodeLayouts`` replaces the scheduler's per-device dictionaries (one entry per device of
the cluster) by tables per distinct device list; the reference below is the per-device loop
it replaces. Random small clusters mix shared and private device lists, several pools per
node, several slices per pool, devices that allow multiple allocations, and an invalid pool.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topodra.sim.allocator import Allocator
from topodra.sim.layout import NodeLayouts
from topodra.sim.objects import parse_node
from topodra.sim.scheduler import Pod, Scheduler

from .builders import DRIVER, attrs, claim, dclass, device, req, slice_

CLS = dclass("cls", f'device.driver == "{DRIVER}"')


def _reference(alloc: Allocator, nodes: list[Any]) -> tuple[list[Any], list[list[Any]], dict[Any, tuple[int, int]], dict[Any, Any]]:
    """The per-device loop: layout key, ids by position, device -> (node, position), capacities."""
    keys: list[Any] = []
    ids_of: list[list[Any]] = []
    where: dict[Any, tuple[int, int]] = {}
    caps: dict[Any, Any] = {}
    for i, node in enumerate(nodes):
        layout: list[Any] = []
        ids: list[Any] = []
        for p in alloc.pools_for(node):
            if not p.usable:
                layout.append((p.driver, "incomplete" if p.incomplete else "invalid"))
                continue
            shapes = []
            for s in p.slices:
                shapes.append((s.per_device_node_selection, bool(s.node_name), tuple(d.shape for d in s.devices)))
                for d in s.devices:
                    did = (p.driver, p.name, d.name)
                    where[did] = (i, len(ids))
                    ids.append(did)
                    if d.allow_multiple and d.capacity:
                        caps[did] = {k: c.value.amount for k, c in d.capacity.items()}
            counters = json.dumps({k: {c: str(q) for c, q in v.items()} for k, v in p.counter_sets.items()}, sort_keys=True)
            layout.append((p.driver, tuple(shapes), counters))
        keys.append(tuple(layout))
        ids_of.append(ids)
    return keys, ids_of, where, caps


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    n = draw(st.integers(1, 6))
    shared_lists = [
        [device(f"d{k}", attrs(kind=draw(st.sampled_from(["p", "e"])))) for k in range(draw(st.integers(0, 4)))] for _ in range(2)
    ]
    nodes = [{"metadata": {"name": f"node-{i}"}} for i in range(n)]
    slices: list[dict[str, Any]] = []
    for i in range(n):
        for pool in range(draw(st.integers(1, 2))):
            parts = draw(st.integers(1, 2))
            for part in range(parts):
                choice = draw(st.integers(0, 3))
                if choice < 2:
                    devs = shared_lists[choice]  # the very same list object on many nodes
                elif choice == 2:
                    devs = [device(f"x{part}-{k}", attrs(kind="p"), {"cpu": 4}, allowMultipleAllocations=True) for k in range(draw(st.integers(1, 3)))]
                else:
                    devs = [device(f"y{part}-{k}") for k in range(draw(st.integers(1, 3)))]
                if parts == 2 and choice < 2:
                    devs = [dict(d, name=f"{d['name']}-{part}") for d in devs]  # no duplicate names inside a pool
                slices.append(slice_(f"node-{i}-p{pool}-{part}", f"node-{i}", devs, pool=f"node-{i}-p{pool}", count=parts))
        if draw(st.booleans()):  # an invalid pool: one name twice
            slices.append(slice_(f"node-{i}-bad", f"node-{i}", [device("z"), device("z")], pool=f"node-{i}-bad"))
    return nodes, slices


@settings(max_examples=60, deadline=None)
@given(clusters())
def test_layouts_equal_the_per_device_reference(cluster: tuple[list[dict[str, Any]], list[dict[str, Any]]]) -> None:
    raw_nodes, slices = cluster
    nodes = [parse_node(n) for n in raw_nodes]
    alloc = Allocator(slices, [CLS])
    layouts = NodeLayouts(alloc, nodes)
    keys, ids_of, where, caps = _reference(alloc, nodes)
    for i in range(len(nodes)):
        assert layouts.device_count(i) == len(ids_of[i])
        assert [layouts.device_at(i, p) for p in range(len(ids_of[i]))] == ids_of[i]
        for p, did in enumerate(ids_of[i]):
            assert layouts.capacity_of(i, p) == caps.get(did, {})
        for j in range(len(nodes)):  # same shape template exactly when the reference keys are equal
            assert (layouts.template_of[i] == layouts.template_of[j]) == (keys[i] == keys[j])
    for did, w in where.items():
        assert layouts.where(did) == w
    assert layouts.where((DRIVER, "no-such-pool", "d0")) is None


@settings(max_examples=30, deadline=None)
@given(clusters(), st.lists(st.integers(1, 3), min_size=1, max_size=8))
def test_scheduler_on_random_layouts_equals_the_plain_loop(cluster: tuple[list[dict[str, Any]], list[dict[str, Any]]], counts: list[int]) -> None:
    nodes, slices = cluster
    fast = Scheduler(nodes, slices, [CLS], memo=True)
    slow = Scheduler(nodes, slices, [CLS], memo=False)
    for k, count in enumerate(counts):
        c = claim("c", req("r", "cls", count))
        p = Pod(f"pod-{k}", ({**c, "metadata": {"name": f"c-{k}", "namespace": "default", "uid": f"u-{k}"}},))
        a, b = fast.schedule(p), slow.schedule(p)
        assert (a.node, a.failure_kind, a.nodes_filtered, a.calls, a.visits, a.cel_evals) == (b.node, b.failure_kind, b.nodes_filtered, b.calls, b.visits, b.cel_evals)
        assert [r.id for x in a.allocations for r in x.results] == [r.id for x in b.allocations for r in x.results]
        if k % 3 == 2 and a.node is not None:
            assert fast.delete(a.pod) == slow.delete(b.pod)


def test_grouped_placements_equal_the_plain_scheduler(monkeypatch: pytest.MonkeyPatch) -> None:
    """Grouped devices (shared, capacity consumed) on two machine sizes, filled: every shortcut
    of the scheduler on, and every one off, place every pod on the same node and devices."""
    from topodra.sim.run import RunConfig, run_simulation

    def placements(fast: bool) -> tuple[int, str]:
        with monkeypatch.context() as m:
            for shortcut in ("fast_scan", "first_fit", "fast_bind", "fast_score"):
                m.setattr(Scheduler, shortcut, fast)
            s, rs = run_simulation(RunConfig(nodes=60, machines={"64": 1.0, "256": 1.0}, model="grouped", workload="grouped", pods=300, fill=0.3, fill_patterns=7))
        return s.scheduled, ",".join(f"{r.node}:{'/'.join(x.device for a in r.allocations for x in a.results)}" for r in rs)

    fast = placements(True)
    assert fast[0] == 300
    assert fast == placements(False)
