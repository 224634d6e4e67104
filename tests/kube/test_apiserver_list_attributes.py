"""List-typed attributes (``DRAListTypeAttributes``) in the API server double, answer for answer
as a real kube-apiserver 1.36 answered the same slices (tests/data/apiserver-rejected/list-attributes.json):
stored as it stored them, refused with its words."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from topodra.embedded.apiserver import ApiServer
from topodra.kube.client import RESOURCE_SLICES, KubeClient
from topodra.kube.errors import ApiError

RECORDED = json.loads((Path(__file__).resolve().parents[1] / "data" / "apiserver-rejected" / "list-attributes.json").read_text())
GATE_ON = [c for c in RECORDED if c["gates"]["DRAListTypeAttributes"]]


def _create(obj: dict[str, Any]) -> dict[str, Any] | ApiError:
    async def main() -> dict[str, Any] | ApiError:
        async with ApiServer() as server:
            client = KubeClient.for_url(server.url)
            try:
                got: dict[str, Any] = await client.create(RESOURCE_SLICES, obj)
                return got
            except ApiError as err:
                return err
            finally:
                await client.close()

    return asyncio.run(main())


@pytest.mark.parametrize("case", GATE_ON, ids=[c["object"]["metadata"]["name"] for c in GATE_ON])
def test_answered_as_the_real_api_server_with_the_gate_on(case: dict[str, Any]) -> None:
    got = _create(case["object"])
    if "stored" in case:
        assert not isinstance(got, ApiError), got
        assert got["spec"] == case["stored"]["spec"]
        return
    real = case["status"]
    assert isinstance(got, ApiError)
    assert (got.code, got.reason) == (real["code"], real["reason"])
    assert [(c.field, c.reason, c.message) for c in got.causes] == [(c["field"], c["reason"], c["message"]) for c in real["details"]["causes"]]
    assert got.status()["message"] == real["message"]


PROBES = [
    p
    for p in json.loads((Path(__file__).resolve().parents[1] / "data" / "sched-recorded" / "v13-pcie-root" / "rejected.json").read_text())
    if p.get("kind") == "ResourceSlice"
]


@pytest.mark.parametrize("probe", PROBES, ids=[p["name"] for p in PROBES])
def test_the_recorded_probes_of_v13_are_answered_alike(probe: dict[str, Any]) -> None:
    got = _create(probe["object"])
    if probe["accepted"]:
        assert not isinstance(got, ApiError), got
    else:
        assert isinstance(got, ApiError)
        assert (got.code, got.reason, got.status()["message"]) == (probe["code"], probe["reason"], probe["message"])


def test_without_the_gate_the_list_is_dropped_and_the_slice_refused_as_the_real_server_does() -> None:
    from topodra.embedded.store import Store
    from topodra.gates import LIST_TYPE_ATTRIBUTES

    (case,) = [c for c in RECORDED if not c["gates"]["DRAListTypeAttributes"]]

    async def main() -> ApiError:
        async with ApiServer(Store(gates={LIST_TYPE_ATTRIBUTES: False})) as server:
            client = KubeClient.for_url(server.url)
            try:
                await client.create(RESOURCE_SLICES, case["object"])
            except ApiError as err:
                return err
            finally:
                await client.close()
        raise AssertionError("a list-valued slice was stored with the gate off")

    err = asyncio.run(main())
    real = case["status"]
    assert [(c.field, c.reason, c.message) for c in err.causes] == [(c["field"], c["reason"], c["message"]) for c in real["details"]["causes"]]
    assert err.status()["message"] == real["message"]


def test_selectors_are_compiled_with_the_list_gate_as_the_server_has_it() -> None:
    """With DRAListTypeAttributes on, the server's compiler types attributes ``dyn``: a selector
    iterating a list attribute is stored (v13's k-06 was, and failed only at scheduling on a
    scalar device); with the gate off it does not compile (``any`` is no range)."""
    from topodra.embedded.store import KINDS, Store
    from topodra.gates import LIST_TYPE_ATTRIBUTES

    claims = KINDS[("resource.k8s.io", "resourceclaims")]
    expr = 'device.attributes["resource.kubernetes.io"].pcieRoot.exists(r, r == "pci0000:00")'
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "native.cpu", "selectors": [{"cel": {"expression": expr}}]}}]}},
    }
    stored = Store(gates={LIST_TYPE_ATTRIBUTES: True}).create(claims, "default", json.loads(json.dumps(claim)))
    assert stored["spec"] == claim["spec"]
    with pytest.raises(ApiError) as refused:
        Store(gates={LIST_TYPE_ATTRIBUTES: False}).create(claims, "default", json.loads(json.dumps(claim)))
    assert "cannot be the range of a comprehension" in refused.value.status()["message"]
