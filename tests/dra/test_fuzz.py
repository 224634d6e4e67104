"""Decoders and validators fed arbitrary input: a clear error or a value, never a crash."""

from __future__ import annotations

import asyncio
import contextlib
import json
from fractions import Fraction
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from topodra.cpuset import CPUSet
from topodra.dra.attributes import AttributeValidationError, attribute_from_api
from topodra.dra.cdi import ClaimEnvError, parse_claim_env
from topodra.dra.checkpoint import (
    CheckpointError,
    PreparedClaim,
    PreparedDevice,
    dump_checkpoint,
    parse_checkpoint,
)
from topodra.dra.claims import ClaimError, ClaimRef, allocated_devices, parse_quantity
from topodra.embedded.apiserver import ApiServer
from topodra.embedded.validation import VALIDATORS
from topodra.kube.errors import FieldError

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=5),
    max_leaves=30,
)

KEYS = st.sampled_from(
    ["metadata", "spec", "status", "name", "namespace", "driver", "pool", "generation", "resourceSliceCount",
     "nodeName", "devices", "attributes", "capacity", "value", "requestPolicy", "taints", "requests",
     "exactly", "deviceClassName", "selectors", "cel", "expression", "allocation", "results", "reservedFor",
     "uid", "device", "request", "consumedCapacity", "int", "string", "ints", "allNodes", "containers", "labels"]
)
SHAPED = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 300) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=6),
    max_leaves=40,
)

CLAIMS = {
    "u1": PreparedClaim(
        "u1", "default", "c1", CPUSet([4, 5]),
        (PreparedDevice("cpu", "node-a", "cpu4", CPUSet([4])), PreparedDevice("cpu", "node-a", "cpu5", CPUSet([5]))),
        ("pod-1",),
    ),
    "u2": PreparedClaim("u2", "ns", "c2", CPUSet([9]), (PreparedDevice("r", "node-a", "numa0", CPUSet([9]), "s1"),)),
}
GOOD = dump_checkpoint(CLAIMS)


@given(st.binary(max_size=300))
def test_checkpoint_arbitrary_bytes(data: bytes) -> None:
    with contextlib.suppress(CheckpointError):
        parse_checkpoint(data)


@given(st.integers(0, len(GOOD) - 1), st.integers(0, 255))
def test_checkpoint_single_byte_corruption(pos: int, value: int) -> None:
    data = bytearray(GOOD)
    data[pos] = value
    try:
        got = parse_checkpoint(bytes(data))
    except CheckpointError:
        return
    assert got == CLAIMS  # only a change outside the checksummed content (whitespace) can pass


@given(JSON)
def test_checkpoint_arbitrary_json(doc: Any) -> None:
    with contextlib.suppress(CheckpointError):
        parse_checkpoint(json.dumps(doc).encode())


@given(st.lists(st.text(max_size=30) | st.builds(lambda s: "DRA_CPUSET_" + s, st.text(max_size=30)), max_size=6))
def test_claim_env(env: list[str]) -> None:
    try:
        out = parse_claim_env(env)
    except ClaimEnvError:
        return
    assert all(out.values())


@given(JSON)
def test_attribute_values(raw: Any) -> None:
    with contextlib.suppress(AttributeValidationError):
        attribute_from_api(raw, name="a")


@given(st.text(max_size=20))
def test_quantities(text: str) -> None:
    try:
        value = parse_quantity(text)
    except ValueError:
        return
    assert isinstance(value, Fraction)


@given(SHAPED)
def test_claim_parser(claim: Any) -> None:
    if not isinstance(claim, dict):
        claim = {"status": claim}
    claim.setdefault("metadata", {"uid": "u1"})
    with contextlib.suppress(ClaimError):
        allocated_devices(claim, ClaimRef("ns", "u1", "c"), pool="node-a")


@settings(max_examples=200)
@given(st.sampled_from(sorted(VALIDATORS)), SHAPED, SHAPED)
@example("resourceclaims", {"metadata": None, "status": {"allocation": []}}, None)  # found by this test
def test_validators_never_crash(kind: str, obj: Any, old: Any) -> None:
    if not isinstance(obj, dict):
        obj = {"spec": obj}
    errors = VALIDATORS[kind](obj, old if isinstance(old, dict) else None)
    assert all(isinstance(e, FieldError) for e in errors)


@settings(max_examples=25)
@given(st.binary(min_size=1, max_size=200))
def test_http_garbage_does_not_hurt_the_server(garbage: bytes) -> None:
    async def main() -> None:
        async with ApiServer() as server:
            host, port = server.url.removeprefix("http://").split(":")
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(garbage + b"\r\n\r\n")
            await writer.drain()
            with contextlib.suppress(TimeoutError, ConnectionError):
                await asyncio.wait_for(reader.read(1000), 2)
            writer.close()
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(b"GET /api/v1/nodes HTTP/1.1\r\nHost: x\r\n\r\n")
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert head.startswith(b"HTTP/1.1 200")
            writer.close()

    asyncio.run(main())
