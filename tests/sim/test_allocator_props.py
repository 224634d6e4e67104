"""Property tests: the allocator against a brute-force reference, pruning and memoising against plain search.

The reference enumerates candidate solutions in the order kube-scheduler's
depth-first search meets them (claims, then requests, then subrequests in
order, device combinations in lexicographic order) and returns the first one
that satisfies every rule. The allocator must return exactly that one.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topodra.sim.allocator import AllocatedState, AllocationError, Allocator

from .builders import DRIVER, attrs, claim, dclass, device, first_available, req, slice_, sub

CLASSES = [dclass("cls", f'device.driver == "{DRIVER}"'), dclass("even", f'device.attributes["{DRIVER}"].id % 2 == 0')]
SELECTORS = [None, f'device.attributes["{DRIVER}"].kind == "p"', f'device.attributes["{DRIVER}"].numa != 1']


@st.composite
def scenario(draw: Any) -> dict[str, Any]:
    n_slices = draw(st.integers(1, 2))
    slices = []
    devices: list[dict[str, Any]] = []
    i = 0
    for s in range(n_slices):
        ds = []
        for _ in range(draw(st.integers(0, 5))):
            a = {"id": i, "numa": draw(st.integers(0, 2)), "kind": draw(st.sampled_from(["p", "e"]))}
            d = device(f"d{i}", attrs(**a))
            ds.append(d)
            devices.append(a | {"name": f"d{i}", "slice": f"s{s}"})
            i += 1
        slices.append(slice_(f"s{s}", "node-1", ds, pool="p", count=n_slices))
    claims = []
    for c in range(draw(st.integers(1, 2))):
        reqs = []
        for r in range(draw(st.integers(1, 2))):
            if draw(st.booleans()):
                subs = [
                    sub(f"s{k}", draw(st.sampled_from(["cls", "even"])), draw(st.integers(1, 3)), *([x] if (x := draw(st.sampled_from(SELECTORS))) else []))
                    for k in range(draw(st.integers(1, 2)))
                ]
                reqs.append(first_available(f"r{r}", *subs))
            else:
                sel = draw(st.sampled_from(SELECTORS))
                reqs.append(req(f"r{r}", draw(st.sampled_from(["cls", "even"])), draw(st.integers(1, 3)), *([sel] if sel else [])))
        constraints = []
        if draw(st.booleans()):
            scope = draw(st.sampled_from([[], ["r0"]]))
            constraints.append({"matchAttribute": f"{DRIVER}/" + draw(st.sampled_from(["numa", "kind"])), **({"requests": scope} if scope else {})})
        claims.append(claim(f"c{c}", *reqs, constraints=constraints))
    in_use = draw(st.sets(st.integers(0, max(i - 1, 0)), max_size=3)) if i else set()
    return {"slices": slices, "devices": devices, "claims": claims, "in_use": {f"d{k}" for k in in_use if k < i}}


def _state(in_use: set[str]) -> AllocatedState:
    stt = AllocatedState()
    stt.devices = {(DRIVER, "p", n) for n in in_use}
    return stt


def _matches(dev: dict[str, Any], cls: str, selectors: list[dict[str, Any]]) -> bool:
    if cls == "even" and dev["id"] % 2:
        return False
    for s in selectors:
        e = s["cel"]["expression"]
        if "kind" in e and dev["kind"] != "p":
            return False
        if "numa" in e and dev["numa"] == 1:
            return False
    return True


def reference(sc: dict[str, Any]) -> list[list[tuple[str, str]]] | None:
    """First solution in depth-first order, found by enumeration."""
    order = sorted(sc["devices"], key=lambda d: (d["slice"], d["id"]))
    order = [d for d in order if d["name"] not in sc["in_use"]]
    # Flatten (claim, request) into a list of alternatives: per request, a list of (name, cls, count, selectors).
    units: list[tuple[int, str, list[tuple[str, str, int, list[Any]]]]] = []
    for ci, c in enumerate(sc["claims"]):
        for r in c["spec"]["devices"]["requests"]:
            if "firstAvailable" in r:
                alts = [(f"{r['name']}/{s['name']}", s["deviceClassName"], s["count"], s.get("selectors", [])) for s in r["firstAvailable"]]
            else:
                e = r["exactly"]
                alts = [(r["name"], e["deviceClassName"], e["count"], e.get("selectors", []))]
            units.append((ci, r["name"], alts))
    total = [sum(min(a[2] for a in alts) for (cj, _, alts) in units if cj == ci) for ci in range(len(sc["claims"]))]
    if any(t > 32 for t in total):
        return None

    def ok(ci: int, chosen: list[tuple[int, str, str, dict[str, Any]]]) -> bool:
        cons = sc["claims"][ci]["spec"]["devices"].get("constraints", [])
        for con in cons:
            attr = con["matchAttribute"].split("/", 1)[1]
            scope = con.get("requests") or []
            vals = {d[attr] for (cj, base, _, d) in chosen if cj == ci and (not scope or base in scope)}
            if len(vals) > 1:
                return False
        return True

    def rec(u: int, used: set[str], chosen: list[tuple[int, str, str, dict[str, Any]]]) -> list[tuple[int, str, str, dict[str, Any]]] | None:
        if u == len(units):
            return chosen
        ci, base, alts = units[u]
        for name, cls, count, sels in alts:
            pool = [d for d in order if d["name"] not in used and _matches(d, cls, sels)]
            for combo in itertools.combinations(pool, count):
                nxt = chosen + [(ci, base, name, d) for d in combo]
                if not ok(ci, nxt):
                    continue
                got = rec(u + 1, used | {d["name"] for d in combo}, nxt)
                if got is not None:
                    return got
        return None

    sol = rec(0, set(), [])
    if sol is None:
        return None
    return [[(name, d["name"]) for (cj, _, name, d) in sol if cj == ci] for ci in range(len(sc["claims"]))]


@given(scenario())
def test_allocation_equals_brute_force_reference(sc: dict[str, Any]) -> None:
    a = Allocator(sc["slices"], CLASSES, _state(sc["in_use"]))
    got = a.allocate({"metadata": {"name": "node-1"}}, sc["claims"])
    want = reference(sc)
    assert (None if got is None else [[(r.request, r.device) for r in c.results] for c in got]) == want


@given(scenario())
def test_pruning_changes_neither_result_nor_counted_work(sc: dict[str, Any]) -> None:
    node = {"metadata": {"name": "node-1"}}
    fast, fs = Allocator(sc["slices"], CLASSES, _state(sc["in_use"]), prune=True).allocate_with_stats(node, sc["claims"])
    slow, ss = Allocator(sc["slices"], CLASSES, _state(sc["in_use"]), prune=False, fast=False).allocate_with_stats(node, sc["claims"])
    assert fast == slow
    assert (fs.calls, fs.visits, fs.checks, fs.cel_evals) == (ss.calls, ss.visits, ss.checks, ss.cel_evals)
    assert fs.our_calls <= ss.our_calls


@given(scenario(), st.sampled_from([0, 5, 16]))
def test_accelerations_answer_as_the_plain_search(sc: dict[str, Any], fast_after: int) -> None:
    """Every acceleration on (from the first call or later) against ``plain=True``: the same
    answer, or the same error, and the same counted work."""
    node = {"metadata": {"name": "node-1"}}

    def run(**kw: Any) -> tuple[Any, tuple[int, int, int, int], int]:
        a = Allocator(sc["slices"], CLASSES, _state(sc["in_use"]), budget=None, **kw)
        try:
            got: Any = a.allocate(node, sc["claims"])
        except AllocationError as e:
            got = str(e)
        s = a.last_stats
        return got, (s.calls, s.visits, s.checks, s.cel_evals), s.pruned

    plain = run(plain=True)
    assert plain[2] == 0  # the plain search decides nothing without walking it
    assert run(fast_after=fast_after, solve_after=fast_after)[:2] == plain[:2]


@st.composite
def grouped_shape(draw: Any) -> tuple[int, int, int, set[int]]:
    groups = draw(st.integers(1, 4))
    size = draw(st.integers(1, 9))
    count = draw(st.integers(1, 10))
    used = draw(st.sets(st.integers(0, groups * size - 1), max_size=groups * size // 2))
    return groups, size, count, used


@given(grouped_shape())
def test_group_constraint_results_hold_and_counting_is_exact(shape: tuple[int, int, int, set[int]]) -> None:
    groups, size, count, used = shape
    devices = [device(f"cpu{i}", attrs(l3=i // size, kind="p" if i % 3 else "e")) for i in range(groups * size)]
    c = claim("c", req("r", "cls", count, f'device.attributes["{DRIVER}"].kind == "p"'), constraints=[{"matchAttribute": f"{DRIVER}/l3"}])
    st_ = AllocatedState()
    st_.devices = {(DRIVER, "node-1", f"cpu{i}") for i in used}
    node = {"metadata": {"name": "node-1"}}
    fast, fs = Allocator([slice_("s", "node-1", devices)], CLASSES, st_, prune=True).allocate_with_stats(node, [c])
    slow, ss = Allocator([slice_("s", "node-1", devices)], CLASSES, st_, prune=False, fast=False).allocate_with_stats(node, [c])
    assert fast == slow
    assert (fs.calls, fs.visits, fs.checks, fs.cel_evals) == (ss.calls, ss.visits, ss.checks, ss.cel_evals)
    if fast is not None:
        picked = [int(r.device[3:]) for r in fast[0].results]
        assert len(picked) == count
        assert len({p // size for p in picked}) == 1
        assert not set(picked) & used
        assert all(p % 3 for p in picked)


@given(st.lists(st.tuples(st.booleans(), st.integers(1, 5)), min_size=1, max_size=12))
def test_allocated_state_add_remove_round_trip(ops: list[tuple[bool, int]]) -> None:
    shared = [device(f"g{i}", attrs(socket=i), {"cpu": 8}, allowMultipleAllocations=True) for i in range(2)]
    plain = [device(f"d{i}") for i in range(4)]
    a = Allocator([slice_("s", "node-1", shared + plain)], CLASSES)
    live: list[Any] = []
    for n, (is_shared, amount) in enumerate(ops):
        if live and n % 3 == 2:
            a.state.remove(live.pop(0))
            continue
        sel = "device.allowMultipleAllocations" if is_shared else "!device.allowMultipleAllocations"
        extra = {"capacity": {"requests": {"cpu": str(amount)}}} if is_shared else {}
        got = a.allocate("node-1", [claim(f"c{n}", req("r", "cls", 1, sel, **extra))])
        if got is not None:
            a.state.add(got[0])
            live.append(got[0])
        # invariants: exclusive devices are used once, shared capacity never exceeds the device's
        for g in ("g0", "g1"):
            used = a.state.capacity.get((DRIVER, "node-1", g), {}).get("cpu", 0)
            assert 0 <= used <= 8
        exclusive = [r.device for x in live for r in x.results if r.share_id is None]
        assert len(exclusive) == len(set(exclusive))
    for x in live:
        a.state.remove(x)
    assert not a.state.devices
    assert not a.state.capacity
    assert not a.state.shared


@st.composite
def rich_scenario(draw: Any) -> dict[str, Any]:
    """Devices with taints, shared capacity and counters; requests with every mode and constraint."""
    devices = []
    counters = draw(st.booleans())
    for i in range(draw(st.integers(1, 7))):
        extra: dict[str, Any] = {}
        if draw(st.booleans()):
            extra["allowMultipleAllocations"] = True
        cap = {"cpu": draw(st.integers(1, 4))} if draw(st.booleans()) else None
        if draw(st.integers(0, 4)) == 0:
            extra["taints"] = [{"key": "t", "value": "v", "effect": draw(st.sampled_from(["NoSchedule", "None", "NoExecute"]))}]
        if counters:
            extra["consumesCounters"] = [{"counterSet": "set", "counters": {"n": {"value": str(draw(st.integers(1, 3)))}}}]
        devices.append(device(f"d{i}", attrs(numa=draw(st.integers(0, 1)), kind=draw(st.sampled_from(["p", "e"]))), cap, **extra))
    slices = [slice_("s0", "node-1", devices, pool="p", count=2 if counters else 1)]
    if counters:
        slices.append(slice_("s1", "node-1", [], pool="p", count=2, sharedCounters=[{"name": "set", "counters": {"n": {"value": "4"}}}]))
    reqs = []
    for r in range(draw(st.integers(1, 3))):
        extra = {}
        if draw(st.booleans()):
            extra["capacity"] = {"requests": {"cpu": str(draw(st.integers(1, 3)))}}
        if draw(st.integers(0, 3)) == 0:
            extra["tolerations"] = [{"key": "t", "operator": "Exists"}]
        if draw(st.integers(0, 5)) == 0:
            extra["adminAccess"] = True
        if draw(st.integers(0, 5)) == 0:
            reqs.append(req(f"r{r}", "cls", None, allocationMode="All", **extra))
        elif draw(st.integers(0, 3)) == 0:
            reqs.append(first_available(f"r{r}", sub("a", "cls", draw(st.integers(1, 3)), **extra), sub("b", "cls", 1)))
        else:
            reqs.append(req(f"r{r}", "cls", draw(st.integers(1, 3)), **extra))
    constraints = []
    for _ in range(draw(st.integers(0, 2))):
        kind = draw(st.sampled_from(["matchAttribute", "distinctAttribute"]))
        constraints.append({kind: f"{DRIVER}/" + draw(st.sampled_from(["numa", "kind"]))})
    return {"slices": slices, "claims": [claim("c", *reqs, constraints=constraints)]}


@given(rich_scenario())
def test_pruning_is_transparent_with_every_feature(sc: dict[str, Any]) -> None:
    from topodra.sim.allocator import AllocationError

    node = {"metadata": {"name": "node-1"}}
    outcomes: list[tuple[Any, ...]] = []
    for prune in (True, False):
        try:
            got, stats = Allocator(sc["slices"], CLASSES, prune=prune, fast=prune, fast_after=0).allocate_with_stats(node, sc["claims"])
            outcomes.append((None if got is None else [a.to_api() for a in got], stats.calls, stats.visits, stats.checks, stats.cel_evals))
        except AllocationError as e:
            outcomes.append((str(e), 0, 0, 0, 0))
    assert outcomes[0] == outcomes[1]
    # whatever was allocated respects exclusivity and capacity
    result = outcomes[0][0]
    if isinstance(result, list):
        devs = [r for a in result for r in a["devices"]["results"]]
        exclusive = [r["device"] for r in devs if "shareID" not in r and not r.get("adminAccess")]
        assert len(exclusive) == len(set(exclusive))


@st.composite
def distinct_scenario(draw: Any) -> dict[str, Any]:
    """Failing and succeeding distinctAttribute searches over L3-like groups, several requests, counters."""
    groups = draw(st.integers(2, 4))
    size = draw(st.integers(2, 4))
    counters = draw(st.integers(0, 2)) == 0
    devices = []
    for i in range(groups * size):
        extra: dict[str, Any] = {}
        if counters:
            extra["consumesCounters"] = [{"counterSet": "set", "counters": {"n": {"value": str(draw(st.integers(1, 2)))}}}]
        if draw(st.integers(0, 6)) == 0:
            extra["taints"] = [{"key": "t", "value": "v", "effect": "NoSchedule"}]
        g = draw(st.integers(0, groups - 1)) if draw(st.integers(0, 3)) == 0 else i // size
        devices.append(device(f"d{i}", attrs(l3=g, numa=g % 2, kind=draw(st.sampled_from(["p", "e"]))), None, **extra))
    slices = [slice_("s0", "node-1", devices, pool="p", count=2 if counters else 1)]
    if counters:
        slices.append(slice_("s1", "node-1", [], pool="p", count=2, sharedCounters=[{"name": "set", "counters": {"n": {"value": str(draw(st.integers(2, 8)))}}}]))
    reqs = [
        req(f"r{r}", "cls", draw(st.integers(1, groups + 2)), *([f'device.attributes["{DRIVER}"].kind == "p"'] if draw(st.booleans()) else []))
        for r in range(draw(st.integers(2, 3)))
    ]
    constraints: list[dict[str, Any]] = [{"distinctAttribute": f"{DRIVER}/l3", **({"requests": ["r0"]} if draw(st.integers(0, 3)) == 0 else {})}]
    if draw(st.booleans()):
        constraints.append({"matchAttribute": f"{DRIVER}/numa"})
    in_use = draw(st.sets(st.integers(0, groups * size - 1), max_size=2))
    return {"slices": slices, "claims": [claim("c", *reqs, constraints=constraints)], "in_use": {f"d{k}" for k in in_use}}


@pytest.mark.slow
@settings(max_examples=400)
@given(distinct_scenario())
def test_memoised_search_equals_plain_search(sc: dict[str, Any]) -> None:
    """Memoised failing subtrees and counting leave result and counted work as the plain search has them."""
    node = {"metadata": {"name": "node-1"}}
    got = []
    for fast in (True, False):
        res, stats = Allocator(sc["slices"], CLASSES, _state(sc["in_use"]), prune=fast, fast=fast, budget=None, fast_after=0).allocate_with_stats(node, sc["claims"])
        got.append((None if res is None else [a.to_api() for a in res], stats.calls, stats.visits, stats.checks, stats.cel_evals, stats.our_calls))
    assert got[0][:5] == got[1][:5]
    assert got[0][5] <= got[1][5]


def test_memo_key_names_the_shareable_devices_held() -> None:
    """Found by the property above: shareable (allowMultipleAllocations) devices held by earlier
    requests are in no mask of the memo's key (they stay allocatable), so a remembered failing
    subtree was replayed from a state it was not walked in (183 calls against the plain search's
    171). The key now names them; the answer and the count must be the plain search's."""
    taint = [{"key": "t", "value": "v", "effect": "NoSchedule"}]
    tolerate = [{"key": "t", "operator": "Exists"}]
    devices = [
        device(f"d{i}", attrs(numa=0, kind="p"), None, **({"allowMultipleAllocations": True} if i in (1, 4) else {}), **({"taints": taint} if i not in (4, 6) else {}))
        for i in range(7)
    ]
    sc = {
        "slices": [slice_("s0", "node-1", devices, pool="p", count=1)],
        "claims": [
            claim(
                "c",
                first_available("r0", sub("a", "cls", 3, tolerations=tolerate, adminAccess=True), sub("b", "cls", 1)),
                req("r1", "cls", None, allocationMode="All", tolerations=tolerate, adminAccess=True),
                constraints=[{"matchAttribute": f"{DRIVER}/numa"}],
            )
        ],
    }
    node = {"metadata": {"name": "node-1"}}
    outcomes = []
    for fast in (True, False):
        got, stats = Allocator(sc["slices"], CLASSES, prune=True, fast=fast, fast_after=0).allocate_with_stats(node, sc["claims"])
        assert got is not None
        outcomes.append(([a.to_api() for a in got], stats.calls, stats.visits, stats.checks))
    assert outcomes[0] == outcomes[1]


def test_memo_key_names_the_shareable_devices_held_under_distinct() -> None:
    """The same gap under ``distinctAttribute`` with a first-available request (checks 59 against 61)."""
    taint = [{"key": "t", "value": "v", "effect": "NoSchedule"}]
    tolerate = [{"key": "t", "operator": "Exists"}]
    devices = [
        device("d0", attrs(numa=0, kind="p"), None, taints=taint),
        device("d1", attrs(numa=1, kind="p"), None, taints=taint),
        device("d2", attrs(numa=0, kind="p"), None, taints=taint),
        device("d3", attrs(numa=0, kind="p"), None),
        device("d4", attrs(numa=0, kind="p"), None, allowMultipleAllocations=True),
    ]
    slices = [slice_("s0", "node-1", devices, pool="p", count=1)]
    claims = [
        claim(
            "c",
            first_available("r0", sub("a", "cls", 1, tolerations=tolerate), sub("b", "cls", 1)),
            req("r1", "cls", 2, tolerations=tolerate),
            constraints=[{"distinctAttribute": f"{DRIVER}/numa"}],
        )
    ]
    node = {"metadata": {"name": "node-1"}}
    outcomes = []
    for fast in (True, False):
        got, stats = Allocator(slices, CLASSES, prune=True, fast=fast, fast_after=0).allocate_with_stats(node, claims)
        outcomes.append((got, stats.calls, stats.visits, stats.checks))
    assert outcomes[0] == outcomes[1]


def test_memo_local_and_full_keys_do_not_collide() -> None:
    """Found by ``test_pruning_is_transparent_with_every_feature``: the memo's local key (the
    devices held shifted by ``start``) had the shape of its full key, so a subtree remembered
    with d0 held (full: 0b1) answered a lookup with d2 held from start 2 (local: 0b100 >> 2),
    where the plain search goes on to r2: 239 calls and 227 checks against 241 and 229."""
    taint = [{"key": "t", "value": "v", "effect": "NoSchedule"}]
    tolerate = [{"key": "t", "operator": "Exists"}]
    devices = [
        device(f"d{i}", attrs(numa=0, kind="p"), None, **({"allowMultipleAllocations": True} if i in (1, 4) else {}), **({"taints": taint} if i != 4 else {}))
        for i in range(5)
    ]
    slices = [slice_("s0", "node-1", devices, pool="p", count=1)]
    admin = {"tolerations": tolerate, "adminAccess": True}
    claims = [
        claim(
            "c",
            first_available("r0", sub("a", "cls", 3, **admin), sub("b", "cls", 1)),
            first_available("r1", sub("a", "cls", 2, **admin), sub("b", "cls", 1)),
            req("r2", "cls", None, allocationMode="All", **admin),
            constraints=[{"matchAttribute": f"{DRIVER}/numa"}],
        )
    ]
    node = {"metadata": {"name": "node-1"}}
    outcomes = []
    for fast in (True, False):
        got, stats = Allocator(slices, CLASSES, prune=False, fast=fast, fast_after=0).allocate_with_stats(node, claims)
        assert got is not None
        outcomes.append(([a.to_api() for a in got], stats.calls, stats.visits, stats.checks, stats.cel_evals))
    assert outcomes[0] == outcomes[1]
