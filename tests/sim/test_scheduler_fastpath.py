"""The per-pod fast scan against the general memoised scan: the same pod results, field by field.

The fast scan (``Scheduler._quick_scan``) answers pods whose scan needs no Filter evaluation;
everything else goes to the general scan. Run side by side on the same pods, a scheduler with
the fast scan and one without must choose the same node and devices and report the same
counted work and predicted times (floats compared exactly), on random workloads with
deletions, firstAvailable scores, both scorings, pods with and without requests on nodes of
different sizes (some of them too small for a pod) and clusters large enough that the scan
samples and wraps around. The general side also filters and scores node by node
(``fast_score`` off), so the arrays of ``fastscore`` are checked here too.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topodra.sim.nodeplugins import PodKind
from topodra.sim.objects import Claim, parse_claim
from topodra.sim.scheduler import FilterScan, Pod, Scheduler

from .builders import DRIVER, attrs, claim, dclass, device, first_available, req, slice_, sub

CLS = dclass("cls", f'device.driver == "{DRIVER}"')
SEL = f'device.attributes["{DRIVER}"].kind'

SHAPES = {
    "one": claim("c", req("r")),
    "two-p": claim("c", req("r", "cls", 2, f'{SEL} == "p"')),
    "pair": claim("c", req("r", "cls", 2), constraints=[{"matchAttribute": f"{DRIVER}/numa"}]),
    "fa": claim("c", first_available("x", sub("p", "cls", 2, f'{SEL} == "p"'), sub("any", "cls", 1))),
    "big": claim("c", req("r", "cls", 5)),
}


#: Pod objects the pods are made from: no requests, one CPU, a lot of memory, two CPUs
POD_OBJS: list[dict[str, Any] | None] = [
    None,
    {"metadata": {"name": "cpu"}, "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}},
    {"metadata": {"name": "mem"}, "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "6Gi"}}}]}},
    {"metadata": {"name": "two"}, "spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}, {"name": "b", "resources": {"requests": {"cpu": "1"}}}]}},
]


class _Counting(Scheduler):
    """Counts the pods the general scan had to take."""

    general_scans = 0

    def _filter_scan(self, claims: list[Claim], sig: str, kind: PodKind) -> FilterScan:
        self.general_scans += 1
        return super()._filter_scan(claims, sig, kind)


def _status(i: int) -> dict[str, Any]:
    """Nodes of a few sizes, every seventh without allocatable (unlimited)."""
    if i % 7 == 6:
        return {}
    cpu, memory, pods = ((4, "16Gi", 110), (8, "32Gi", 110), (2, "8Gi", 3), (16, "64Gi", 110))[i % 4]
    return {"status": {"allocatable": {"cpu": str(cpu), "memory": memory, "pods": str(pods)}}}


#: scheduler_perf's DRA node (node-with-dra-test-driver.yaml: capacity, defaulted into allocatable)
PERF_NODE = {"status": {"allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"}}}


def _cluster(n: int, kinds: list[tuple[str, ...]], perf: bool = False) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes = [{"metadata": {"name": f"node-{i:03d}"}, **(PERF_NODE if perf else _status(i))} for i in range(n)]
    slices = []
    for i in range(n):
        ks = kinds[i % len(kinds)]
        slices.append(slice_(f"s-{i}", f"node-{i:03d}", [device(f"d{k}", attrs(kind=ks[k], numa=k // 2)) for k in range(len(ks))]))
    return nodes, slices


_names = itertools.count()


def _pod(shape: str, pause: bool = False) -> Pod:
    """A pod of ``shape``, made from one of ``POD_OBJS`` (``pause``: always the first)."""
    n = next(_names)
    c = SHAPES[shape]
    obj = None if pause else POD_OBJS[n * 7 % len(POD_OBJS)]
    return Pod(f"pod-{n}", ({**c, "metadata": {"name": f"c-{n}", "namespace": "default", "uid": f"u-{n}"}},), obj=obj)


def _run_side_by_side(nodes: list[dict[str, Any]], slices: list[dict[str, Any]], ops: list[tuple[str, int]], scoring: str, pause: bool = False) -> int:
    fast = _Counting(nodes, slices, [CLS], scoring=scoring)
    general = Scheduler(nodes, slices, [CLS], scoring=scoring)
    general.fast_scan = False
    general.fast_bind = False
    general.fast_score = False
    live: list[str] = []
    pods = 0
    for kind, k in ops:
        if kind == "del":
            if live:
                name = live.pop(k % len(live))
                assert fast.delete(name) == general.delete(name)
            continue
        for _ in range(k % 7 + 1):
            p = _pod(kind, pause)
            a, b = fast.schedule(p), general.schedule(p)
            pods += 1
            assert dataclasses.asdict(a) == dataclasses.asdict(b)
            if a.node:
                live.append(p.name)
    assert fast.state.devices == general.state.devices
    assert fast.next_start == general.next_start
    assert (fast._kid == general._kid).all()
    assert [fast.plugins.usage(i).requested for i in range(len(nodes))] == [general.plugins.usage(i).requested for i in range(len(nodes))]
    return pods - fast.general_scans


KINDS = st.lists(st.lists(st.sampled_from("pe"), min_size=2, max_size=6).map(tuple), min_size=1, max_size=4)


@settings(max_examples=25, deadline=None)
@given(
    st.integers(90, 260),
    KINDS,
    st.lists(st.tuples(st.sampled_from([*SHAPES, "del"]), st.integers(0, 60)), min_size=1, max_size=30),
    st.sampled_from(["kube-scheduler", "first"]),
    st.sampled_from([0, 0, 1, 7]),
)
def test_fast_scan_equals_the_general_scan(
    n: int, kinds: list[tuple[str, ...]], ops: list[tuple[str, int]], scoring: str, scan_chunk: int
) -> None:
    import topodra.sim.scheduler as scheduler_module

    scheduler_module.SCAN_CHUNK = scan_chunk  # 1, 7: windows far smaller than the nodes wanted
    try:
        _run_side_by_side(*_cluster(n, kinds), ops, scoring)
    finally:
        scheduler_module.SCAN_CHUNK = 0


def test_scheduler_perf_shape_golden() -> None:
    """scheduler_perf's shape in small (150 nodes x 10 devices, filled up and past): every pod
    the same with and without the fast scan, and the fast scan answers nearly all of them."""
    nodes, slices = _cluster(150, [("p",) * 10], perf=True)
    fast_pods = _run_side_by_side(nodes, slices, [("one", 6)] * 230 + [("del", 7)] * 40 + [("one", 6)] * 30, "kube-scheduler", pause=True)
    assert fast_pods >= 1400


def test_the_fast_scan_builds_claims_as_the_parser_does() -> None:
    """Claims of pods that share a spec are the parsed prototype with the pod's identity."""
    nodes, slices = _cluster(3, [("p", "e")])
    s = Scheduler(nodes, slices, [CLS])
    first, second = _pod("pair"), _pod("pair")
    s._parse(first)
    got, _ = s._parse(second)  # from the spec cache
    assert got == [parse_claim(c) for c in second.claims]



def test_window_sums_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast scan's window sums are dropped past the limit, and results do not change."""
    import topodra.sim.scheduler as scheduler_module

    monkeypatch.setattr(scheduler_module, "_SUMS_LIMIT", 3)
    nodes, slices = _cluster(120, [("p",) * 4, ("p", "e")])
    fast = Scheduler(nodes, slices, [CLS])
    general = Scheduler(nodes, slices, [CLS])
    general.fast_scan = False
    for _ in range(200):
        p = _pod("one")
        assert dataclasses.asdict(fast.schedule(p)) == dataclasses.asdict(general.schedule(p))
        assert fast._sums_kept <= 3
        assert sum(len(m.sums) for m in fast._memo.values()) <= 3


@st.composite
def _mixed_clusters(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Nodes the bind shortcut may take (whole devices, pools of their own) beside nodes it must
    leave to ``_touch``: devices that allow multiple allocations, a pool name two nodes list."""
    n = draw(st.integers(2, 40))
    nodes = [{"metadata": {"name": f"node-{i:03d}"}} for i in range(n)]
    slices = []
    for i in range(n):
        kind = draw(st.sampled_from(["plain", "plain", "multi", "twin"]))
        size = draw(st.integers(1, 5))
        if kind == "multi":
            # a whole device first: plain pods take it before sharing the others
            devs = [device("w", attrs(kind="e", numa=0))]
            devs += [device(f"m{k}", attrs(kind="p", numa=k // 2), {"cpu": 4}, allowMultipleAllocations=True) for k in range(size)]
            slices.append(slice_(f"s-{i}", f"node-{i:03d}", devs))
        else:
            devs = [device(f"d{k}", attrs(kind=draw(st.sampled_from("pe")), numa=k // 2)) for k in range(size)]
            # "twin": the pool is named after the pair of nodes, so two nodes list it
            slices.append(slice_(f"s-{i}", f"node-{i:03d}", devs, pool=f"twin-{i // 2}" if kind == "twin" else None))
    return nodes, slices


@settings(max_examples=40, deadline=None)
@given(
    _mixed_clusters(),
    st.lists(st.tuples(st.sampled_from(["one", "two-p", "pair", "fa", "del"]), st.integers(0, 60)), min_size=1, max_size=40),
    st.sampled_from(["kube-scheduler", "first"]),
)
def test_bind_shortcut_is_transparent(cluster: tuple[list[dict[str, Any]], list[dict[str, Any]]], ops: list[tuple[str, int]], scoring: str) -> None:
    """``_touch_added`` (the node's next class from the step seen before) against rescanning the
    node's bitmap after every bind: the same pods, classes and bitmap."""
    nodes, slices = cluster
    quick = Scheduler(nodes, slices, [CLS], scoring=scoring)
    plain = Scheduler(nodes, slices, [CLS], scoring=scoring)
    plain.fast_bind = False
    live: list[str] = []
    for kind, k in ops:
        if kind == "del":
            if live:
                name = live.pop(k % len(live))
                assert quick.delete(name) == plain.delete(name)
            continue
        for _ in range(k % 5 + 1):
            p = _pod(kind)
            a, b = quick.schedule(p), plain.schedule(p)
            assert dataclasses.asdict(a) == dataclasses.asdict(b)
            if a.node:
                live.append(p.name)
        assert (quick._kid == plain._kid).all()
        assert (quick._held == plain._held).all()
    assert quick.state.devices == plain.state.devices
    assert quick.state.shared == plain.state.shared


def test_the_bind_shortcut_is_taken_only_where_it_holds() -> None:
    """Nodes with shareable devices and nodes whose pool another node lists are left to ``_touch``."""
    nodes = [{"metadata": {"name": n}} for n in ("a", "b", "c", "d")]
    slices = [
        slice_("s-a", "a", [device("d0")]),
        slice_("s-b", "b", [device("m0", capacity={"cpu": 4}, allowMultipleAllocations=True)]),
        slice_("s-c", "c", [device("d0")], pool="twin"),
        slice_("s-d", "d", [device("d0")], pool="twin"),
    ]
    s = Scheduler(nodes, slices, [CLS])
    assert s._plain_node == [True, False, False, False]
    s.schedule(_pod("one"))
    assert len(s._steps) == 1  # node a's step: nothing held -> d0 held


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.floats(0.0, 20.0), st.integers(0, 10**6)), min_size=1, max_size=40))
def test_class_sums_loop_and_product_agree(rows: list[tuple[int, float, int]]) -> None:
    """The window sums in Python (few classes) and as one numpy product (many): the same counts,
    slowest node and timeouts, and the same seconds up to rounding."""
    import topodra.sim.scheduler as scheduler_module
    from topodra.sim.scheduler import _class_sums, _Entry, _SigMemo

    memo = _SigMemo()
    memo.grow(len(rows))
    counts = np.zeros(len(memo.entries), dtype=np.int64)
    for k, (count, secs, calls) in enumerate(rows):
        memo.put(k, _Entry(True, secs, calls, calls // 2, calls // 3, calls // 5), timeout_s=10.0)
        counts[k] = count
    if not counts.any():
        counts[0] = 1
    loop = _class_sums(memo, counts, 10.0)
    saved = scheduler_module._LOOP_CLASSES
    scheduler_module._LOOP_CLASSES = -1  # every histogram takes the product
    try:
        product = _class_sums(memo, counts, 10.0)
    finally:
        scheduler_module._LOOP_CLASSES = saved
    assert loop[1:] == product[1:]
    assert loop[0] == pytest.approx(product[0], rel=1e-12, abs=1e-12)
