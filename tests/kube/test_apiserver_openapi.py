"""The API server double serves the OpenAPI v3 documents kubectl 1.36 reads before ``kubectl
apply`` (so it works without ``--validate=false``), decodes objects as the real server does
(unknown fields refused with ``fieldValidation=Strict``, dropped with a warning otherwise, in the
real server's words: tests/data/apiserver-rejected/strict-fields.json), and takes the strategic
merge patches kubectl's client-side apply sends."""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from topodra.embedded.apiserver import ApiServerThread
from topodra.embedded.openapi import group_version_path, unknown_fields
from topodra.embedded.store import KINDS

DATA = Path(__file__).resolve().parents[1] / "data" / "apiserver-rejected"
STRICT = json.loads((DATA / "strict-fields.json").read_text())
_PLURALS = {k.kind: k for k in KINDS.values()}


@pytest.fixture(scope="module")
def server() -> Iterator[ApiServerThread]:
    with ApiServerThread() as srv:
        yield srv


def _request(url: str, method: str = "GET", body: Any = None, ctype: str = "application/json") -> tuple[int, list[str], Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.headers.get_all("Warning") or [], json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, err.headers.get_all("Warning") or [], json.loads(err.read())


def _collection(server: ApiServerThread, obj: dict[str, Any]) -> str:
    kind = _PLURALS[obj["kind"]]
    ns = f"/namespaces/{obj['metadata'].get('namespace', 'default')}" if kind.namespaced else ""
    return f"{server.url}/{group_version_path(kind.group, kind.version)}{ns}/{kind.plural}"


def _group_versions() -> list[tuple[str, str]]:
    return sorted({(k.group, k.version) for k in KINDS.values()})


def test_the_root_lists_each_group_version_under_its_hash(server: ApiServerThread) -> None:
    code, _, root = _request(f"{server.url}/openapi/v3")
    assert code == 200
    assert sorted(root["paths"]) == sorted(group_version_path(g, v) for g, v in _group_versions())
    for key, entry in root["paths"].items():
        url = entry["serverRelativeURL"]
        assert url.startswith(f"/openapi/v3/{key}?hash=")
        with urllib.request.urlopen(server.url + url, timeout=10) as resp:
            body = resp.read()
        assert url.endswith(hashlib.sha512(body).hexdigest().upper())  # the hash is the document's
        assert json.loads(body)["openapi"].startswith("3.")


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


@pytest.mark.parametrize("kind", list(KINDS.values()), ids=lambda k: k.kind)
def test_each_kind_has_what_kubectl_apply_looks_for(server: ApiServerThread, kind: Any) -> None:
    """kubectl's QueryParamVerifierV3 (fieldValidation on the kind's PATCH), its apply patcher
    (strategic-merge-patch in the PATCH body types) and ``kubectl explain`` (a schema carrying
    the kind's group-version-kind)."""
    code, _, doc = _request(f"{server.url}/openapi/v3/{group_version_path(kind.group, kind.version)}")
    assert code == 200
    gvk = {"group": kind.group, "version": kind.version, "kind": kind.kind}
    patches = [p["patch"] for p in doc["paths"].values() if "patch" in p and p["patch"]["x-kubernetes-group-version-kind"] == gvk]
    assert patches, f"no PATCH operation for {kind.kind}"
    for op in patches:
        assert any(p["name"] == "fieldValidation" and p["in"] == "query" for p in op["parameters"])
        assert "application/strategic-merge-patch+json" in op["requestBody"]["content"]
    schemas = doc["components"]["schemas"]
    assert any(gvk in s.get("x-kubernetes-group-version-kind", []) for s in schemas.values())
    prefix = "#/components/schemas/"
    assert all(ref.startswith(prefix) and ref.removeprefix(prefix) in schemas for ref in _refs(doc))
    assert all(p.startswith(f"/{group_version_path(kind.group, kind.version)}/") for p in doc["paths"])


@pytest.mark.parametrize("case", STRICT, ids=[f"{c['object']['kind']}-{i}" for i, c in enumerate(STRICT)])
def test_unknown_fields_as_the_real_server_decodes_them(server: ApiServerThread, case: dict[str, Any]) -> None:
    obj = case["object"]
    url = _collection(server, obj)
    for validation in ("Strict", "Warn", "Ignore"):
        real = case[validation]
        code, warnings, body = _request(f"{url}?dryRun=All&fieldValidation={validation}", "POST", obj)
        assert code == real["code"], (validation, body)
        assert warnings == real["warnings"], validation
        if code >= 400:
            assert (body["reason"], body["message"]) == (real["body"]["reason"], real["body"]["message"])
        else:
            assert unknown_fields(_PLURALS[obj["kind"]], body) == []
            _assert_within(body.get("spec"), real["body"].get("spec"))  # the real one adds defaults


def _assert_within(ours: Any, theirs: Any) -> None:
    if isinstance(ours, dict):
        assert isinstance(theirs, dict)
        for key, value in ours.items():
            assert key in theirs, key
            _assert_within(value, theirs[key])
    elif isinstance(ours, list):
        assert isinstance(theirs, list)
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs, strict=True):
            _assert_within(a, b)
    else:
        assert ours == theirs


def test_an_unknown_field_validation_directive_is_refused(server: ApiServerThread) -> None:
    obj = STRICT[0]["object"]
    code, _, body = _request(f"{_collection(server, obj)}?dryRun=All&fieldValidation=Loose", "POST", obj)
    assert code == 400
    assert "fieldValidation" in body["message"]


def test_kubectl_re_apply_of_a_pod_merges_by_the_containers_name(server: ApiServerThread) -> None:
    """The strategic merge patch kubectl 1.32 sent for a changed env value (recorded with -v=8)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "smp", "namespace": "default", "finalizers": ["a/one"]},
        "spec": {
            "containers": [
                {"name": "c", "image": "busybox", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "x"}]},
                {"name": "d", "image": "busybox"},
            ]
        },
    }
    url = _collection(server, pod)
    assert _request(url, "POST", pod)[0] == 201
    patch = {
        "metadata": {"finalizers": ["b/two"]},
        "spec": {
            "$setElementOrder/containers": [{"name": "d"}, {"name": "c"}],
            "containers": [
                {"$setElementOrder/env": [{"name": "A"}], "env": [{"name": "A", "value": "2"}, {"$patch": "delete", "name": "B"}], "name": "c"}
            ],
        },
    }
    code, warnings, body = _request(
        f"{url}/smp?fieldValidation=Strict", "PATCH", patch, "application/strategic-merge-patch+json"
    )
    assert (code, warnings) == (200, []), body
    assert [c["name"] for c in body["spec"]["containers"]] == ["d", "c"]
    assert body["spec"]["containers"][1]["env"] == [{"name": "A", "value": "2"}]
    assert body["metadata"]["finalizers"] == ["a/one", "b/two"]  # a set: merged, not replaced
    code, _, body = _request(f"{url}/smp", "PATCH", {"spec": {"containers": [{"image": "x"}]}}, "application/strategic-merge-patch+json")
    assert code == 400
    assert "does not contain declared merge key: name" in body["message"]
