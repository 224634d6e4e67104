"""Slices on the wire: the joined encoding is the plain JSON encoding, and an answer is read as
stored-as-sent exactly when its decoded spec and owner equal what was sent."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from topodra.cpuset import CPUSet
from topodra.dra.devices import DeviceModelConfig, build_devices, offer_devices
from topodra.dra.slices import build_slices, chunk_devices, encode_slice, event_head, read_answer
from topodra.embedded.apiserver import ApiServer
from topodra.kube.client import RESOURCE_SLICES, KubeClient
from topodra.topology import synthetic_topology

TOPO = synthetic_topology("2s1d2n2l8c2t")  # 128 CPUs
MODELS = {m: DeviceModelConfig(model=m) for m in ("cpu", "core", "grouped")}
ALL = {m: build_devices(TOPO, c) for m, c in MODELS.items()}


def _read(answer: str, sent: dict[str, Any], devices: Any, step: int = 7) -> dict[str, Any] | None:
    steps = read_answer(answer, sent, devices, step=step)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            result: dict[str, Any] | None = done.value
            return result


offers = st.tuples(
    st.sampled_from(sorted(MODELS)),
    st.sets(st.integers(0, len(TOPO.online) - 1)),
    st.integers(1, 1_000_000),
    st.one_of(st.none(), st.text("abcdef0123456789-", min_size=1, max_size=36)),
    st.sampled_from(["node-a", "n", "a-very.long-node.name" * 5]),
)


def _slices(offer: tuple[str, set[int], int, str | None, str]) -> list[tuple[dict[str, Any], list[Any]]]:
    model, held, generation, uid, node = offer
    devices = offer_devices(TOPO, MODELS[model], ALL[model], TOPO.online - CPUSet(held))
    chunks = chunk_devices(devices)
    slices = build_slices(node, devices, generation=generation, node_uid=uid, chunks=chunks)
    return list(zip(slices, chunks, strict=True))


@settings(max_examples=60, deadline=None)
@given(offers, st.integers(0, 10**12))
def test_the_joined_encoding_is_the_plain_json_encoding(offer: Any, rv: int) -> None:
    for obj, chunk in _slices(offer):
        body = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(rv)}}  # as a replace sends it
        for o in (obj, body):
            wire = encode_slice(o, chunk)
            assert wire == json.dumps(o, separators=(",", ":")).encode()
            assert json.loads(wire) == o


@settings(max_examples=40, deadline=None)
@given(offers, st.data())
def test_an_answer_is_as_sent_exactly_when_it_decodes_equal(offer: Any, data: st.DataObject) -> None:
    for obj, chunk in _slices(offer):
        stored = copy.deepcopy(obj)
        stored["metadata"].update(uid="u-1", resourceVersion="42", creationTimestamp="2026-01-01T00:00:00Z")
        for text in (json.dumps(stored), json.dumps(stored, separators=(",", ":")), json.dumps(stored, indent=1, sort_keys=True)):
            assert _read(text, obj, chunk) == stored["metadata"]
        # The server changes one thing: the answer is not as sent.
        changed = copy.deepcopy(stored)
        devices = changed["spec"]["devices"]
        what = data.draw(st.sampled_from(["drop-field", "drop-device", "add-device", "pool", "owner", "extra-key", "no-spec"]))
        if what == "drop-field" and devices:
            d = devices[data.draw(st.integers(0, len(devices) - 1))]
            d.pop(data.draw(st.sampled_from(sorted(d))))
        elif what == "drop-device" and devices:
            devices.pop(data.draw(st.integers(0, len(devices) - 1)))
        elif what == "add-device":
            devices.append({"name": "extra"})
        elif what == "pool":
            changed["spec"]["pool"]["generation"] += 1
        elif what == "owner":
            changed["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": "x", "uid": "y"}]
        elif what == "extra-key":
            changed["spec"]["allNodes"] = False
        else:
            del changed["spec"]
        if changed == stored:
            continue  # nothing to change (no devices to drop)
        for text in (json.dumps(changed), json.dumps(changed, separators=(",", ":"))):
            assert _read(text, obj, chunk) is None


def test_an_empty_list_or_map_left_out_by_the_server_is_as_sent() -> None:
    """The server stores no ``devices`` for a slice offering none (omitempty): the same slice.
    A member with content left out still differs."""
    (obj, chunk), *_ = _slices(("cpu", set(range(len(TOPO.online))), 3, "uid-1", "node-a"))
    assert obj["spec"]["devices"] == []
    stored = copy.deepcopy(obj)
    stored["metadata"].update(uid="u-1", resourceVersion="42")
    del stored["spec"]["devices"]
    for text in (json.dumps(stored), json.dumps(stored, separators=(",", ":"))):
        assert _read(text, obj, chunk) == stored["metadata"]
    (full, full_chunk), *_ = _slices(("cpu", set(), 3, "uid-1", "node-a"))
    assert _read(json.dumps({**full, "spec": {**full["spec"], "devices": []}}), full, full_chunk) is None
    assert _read(json.dumps({**full, "spec": {k: v for k, v in full["spec"].items() if k != "devices"}}), full,
                 full_chunk) is None
    # deeper: a device sent with an empty map, stored without it (decoded: not the bytes sent)
    sent = {**full, "spec": {**full["spec"], "devices": [{**full_chunk[0].to_api(), "capacity": {}}]}}
    answer = {**full, "spec": {**full["spec"], "devices": [full_chunk[0].to_api()]}}
    assert _read(json.dumps(answer, indent=1, sort_keys=True), sent, full_chunk[:1]) == full["metadata"]


def test_garbage_answers_are_not_as_sent() -> None:
    (obj, chunk), *_ = _slices(("cpu", set(), 1, None, "node-a"))
    for text in ("", "[]", "{", '{"spec": 1}', '{"metadata": {}, "spec": {"devices": [}}', "null"):
        assert _read(text, obj, chunk) is None


def test_the_api_server_double_stores_the_joined_encoding() -> None:
    async def main() -> None:
        async with ApiServer() as server, KubeClient.for_url(server.url) as client:
            for obj, chunk in _slices(("grouped", {3, 4, 5}, 7, "uid-1", "node-a")) + _slices(("cpu", {0}, 2, None, "node-b")):
                answer = await client.create_encoded(RESOURCE_SLICES, encode_slice(obj, chunk))
                metadata = _read(answer, obj, chunk)
                assert metadata is not None
                assert metadata["name"] == obj["metadata"]["name"]
                got = await client.get(RESOURCE_SLICES, obj["metadata"]["name"])
                assert got["spec"] == obj["spec"]
                body = {**obj, "metadata": {**obj["metadata"], "resourceVersion": metadata["resourceVersion"]}}
                again = await client.replace_encoded(RESOURCE_SLICES, obj["metadata"]["name"], encode_slice(body, chunk))
                assert _read(again, obj, chunk) is not None

    asyncio.run(main())


def test_an_event_head_is_its_type_and_metadata() -> None:
    (obj, _), *_ = _slices(("cpu", set(), 1, "uid-1", "node-a"))
    obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": "7"}}
    for line in (json.dumps({"type": "MODIFIED", "object": obj}), json.dumps({"type": "ADDED", "object": obj}, separators=(",", ":"))):
        head = event_head(line)
        assert head is not None
        assert head[1] == obj["metadata"]
        assert head[0] == json.loads(line)["type"]
    # Not in the expected order, or not an event: decode it whole.
    assert event_head(json.dumps({"object": obj, "type": "MODIFIED"})) is None
    assert event_head(json.dumps({"type": "MODIFIED", "object": {"spec": obj["spec"], "metadata": obj["metadata"]}})) is None
    assert event_head("not json") is None
