"""Selectors whose CEL does not compile are refused at create time, word for word as a real
kube-apiserver 1.36 refuses them (tests/data/apiserver-rejected/cel-compile.json)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from topodra.embedded.apiserver import ApiServer
from topodra.embedded.validation import cel_compile_problem
from topodra.kube.client import DEVICE_CLASSES, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS, KubeClient
from topodra.kube.errors import ApiError

RECORDED = json.loads((Path(__file__).resolve().parents[1] / "data" / "apiserver-rejected" / "cel-compile.json").read_text())
RESOURCES = {"ResourceClaim": RESOURCE_CLAIMS, "ResourceClaimTemplate": RESOURCE_CLAIM_TEMPLATES, "DeviceClass": DEVICE_CLASSES}


def _create(obj: dict[str, Any]) -> ApiError:
    async def main() -> ApiError:
        async with ApiServer() as server:
            client = KubeClient.for_url(server.url)
            try:
                await client.create(RESOURCES[obj["kind"]], obj)
            except ApiError as err:
                return err
            finally:
                await client.close()
        raise AssertionError(f"{obj['kind']} with a selector that does not compile was stored")

    return asyncio.run(main())


@pytest.mark.parametrize("case", RECORDED, ids=[f"{c['object']['kind']}-{i}" for i, c in enumerate(RECORDED)])
def test_refused_as_the_real_api_server_refuses_it(case: dict[str, Any]) -> None:
    err = _create(case["object"])
    real = case["status"]
    assert err.code == real["code"]
    assert err.reason == real["reason"]
    assert [(c.field, c.message) for c in err.causes] == [(c["field"], c["message"]) for c in real["details"]["causes"]]
    assert err.status()["message"] == real["message"]


def test_a_selector_that_compiles_is_stored() -> None:
    assert cel_compile_problem('device.attributes["native.cpu"].coreType == "P-core"') is None


RESULT_TYPES = json.loads((Path(__file__).resolve().parents[1] / "data" / "apiserver-rejected" / "cel-result-type.json").read_text())


@pytest.mark.parametrize(
    "case", RESULT_TYPES["refused"], ids=[f"{c['object']['kind']}-{i}" for i, c in enumerate(RESULT_TYPES["refused"])]
)
def test_a_selector_that_is_not_a_bool_is_refused_as_the_real_server_refuses_it(case: dict[str, Any]) -> None:
    """Also in ``firstAvailable`` subrequests, and for ``device.driver`` (a string) or
    ``device.capacity[...]`` (a Quantity), typed as Kubernetes declares the device's fields."""
    test_refused_as_the_real_api_server_refuses_it(case)


@pytest.mark.parametrize("obj", RESULT_TYPES["accepted"], ids=lambda o: o["kind"])
def test_a_selector_of_unknown_or_bool_type_is_stored(obj: dict[str, Any]) -> None:
    async def main() -> None:
        async with ApiServer() as server:
            client = KubeClient.for_url(server.url)
            try:
                await client.create(RESOURCES[obj["kind"]], obj)
            finally:
                await client.close()

    asyncio.run(main())
