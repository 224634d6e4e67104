"""List-typed attributes (``DRAListTypeAttributes``) in the API server double, against what a real
kube-apiserver 1.36 did with the same slice (tests/data/apiserver-rejected/list-attributes.json)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from topodra.embedded.apiserver import ApiServer
from topodra.kube.client import RESOURCE_SLICES, KubeClient

RECORDED = json.loads((Path(__file__).resolve().parents[1] / "data" / "apiserver-rejected" / "list-attributes.json").read_text())


def _stored(obj: dict[str, Any]) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        async with ApiServer() as server:
            client = KubeClient.for_url(server.url)
            try:
                got: dict[str, Any] = await client.create(RESOURCE_SLICES, obj)
                return got
            finally:
                await client.close()

    return asyncio.run(main())


def test_a_slice_with_list_attributes_is_stored_as_the_real_server_stores_it_with_the_gate_on() -> None:
    (case,) = [c for c in RECORDED if c["gates"]["DRAListTypeAttributes"]]
    assert _stored(case["object"])["spec"] == case["stored"]["spec"]
