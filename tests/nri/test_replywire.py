"""The direct reply writer against upb, the reference: the same bytes, the same refusals."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topodra.cpuset import CPUSet
from topodra.nri import convert, replywire
from topodra.nri.errors import EmptyCPUSetError
from topodra.nri.plugin import Plugin
from topodra.nri.proto import api_pb2
from topodra.nri.stub import Stub
from topodra.nri.ttrpc import Code
from topodra.nri.types import (
    Container,
    ContainerAdjustment,
    ContainerState,
    ContainerUpdate,
    CreateContainerResult,
    LinuxResources,
    PlacementUpdates,
    Pod,
    placement_adjustment,
    placement_update,
)

INT64 = st.integers(-(2**63), 2**63 - 1) | st.sampled_from([0, -1, 1, 127, 128, -(2**63), 2**63 - 1])
UINT64 = st.integers(0, 2**64 - 1) | st.sampled_from([0, 1, 127, 128, 2**63, 2**64 - 1])
#: ids and env strings: any unicode, surrogates included (both encoders must refuse those alike)
text = st.text(max_size=10) | st.text(st.characters(codec="utf-8"), min_size=100, max_size=300)
cpusets = st.frozensets(st.integers(0, 1023), min_size=1, max_size=40).map(CPUSet)
#: a few sets repeated between updates, as a pool's followers share their new sets
shared = st.lists(cpusets, min_size=1, max_size=3)


def _outcome(encode: Callable[[], bytes]) -> tuple[str, str] | bytes:
    try:
        return encode()
    except Exception as exc:  # the refusal itself is compared
        return type(exc).__name__, str(exc)


def _reference_updates(updates: Sequence[ContainerUpdate]) -> bytes:
    pb = api_pb2.UpdateContainersRequest()
    for u in updates:
        convert.update_to_proto(u, pb.update.add())
    return pb.SerializeToString()


def _reference_create(adj: ContainerAdjustment | None, updates: Sequence[ContainerUpdate]) -> bytes:
    pb = api_pb2.CreateContainerResponse()
    if adj is not None:
        convert.adjustment_to_proto(adj, pb.adjust)
    convert.updates_to_proto(updates, pb.update)
    return pb.SerializeToString()


def _create(adj: ContainerAdjustment | None, updates: Sequence[ContainerUpdate]) -> bytes:
    return replywire.create_container_response(replywire.adjustment_bytes(adj) if adj is not None else None, updates)


@st.composite
def update_lists(draw: st.DrawFn) -> list[ContainerUpdate]:
    scalars = st.none() | INT64
    pool = draw(shared)
    pick = st.none() | st.sampled_from(pool) | cpusets
    out: list[ContainerUpdate] = []
    for _ in range(draw(st.integers(0, 12))):
        cid = draw(text.filter(bool))
        if draw(st.booleans()):  # the agent's own: shared sets, nothing else set
            out.append(placement_update(cid, draw(st.sampled_from(pool)), draw(st.none() | st.sampled_from(pool))))
            continue
        uint = st.none() | UINT64
        out.append(
            ContainerUpdate(
                cid,
                cpus=draw(pick),
                mems=draw(pick),
                cpu_shares=draw(uint),
                cpu_quota=draw(scalars),
                cpu_period=draw(uint),
                memory_limit=draw(scalars),
                ignore_failure=draw(st.booleans()),
            )
        )
    return out


adjustments = st.builds(
    ContainerAdjustment,
    cpus=st.none() | cpusets,
    mems=st.none() | cpusets,
    cpu_shares=st.none() | UINT64,
    cpu_quota=st.none() | INT64,
    cpu_period=st.none() | UINT64,
    memory_limit=st.none() | INT64,
    annotations=st.just({}) | st.dictionaries(text, text, max_size=3),
    env=st.dictionaries(text, text, max_size=3),
)


@given(update_lists())
def test_update_lists_are_the_bytes_upb_writes(updates: list[ContainerUpdate]) -> None:
    expected = _outcome(lambda: _reference_updates(updates))
    assert _outcome(lambda: replywire.updates_message(updates)) == expected

    def shared_copies() -> bytes:
        batch = api_pb2.UpdateContainersRequest()
        convert.updates_to_proto(updates, batch.update)
        return batch.SerializeToString()

    assert _outcome(shared_copies) == expected
    if isinstance(expected, bytes):  # and they read back as the updates sent
        decoded = convert.updates_from_proto(api_pb2.StopContainerResponse.FromString(expected).update)
        assert decoded == updates


@given(st.none() | adjustments, update_lists())
def test_create_replies_are_the_bytes_upb_writes(adj: ContainerAdjustment | None, updates: list[ContainerUpdate]) -> None:
    assert _outcome(lambda: _create(adj, updates)) == _outcome(lambda: _reference_create(adj, updates))


@given(
    st.sampled_from(["cpu_shares", "cpu_quota", "cpu_period", "memory_limit"]),
    st.integers(2**63 - 2, 2**64 + 2) | st.integers(-(2**70), 2**70) | st.booleans(),
    st.booleans(),
)
def test_values_upb_refuses_are_refused_alike(name: str, value: int, in_adjustment: bool) -> None:
    """Near and past the ends of int64/uint64, or a bool for an int: what upb refuses is refused
    with its error, and what it takes is written as it writes it."""
    field: dict[str, Any] = {name: value}
    if in_adjustment:
        adj = replace(ContainerAdjustment(cpus=CPUSet({1})), **field)
        got, want = _outcome(lambda: _create(adj, ())), _outcome(lambda: _reference_create(adj, ()))
    else:
        updates = [ContainerUpdate("a", cpus=CPUSet({1})), replace(ContainerUpdate("b", cpus=CPUSet({1})), **field)]
        got, want = _outcome(lambda: replywire.updates_message(updates)), _outcome(lambda: _reference_updates(updates))
    assert got == want
    signed = name in ("cpu_quota", "memory_limit")
    in_range = -(2**63) <= value < 2**63 if signed else 0 <= value < 2**64
    assert isinstance(got, bytes) == (in_range and not isinstance(value, bool))


def test_empty_sets_are_never_written() -> None:
    """An empty set slipped past the dataclass checks is still refused, in every position."""
    ok = CPUSet({2})
    update = ContainerUpdate("c1", cpus=ok)
    object.__setattr__(update, "cpus", CPUSet())
    mems = ContainerUpdate("c2", cpus=ok, mems=ok)
    object.__setattr__(mems, "mems", CPUSet())
    plain = placement_update("c0", ok, None)
    for batch in ([update], [plain, update], [plain, mems], [mems]):
        with pytest.raises(EmptyCPUSetError, match="refusing to encode an empty set"):
            replywire.updates_message(batch)
    adj = ContainerAdjustment(cpus=ok, mems=ok)
    for name in ("cpus", "mems"):
        sneaky = ContainerAdjustment(cpus=ok, mems=ok)
        object.__setattr__(sneaky, name, CPUSet())
        with pytest.raises(EmptyCPUSetError, match=rf"ContainerAdjustment\.{name}: refusing to encode an empty set"):
            replywire.adjustment_bytes(sneaky)
    assert replywire.adjustment_bytes(adj) == _reference_create(adj, ())[2:]


def test_lone_surrogates_are_refused_as_upb_refuses_them() -> None:
    ok = CPUSet({2})
    for updates in ([ContainerUpdate("\ud800", cpus=ok)], [placement_update("a", ok, None), placement_update("\udfff", ok, None)]):
        got = _outcome(lambda batch=updates: replywire.updates_message(batch))  # type: ignore[misc]
        assert got == _outcome(lambda batch=updates: _reference_updates(batch))  # type: ignore[misc]
        assert got[0] == "UnicodeEncodeError"
    adj = ContainerAdjustment(cpus=ok, env={"K": "\ud800"})
    assert _outcome(lambda: _create(adj, ())) == _outcome(lambda: _reference_create(adj, ()))


def test_placement_updates_equal_checked_ones_and_keep_the_id_check() -> None:
    cpus, mems = CPUSet.parse("0-3"), CPUSet({0})
    fast = placement_update("c1", cpus, mems)
    assert fast == ContainerUpdate("c1", cpus=cpus, mems=mems)
    assert hash(fast) == hash(ContainerUpdate("c1", cpus=cpus, mems=mems))
    assert repr(placement_update("c2", cpus, None)) == repr(ContainerUpdate("c2", cpus=cpus))
    with pytest.raises(ValueError, match="container_id must not be empty"):
        placement_update("", cpus, None)


def test_a_long_run_of_followers_matches_upb() -> None:
    """Twenty-four followers moved to one new set, with ids long enough to need 2-byte lengths."""
    cpus, mems = CPUSet.parse("52-63,180-191"), CPUSet({1})
    updates = [placement_update(f"c{i}" + "x" * (i * 7), cpus, mems) for i in range(24)]
    assert replywire.updates_message(updates) == _reference_updates(updates)
    adj = replywire.adjustment_bytes(ContainerAdjustment(cpus=CPUSet({4, 5}), mems=mems))
    assert replywire.create_container_response(adj, updates) == _reference_create(
        ContainerAdjustment(cpus=CPUSet({4, 5}), mems=mems), updates
    )
    assert replywire.create_container_response(None, ()) == b""


def test_set_fields_memo_is_bounded_and_stays_exact() -> None:
    """Many distinct sets: the memo of formatted lists stays bounded, every reply exact."""
    for i in range(1, 2 * replywire._SET_FIELDS_MAX, 7):
        cpus = CPUSet.from_mask(i)
        updates = [placement_update("a", cpus, CPUSet({i % 4})), ContainerUpdate("b", cpus=CPUSet.from_mask(i + 1))]
        assert replywire.updates_message(updates) == _reference_updates(updates)
        assert len(replywire._SET_FIELDS) <= replywire._SET_FIELDS_MAX


def test_unknown_container_states_decode_as_unknown() -> None:
    pb = api_pb2.Container(id="c", pod_sandbox_id="p")
    pb.state = 7  # type: ignore[assignment]  # a state from a newer runtime
    assert convert.container_from_proto(api_pb2.Container.FromString(pb.SerializeToString())).state is ContainerState.UNKNOWN
    pb.state = api_pb2.CONTAINER_RUNNING
    assert convert.container_from_proto(pb).state is ContainerState.RUNNING


def test_the_stub_answers_with_the_reference_bytes_and_refuses_empty_sets() -> None:
    """Through ``Stub.handle``: the replies the stub now writes directly are the reference's
    bytes, an empty set the plugin slipped past the dataclass checks is refused with UNKNOWN, and
    an update of the container being created still fails the creation."""
    cpus, mems = CPUSet.parse("0-3,8"), CPUSet({1})
    adj = ContainerAdjustment(cpus=CPUSet({5}), mems=mems, memory_limit=0, annotations={"a": "1", "b": "2"}, env={"K": "v"})
    updates = [placement_update("x1", cpus, mems), placement_update("x2", cpus, mems), ContainerUpdate("é", cpus=cpus)]
    sneaky = ContainerUpdate("x3", cpus=cpus)
    object.__setattr__(sneaky, "cpus", CPUSet())
    answer: dict[str, Any] = {}

    class Answers(Plugin):
        async def create_container(self, pod: Pod, container: Container) -> CreateContainerResult:
            return CreateContainerResult(adjust=answer.get("adjust"), updates=tuple(answer["updates"]))

        async def update_container(self, pod: Pod, container: Container, resources: LinuxResources | None) -> list[ContainerUpdate]:
            return list(answer["updates"])

        async def stop_container(self, pod: Pod, container: Container) -> list[ContainerUpdate]:
            return list(answer["updates"])

    request = api_pb2.CreateContainerRequest()
    request.pod.id, request.container.id, request.container.pod_sandbox_id = "p", "c", "p"
    payload = request.SerializeToString()

    async def main() -> None:
        stub = Stub(Answers(), name="t", idx="42", env={})
        answer.update(adjust=adj, updates=updates)
        assert await stub.handle("CreateContainer", payload) == (_reference_create(adj, updates), None)
        answer.update(adjust=None, updates=[])
        assert await stub.handle("CreateContainer", payload) == (b"", None)
        answer.update(updates=updates)
        for method in ("UpdateContainer", "StopContainer"):
            assert await stub.handle(method, payload) == (_reference_updates(updates), None)
        answer.update(updates=[*updates, sneaky])
        for method in ("CreateContainer", "UpdateContainer", "StopContainer"):
            reply, status = await stub.handle(method, payload)
            assert reply == b""
            assert status is not None
            assert status.code == Code.UNKNOWN
            assert "refusing to encode an empty set" in status.message
        answer.update(updates=[placement_update("c", cpus, None)])
        _, status = await stub.handle("CreateContainer", payload)
        assert status is not None
        assert "during its own creation" in status.message

    asyncio.run(main())


@st.composite
def placement_lists(draw: st.DrawFn) -> list[tuple[str, CPUSet, CPUSet | None]]:
    """The agent's placements: runs sharing sets by identity; now and then an empty set, an empty
    id or a lone surrogate, which must be refused as the built updates are."""
    pool = draw(shared)
    odd = st.sampled_from([CPUSet(), CPUSet.from_mask(0)])
    out: list[tuple[str, CPUSet, CPUSet | None]] = []
    for _ in range(draw(st.integers(0, 12))):
        cid = draw(text.filter(bool) | st.just("") if draw(st.integers(0, 9)) == 0 else text.filter(bool))
        cpus = draw(odd) if draw(st.integers(0, 14)) == 0 else draw(st.sampled_from(pool))
        mems = draw(st.none() | st.sampled_from(pool) | odd) if draw(st.integers(0, 14)) == 0 else draw(
            st.none() | st.sampled_from(pool)
        )
        out.append((cid, cpus, mems))
    return out


@given(placement_lists(), st.none() | adjustments)
def test_placement_updates_are_the_bytes_of_the_updates_they_stand_for(
    placements: list[tuple[str, CPUSet, CPUSet | None]], adj: ContainerAdjustment | None
) -> None:
    """Written from the triples, the same bytes (or the same refusal) as the ``placement_update``s
    built from them, through the general writer and through upb."""
    lazy = PlacementUpdates(placements)

    def built() -> list[ContainerUpdate]:
        return [placement_update(*p) for p in placements]

    want = _outcome(lambda: replywire.updates_message(built()))
    assert _outcome(lambda: replywire.updates_message(lazy)) == want
    assert want == _outcome(lambda: _reference_updates(built()))
    assert _outcome(lambda: _create(adj, lazy)) == _outcome(lambda: _create(adj, built()))


def test_placement_updates_read_as_the_updates_they_stand_for() -> None:
    cpus, mems = CPUSet.parse("0-3"), CPUSet({1})
    lazy = PlacementUpdates([("a", cpus, None), ("b", cpus, mems)])
    built = (ContainerUpdate("a", cpus=cpus), ContainerUpdate("b", cpus=cpus, mems=mems))
    assert len(lazy) == 2
    assert lazy == built
    assert built == lazy
    assert list(lazy) == list(built)
    assert lazy[1] == built[1]
    assert lazy[1:] == built[1:]
    assert lazy.container_ids == ["a", "b"]
    assert lazy != built[:1]
    assert lazy != "ab"
    assert not PlacementUpdates()
    with pytest.raises(ValueError, match="container_id must not be empty"):
        list(PlacementUpdates([("", cpus, None)]))


def test_placement_adjustments_equal_checked_ones_and_refuse_empty_sets() -> None:
    cpus, mems = CPUSet({4, 5}), CPUSet({1})
    for m in (mems, None):
        placed = placement_adjustment(cpus, m)
        assert placed == ContainerAdjustment(cpus=cpus, mems=m)
        assert replywire.adjustment_bytes(placed) == replywire.adjustment_bytes(ContainerAdjustment(cpus=cpus, mems=m))
    for name, bad in (("cpus", (CPUSet(), mems)), ("mems", (cpus, CPUSet()))):
        with pytest.raises(EmptyCPUSetError, match=rf"ContainerAdjustment\.{name} is an empty set"):
            placement_adjustment(*bad)


def test_placement_updates_refuse_empty_sets() -> None:
    cpus = CPUSet({4, 5})
    for name, bad in (("cpus", (CPUSet(), None)), ("mems", (cpus, CPUSet()))):
        with pytest.raises(EmptyCPUSetError, match=rf"ContainerUpdate\(c1\)\.{name} is an empty set"):
            placement_update("c1", *bad)


def test_the_stub_refuses_placement_updates_of_the_container_being_created() -> None:
    cpus = CPUSet({1})
    answer: list[CreateContainerResult] = []

    class Answers(Plugin):
        async def create_container(self, pod: Pod, container: Container) -> CreateContainerResult:
            return answer[-1]

    request = api_pb2.CreateContainerRequest()
    request.pod.id, request.container.id, request.container.pod_sandbox_id = "p", "c", "p"
    payload = request.SerializeToString()

    async def main() -> None:
        stub = Stub(Answers(), name="t", idx="42", env={})
        answer.append(CreateContainerResult(updates=PlacementUpdates([("a", cpus, None), ("c", cpus, None)])))
        _, status = await stub.handle("CreateContainer", payload)
        assert status is not None
        assert "during its own creation" in status.message
        lazy = PlacementUpdates([("a", cpus, None), ("b", CPUSet(), None)])
        answer.append(CreateContainerResult(adjust=placement_adjustment(cpus, None), updates=lazy))
        reply, status = await stub.handle("CreateContainer", payload)
        assert reply == b""
        assert status is not None
        assert status.code == Code.UNKNOWN
        assert "ContainerUpdate(b).cpus is an empty set" in status.message
        ok = PlacementUpdates([("a", cpus, None), ("b", cpus, cpus)])
        answer.append(CreateContainerResult(adjust=placement_adjustment(cpus, cpus), updates=ok))
        assert await stub.handle("CreateContainer", payload) == (
            _reference_create(ContainerAdjustment(cpus=cpus, mems=cpus), list(ok)),
            None,
        )

    asyncio.run(main())


runs = st.lists(st.tuples(st.integers(1, 300), st.integers(0, 300)), min_size=1, max_size=6).map(
    lambda rs: sum(((1 << n) - 1) << (sum(a + b for a, b in rs[:i]) + gap) for i, (n, gap) in enumerate(rs))
)


@given(st.integers(1, 2**1100) | runs.filter(bool))
def test_set_lists_are_written_as_cpusets_format_them(mask: int) -> None:
    assert replywire._list_text(mask) == CPUSet.from_mask(mask).format()


def test_placement_ids_around_the_one_byte_length_are_written_as_upb_writes_them() -> None:
    cpus, mems = CPUSet.parse("0-3,8,10-63"), CPUSet({1})
    for length in range(80, 140):
        placements = [("y", cpus, mems), ("x" * length, cpus, mems), ("é" * (length // 2), cpus, None)]
        built = [placement_update(*p) for p in placements]
        assert replywire.updates_message(PlacementUpdates(placements)) == _reference_updates(built)
