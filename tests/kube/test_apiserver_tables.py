"""``kubectl get`` asks for server-side Tables; the double answers them with kube-apiserver 1.36's
columns (recorded from a real 1.36.2 server) and cells (its printers)."""

from __future__ import annotations

import datetime
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from topodra.embedded.apiserver import ApiServerThread
from topodra.embedded.store import KINDS
from topodra.embedded.tables import human_duration, table, wants_table

KUBECTL_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"

#: (name, priority) of each column, as a real kube-apiserver 1.36.2 answers a Table request.
REAL_COLUMNS = {
    "pods": [("Name", 0), ("Ready", 0), ("Status", 0), ("Restarts", 0), ("Age", 0), ("IP", 1), ("Node", 1), ("Nominated Node", 1), ("Readiness Gates", 1)],
    "resourceclaims": [("Name", 0), ("State", 0), ("Age", 0)],
    "resourceslices": [("Name", 0), ("Node", 0), ("Driver", 0), ("Pool", 0), ("Age", 0)],
    "deviceclasses": [("Name", 0), ("Age", 0)],
    "nodes": [("Name", 0), ("Status", 0), ("Roles", 0), ("Age", 0), ("Version", 0), ("Internal-IP", 1), ("External-IP", 1), ("OS-Image", 1), ("Kernel-Version", 1), ("Container-Runtime", 1)],
    "namespaces": [("Name", 0), ("Status", 0), ("Age", 0)],
    "resourceclaimtemplates": [("Name", 0), ("Age", 0)],
}


@pytest.fixture(scope="module")
def server() -> Iterator[ApiServerThread]:
    with ApiServerThread() as srv:
        yield srv


def _get(url: str, accept: str = KUBECTL_ACCEPT) -> tuple[int, Any]:
    req = urllib.request.Request(url, headers={"Accept": accept})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _path(plural: str) -> str:
    kind = next(k for k in KINDS.values() if k.plural == plural)
    base = f"/apis/{kind.group}/{kind.version}" if kind.group else "/api/v1"
    return f"{base}/namespaces/default/{plural}" if kind.namespaced else f"{base}/{plural}"


@pytest.mark.parametrize("plural", sorted(REAL_COLUMNS))
def test_the_columns_are_the_real_servers(server: ApiServerThread, plural: str) -> None:
    code, body = _get(server.url + _path(plural))
    assert code == 200, body
    assert (body["kind"], body["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    assert [(c["name"], c["priority"]) for c in body["columnDefinitions"]] == REAL_COLUMNS[plural]
    assert body["columnDefinitions"][0]["format"] == "name"


def test_a_plain_json_client_still_gets_the_list(server: ApiServerThread) -> None:
    code, body = _get(server.url + _path("deviceclasses"), "application/json")
    assert (code, body["kind"]) == (200, "DeviceClassList")


def test_include_object_as_the_real_server_reads_it(server: ApiServerThread) -> None:
    server.call(lambda: server.store.create(KINDS[("resource.k8s.io", "deviceclasses")], None, {"metadata": {"name": "tbl"}}))
    _, meta = _get(server.url + _path("deviceclasses") + "/tbl")
    assert meta["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    assert meta["rows"][0]["cells"][0] == "tbl"
    _, none = _get(server.url + _path("deviceclasses") + "?includeObject=None")
    assert [r["object"] for r in none["rows"]] == [None]
    _, full = _get(server.url + _path("deviceclasses") + "?includeObject=Object")
    assert full["rows"][0]["object"]["kind"] == "DeviceClass"
    code, bad = _get(server.url + _path("deviceclasses") + "?includeObject=Bogus")
    assert code == 400
    assert bad["message"] == (  # recorded from kube-apiserver 1.36.2
        "Unable to convert to Table as requested: includeObject: Invalid value: \"Bogus\": must be 'Metadata', 'Object', 'None', or empty"
    )


NOW = datetime.datetime(2026, 12, 4, 12, 0, 0, tzinfo=datetime.UTC)


def _cells(plural: str, obj: dict[str, Any]) -> list[Any]:
    kind = next(k for k in KINDS.values() if k.plural == plural)
    obj.setdefault("metadata", {}).setdefault("creationTimestamp", "2026-12-04T11:58:55Z")
    cells: list[Any] = table(kind, [obj], {}, "None", NOW)["rows"][0]["cells"]
    return cells


def test_a_pods_ready_and_status_as_printPod_derives_them() -> None:
    running = {
        "metadata": {"name": "p"},
        "spec": {"nodeName": "n1", "containers": [{"name": "a"}, {"name": "b"}]},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": "a", "ready": True, "restartCount": 2, "state": {"running": {}}},
                {"name": "b", "ready": False, "restartCount": 0, "state": {"running": {}}},
            ],
        },
    }
    assert _cells("pods", running) == ["p", "1/2", "Running", "2", "65s", "<none>", "n1", "<none>", "<none>"]
    waiting = {"metadata": {"name": "w"}, "spec": {"containers": [{"name": "a"}]}, "status": {"phase": "Pending", "containerStatuses": [{"name": "a", "state": {"waiting": {"reason": "CreateContainerError"}}}]}}
    assert _cells("pods", waiting)[1:3] == ["0/1", "CreateContainerError"]
    pending = {"metadata": {"name": "q", "deletionTimestamp": "2026-12-04T11:59:00Z"}, "spec": {"containers": [{"name": "a"}]}, "status": {"phase": "Pending"}}
    assert _cells("pods", pending)[1:3] == ["0/1", "Terminating"]


def test_a_claims_state_a_slice_and_a_node() -> None:
    assert _cells("resourceclaims", {"metadata": {"name": "c"}})[1] == "pending"
    allocated = {"metadata": {"name": "c"}, "status": {"allocation": {"devices": {}}, "reservedFor": [{"name": "p"}]}}
    assert _cells("resourceclaims", allocated)[1] == "allocated,reserved"
    assert _cells("resourceclaims", {"metadata": {"name": "c", "deletionTimestamp": "x"}})[1] == "deleted"
    slice_ = {"metadata": {"name": "s"}, "spec": {"nodeName": "n1", "driver": "native.cpu", "pool": {"name": "n1"}}}
    assert _cells("resourceslices", slice_) == ["s", "n1", "native.cpu", "n1", "65s"]
    node = {
        "metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/control-plane": ""}},
        "spec": {"unschedulable": True},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": "v1.36.2", "architecture": "amd64"}},
    }
    assert _cells("nodes", node)[:5] == ["n1", "Ready,SchedulingDisabled", "control-plane", "65s", "v1.36.2"]
    assert _cells("nodes", node)[8] == "<unknown> (amd64)"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(-5, "<invalid>"), (-1, "0s"), (0, "0s"), (119, "119s"), (120, "2m"), (125, "2m5s"), (600, "10m"), (3 * 3600 - 1, "179m"),
     (3 * 3600, "3h"), (3 * 3600 + 300, "3h5m"), (8 * 3600, "8h"), (47 * 3600, "47h"), (48 * 3600, "2d"), (50 * 3600, "2d2h"),
     (8 * 86400, "8d"), (2 * 365 * 86400, "2y"), ((2 * 365 + 5) * 86400, "2y5d"), (8 * 365 * 86400, "8y")],
)
def test_ages_read_as_human_duration(seconds: int, text: str) -> None:
    """apimachinery's duration.HumanDuration, value for value (util/duration/duration.go)."""
    assert human_duration(seconds) == text


def test_kubectl_get_asks_for_a_table() -> None:
    assert wants_table(KUBECTL_ACCEPT)
    assert not wants_table("application/json")
    assert not wants_table("application/json;as=Table;v=v1beta1;g=meta.k8s.io")


def test_a_watch_sends_one_row_tables_headed_once(server: ApiServerThread) -> None:
    """``kubectl get -w``: each event's object is a one-row Table in the kind's columns; only the
    first carries the column definitions, as the real watch encoder sends them."""
    classes = KINDS[("resource.k8s.io", "deviceclasses")]
    server.call(lambda: server.store.create(classes, None, {"metadata": {"name": "w1"}}))
    server.call(lambda: server.store.create(classes, None, {"metadata": {"name": "w2"}}))
    req = urllib.request.Request(server.url + _path("deviceclasses") + "?watch=true&timeoutSeconds=1", headers={"Accept": KUBECTL_ACCEPT})
    with urllib.request.urlopen(req, timeout=10) as resp:
        events = [json.loads(line) for line in resp.read().splitlines() if line.strip()]
    tables = [e["object"] for e in events if e["type"] == "ADDED"]
    assert {t["rows"][0]["cells"][0] for t in tables} >= {"w1", "w2"}
    assert all(t["kind"] == "Table" and len(t["rows"]) == 1 for t in tables)
    assert [(c["name"], c["priority"]) for c in tables[0]["columnDefinitions"]] == REAL_COLUMNS["deviceclasses"]
    assert all(t["columnDefinitions"] is None for t in tables[1:])
    code, bad = _get(server.url + _path("deviceclasses") + "?watch=true&includeObject=Bogus")
    assert code == 400, bad
