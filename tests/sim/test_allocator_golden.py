"""Golden cases for the structured allocator: the documented semantics, as our own test data."""

from __future__ import annotations

from typing import Any

import pytest

from topodra.sim.allocator import AllocatedState, AllocationError, Allocator, write_allocation

from .builders import DRIVER, attrs, claim, dclass, device, first_available, picked, req, slice_, sub

CLS = dclass("cls", f'device.driver == "{DRIVER}"')
NODE = {"metadata": {"name": "node-1", "labels": {"zone": "a"}}}


def alloc(slices: list[dict[str, Any]], claims: list[dict[str, Any]], classes: list[dict[str, Any]] | None = None, state: AllocatedState | None = None, node: Any = NODE) -> Any:
    return Allocator(slices, classes or [CLS], state).allocate(node, claims)


def devs(*names: str, **a: Any) -> list[dict[str, Any]]:
    return [device(n, attrs(**a) if a else None) for n in names]


def test_simple_first_device() -> None:
    got = alloc([slice_("s1", "node-1", devs("d0", "d1"))], [claim("c", req("r"))])
    assert picked(got) == [[("r", "d0")]]
    assert got[0].node_selector == {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]
    }


def test_other_node_has_nothing() -> None:
    assert alloc([slice_("s1", "node-2", devs("d0"))], [claim("c", req("r"))]) is None


def test_backtracking_across_requests() -> None:
    devices = [device("large", attrs(size=2)), device("small", attrs(size=1))]
    c = claim(
        "c",
        req("a", "cls", 1, f'device.attributes["{DRIVER}"].size >= 1'),
        req("b", "cls", 1, f'device.attributes["{DRIVER}"].size >= 2'),
    )
    # a first takes "large"; b then finds nothing, so a moves on to "small".
    assert picked(alloc([slice_("s", "node-1", devices)], [c])) == [[("a", "small"), ("b", "large")]]


def test_backtracking_across_claims() -> None:
    devices = [device("large", attrs(size=2)), device("small", attrs(size=1))]
    c1 = claim("c1", req("a", "cls", 1, f'device.attributes["{DRIVER}"].size >= 1'))
    c2 = claim("c2", req("b", "cls", 1, f'device.attributes["{DRIVER}"].size >= 2'))
    assert picked(alloc([slice_("s", "node-1", devices)], [c1, c2])) == [[("a", "small")], [("b", "large")]]


def test_slices_sorted_by_name_and_pools_by_driver_then_name() -> None:
    slices = [
        slice_("z-slice", "node-1", devs("z0"), pool="p", count=2),
        slice_("a-slice", "node-1", devs("a0"), pool="p", count=2),
        slice_("other", "node-1", devs("o0"), driver="a.example.com", pool="q"),
    ]
    classes = [dclass("cls", "true")]
    got = alloc(slices, [claim("c", req("r", "cls", 3))], classes)
    assert [(r.driver, r.device) for r in got[0].results] == [
        ("a.example.com", "o0"),
        (DRIVER, "a0"),
        (DRIVER, "z0"),
    ]


def test_obsolete_generation_is_ignored() -> None:
    slices = [slice_("old", "node-1", devs("old0"), pool="p", generation=1), slice_("new", "node-1", devs("new0"), pool="p", generation=2)]
    assert picked(alloc(slices, [claim("c", req("r"))])) == [[("r", "new0")]]


def test_incomplete_pool_is_not_used_and_all_mode_errors() -> None:
    slices = [slice_("s1", "node-1", devs("d0"), pool="p", count=2)]
    assert alloc(slices, [claim("c", req("r"))]) is None
    with pytest.raises(AllocationError, match="currently being updated"):
        alloc(slices, [claim("c", req("r", "cls", None, allocationMode="All"))])


def test_pool_completed_by_a_slice_of_another_node_is_usable() -> None:
    slices = [
        slice_("s1", "node-1", devs("d0"), pool="p", count=2),
        slice_("s2", "node-2", devs("d1"), pool="p", count=2),
    ]
    assert picked(alloc(slices, [claim("c", req("r"))])) == [[("r", "d0")]]


def test_duplicate_device_names_make_the_pool_invalid() -> None:
    slices = [slice_("s1", "node-1", devs("d0"), pool="p", count=2), slice_("s2", "node-1", devs("d0"), pool="p", count=2)]
    with pytest.raises(AllocationError, match="invalid resource pools"):
        alloc(slices, [claim("c", req("r"))])


def test_unknown_class_is_an_error() -> None:
    with pytest.raises(AllocationError, match=r'deviceclass\.resource\.k8s\.io "nope" not found'):
        alloc([slice_("s", "node-1", devs("d0"))], [claim("c", req("r", "nope"))])


def test_not_enough_devices() -> None:
    assert alloc([slice_("s", "node-1", devs("d0", "d1"))], [claim("c", req("r", "cls", 3))]) is None


def test_already_allocated_devices_are_skipped() -> None:
    st = AllocatedState()
    first = alloc([slice_("s", "node-1", devs("d0", "d1"))], [claim("c", req("r"))], state=st)
    st.add(first[0])
    assert picked(alloc([slice_("s", "node-1", devs("d0", "d1"))], [claim("c2", req("r"))], state=st)) == [[("r", "d1")]]


def test_all_mode_takes_every_matching_device_and_fails_on_one_in_use() -> None:
    slices = [slice_("s", "node-1", [device("d0", attrs(kind="x")), device("d1", attrs(kind="y")), device("d2", attrs(kind="x"))])]
    c = claim("c", req("r", "cls", None, f'device.attributes["{DRIVER}"].kind == "x"', allocationMode="All"))
    got = alloc(slices, [c])
    assert picked(got) == [[("r", "d0"), ("r", "d2")]]
    st = AllocatedState()
    st.add(got[0])
    assert alloc(slices, [c], state=st) is None


def test_all_mode_with_no_match_has_no_solution() -> None:
    c = claim("c", req("r", "cls", None, "false", allocationMode="All"))
    assert alloc([slice_("s", "node-1", devs("d0"))], [c]) is None


def test_admin_access_ignores_other_allocations() -> None:
    st = AllocatedState()
    slices = [slice_("s", "node-1", devs("d0"))]
    st.add(alloc(slices, [claim("c", req("r"))], state=st)[0])
    assert alloc(slices, [claim("c2", req("r"))], state=st) is None
    got = alloc(slices, [claim("c3", req("r", "cls", 1, adminAccess=True))], state=st)
    assert picked(got) == [[("r", "d0")]]
    assert got[0].to_api()["devices"]["results"][0]["adminAccess"] is True


def test_match_attribute_skips_to_a_matching_group() -> None:
    devices = [device("d0", attrs(numa=0)), device("d1", attrs(numa=1)), device("d2", attrs(numa=1))]
    c = claim("c", req("r", "cls", 2), constraints=[{"matchAttribute": f"{DRIVER}/numa"}])
    assert picked(alloc([slice_("s", "node-1", devices)], [c])) == [[("r", "d1"), ("r", "d2")]]


def test_match_attribute_missing_attribute_and_type_mismatch() -> None:
    devices = [device("d0", attrs(numa=0)), device("d1"), device("d2", attrs(numa="0"))]
    c = claim("c", req("r", "cls", 2), constraints=[{"matchAttribute": f"{DRIVER}/numa"}])
    assert alloc([slice_("s", "node-1", devices)], [c]) is None


def test_match_attribute_fully_qualified_attribute_key() -> None:
    devices = [
        device("d0", {"other.io/numa": {"int": 0}}),
        device("d1", {"other.io/numa": {"int": 1}}),
        device("d2", {"other.io/numa": {"int": 1}}),
    ]
    c = claim("c", req("r", "cls", 2), constraints=[{"matchAttribute": "other.io/numa"}])
    assert picked(alloc([slice_("s", "node-1", devices)], [c])) == [[("r", "d1"), ("r", "d2")]]


def test_constraint_limited_to_some_requests() -> None:
    devices = [device("d0", attrs(numa=0)), device("d1", attrs(numa=1)), device("d2", attrs(numa=0))]
    c = claim(
        "c",
        req("a", "cls", 1),
        req("b", "cls", 1),
        req("free", "cls", 1),
        constraints=[{"matchAttribute": f"{DRIVER}/numa", "requests": ["a", "b"]}],
    )
    assert picked(alloc([slice_("s", "node-1", devices)], [c])) == [[("a", "d0"), ("b", "d2"), ("free", "d1")]]


def test_distinct_attribute_spreads_shared_devices() -> None:
    devices = [
        device("g0", attrs(socket=0), {"cpu": 8}, allowMultipleAllocations=True),
        device("g1", attrs(socket=1), {"cpu": 8}, allowMultipleAllocations=True),
    ]
    c = claim(
        "c",
        req("a", "cls", 1, capacity={"requests": {"cpu": "2"}}),
        req("b", "cls", 1, capacity={"requests": {"cpu": "2"}}),
        constraints=[{"distinctAttribute": f"{DRIVER}/socket"}],
    )
    got = alloc([slice_("s", "node-1", devices)], [c])
    assert picked(got) == [[("a", "g0"), ("b", "g1")]]
    without = claim("c", req("a", "cls", 1, capacity={"requests": {"cpu": "2"}}), req("b", "cls", 1, capacity={"requests": {"cpu": "2"}}))
    assert picked(alloc([slice_("s", "node-1", devices)], [without])) == [[("a", "g0"), ("b", "g0")]]


def _message(f: Any) -> str:
    with pytest.raises(AllocationError) as e:
        f()
    return str(e.value)


def test_cel_runtime_error_reads_as_the_go_allocator_writes_it() -> None:
    # selectorsMatch (allocator_incubating.go): "claim %s: selector #%d: CEL runtime error: %w",
    # with cel-go's error: no device, no expression
    c = claim("c", req("r", "cls", 1, f'device.attributes["{DRIVER}"].missing == 1'))
    assert _message(lambda: alloc([slice_("s", "node-1", devs("d0"))], [c])) == (
        "claim default/c: selector #0: CEL runtime error: no such key: missing"
    )


def test_cel_error_in_class_and_compile_error() -> None:
    bad = dclass("bad", f'device.attributes["{DRIVER}"].x == 1')
    assert _message(lambda: alloc([slice_("s", "node-1", devs("d0"))], [claim("c", req("r", "bad"))], [bad])) == (
        "class bad: selector #0: CEL runtime error: no such key: x"
    )
    # the compile error is cel-go's Detail: "compilation failed: " and the issues with their caret lines
    assert _message(lambda: alloc([slice_("s", "node-1", devs("d0"))], [claim("c", req("r", "cls", 1, "device.driver > 5"))])) == (
        "claim default/c: selector #0: CEL compile error: compilation failed: "
        "ERROR: <input>:1:15: found no matching overload for '_>_' applied to '(string, int)'\n"
        " | device.driver > 5\n"
        " | ..............^"
    )


def test_missing_domain_is_empty_map() -> None:
    c = claim("c", req("r", "cls", 1, 'size(device.attributes["other.io"]) == 0 && !("x" in device.attributes["other.io"])'))
    assert picked(alloc([slice_("s", "node-1", devs("d0"))], [c])) == [[("r", "d0")]]


def test_32_device_limit() -> None:
    slices = [slice_("s", "node-1", devs(*(f"d{i}" for i in range(40))))]
    got = alloc(slices, [claim("c", req("r", "cls", 32))])
    assert got is not None
    assert len(got[0].results) == 32
    with pytest.raises(AllocationError, match="exceeds the claim limit of 32"):
        alloc(slices, [claim("c", req("r", "cls", 20), req("q", "cls", 13))])


def test_first_available_falls_back_to_next_subrequest() -> None:
    devices = [device("e0", attrs(kind="e")), device("e1", attrs(kind="e"))]
    sel = f'device.attributes["{DRIVER}"].kind'
    c = claim("c", first_available("cpu", sub("p", "cls", 1, f'{sel} == "p"'), sub("e", "cls", 2, f'{sel} == "e"')))
    got = alloc([slice_("s", "node-1", devices)], [c])
    assert picked(got) == [[("cpu/e", "e0"), ("cpu/e", "e1")]]


def test_first_available_retries_when_the_32_cap_is_hit() -> None:
    slices = [slice_("s", "node-1", devs(*(f"d{i}" for i in range(40))))]
    c = claim("c", req("one", "cls", 2), first_available("big", sub("all31", "cls", 31), sub("few", "cls", 4)))
    got = alloc(slices, [c])
    assert got is not None
    assert [r.request for r in got[0].results] == ["one", "one"] + ["big/few"] * 4


def test_first_available_with_constraint_on_parent_request() -> None:
    devices = [device("d0", attrs(numa=0)), device("d1", attrs(numa=1)), device("d2", attrs(numa=1))]
    c = claim(
        "c",
        req("a", "cls", 1),
        first_available("b", sub("two", "cls", 2), sub("one", "cls", 1)),
        constraints=[{"matchAttribute": f"{DRIVER}/numa", "requests": ["a", "b"]}],
    )
    # a=d0 (numa 0) leaves no numa-0 device for b at all; a moves to d1, then b/two cannot
    # find two numa-1 devices (only d2 left), so b/one takes d2.
    assert picked(alloc([slice_("s", "node-1", devices)], [c])) == [[("a", "d1"), ("b/one", "d2")]]


def test_partitionable_devices_share_counters() -> None:
    counters = slice_("counters", "node-1", [], pool="gpu", count=2, sharedCounters=[{"name": "mem", "counters": {"memory": {"value": "8Gi"}}}])
    devices = slice_(
        "parts",
        "node-1",
        [
            device("big", consumesCounters=[{"counterSet": "mem", "counters": {"memory": {"value": "6Gi"}}}]),
            device("half-a", consumesCounters=[{"counterSet": "mem", "counters": {"memory": {"value": "4Gi"}}}]),
            device("half-b", consumesCounters=[{"counterSet": "mem", "counters": {"memory": {"value": "4Gi"}}}]),
        ],
        pool="gpu",
        count=2,
    )
    # big (6Gi) leaves 2Gi: no half fits next to it, so two devices means both halves.
    assert picked(alloc([counters, devices], [claim("c", req("r", "cls", 2))])) == [[("r", "half-a"), ("r", "half-b")]]
    st = AllocatedState()
    first = alloc([counters, devices], [claim("c", req("r", "cls", 1))], state=st)
    assert picked(first) == [[("r", "big")]]
    st.add(first[0])
    assert alloc([counters, devices], [claim("c2", req("r", "cls", 1))], state=st) is None


def test_dangling_counter_reference_makes_pool_invalid() -> None:
    devices = slice_("parts", "node-1", [device("p", consumesCounters=[{"counterSet": "nope", "counters": {"m": {"value": "1"}}}])])
    with pytest.raises(AllocationError, match="invalid resource pools"):
        alloc([devices], [claim("c", req("r"))])


def test_taints_block_unless_tolerated() -> None:
    devices = [
        device("t0", taints=[{"key": "broken", "value": "yes", "effect": "NoSchedule"}]),
        device("t1", taints=[{"key": "info", "effect": "None"}]),
    ]
    assert picked(alloc([slice_("s", "node-1", devices)], [claim("c", req("r"))])) == [[("r", "t1")]]
    tol = [{"key": "broken", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}]
    got = alloc([slice_("s", "node-1", devices)], [claim("c", req("r", "cls", 1, tolerations=tol))])
    assert picked(got) == [[("r", "t0")]]
    assert got[0].to_api()["devices"]["results"][0]["tolerations"] == tol
    exists = [{"key": "broken", "operator": "Exists"}]
    assert picked(alloc([slice_("s", "node-1", devices)], [claim("c", req("r", "cls", 2, tolerations=exists))])) == [[("r", "t0"), ("r", "t1")]]


@pytest.mark.parametrize(
    ("tolerations", "want"),
    [
        ([], "y"),  # "PreferNoSchedule" is no device effect: unknown effects are treated like None
        ([{"operator": "Exists"}], "x"),  # no key, Exists: every taint
        ([{"key": "native.cpu/isolated", "operator": "Exists", "effect": "NoExecute"}], "y"),  # another effect
        ([{"key": "native.cpu/isolated", "value": "isolcpus"}], "x"),  # no operator: Equal
        ([{"key": "native.cpu/isolated", "operator": "Equal", "value": "nohz_full"}], "y"),
        ([{"key": "native.cpu/isolated", "operator": "Bogus"}], "y"),  # an unknown operator tolerates nothing
    ],
)
def test_tolerations_match_as_upstreams_tolerates_taint(tolerations: list[dict[str, str]], want: str) -> None:
    """``resourceclaim.ToleratesTaint`` (devicetoleration.go) and ``taintPreventsAllocation``
    (allocator_incubating.go), Kubernetes v1.36.2: only NoSchedule and NoExecute prevent allocation."""
    devices = [
        device("x", taints=[{"key": "native.cpu/isolated", "value": "isolcpus", "effect": "NoSchedule"}]),
        device("y", taints=[{"key": "k", "effect": "PreferNoSchedule"}]),
    ]
    got = alloc([slice_("s", "node-1", devices)], [claim("c", req("r", "cls", 1, tolerations=tolerations))])
    assert picked(got) == [[("r", want)]]


def test_consumable_capacity_share_ids_and_exhaustion() -> None:
    shared = [device("g0", attrs(socket=0), {"cpu": 8}, allowMultipleAllocations=True)]
    slices = [slice_("s", "node-1", shared)]
    st = AllocatedState()
    c1 = claim("c1", req("r", "cls", 1, capacity={"requests": {"cpu": "3"}}))
    got = alloc(slices, [c1], state=st)
    r0 = got[0].to_api()["devices"]["results"][0]
    assert r0["consumedCapacity"] == {"cpu": "3"}
    assert len(r0["shareID"]) == 36
    st.add(got[0])
    assert alloc(slices, [claim("c2", req("r", "cls", 1, capacity={"requests": {"cpu": "6"}}))], state=st) is None
    second = alloc(slices, [claim("c3", req("r", "cls", 1, capacity={"requests": {"cpu": "5"}}))], state=st)
    assert picked(second) == [[("r", "g0")]]
    st.add(second[0])
    st.remove(got[0])
    assert st.capacity[("dra.example.com", "node-1", "g0")] == {"cpu": 5}
    # Without a request the whole capacity is consumed.
    assert alloc(slices, [claim("c4", req("r"))], state=st) is None


def test_request_policy_rounding_and_violation() -> None:
    policy = {"default": "2", "validRange": {"min": "2", "max": "6", "step": "2"}}
    shared = [device("g0", None, {"cpu": {"value": "8", "requestPolicy": policy}}, allowMultipleAllocations=True)]
    slices = [slice_("s", "node-1", shared)]
    got = alloc(slices, [claim("c", req("r", "cls", 1, capacity={"requests": {"cpu": "3"}}))])
    assert got[0].results[0].consumed_capacity is not None
    assert str(got[0].results[0].consumed_capacity["cpu"]) == "4"
    assert alloc(slices, [claim("c", req("r", "cls", 1, capacity={"requests": {"cpu": "7"}}))]) is None
    got = alloc(slices, [claim("c", req("r"))])
    assert str(got[0].results[0].consumed_capacity["cpu"]) == "2"


def test_capacity_request_on_unknown_capacity_makes_device_ineligible() -> None:
    slices = [slice_("s", "node-1", [device("d0", None, {"cpu": 4}), device("d1", None, {"memory": "1Gi"})])]
    got = alloc(slices, [claim("c", req("r", "cls", 1, capacity={"requests": {"memory": "512Mi"}}))])
    assert picked(got) == [[("r", "d1")]]


def test_class_and_claim_config_in_result() -> None:
    """As upstream's "Populate configs" (allocator_incubating.go, v1.36.2): a class's configs once,
    naming each request of the class; a claim config once per request it names."""
    cfg = {"opaque": {"driver": DRIVER, "parameters": {"a": 1}}}
    classes = [dclass("cls", "true", config=[cfg])]
    c = claim("c", req("x"), req("y"), config=[{"requests": ["y"], "opaque": {"driver": DRIVER, "parameters": {"b": 2}}}])
    got = alloc([slice_("s", "node-1", devs("d0", "d1"))], [c], classes)
    assert got[0].to_api()["devices"]["config"] == [
        {"source": "FromClass", "requests": ["x", "y"], "opaque": {"driver": DRIVER, "parameters": {"a": 1}}},
        {"source": "FromClaim", "requests": ["y"], "opaque": {"driver": DRIVER, "parameters": {"b": 2}}},
    ]


def test_claim_config_naming_two_requests_appears_once_per_request() -> None:
    both = {"requests": ["x", "y"], "opaque": {"driver": DRIVER, "parameters": {"b": 2}}}
    every = {"opaque": {"driver": DRIVER, "parameters": {"c": 3}}}
    c = claim("c", req("x"), req("y"), config=[every, both])
    got = alloc([slice_("s", "node-1", devs("d0", "d1"))], [c])
    assert got[0].to_api()["devices"]["config"] == [
        {"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": {"c": 3}}},
        {"source": "FromClaim", "requests": ["x", "y"], "opaque": {"driver": DRIVER, "parameters": {"b": 2}}},
        {"source": "FromClaim", "requests": ["x", "y"], "opaque": {"driver": DRIVER, "parameters": {"b": 2}}},
    ]


def test_config_of_a_chosen_subrequest() -> None:
    """Class configs name the chosen subrequest ``req/sub``; a claim config naming it applies,
    one naming the subrequest that was not chosen does not."""
    gone = dclass("gone", "false", config=[{"opaque": {"driver": DRIVER, "parameters": {"g": 1}}}])
    cls = dclass("cls", "true", config=[{"opaque": {"driver": DRIVER, "parameters": {"a": 1}}}])
    chosen = {"requests": ["r/second"], "opaque": {"driver": DRIVER, "parameters": {"s": 2}}}
    skipped = {"requests": ["r/first"], "opaque": {"driver": DRIVER, "parameters": {"f": 3}}}
    c = claim("c", first_available("r", sub("first", "gone"), sub("second", "cls")), config=[chosen, skipped])
    got = alloc([slice_("s", "node-1", devs("d0"))], [c], [gone, cls])
    assert picked(got) == [[("r/second", "d0")]]
    assert got[0].to_api()["devices"]["config"] == [
        {"source": "FromClass", "requests": ["r/second"], "opaque": {"driver": DRIVER, "parameters": {"a": 1}}},
        {"source": "FromClaim", "requests": ["r/second"], "opaque": {"driver": DRIVER, "parameters": {"s": 2}}},
    ]


def test_node_selector_for_network_attached_devices() -> None:
    everywhere = slice_("net", None, devs("n0"), pool="net", allNodes=True)
    assert alloc([everywhere], [claim("c", req("r"))])[0].node_selector is None
    sel = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}
    zoned = slice_("zoned", None, devs("z0"), pool="zoned", nodeSelector=sel)
    got = alloc([zoned], [claim("c", req("r"))])
    assert got[0].node_selector == sel
    assert alloc([zoned], [claim("c", req("r"))], node={"metadata": {"name": "node-9", "labels": {"zone": "b"}}}) is None


def test_per_device_node_selection() -> None:
    s = slice_(
        "pd",
        None,
        [device("a", nodeName="node-2"), device("b", nodeName="node-1")],
        pool="pd",
        perDeviceNodeSelection=True,
    )
    assert picked(alloc([s], [claim("c", req("r"))])) == [[("r", "b")]]


def test_binding_condition_pools_go_last() -> None:
    slices = [
        slice_("a", "node-1", [device("bc", bindingConditions=["ready"])], pool="a-pool"),
        slice_("b", "node-1", devs("plain"), pool="b-pool"),
    ]
    got = alloc(slices, [claim("c", req("r"))])
    assert picked(got) == [[("r", "plain")]]
    got = alloc(slices, [claim("c", req("r", "cls", 2))])
    assert picked(got) == [[("r", "plain"), ("r", "bc")]]
    assert got[0].to_api()["devices"]["results"][1]["bindingConditions"] == ["ready"]


def test_write_allocation_sets_status_reserved_for_and_finalizer() -> None:
    c = claim("c", req("r"))
    got = alloc([slice_("s", "node-1", devs("d0"))], [c])
    pod = {"metadata": {"name": "p", "uid": "pod-uid"}}
    out = write_allocation(c, got[0], pod)
    assert out["status"]["allocation"]["devices"]["results"] == [{"request": "r", "driver": DRIVER, "pool": "node-1", "device": "d0"}]
    assert out["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": "pod-uid"}]
    assert "resource.kubernetes.io/delete-protection" in out["metadata"]["finalizers"]
    assert "status" not in c
    st = AllocatedState.from_claims([out])
    assert st.devices == {(DRIVER, "node-1", "d0")}


def test_l3_group_search_is_counted_not_executed() -> None:
    # 4 L3 groups of 16 CPUs, ask 17 from one group: impossible. The scheduler's search tries
    # every subset of each group; we decide it by counting and report the same work.
    devices = [device(f"cpu{i}", attrs(l3=i // 16)) for i in range(64)]
    c = claim("c", req("r", "cls", 17), constraints=[{"matchAttribute": f"{DRIVER}/l3"}])
    a = Allocator([slice_("s", "node-1", devices)], [CLS])
    result, stats = a.allocate_with_stats(NODE, [c])
    assert result is None
    assert stats.calls == 1 + 4 * (2**16 - 1)
    assert stats.our_calls == 1


def test_distinct_attribute_keeps_one_value_per_request_as_upstream() -> None:
    # Upstream stores the distinct value per request name, so the third device of one request is
    # only compared with the second: x=1, x=2, x=1 is accepted. We mirror it to match the scheduler.
    devices = [device("d0", attrs(x=1)), device("d1", attrs(x=2)), device("d2", attrs(x=1))]
    c = claim("c", req("r", "cls", 3), constraints=[{"distinctAttribute": f"{DRIVER}/x"}])
    assert picked(alloc([slice_("s", "node-1", devices)], [c])) == [[("r", "d0"), ("r", "d1"), ("r", "d2")]]
    two_requests = claim("c", req("a", "cls", 1), req("b", "cls", 1), req("c", "cls", 1), constraints=[{"distinctAttribute": f"{DRIVER}/x"}])
    assert alloc([slice_("s", "node-1", devices)], [two_requests]) is None


def test_admin_access_may_share_a_device_being_allocated_in_the_same_call() -> None:
    got = alloc([slice_("s", "node-1", devs("d1", "d2"))], [claim("c0", req("r")), claim("c1", req("r", "cls", 1, adminAccess=True))])
    assert picked(got) == [[("r", "d1")], [("r", "d1")]]


def test_first_available_backtracks_to_a_smaller_subrequest() -> None:
    big = f'device.capacity["{DRIVER}"].memory.compareTo(quantity("8Gi")) >= 0'
    small = f'device.capacity["{DRIVER}"].memory.compareTo(quantity("4Gi")) >= 0'
    slices = [
        slice_("s1", "node-1", [device("d-big", None, {"memory": "8Gi"})], pool="p1"),
        slice_("s2", "node-1", [device("d-small", None, {"memory": "4Gi"})], pool="p2"),
    ]
    c = claim("c", first_available("a", sub("big", "cls", 1, big), sub("small", "cls", 1, small)), req("b", "cls", 1, big))
    assert picked(alloc(slices, [c])) == [[("a/small", "d-small"), ("b", "d-big")]]


def test_shared_capacity_backtracks_across_requests_and_claims() -> None:
    policy2 = {"value": "2", "requestPolicy": {"default": "1", "validRange": {"min": "1"}}}
    policy4 = {"value": "4", "requestPolicy": {"default": "1", "validRange": {"min": "1"}}}
    slices = [
        slice_(
            "s",
            "node-1",
            [
                device("small", attrs(tag="one"), {"slots": policy2}, allowMultipleAllocations=True),
                device("large", attrs(tag="two"), {"slots": policy4}, allowMultipleAllocations=True),
            ],
        )
    ]
    two = {"capacity": {"requests": {"slots": "2"}}}
    c0 = claim("c0", req("a", "cls", 1, **two), req("b", "cls", 1, **two), constraints=[{"matchAttribute": f"{DRIVER}/tag"}])
    c1 = claim("c1", req("a", "cls", 1, **two))
    got = alloc(slices, [c0, c1])
    assert picked(got) == [[("a", "large"), ("b", "large")], [("a", "small")]]
    assert got[0].results[0].share_id != got[0].results[1].share_id


def test_admin_access_does_not_bypass_taints() -> None:
    st = AllocatedState()
    st.devices = {(DRIVER, "node-1", "d1")}
    tainted = [device("d1", taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}])]
    assert alloc([slice_("s", "node-1", tainted)], [claim("c", req("r", "cls", 1, adminAccess=True))], state=st) is None


def test_counters_pick_the_pair_that_fits() -> None:
    def part(name: str, gib: int) -> dict[str, Any]:
        return device(name, consumesCounters=[{"counterSet": "mem", "counters": {"memory": {"value": f"{gib}Gi"}}}])

    slices = [
        slice_("a", "node-1", [part("p4a", 4), part("p6", 6), part("p4b", 4)], pool="gpu", count=2),
        slice_("b", "node-1", [], pool="gpu", count=2, sharedCounters=[{"name": "mem", "counters": {"memory": {"value": "8Gi"}}}]),
    ]
    assert picked(alloc(slices, [claim("c", req("x"), req("y"))])) == [[("x", "p4a"), ("y", "p4b")]]


def test_admin_all_mode_conflicts_with_a_device_taken_earlier_in_the_same_claim() -> None:
    c = claim("c", req("one", "cls", 1, adminAccess=True), req("all", "cls", None, adminAccess=True, allocationMode="All"))
    assert alloc([slice_("s", "node-1", devs("d1", "d2"))], [c]) is None


def test_admin_count_may_take_allocated_devices() -> None:
    st = AllocatedState()
    st.devices = {(DRIVER, "node-1", "d1")}
    got = alloc([slice_("s", "node-1", devs("d1", "d2"))], [claim("c", req("r", "cls", 2, adminAccess=True))], state=st)
    assert picked(got) == [[("r", "d1"), ("r", "d2")]]


def test_distinct_search_past_the_filter_timeout_is_that_timeout() -> None:
    """Nine CPUs on distinct L3 groups of a node with eight: kube-scheduler gives up at 10 s."""
    from topodra.dra.devices import DeviceModelConfig, build_devices, device_class
    from topodra.dra.slices import build_slices
    from topodra.sim.allocator import FilterTimeout
    from topodra.sim.calibration import distinct_shape
    from topodra.sim.costmodel import DEFAULT_COSTS
    from topodra.topology.synthetic import synthetic_topology

    slices = build_slices("node-0", build_devices(synthetic_topology("2s1d2n2l6c2t4e"), DeviceModelConfig(model="cpu")))
    a = Allocator(slices, [device_class()])
    with pytest.raises(FilterTimeout) as err:
        a.allocate("node-0", [distinct_shape(9)])
    assert str(err.value) == "timed out trying to allocate devices"
    stats = a.last_stats
    assert DEFAULT_COSTS.timeout_s * 0.999 < DEFAULT_COSTS.node_seconds(stats) < DEFAULT_COSTS.timeout_s * 1.01
    assert stats.our_calls < stats.calls / 100  # decided by counting, not by walking the search
    # the same claim fits when the node has nine groups
    slices9 = build_slices("node-0", build_devices(synthetic_topology("1s1d1n9l2c2t"), DeviceModelConfig(model="cpu")))
    got = Allocator(slices9, [device_class()]).allocate("node-0", [distinct_shape(9)])
    assert got is not None
    assert len(got[0].results) == 9


def test_memoised_subtrees_tell_apart_the_counters_their_prefix_consumed() -> None:
    """r0 (under distinctAttribute, so its subtrees are memoised) picks devices that use different
    amounts of a shared counter; r1 then fits or not: equal slot, start and constraint state must not
    share a memo entry when the counters differ (found by the property test below)."""
    counters = slice_("s1", "node-1", [], pool="p", count=2, sharedCounters=[{"name": "set", "counters": {"n": {"value": "4"}}}])
    devices = [
        device(f"d{i}", attrs(l3=i // 4, numa=i // 4, kind="p"), consumesCounters=[{"counterSet": "set", "counters": {"n": {"value": "2" if i == 1 else "1"}}}])
        for i in range(8)
    ]
    slices = [slice_("s0", "node-1", devices, pool="p", count=2), counters]
    c = claim("c", req("r0", "cls", 1), req("r1", "cls", 3), constraints=[{"distinctAttribute": f"{DRIVER}/l3", "requests": ["r0"]}])
    got = []
    for fast in (True, False):
        res, s = Allocator(slices, [CLS], prune=fast, fast=fast, budget=None).allocate_with_stats(NODE, [c])
        got.append((picked(res), s.calls, s.visits, s.checks, s.cel_evals))
    assert got[0] == got[1]
    assert got[1][0] == [[("r0", "d0"), ("r1", "d2"), ("r1", "d3"), ("r1", "d4")]]


def test_nine_one_cpu_requests_on_eight_groups_time_out_by_predicted_filter_time() -> None:
    """Nine one-CPU requests on distinct L3 groups of a node with eight: every order of every
    choice fails; the dead-state memo replays the failing subtrees, so the predicted 10 s are
    reached after a few hundred executed calls, with kube-scheduler's message."""
    from topodra.dra.devices import DeviceModelConfig, build_devices, device_class
    from topodra.dra.slices import build_slices
    from topodra.sim.allocator import FilterTimeout
    from topodra.sim.calibration import distinct_shape
    from topodra.sim.costmodel import DEFAULT_COSTS
    from topodra.topology.synthetic import synthetic_topology

    slices = build_slices("node-0", build_devices(synthetic_topology("2s1d2n2l6c2t4e"), DeviceModelConfig(model="cpu")))
    a = Allocator(slices, [device_class()])
    with pytest.raises(FilterTimeout) as err:
        a.allocate("node-0", [distinct_shape(1, 9)])
    assert str(err.value) == "timed out trying to allocate devices"
    stats = a.last_stats
    assert DEFAULT_COSTS.timeout_s * 0.999 < DEFAULT_COSTS.node_seconds(stats) < DEFAULT_COSTS.timeout_s * 1.01
    assert stats.our_calls < stats.calls / 100
    slices9 = build_slices("node-0", build_devices(synthetic_topology("1s1d1n9l2c2t"), DeviceModelConfig(model="cpu")))
    got = Allocator(slices9, [device_class()]).allocate("node-0", [distinct_shape(1, 9)])
    assert got is not None
    assert [r.request for r in got[0].results] == [f"r{i}" for i in range(9)]
