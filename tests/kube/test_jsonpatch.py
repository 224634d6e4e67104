"""JSON patch (``kubectl patch --type json``) as kube-apiserver 1.36 applies it: RFC 6902 with the
rules of the library it uses (gopkg.in/evanphx/json-patch.v4), and the server's answers."""

from __future__ import annotations

from typing import Any

import pytest

from topodra.embedded.jsonpatch import JsonPatchError, apply_patch, decode_patch
from topodra.embedded.store import KINDS, Store
from topodra.kube.errors import ApiError

DOC: dict[str, Any] = {"metadata": {"name": "p", "labels": {"a": "1", "x/y": "2"}}, "spec": {"list": [1, 2, 3], "flag": True}}


def patched(*ops: dict[str, Any]) -> Any:
    return apply_patch(DOC, list(ops))


def test_the_rfc_operations() -> None:
    assert patched({"op": "add", "path": "/metadata/labels/b", "value": "3"})["metadata"]["labels"] == {"a": "1", "x/y": "2", "b": "3"}
    assert patched({"op": "add", "path": "/spec/list/1", "value": 9})["spec"]["list"] == [1, 9, 2, 3]
    assert patched({"op": "add", "path": "/spec/list/-", "value": 9})["spec"]["list"] == [1, 2, 3, 9]
    assert patched({"op": "remove", "path": "/metadata/labels/x~1y"})["metadata"]["labels"] == {"a": "1"}
    assert patched({"op": "replace", "path": "/spec/list/0", "value": 0})["spec"]["list"] == [0, 2, 3]
    moved = patched({"op": "move", "from": "/metadata/labels/a", "path": "/spec/a"})
    assert (moved["metadata"]["labels"], moved["spec"]["a"]) == ({"x/y": "2"}, "1")
    assert patched({"op": "copy", "from": "/spec/list", "path": "/spec/copy"})["spec"]["copy"] == [1, 2, 3]
    assert patched({"op": "test", "path": "/spec/list", "value": [1.0, 2, 3]}) == DOC
    assert DOC["spec"]["list"] == [1, 2, 3]  # the document itself is not changed


def test_the_librarys_own_rules() -> None:
    assert patched({"op": "remove", "path": "/spec/list/-1"})["spec"]["list"] == [1, 2]  # negative: from the end
    assert patched({"op": "replace", "path": "/spec/new", "value": 1})["spec"]["new"] == 1  # a missing member is added
    assert patched({"op": "test", "path": "/spec/missing"}) == DOC  # no value: a missing member passes
    with pytest.raises(JsonPatchError, match="test failed"):
        patched({"op": "test", "path": "/spec/flag", "value": 1})  # a bool is not a number
    with pytest.raises(JsonPatchError, match="doc is missing key"):
        patched({"op": "replace", "path": "/spec/list/3", "value": 1})
    with pytest.raises(JsonPatchError, match="doc is missing path"):
        patched({"op": "add", "path": "/spec/none/x", "value": 1})
    with pytest.raises(JsonPatchError, match="Unable to remove nonexistent key: zz"):
        patched({"op": "remove", "path": "/spec/zz"})
    with pytest.raises(JsonPatchError, match="Unexpected kind: merge"):
        patched({"op": "merge", "path": "/spec"})
    with pytest.raises(JsonPatchError, match="missing value"):
        patched({"op": "add", "value": 1})


def test_a_body_that_is_no_patch_is_refused_in_gos_words() -> None:
    with pytest.raises(ValueError, match=r"^json: cannot unmarshal object into Go value of type jsonpatch\.Patch$"):
        decode_patch({"op": "add"})
    with pytest.raises(ValueError, match=r"^json: cannot unmarshal number into Go value of type jsonpatch\.Operation$"):
        decode_patch([1])
    assert decode_patch(None) == []


def test_the_server_applies_it_and_answers_as_kube_apiserver() -> None:
    store = Store()
    classes = KINDS[("resource.k8s.io", "deviceclasses")]
    store.create(classes, None, {"metadata": {"name": "c", "labels": {"a": "1"}}, "spec": {}})
    out = store.patch(classes, None, "c", [{"op": "add", "path": "/metadata/labels/b", "value": "2"}], content_type="application/json-patch+json")
    assert out["metadata"]["labels"] == {"a": "1", "b": "2"}
    with pytest.raises(ApiError) as failed:
        store.patch(classes, None, "c", [{"op": "test", "path": "/metadata/labels/a", "value": "9"}], content_type="application/json-patch+json")
    assert (failed.value.code, failed.value.reason, failed.value.message) == (
        422,
        "Invalid",
        "the server rejected our request due to an error in our request",
    )
    with pytest.raises(ApiError) as bad:
        store.patch(classes, None, "c", {"op": "add"}, content_type="application/json-patch+json")
    assert (bad.value.code, bad.value.message) == (400, "json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    with pytest.raises(ApiError) as big:
        store.patch(classes, None, "c", [{"op": "test", "path": "/kind"}] * 10_001, content_type="application/json-patch+json")
    assert (big.value.code, big.value.reason) == (413, "RequestEntityTooLarge")
    assert store.get(classes, None, "c")["metadata"]["labels"] == {"a": "1", "b": "2"}


def test_over_http_a_patch_body_is_no_object_of_the_kind() -> None:
    """The operations are not decoded as a DeviceClass: no unknown-field warning for "op"."""
    import json
    import urllib.error
    import urllib.request

    from topodra.embedded.apiserver import ApiServerThread

    with ApiServerThread() as srv:
        srv.call(lambda: srv.store.create(KINDS[("resource.k8s.io", "deviceclasses")], None, {"metadata": {"name": "c"}}))
        url = srv.url + "/apis/resource.k8s.io/v1/deviceclasses/c"
        req = urllib.request.Request(url, data=b'{"op": "add"}', method="PATCH", headers={"Content-Type": "application/json-patch+json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=10)
        assert refused.value.code == 400
        assert refused.value.headers.get("Warning") is None
        ops = [{"op": "add", "path": "/metadata/labels", "value": {"k": "v"}}]
        req = urllib.request.Request(url, data=json.dumps(ops).encode(), method="PATCH", headers={"Content-Type": "application/json-patch+json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert json.loads(resp.read())["metadata"]["labels"] == {"k": "v"}
