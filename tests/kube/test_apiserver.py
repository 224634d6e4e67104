"""The API server double, driven over HTTP by the real client library (lightkube via KubeClient)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from topodra.dra.devices import Device, build_devices
from topodra.dra.slices import build_slices
from topodra.embedded.apiserver import ApiServer, ApiServerThread
from topodra.embedded.store import KINDS, Store, parse_field_selector, parse_label_selector
from topodra.kube.client import (
    DEVICE_CLASSES,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    KubeClient,
)
from topodra.kube.errors import ApiError
from topodra.topology import synthetic_topology

SLICES = build_slices("node-a", build_devices(synthetic_topology("1s1n1l4c2t")))


def with_client(body: Callable[[KubeClient, ApiServer], Awaitable[Any]], store: Store | None = None) -> Any:
    async def main() -> Any:
        async with ApiServer(store) as server:
            client = KubeClient.for_url(server.url)
            try:
                return await body(client, server)
            finally:
                await client.close()

    return asyncio.run(main())


def claim(name: str = "c1", ns: str = "default") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns},
        "spec": {"devices": {"requests": [{"name": "cpu", "exactly": {"deviceClassName": "native.cpu"}}]}},
    }


def test_crud_resource_versions_and_generation() -> None:
    async def body(c: KubeClient, server: ApiServer) -> None:
        created = await c.create(RESOURCE_SLICES, SLICES[0])
        meta = created["metadata"]
        assert meta["uid"]
        assert meta["creationTimestamp"]
        assert meta["generation"] == 1
        got = await c.get(RESOURCE_SLICES, meta["name"])
        assert got["spec"] == SLICES[0]["spec"]
        changed = copy.deepcopy(got)
        changed["spec"]["pool"]["generation"] = 2
        updated = await c.replace(RESOURCE_SLICES, changed)
        assert int(updated["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])
        assert updated["metadata"]["generation"] == 2
        # a no-op update keeps the resourceVersion
        again = await c.replace(RESOURCE_SLICES, updated)
        assert again["metadata"]["resourceVersion"] == updated["metadata"]["resourceVersion"]
        await c.delete(RESOURCE_SLICES, meta["name"])
        with pytest.raises(ApiError) as info:
            await c.get(RESOURCE_SLICES, meta["name"])
        assert info.value.code == 404
        assert info.value.reason == "NotFound"

    with_client(body)


def test_conflicts() -> None:
    async def body(c: KubeClient, server: ApiServer) -> None:
        first = await c.create(RESOURCE_SLICES, SLICES[0])
        with pytest.raises(ApiError) as info:
            await c.create(RESOURCE_SLICES, SLICES[0])
        assert (info.value.code, info.value.reason) == (409, "AlreadyExists")
        newer = copy.deepcopy(first)
        newer["spec"]["pool"]["generation"] = 5
        await c.replace(RESOURCE_SLICES, newer)
        stale = copy.deepcopy(first)
        stale["spec"]["pool"]["generation"] = 6
        with pytest.raises(ApiError) as info:
            await c.replace(RESOURCE_SLICES, stale)
        assert (info.value.code, info.value.reason) == (409, "Conflict")
        assert "has been modified" in info.value.message
        name = first["metadata"]["name"]
        with pytest.raises(ApiError, match="Precondition failed: UID"):
            await c.delete(RESOURCE_SLICES, name, uid="someone-else")
        with pytest.raises(ApiError, match="Precondition failed: ResourceVersion"):
            await c.delete(RESOURCE_SLICES, name, resource_version=first["metadata"]["resourceVersion"])
        await c.delete(RESOURCE_SLICES, name, uid=first["metadata"]["uid"])

    with_client(body)


def _slice_with(devices: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    s = copy.deepcopy(SLICES[0])
    s["spec"]["devices"] = devices
    s["spec"].update(spec)
    return s


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda: _slice_with([{"name": f"d{i}"} for i in range(129)]), "spec.devices: Too many: 129: must have at most 128"),
        (
            lambda: _slice_with([{"name": "t", "taints": [{"key": "k", "effect": "NoSchedule"}]}] + [{"name": f"d{i}"} for i in range(64)]),
            "must have at most 64",
        ),
        (lambda: _slice_with([{"name": "d", "attributes": {"bad-name": {"int": 1}}}]), "bad-name"),
        (lambda: _slice_with([{"name": "d", "attributes": {"s": {"string": "x" * 65}}}]), "attributes[s].string: Too long"),
        (lambda: _slice_with([{"name": "d", "attributes": {"v": {"int": 1, "bool": True}}}]), "exactly one value must be specified"),
        (lambda: _slice_with([{"name": "Bad_Name"}]), "spec.devices[0].name"),
        (lambda: _slice_with([{"name": "d"}, {"name": "d"}]), "Duplicate value: 'd'"),
        (lambda: _slice_with([], pool={"name": "node-a", "generation": 1, "resourceSliceCount": 0}), "resourceSliceCount"),
        (lambda: _slice_with([], pool={"name": "node-a", "resourceSliceCount": 1}), "spec.pool.generation"),
        (lambda: _slice_with([], allNodes=True), "exactly one of nodeName"),
        (lambda: _slice_with([], driver="Native_CPU"), "spec.driver"),
        (
            lambda: _slice_with([{"name": "d", "capacity": {"cpu": {"value": "4", "requestPolicy": {"default": "1"}}}}]),
            "requires allowMultipleAllocations",
        ),
        (lambda: _slice_with([{"name": f"d{i}", "attributes": {f"a{j}": {"int": j} for j in range(33)}} for i in range(1)]), "at most 32"),
    ],
)
def test_resource_slice_validation(make: Callable[[], dict[str, Any]], needle: str) -> None:
    async def body(c: KubeClient, server: ApiServer) -> None:
        with pytest.raises(ApiError) as info:
            await c.create(RESOURCE_SLICES, make())
        assert info.value.code == 422
        assert info.value.reason == "Invalid"
        assert needle in info.value.message

    with_client(body)


def test_published_slices_are_valid() -> None:
    big = build_slices("node-a", build_devices(synthetic_topology("2s1d2n2l16c2t")), node_uid="u")

    async def body(c: KubeClient, server: ApiServer) -> None:
        for s in big:
            await c.create(RESOURCE_SLICES, s)
        items, _ = await c.list(RESOURCE_SLICES)
        assert sorted(len(i["spec"]["devices"]) for i in items) == [128, 128]

    with_client(body)


@pytest.mark.parametrize(("field", "value"), [("driver", "other.example.com"), ("nodeName", "node-b")])
def test_immutable_slice_fields(field: str, value: str) -> None:
    async def body(c: KubeClient, server: ApiServer) -> None:
        created = await c.create(RESOURCE_SLICES, SLICES[0])
        created["spec"][field] = value
        with pytest.raises(ApiError, match=f"spec.{field}: field is immutable"):
            await c.replace(RESOURCE_SLICES, created)

    with_client(body)


def test_pool_name_is_immutable() -> None:
    async def body(c: KubeClient, server: ApiServer) -> None:
        created = await c.create(RESOURCE_SLICES, SLICES[0])
        created["spec"]["pool"]["name"] = "other-pool"
        with pytest.raises(ApiError, match=r"spec\.pool\.name: field is immutable"):
            await c.replace(RESOURCE_SLICES, created)

    with_client(body)


def test_claim_status_subresource_and_immutable_spec() -> None:
    async def body(c: KubeClient, server: ApiServer) -> None:
        created = await c.create(RESOURCE_CLAIMS, {**claim(), "status": {"reservedFor": []}})
        assert "status" not in created  # status is ignored on create
        created["status"] = {
            "allocation": {"devices": {"results": [{"request": "cpu", "driver": "native.cpu", "pool": "node-a", "device": "cpu1"}]}},
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "pod-uid"}],
        }
        ignored = await c.replace(RESOURCE_CLAIMS, created)  # main resource: status not written
        assert "status" not in ignored
        created["metadata"]["resourceVersion"] = ignored["metadata"]["resourceVersion"]
        with_status = await c.replace(RESOURCE_CLAIMS, created, status=True)
        assert with_status["status"]["reservedFor"][0]["uid"] == "pod-uid"
        fetched = await c.get(RESOURCE_CLAIMS, "c1", "default")
        assert fetched["status"]["allocation"]["devices"]["results"][0]["device"] == "cpu1"
        fetched["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
        with pytest.raises(ApiError, match="spec: field is immutable"):
            await c.replace(RESOURCE_CLAIMS, fetched)
        too_many = copy.deepcopy(with_status)
        too_many["status"]["allocation"]["devices"]["results"] *= 33
        with pytest.raises(ApiError, match="at most 32"):
            await c.replace(RESOURCE_CLAIMS, too_many, status=True)

    with_client(body)


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ({"devices": {"requests": [{"name": "cpu"}]}}, "exactly one of exactly or firstAvailable"),
        ({"devices": {"requests": [{"name": "cpu", "exactly": {}}]}}, "deviceClassName: Required"),
        ({"devices": {"requests": [{"name": "Bad", "exactly": {"deviceClassName": "c"}}]}}, "must be a DNS label"),
        ({"devices": {"requests": [{"name": "a", "exactly": {"deviceClassName": "c", "count": 0}}]}}, "count"),
        ({"devices": {"requests": [{"name": "a", "exactly": {"deviceClassName": "c", "selectors": [{"cel": {"expression": "x" * 10241}}]}}]}}, "Too long"),
    ],
)
def test_claim_validation(spec: dict[str, Any], needle: str) -> None:
    async def body(c: KubeClient, server: ApiServer) -> None:
        with pytest.raises(ApiError) as info:
            await c.create(RESOURCE_CLAIMS, {"metadata": {"name": "c", "namespace": "default"}, "spec": spec})
        assert info.value.code == 422
        assert needle in info.value.message

    with_client(body)


def test_other_kinds_roundtrip() -> None:
    async def body(c: KubeClient, server: ApiServer) -> None:
        await c.create(DEVICE_CLASSES, {"metadata": {"name": "native.cpu"}, "spec": {"selectors": [{"cel": {"expression": "true"}}]}})
        await c.create(RESOURCE_CLAIM_TEMPLATES, {"metadata": {"name": "t", "namespace": "ns1"}, "spec": {"spec": claim()["spec"]}})
        await c.create(PODS, {"metadata": {"name": "p", "namespace": "ns1", "labels": {"app": "x"}}, "spec": {"containers": [{"name": "c"}], "nodeName": "node-a"}})
        await c.create(PODS, {"metadata": {"name": "q", "namespace": "ns2"}, "spec": {"containers": [{"name": "c"}]}})
        pods, _ = await c.list(PODS)
        assert [p["metadata"]["name"] for p in pods] == ["p", "q"]
        pods, _ = await c.list(PODS, namespace="ns1")
        assert [p["metadata"]["name"] for p in pods] == ["p"]
        pods, _ = await c.list(PODS, fields={"spec.nodeName": "node-a"})
        assert [p["metadata"]["name"] for p in pods] == ["p"]
        pods, _ = await c.list(PODS, labels={"app": "x"})
        assert [p["metadata"]["name"] for p in pods] == ["p"]
        assert (await c.get(DEVICE_CLASSES, "native.cpu"))["kind"] == "DeviceClass"
        assert (await c.get(RESOURCE_CLAIM_TEMPLATES, "t", "ns1"))["spec"]["spec"] == claim()["spec"]
        with pytest.raises(ApiError, match=r"spec\.containers"):
            await c.create(PODS, {"metadata": {"name": "r", "namespace": "ns1"}, "spec": {}})

    with_client(body)


def test_unsupported_field_selector_is_a_bad_request() -> None:
    async def body(c: KubeClient, server: ApiServer) -> None:
        with pytest.raises(ApiError) as info:
            await c.list(RESOURCE_SLICES, fields={"spec.devices": "x"})
        assert info.value.code == 400
        assert "field label not supported" in info.value.message

    with_client(body)


def test_list_paging() -> None:
    async def body(c: KubeClient, server: ApiServer) -> None:
        for i in range(7):
            await c.create(NODES, {"metadata": {"name": f"n{i}"}})
        items, rv = await c.list(NODES, chunk_size=3)
        assert [i["metadata"]["name"] for i in items] == [f"n{i}" for i in range(7)]
        assert rv
        assert sum(1 for m, p in server.requests if m == "GET" and p.endswith("/nodes")) == 3

    with_client(body)


def test_watch_replay_and_live_events() -> None:
    async def body(c: KubeClient, server: ApiServer) -> None:
        a = await c.create(NODES, {"metadata": {"name": "a"}})
        _, rv = await c.list(NODES)
        await c.create(NODES, {"metadata": {"name": "b"}})  # after rv: replayed
        events: list[tuple[str, str]] = []

        async def watch() -> None:
            async for event_type, obj in c.watch(NODES, resource_version=rv):
                events.append((event_type, obj["metadata"]["name"]))
                if len(events) == 3:
                    return

        task = asyncio.create_task(watch())
        while not events:  # the watch is open once it has replayed "b"
            await asyncio.sleep(0.005)
        a["metadata"]["labels"] = {"x": "y"}
        await c.replace(NODES, a)
        await c.delete(NODES, "b")
        await asyncio.wait_for(task, 5)
        assert events == [("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]

    with_client(body)


def test_watch_too_old_is_gone() -> None:
    async def body(c: KubeClient, server: ApiServer) -> None:
        for i in range(6):
            await c.create(NODES, {"metadata": {"name": f"n{i}"}})
        with pytest.raises(ApiError) as info:
            async for _ in c.watch(NODES, resource_version="1"):
                pass
        assert info.value.code == 410

    with_client(body, Store(event_log=3))


def test_finalizers_delay_deletion() -> None:
    async def body(c: KubeClient, server: ApiServer) -> None:
        obj = claim()
        obj["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
        await c.create(RESOURCE_CLAIMS, obj)
        await c.delete(RESOURCE_CLAIMS, "c1", "default")
        pending = await c.get(RESOURCE_CLAIMS, "c1", "default")
        assert pending["metadata"]["deletionTimestamp"]
        pending["metadata"]["finalizers"] = []
        await c.replace(RESOURCE_CLAIMS, pending)
        with pytest.raises(ApiError, match="not found"):
            await c.get(RESOURCE_CLAIMS, "c1", "default")

    with_client(body)


def test_owner_garbage_collection() -> None:
    async def body(c: KubeClient, server: ApiServer) -> None:
        node = await c.create(NODES, {"metadata": {"name": "node-a"}})
        for s in build_slices("node-a", [Device("d0", {})], node_uid=node["metadata"]["uid"]):
            await c.create(RESOURCE_SLICES, s)
        await c.create(RESOURCE_SLICES, {**copy.deepcopy(SLICES[0]), "metadata": {"name": "unowned"}})
        await c.delete(NODES, "node-a")
        items, _ = await c.list(RESOURCE_SLICES)
        assert [i["metadata"]["name"] for i in items] == ["unowned"]

    with_client(body)


def test_fault_injection() -> None:
    async def body(c: KubeClient, server: ApiServer) -> None:
        server.inject("POST", "resourceslices", 500, times=1)
        with pytest.raises(ApiError) as info:
            await c.create(RESOURCE_SLICES, SLICES[0])
        assert info.value.code == 500
        await c.create(RESOURCE_SLICES, SLICES[0])

    with_client(body)


def test_unreachable_server_is_an_api_error() -> None:
    async def main() -> None:
        c = KubeClient.for_url("http://127.0.0.1:9", timeout=2)
        with pytest.raises(ApiError) as info:
            await c.get(NODES, "x")
        assert info.value.code == 503
        await c.close()

    asyncio.run(main())


def test_the_official_client_runs_against_the_double_too() -> None:
    from kubernetes import client as k8s

    # the official client's models have no alpha nodeAllocatableResourceMappings: a slice without them
    plain = build_slices("node-a", [d.without_node_allocatable for d in build_devices(synthetic_topology("1s1n1l4c2t"))])[0]
    with ApiServerThread() as server:
        api_client: Any = k8s.ApiClient(k8s.Configuration(host=server.url))
        api: Any = k8s.ResourceV1Api(api_client)
        api.create_resource_slice(plain)
        listed = api.list_resource_slice(field_selector="spec.nodeName=node-a")
        assert [s.metadata.name for s in listed.items] == [SLICES[0]["metadata"]["name"]]
        assert len(listed.items[0].spec.devices) == len(SLICES[0]["spec"]["devices"])
        with pytest.raises(k8s.ApiException) as info:
            api.create_resource_slice(plain)
        assert info.value.status == 409
        assert server.call(lambda: len(list(server.store.objects(KINDS[("resource.k8s.io", "resourceslices")])))) == 1
        api_client.close()


def test_selectors() -> None:
    match = parse_label_selector("a=1,b!=2,c,!d,e in (x, y),f notin (z)")
    labels = {"a": "1", "b": "3", "c": "", "e": "y", "f": "q"}
    assert match({"metadata": {"labels": labels}})
    assert not match({"metadata": {"labels": {**labels, "d": "1"}}})
    assert not match({"metadata": {"labels": {**labels, "e": "w"}}})
    kind = KINDS[("resource.k8s.io", "resourceslices")]
    fields = parse_field_selector("spec.nodeName=n1,spec.driver!=x", kind)
    assert fields({"spec": {"nodeName": "n1", "driver": "y"}})
    assert not fields({"spec": {"nodeName": "n1", "driver": "x"}})
    with pytest.raises(ApiError, match="field label not supported"):
        parse_field_selector("spec.pool.generation=1", kind)


@pytest.mark.parametrize(
    ("attributes", "needle"),
    [
        ({"x": {"int": 1}, "native.cpu/x": {"int": 2}}, "Duplicate value"),
        ({"v": {"version": "01.2.3"}}, "must be a string compatible with semver.org spec 2.0.0"),
        ({"v": {"version": "1.2.3-rc.1+build.5"}}, None),
        ({"i": {"int": 1 << 63}}, "int64"),
        ({"l": {"ints": []}}, "must not be empty if specified"),
        ({"l": {"strings": ["a"] * 49}}, "the total number of attribute values must not exceed 48"),
        ({"example.com/" + "a" * 33: {"int": 1}}, "C identifier of at most 32"),
        ({"Bad.Domain/x": {"int": 1}}, "DNS subdomain"),
        ({"b": {"bool": "yes"}}, "must be a bool"),
    ],
)
def test_device_attributes_follow_the_api_rules(attributes: dict[str, Any], needle: str | None) -> None:
    """The double checks attributes from the API's rules, not with the driver's own validator."""

    async def body(c: KubeClient, server: ApiServer) -> None:
        obj = _slice_with([{"name": "d", "attributes": attributes}])
        if needle is None:
            await c.create(RESOURCE_SLICES, obj)
            return
        with pytest.raises(ApiError) as info:
            await c.create(RESOURCE_SLICES, obj)
        assert info.value.code == 422
        assert needle in info.value.message

    with_client(body)


def test_double_does_not_share_the_drivers_validator() -> None:
    import ast
    from pathlib import Path

    import topodra.embedded.validation as v

    tree = ast.parse(Path(v.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not any(m and m.startswith("topodra.dra") for m in imported)


#: apimachinery's IsDNS1123Subdomain words, as a real 1.36 server wrote them for a driver name
#: (tests/data/sched-recorded/v9-opaque-params/rejected.json, probe-config-bad-driver)
_SUBDOMAIN_WORDS = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end "
    "with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def test_object_names_are_refused_in_the_real_servers_words() -> None:
    store = Store()
    with pytest.raises(ApiError) as refused:
        store.create(KINDS[("resource.k8s.io", "deviceclasses")], None, {"metadata": {"name": "Bad_Name"}, "spec": {}})
    assert [(c.field, c.message) for c in refused.value.causes] == [("metadata.name", f'Invalid value: "Bad_Name": {_SUBDOMAIN_WORDS}')]
    with pytest.raises(ApiError) as dotted:
        store.create(KINDS[("", "namespaces")], None, {"metadata": {"name": "a.b"}})
    assert [(c.field, c.message) for c in dotted.value.causes] == [("metadata.name", 'Invalid value: "a.b": must not contain dots')]


def test_container_resources_are_checked_as_the_real_server_checks_them() -> None:
    """validateResourceRequirements (pkg/apis/core/validation, v1.36.2): no negative quantity,
    no request over its limit; a JSON number is a quantity too."""
    store = Store()
    pods = KINDS[("", "pods")]

    def pod(name: str, resources: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "resources": resources}]}}

    store.create(pods, "default", pod("ok", {"requests": {"cpu": 1, "memory": "1Gi"}, "limits": {"cpu": 1.5}}))
    with pytest.raises(ApiError) as negative:
        store.create(pods, "default", pod("neg", {"requests": {"cpu": "-1"}}))
    assert [(c.field, c.message) for c in negative.value.causes] == [
        ("spec.containers[0].resources.requests[cpu]", 'Invalid value: "-1": must be greater than or equal to 0')
    ]
    with pytest.raises(ApiError) as over:
        store.create(pods, "default", pod("over", {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}))
    assert over.value.status()["message"] == (
        'Pod "over" is invalid: spec.containers[0].resources.requests: Invalid value: "2": must be less than or equal to cpu limit of 1'
    )
