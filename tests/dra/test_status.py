# mypy: disable-error-code="no-untyped-call"
"""Claim device status: the builder, the API server double's rules for status.devices (server-side
apply, validation, the 1.36 per-driver authorization) and the background writer with the driver."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topodra.cpuset import CPUSet
from topodra.dra.checkpoint import PreparedClaim, PreparedDevice
from topodra.dra.devices import DRIVER, build_devices
from topodra.dra.driver import ClaimRef, Driver
from topodra.dra.status import (
    CONDITIONS_MAX,
    DATA_MAX,
    REASON_NOT_RESTORED,
    REASON_OFFLINE,
    REASON_PREPARED,
    ClaimStatus,
    StatusWriter,
    apply_body,
    device_statuses,
)
from topodra.embedded.apiserver import ApiServer, Authorizer
from topodra.embedded.validation import validate_resource_claim
from topodra.kube.client import NAMESPACES, RESOURCE_CLAIMS, KubeClient
from topodra.kube.errors import ApiError
from topodra.topology import synthetic_topology

from .dra_fakes import RecordingPolicy, make_claim

TOPO = synthetic_topology("1s1d2n1l4c2t")  # 16 CPUs; node 0: 0-3,8-11; node 1: 4-7,12-15
NODE_OF = {c: i.node for c, i in TOPO.cpus.items()}
NODE_SELECTOR = {
    "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]
}
T0 = "2026-12-01T19:00:00Z"


def _prepared(uid: str = "u1", per_device: dict[str, str] | None = None, share: bool = False) -> PreparedClaim:
    per_device = per_device or {"cpu4": "4", "cpu12": "12"}
    devices = tuple(
        PreparedDevice("cpu", "node-a", name, CPUSet.parse(cpus), f"share-{uid}-{i}" if share else None)
        for i, (name, cpus) in enumerate(per_device.items())
    )
    cpus = CPUSet()
    for d in devices:
        cpus |= d.cpus
    return PreparedClaim(uid, "default", f"claim-{uid}", cpus, devices, ("pod-1",))


def _claim_with_status(claim: PreparedClaim, entries: list[dict[str, Any]]) -> dict[str, Any]:
    obj = make_claim(claim.uid, [d.device for d in claim.devices])
    for r, d in zip(obj["status"]["allocation"]["devices"]["results"], claim.devices, strict=True):
        if d.share_id:
            r["shareID"] = d.share_id
    obj["status"]["devices"] = entries
    return obj


# --- the builder --------------------------------------------------------------------------------


def test_entries_name_each_device_with_its_cpus_and_numa_nodes() -> None:
    claim = _prepared()
    entries = device_statuses(claim, node_of=NODE_OF, online=TOPO.online, now=T0)
    assert [(e["driver"], e["pool"], e["device"]) for e in entries] == [(DRIVER, "node-a", "cpu4"), (DRIVER, "node-a", "cpu12")]
    assert entries[0]["data"] == {"cpuset": "4", "cpus": 1, "numaNodes": [1]}
    assert "shareID" not in entries[0]
    (ready,) = entries[0]["conditions"]
    assert ready == {
        "type": "Ready",
        "status": "True",
        "reason": REASON_PREPARED,
        "message": "CPU 4 prepared for the claim's containers",
        "lastTransitionTime": T0,
    }
    assert validate_resource_claim(_claim_with_status(claim, entries), None) == []


def test_grouped_device_entry_has_its_share_id_and_spans_its_nodes() -> None:
    claim = _prepared(per_device={"machine": "2-5"}, share=True)
    (entry,) = device_statuses(claim, node_of=NODE_OF, online=TOPO.online, now=T0)
    assert entry["shareID"] == "share-u1-0"
    assert entry["data"] == {"cpuset": "2-5", "cpus": 4, "numaNodes": [0, 1]}


def test_an_offline_cpu_makes_its_device_not_ready_and_names_what_is_left() -> None:
    claim = _prepared(per_device={"core1": "1,9", "cpu4": "4"})
    online = TOPO.online - CPUSet([9, 4])
    one, two = device_statuses(claim, node_of=NODE_OF, online=online, now=T0)
    assert one["conditions"][0]["status"] == "False"
    assert one["conditions"][0]["reason"] == REASON_OFFLINE
    assert one["conditions"][0]["message"] == "CPU 9 offline; the claim's containers run on 1 until it returns"
    assert one["data"] == {"cpuset": "1,9", "cpus": 2, "numaNodes": [0], "offlineCPUs": "9"}
    assert two["conditions"][0]["message"] == "CPU 4 offline; the claim's containers run on 1 until it returns"
    alone = device_statuses(_prepared(per_device={"core1": "1,9"}), node_of=NODE_OF, online=TOPO.online - CPUSet([1, 9]), now=T0)
    assert alone[0]["conditions"][0]["message"] == (
        "CPUs 1,9 offline; no CPU of the claim is online: its containers run where their CPU request places them "
        "until they return"
    )
    assert validate_resource_claim(_claim_with_status(claim, [one, two]), None) == []


def test_a_claim_that_failed_to_restore_is_not_ready_with_the_reason() -> None:
    from dataclasses import replace

    claim = replace(_prepared(), error="cannot restore claim default/claim-u1: CPU 4 is reserved")
    entries = device_statuses(claim, node_of=NODE_OF, online=TOPO.online, now=T0)
    assert {e["conditions"][0]["reason"] for e in entries} == {REASON_NOT_RESTORED}
    assert entries[0]["conditions"][0]["message"].endswith("CPU 4 is reserved")


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sets(st.integers(0, 2047), min_size=1, max_size=300), min_size=1, max_size=32),
    st.sets(st.integers(0, 2047), max_size=600),
)
def test_any_claim_gives_entries_the_api_server_accepts(cpu_sets: list[set[int]], offline: set[int]) -> None:
    per_device = {f"dev{i}": str(CPUSet(s)) for i, s in enumerate(cpu_sets)}
    claim = _prepared(per_device=per_device)
    online = CPUSet(range(2048)) - CPUSet(offline)
    node_of = {c: c // 64 for c in range(2048)}
    entries = device_statuses(claim, node_of=node_of, online=online, now=T0)
    assert len(entries) == len(cpu_sets)
    assert validate_resource_claim(_claim_with_status(claim, entries), None) == []
    for entry, cpus in zip(entries, cpu_sets, strict=True):
        assert CPUSet.parse(entry["data"]["cpuset"]) == CPUSet(cpus)
        assert entry["data"]["numaNodes"] == sorted({c // 64 for c in cpus})
        gone = CPUSet(cpus) - online
        assert (entry["conditions"][0]["status"] == "True") == (not gone)
        if gone:
            assert CPUSet.parse(entry["data"]["offlineCPUs"]) == gone
        assert len(entry["conditions"]) <= CONDITIONS_MAX


# --- the API server double's rules --------------------------------------------------------------


async def _server_with_claim(server: ApiServer, *, node_selector: bool = True, **kw: Any) -> tuple[KubeClient, dict[str, Any]]:
    client = KubeClient.for_url(server.url)
    await client.create(NAMESPACES, {"metadata": {"name": "default"}})
    obj = make_claim("ignored", ["cpu4", "cpu12"], **kw)
    if node_selector:
        obj["status"]["allocation"]["nodeSelector"] = NODE_SELECTOR
    status = obj.pop("status")
    obj["metadata"].pop("uid")
    created = await client.create(RESOURCE_CLAIMS, obj)
    created["status"] = status
    claim = await client.replace(RESOURCE_CLAIMS, created, status=True)
    return client, claim


def _entries_for(claim: dict[str, Any], online: CPUSet = TOPO.online) -> list[dict[str, Any]]:
    prepared = _prepared(uid=claim["metadata"]["uid"])
    return device_statuses(prepared, node_of=NODE_OF, online=online, now=T0)


def _body(claim: dict[str, Any], entries: list[dict[str, Any]]) -> dict[str, Any]:
    m = claim["metadata"]
    return apply_body(m["namespace"], m["name"], m["uid"], entries)


def test_apply_adds_our_entries_keeps_others_and_removes_ours_when_we_stop_naming_them() -> None:
    async def main() -> None:
        async with ApiServer() as server:
            client, claim = await _server_with_claim(server)
            ours = _entries_for(claim)
            out = await client.apply(RESOURCE_CLAIMS, _body(claim, ours), field_manager=DRIVER, status=True)
            assert out["status"]["devices"] == ours
            # another manager (a monitoring controller) adds data to cpu4's entry by a merge patch
            theirs = copy.deepcopy(out)
            theirs["status"]["devices"][0]["networkData"] = {"interfaceName": "none"}
            await client.replace(RESOURCE_CLAIMS, theirs, status=True)
            owners = server.store.field_owners(server.store.kind_of(claim), "default", claim["metadata"]["name"])
            (updater,) = set(owners) - {DRIVER}  # named after the client's user agent, as on a real server
            assert [p for p in owners[updater] if p.endswith(".networkData")] == [
                '.status.devices[driver="native.cpu",pool="node-a",device="cpu4"].networkData'
            ]
            assert not [p for p in owners[DRIVER] if p.endswith(".networkData")]
            # we re-apply only cpu12: cpu4's fields of ours go, their networkData (and the item) stays
            out = await client.apply(RESOURCE_CLAIMS, _body(claim, ours[1:]), field_manager=DRIVER, status=True)
            devs = {e["device"]: e for e in out["status"]["devices"]}
            assert devs["cpu12"] == ours[1]
            assert devs["cpu4"] == {"driver": DRIVER, "pool": "node-a", "device": "cpu4", "networkData": {"interfaceName": "none"}}
            # an empty apply removes every field we own; the other manager's stay
            out = await client.apply(RESOURCE_CLAIMS, _body(claim, []), field_manager=DRIVER, status=True)
            assert [e["device"] for e in out["status"]["devices"]] == ["cpu4"]
            await client.close()

    asyncio.run(main())


def test_apply_conflicts_with_another_managers_field_unless_forced() -> None:
    async def main() -> None:
        async with ApiServer() as server:
            client, claim = await _server_with_claim(server)
            ours = _entries_for(claim)
            await client.apply(RESOURCE_CLAIMS, _body(claim, ours), field_manager="someone-else", status=True)
            changed = copy.deepcopy(ours)
            changed[0]["data"] = {"cpuset": "5"}
            with pytest.raises(ApiError) as err:
                await client.apply(RESOURCE_CLAIMS, _body(claim, changed), field_manager=DRIVER, status=True)
            assert err.value.code == 409
            assert 'conflict with "someone-else"' in str(err.value)
            # the same values are shared, not a conflict
            await client.apply(RESOURCE_CLAIMS, _body(claim, ours), field_manager=DRIVER, status=True)
            out = await client.apply(RESOURCE_CLAIMS, _body(claim, changed), field_manager=DRIVER, force=True, status=True)
            assert out["status"]["devices"][0]["data"] == {"cpuset": "5"}
            await client.close()

    asyncio.run(main())


@pytest.mark.parametrize(
    ("mutate", "expect"),
    [
        (lambda es: es[0].update(device="cpu5"), "must be an allocated device in the claim"),
        (lambda es: es[0].update(shareID="share-x"), "must be an allocated device in the claim"),
        (lambda es: es[0].update(conditions=[dict(es[0]["conditions"][0], type=f"T{i}") for i in range(9)]), "at most 8"),
        (lambda es: es[0].update(data={"x": "y" * DATA_MAX}), "may not be more than 10240 bytes"),
        (lambda es: es[0].update(data=["not", "an", "object"]), "must be a valid JSON object"),
        (lambda es: es[0]["conditions"][0].update(status="Maybe"), "Unsupported value"),
        (lambda es: es[0]["conditions"][0].update(reason="not a reason!"), "condition reason"),
        (lambda es: es[0]["conditions"][0].pop("lastTransitionTime"), "lastTransitionTime"),
    ],
)
def test_the_double_rejects_status_devices_the_real_server_rejects(mutate: Any, expect: str) -> None:
    async def main() -> None:
        async with ApiServer() as server:
            client, claim = await _server_with_claim(server)
            entries = _entries_for(claim)
            mutate(entries)
            with pytest.raises(ApiError) as err:
                await client.apply(RESOURCE_CLAIMS, _body(claim, entries), field_manager=DRIVER, status=True)
            assert err.value.code == 422
            assert expect in str(err.value)
            await client.close()

    asyncio.run(main())


def test_apply_to_a_recreated_claim_is_refused_and_unallocating_drops_the_entries() -> None:
    async def main() -> None:
        async with ApiServer() as server:
            client, claim = await _server_with_claim(server)
            entries = _entries_for(claim)
            stale = apply_body("default", claim["metadata"]["name"], "00000000-0000-0000-0000-000000000000", entries)
            with pytest.raises(ApiError) as err:
                await client.apply(RESOURCE_CLAIMS, stale, field_manager=DRIVER, status=True)
            assert err.value.code == 409
            out = await client.apply(RESOURCE_CLAIMS, _body(claim, entries), field_manager=DRIVER, status=True)
            assert len(out["status"]["devices"]) == 2
            out["status"].pop("allocation")
            out["status"].pop("reservedFor")
            out = await client.replace(RESOURCE_CLAIMS, out, status=True)
            assert "devices" not in out["status"]
            await client.close()

    asyncio.run(main())


RULES_BEFORE_136 = [
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get", "list", "create"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/status"], "verbs": ["get", "update", "patch"]},
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["create"]},
]
RULES_136 = [
    *RULES_BEFORE_136,
    {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceclaims/driver"],
        "resourceNames": [DRIVER],
        "verbs": ["associated-node:update", "associated-node:patch"],
    },
]


@pytest.mark.parametrize(
    ("rules", "token_node", "allowed"),
    [
        (RULES_136, "node-a", True),
        (RULES_BEFORE_136, "node-a", False),  # 1.36: resourceclaims/status alone is not enough
        (RULES_136, "node-b", False),  # the agent of another node
        (RULES_136, None, False),  # a token bound to no node
    ],
)
def test_writing_status_devices_needs_the_136_driver_verbs_for_the_claims_node(
    rules: list[dict[str, Any]], token_node: str | None, allowed: bool
) -> None:
    async def main() -> None:
        async with ApiServer() as server:
            client, claim = await _server_with_claim(server)
            server.authorizer = Authorizer(rules, {"topodra": token_node} if token_node else {})
            body = _body(claim, _entries_for(claim))
            if allowed:
                out = await client.apply(RESOURCE_CLAIMS, body, field_manager=DRIVER, status=True)
                assert len(out["status"]["devices"]) == 2
                assert ("resource.k8s.io", "resourceclaims/driver", "associated-node:patch") in server.audit
            else:
                with pytest.raises(ApiError) as err:
                    await client.apply(RESOURCE_CLAIMS, body, field_manager=DRIVER, status=True)
                assert err.value.code == 403
                assert "resourceclaims" in str(err.value)
            # a status write that leaves status.devices alone needs no driver verb
            fresh = await client.get(RESOURCE_CLAIMS, claim["metadata"]["name"], "default")
            fresh["status"]["reservedFor"] = fresh["status"]["reservedFor"] + [{"resource": "pods", "name": "p2", "uid": "p2"}]
            await client.replace(RESOURCE_CLAIMS, fresh, status=True)
            await client.close()

    asyncio.run(main())


# --- the writer and the driver ------------------------------------------------------------------


def test_writer_coalesces_and_retries_off_the_callers_path() -> None:
    async def main() -> None:
        calls: list[list[Any]] = []
        gate = asyncio.Event()
        failures = [ApiError(503, "ServiceUnavailable", "busy")]

        async def apply(ns: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
            await gate.wait()
            calls.append(body["status"].get("devices", []))
            if failures:
                raise failures.pop()
            return body

        writer = StatusWriter(apply, retry_base=0.01)
        stop = asyncio.Event()
        task = asyncio.create_task(writer.run(stop))
        claim = _prepared()
        for i in range(50):  # fifty reports while the API server is slow: never waits
            entries = device_statuses(claim, node_of=NODE_OF, online=TOPO.online - CPUSet([4] if i % 2 else []), now=T0)
            writer.submit(claim.uid, "default", claim.name, entries)
        assert writer.pending == 1
        gate.set()
        await writer.wait_idle(5)
        assert len(calls) <= 3  # the first in flight, its retry, and the newest state
        assert calls[-1][0]["conditions"][0]["status"] == "False"  # the last submitted: i = 49, CPU 4 offline
        stop.set()
        await task

    asyncio.run(main())


def test_writer_prepared_then_released_before_writing_sends_nothing() -> None:
    async def main() -> None:
        calls: list[dict[str, Any]] = []

        async def apply(ns: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
            calls.append(body)
            return body

        writer = StatusWriter(apply)
        status = ClaimStatus(writer, node_of=NODE_OF, online=TOPO.online)
        claim = _prepared()
        status.prepared(claim)
        status.unprepared(claim)
        stop = asyncio.Event()
        task = asyncio.create_task(writer.run(stop))
        await writer.wait_idle(5)
        assert calls == []
        stop.set()
        await task

    asyncio.run(main())


async def _driver(root: Path, client: KubeClient, writer: StatusWriter, status: ClaimStatus) -> Driver:
    async def fetch(namespace: str, name: str) -> dict[str, Any]:
        return await client.get(RESOURCE_CLAIMS, name, namespace)

    return Driver(
        policy=RecordingPolicy(TOPO, CPUSet([0])),
        lock=asyncio.Lock(),
        fetch_claim=fetch,
        cdi_dir=root / "cdi",
        checkpoint_path=root / "checkpoint.json",
        devices=build_devices(TOPO, exclude=CPUSet([0])),
        pool="node-a",
        status=status,
    )


def test_driver_writes_status_on_prepare_clears_it_on_unprepare_and_keeps_it_across_a_restart(tmp_path: Path) -> None:
    async def main() -> None:
        async with ApiServer() as server:
            client, claim = await _server_with_claim(server)
            name, uid = claim["metadata"]["name"], claim["metadata"]["uid"]
            ref = ClaimRef("default", uid, name)

            async def apply(ns: str, n: str, body: dict[str, Any]) -> dict[str, Any]:
                return await client.apply(RESOURCE_CLAIMS, body, field_manager=DRIVER, status=True)

            async def get(ns: str, n: str) -> dict[str, Any]:
                return await client.get(RESOURCE_CLAIMS, n, ns)

            stop = asyncio.Event()
            clock = iter(["2026-12-01T19:00:00Z", "2026-12-01T19:05:00Z", "2026-12-01T19:10:00Z"])

            def start() -> tuple[StatusWriter, ClaimStatus, asyncio.Task[None]]:
                writer = StatusWriter(apply, get=get)
                status = ClaimStatus(writer, node_of=NODE_OF, online=TOPO.online, now=lambda: next(clock))
                return writer, status, asyncio.create_task(writer.run(stop))

            writer, status, task = start()
            driver = await _driver(tmp_path, client, writer, status)
            result = (await driver.prepare([ref]))[uid]
            assert result.error == ""
            await writer.wait_idle(5)
            got = (await client.get(RESOURCE_CLAIMS, name, "default"))["status"]["devices"]
            assert [(e["device"], e["data"]["cpuset"], e["data"]["numaNodes"]) for e in got] == [
                ("cpu4", "4", [1]),
                ("cpu12", "12", [1]),
            ]
            assert got[0]["conditions"][0]["lastTransitionTime"] == "2026-12-01T19:00:00Z"

            # the agent restarts: a new driver and writer on the same checkpoint re-assert the entries,
            # keeping the condition's transition time (the GET of a restored claim)
            stop.set()
            await task
            stop.clear()
            writer, status, task = start()
            driver = await _driver(tmp_path, client, writer, status)
            report = await driver.restore()
            assert report.restored == (uid,)
            await writer.wait_idle(5)
            assert (await client.get(RESOURCE_CLAIMS, name, "default"))["status"]["devices"] == got

            # a CPU goes offline: Ready turns False, with a new transition time
            status.follow(TOPO.online - CPUSet([12]), NODE_OF)
            await writer.wait_idle(5)
            now = (await client.get(RESOURCE_CLAIMS, name, "default"))["status"]["devices"]
            assert now[0] == got[0]
            assert now[1]["conditions"][0]["status"] == "False"
            assert now[1]["conditions"][0]["lastTransitionTime"] == "2026-12-01T19:10:00Z"

            un = (await driver.unprepare([ref]))[uid]
            assert un.error == ""
            await writer.wait_idle(5)
            assert "devices" not in (await client.get(RESOURCE_CLAIMS, name, "default"))["status"]
            assert writer.counts.get("failed", 0) == 0
            stop.set()
            await task
            await client.close()

    asyncio.run(main())


def test_prepare_does_not_wait_for_a_hung_api_server(tmp_path: Path) -> None:
    async def main() -> None:
        async with ApiServer() as server:
            client, claim = await _server_with_claim(server)
            hang = asyncio.Event()

            async def apply(ns: str, n: str, body: dict[str, Any]) -> dict[str, Any]:
                await hang.wait()
                return body

            writer = StatusWriter(apply)
            stop = asyncio.Event()
            task = asyncio.create_task(writer.run(stop))
            status = ClaimStatus(writer, node_of=NODE_OF, online=TOPO.online)
            driver = await _driver(tmp_path, client, writer, status)
            ref = ClaimRef("default", claim["metadata"]["uid"], claim["metadata"]["name"])
            result = await asyncio.wait_for(driver.prepare([ref]), 5)
            assert result[ref.uid].error == ""
            assert (await asyncio.wait_for(driver.unprepare([ref]), 5))[ref.uid].error == ""
            stop.set()
            hang.set()
            await task
            await client.close()

    asyncio.run(main())


# --- server-side apply, as a property --------------------------------------------------------------

_DEVICES = [f"cpu{i}" for i in range(6)]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["native.cpu", "gpu.example.com"]), st.sets(st.sampled_from(_DEVICES)), st.integers(0, 3)),
        max_size=12,
    )
)
def test_applies_of_two_drivers_leave_each_ones_last_configuration(steps: list[tuple[str, set[str], int]]) -> None:
    """Each driver (its own field manager, its own entries) ends with exactly what it applied last,
    whatever the other did in between."""
    from topodra.embedded.apply import apply_devices

    items: list[dict[str, Any]] = []
    owners: dict[Any, Any] = {}
    last: dict[str, dict[str, int]] = {}
    for driver, devices, version in steps:
        applied = [{"driver": driver, "pool": "p", "device": d, "data": {"v": version}} for d in sorted(devices)]
        items, owners = apply_devices(items, owners, driver, applied, force=False)
        last[driver] = dict.fromkeys(devices, version)
    got: dict[str, dict[str, int]] = {}
    for e in items:
        got.setdefault(e["driver"], {})[e["device"]] = e["data"]["v"]
    assert got == {d: v for d, v in last.items() if v}
    assert len({(e["driver"], e["device"]) for e in items}) == len(items)


def test_writer_is_bounded_and_stops_on_permanent_errors() -> None:
    async def main() -> None:
        answers: dict[str, ApiError] = {
            "gone": ApiError(404, "NotFound", "resourceclaims gone not found"),
            "recreated": ApiError(409, "Conflict", "Precondition failed: UID in object meta: x"),
            "invalid": ApiError(422, "Invalid", "status.devices[0]: must be an allocated device in the claim"),
        }
        calls: list[str] = []

        async def apply(ns: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
            calls.append(name)
            if name in answers:
                raise answers[name]
            return body

        writer = StatusWriter(apply, max_pending=3, retry_base=0.01)
        entries = _entries_for({"metadata": {"uid": "u"}})
        for name in ("gone", "recreated", "invalid", "one-too-many"):
            writer.submit(name, "default", name, entries)
        assert writer.pending == 3
        assert writer.counts == {"dropped": 1}
        stop = asyncio.Event()
        task = asyncio.create_task(writer.run(stop))
        await writer.wait_idle(5)
        assert sorted(calls) == ["gone", "invalid", "recreated"]  # each once: nothing worth retrying
        assert writer.counts == {"dropped": 1, "gone": 2, "failed": 1}
        assert "must be an allocated device" in writer.last_error
        stop.set()
        await task

    asyncio.run(main())


def test_the_double_serves_discovery_so_kubectl_finds_resourceclaims() -> None:
    """kubectl resolves ``get resourceclaim NAME -o yaml`` through these documents."""
    import json
    import urllib.request

    from topodra.embedded.apiserver import ApiServerThread

    with ApiServerThread() as server:

        def get(path: str) -> dict[str, Any]:
            with urllib.request.urlopen(f"{server.url}{path}", timeout=10) as r:
                doc: dict[str, Any] = json.loads(r.read())
                return doc

        assert get("/api")["versions"] == ["v1"]
        groups = {g["name"]: g["preferredVersion"]["groupVersion"] for g in get("/apis")["groups"]}
        assert groups == {"resource.k8s.io": "resource.k8s.io/v1"}
        assert get("/apis/resource.k8s.io")["preferredVersion"]["version"] == "v1"
        resources = {r["name"]: r for r in get("/apis/resource.k8s.io/v1")["resources"]}
        assert resources["resourceclaims"]["namespaced"] is True
        assert resources["resourceclaims"]["kind"] == "ResourceClaim"
        assert "resourceclaims/status" in resources
        assert resources["resourceslices"]["namespaced"] is False
        core = {r["name"]: r for r in get("/api/v1")["resources"]}
        assert core["pods"]["shortNames"] == ["po"]
        assert {"nodes", "namespaces", "pods/status"} <= set(core)
