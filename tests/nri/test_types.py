"""Dataclasses <-> protobuf, version rules and the runtime's merge rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topodra.cpuset import CPUSet
from topodra.nri import convert
from topodra.nri.errors import ConversionError, EmptyCPUSetError
from topodra.nri.merge import Owners, OwnershipConflict, apply_adjustment, merge_adjustment, merge_update
from topodra.nri.proto import api_pb2
from topodra.nri.types import (
    Container,
    ContainerAdjustment,
    ContainerState,
    ContainerUpdate,
    Event,
    LinuxResources,
    Mount,
    Pod,
    event_mask,
    events_in_mask,
)
from topodra.nri.version import NRIVersion, RuntimeInfo, infer_nri_version, valid_event_mask

cpusets = st.frozensets(st.integers(0, 255), min_size=1, max_size=20).map(CPUSet)
maybe_sets = st.none() | cpusets
small = st.none() | st.integers(0, 2**40)
text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)

resources = st.builds(
    LinuxResources,
    cpus=maybe_sets,
    mems=maybe_sets,
    cpu_shares=small,
    cpu_quota=st.none() | st.integers(-1, 2**40),
    cpu_period=small,
    cpu_realtime_runtime=st.none() | st.integers(-(2**40), 2**40),
    cpu_realtime_period=small,
    memory_limit=st.none() | st.integers(-1, 2**50),
    memory_reservation=small,
    memory_swap=small,
    memory_kernel=small,
    memory_kernel_tcp=small,
    memory_swappiness=small,
    memory_disable_oom_killer=st.none() | st.booleans(),
    memory_use_hierarchy=st.none() | st.booleans(),
    hugepage_limits=st.dictionaries(st.sampled_from(["2MB", "1GB"]), st.integers(0, 2**40)),
    blockio_class=st.none() | text,
    rdt_class=st.none() | text,
    unified=st.dictionaries(text, text, max_size=3),
    pids_limit=st.none() | st.integers(0, 2**30),
)


@given(resources)
def test_resources_round_trip(res: LinuxResources) -> None:
    pb = api_pb2.LinuxResources()
    convert.resources_to_proto(res, pb)
    again = api_pb2.LinuxResources.FromString(pb.SerializeToString())
    assert convert.resources_from_proto(again) == res


@given(
    st.builds(
        Container,
        id=text.filter(bool),
        pod_sandbox_id=text,
        name=text,
        state=st.sampled_from(ContainerState),
        labels=st.dictionaries(text, text, max_size=3),
        annotations=st.dictionaries(text, text, max_size=3),
        args=st.lists(text, max_size=3).map(tuple),
        env=st.lists(text, max_size=3).map(tuple),
        mounts=st.lists(st.builds(Mount, destination=text, type=text, source=text,
                                  options=st.lists(text, max_size=2).map(tuple)), max_size=2).map(tuple),
        resources=st.none() | resources,
        cgroups_path=text,
        cdi_devices=st.lists(text, max_size=2).map(tuple),
        pid=st.integers(0, 2**31),
        created_at=st.integers(0, 2**62),
        exit_code=st.integers(-(2**31), 2**31 - 1),
        oom_score_adj=st.none() | st.integers(-1000, 1000),
        image=text,
    )
)
def test_container_round_trip(ctr: Container) -> None:
    pb = api_pb2.Container.FromString(convert.container_to_proto(ctr).SerializeToString())
    assert convert.container_from_proto(pb) == ctr


@given(st.builds(Pod, id=text, name=text, uid=text, namespace=text, labels=st.dictionaries(text, text, max_size=2),
                 cgroup_parent=text, resources=st.none() | resources, overhead=st.none() | resources,
                 pid=st.integers(0, 2**31), ips=st.lists(text, max_size=2).map(tuple)))
def test_pod_round_trip(pod: Pod) -> None:
    pb = api_pb2.PodSandbox.FromString(convert.pod_to_proto(pod).SerializeToString())
    got = convert.pod_from_proto(pb)
    if not (pod.cgroup_parent or pod.cgroups_path or pod.resources or pod.overhead):
        assert not pb.HasField("linux")
    assert got == pod


@given(maybe_sets, maybe_sets, small, st.dictionaries(text, text, max_size=3), st.dictionaries(text, text, max_size=3))
def test_adjustment_and_update_round_trip(cpus: CPUSet | None, mems: CPUSet | None, shares: int | None,
                                          annotations: dict[str, str], env: dict[str, str]) -> None:
    adj = ContainerAdjustment(cpus=cpus, mems=mems, cpu_shares=shares, annotations=annotations, env=env)
    pb = api_pb2.CreateContainerResponse()
    convert.adjustment_to_proto(adj, pb.adjust)
    back = api_pb2.CreateContainerResponse.FromString(pb.SerializeToString())
    assert back.HasField("adjust")
    assert convert.adjustment_from_proto(back.adjust) == adj
    upd = ContainerUpdate("c", cpus=cpus, mems=mems, cpu_shares=shares, ignore_failure=True)
    assert convert.update_from_proto(api_pb2.ContainerUpdate.FromString(convert.update_to_proto(upd).SerializeToString())) == upd


@given(st.lists(st.tuples(maybe_sets, maybe_sets, small, st.booleans()), max_size=12))
def test_batched_updates_encode_as_one_by_one(rows: list[tuple[CPUSet | None, CPUSet | None, int | None, bool]]) -> None:
    """``updates_to_proto`` shares the encoding of equal resources: same bytes as encoding each."""
    updates = [ContainerUpdate(f"c{i}", cpus=c, mems=m, cpu_shares=s, ignore_failure=f) for i, (c, m, s, f) in enumerate(rows)]
    updates += updates[:3]  # repeated resources take the shared path
    one, batch = api_pb2.UpdateContainersRequest(), api_pb2.UpdateContainersRequest()
    for u in updates:
        convert.update_to_proto(u, one.update.add())
    convert.updates_to_proto(updates, batch.update)
    assert batch.SerializeToString() == one.SerializeToString()


def test_wire_shapes_match_go_plugins() -> None:
    pb = api_pb2.CreateContainerResponse()
    convert.adjustment_to_proto(ContainerAdjustment(), pb.adjust)
    assert pb.SerializeToString() == bytes.fromhex("0a00")  # the template's "present but empty" adjust
    upd = convert.update_to_proto(ContainerUpdate("pod0-ctr0", cpus=CPUSet.parse("2-3"), mems=CPUSet({0})))
    assert upd.SerializeToString().hex() == "0a09706f64302d63747230120c0a0a12083203322d333a0130"  # as recorded
    zero = api_pb2.LinuxResources()
    convert.resources_to_proto(LinuxResources(cpu_shares=0, memory_limit=0), zero)
    assert zero.cpu.HasField("shares")
    assert zero.memory.HasField("limit")


def test_empty_sets_are_refused_everywhere() -> None:
    with pytest.raises(EmptyCPUSetError, match=r"ContainerAdjustment\.cpus is an empty set"):
        ContainerAdjustment(cpus=CPUSet())
    with pytest.raises(EmptyCPUSetError, match=r"ContainerUpdate\(c1\).mems"):
        ContainerUpdate("c1", mems=CPUSet())
    with pytest.raises(EmptyCPUSetError, match=r"ContainerUpdate\(c1\).cpus"):
        ContainerUpdate("c1", cpus=CPUSet(), mems=CPUSet({0}))
    sneaky = ContainerAdjustment(cpus=CPUSet({1}))
    object.__setattr__(sneaky, "cpus", CPUSet())
    with pytest.raises(EmptyCPUSetError, match="refusing to encode an empty set"):
        convert.adjustment_to_proto(sneaky, api_pb2.ContainerAdjustment())
    with pytest.raises(ValueError, match="container_id must not be empty"):
        ContainerUpdate("")


def test_bad_wire_values_name_the_field() -> None:
    pb = api_pb2.Container(id="c9")
    pb.linux.resources.cpu.mems = "0-x"
    with pytest.raises(ConversionError, match=r"container c9: linux.resources.cpu.mems: invalid CPU list '0-x'"):
        convert.container_from_proto(pb)
    with pytest.raises(ConversionError, match="ContainerUpdate without container_id"):
        convert.update_from_proto(api_pb2.ContainerUpdate())
    pb = api_pb2.Container(id="c1", state=99)  # type: ignore[arg-type]
    assert convert.container_from_proto(pb).state is ContainerState.UNKNOWN


def test_events() -> None:
    assert Event.CREATE_CONTAINER.bit == 0x8
    assert Event.VALIDATE_CONTAINER_ADJUSTMENT.rpc == "ValidateContainerAdjustment"
    assert Event.parse("post_update_pod_sandbox") is Event.POST_UPDATE_POD_SANDBOX
    assert Event.parse("StopContainer") is Event.STOP_CONTAINER
    with pytest.raises(ValueError, match="unknown NRI event 'Nope'"):
        Event.parse("Nope")
    assert event_mask(list(Event)) == 0x3FFF
    assert events_in_mask(0x62D) == {Event.RUN_POD_SANDBOX, Event.REMOVE_POD_SANDBOX, Event.CREATE_CONTAINER,
                                     Event.START_CONTAINER, Event.STOP_CONTAINER, Event.REMOVE_CONTAINER}


@pytest.mark.parametrize(
    ("runtime", "version", "nri"),
    [
        ("containerd", "v1.7.6", "v0.3.0"),
        ("containerd", "1.7.26", "v0.8.0"),
        ("containerd", "v2.1.9", "v0.8.0"),
        ("containerd", "v2.2.0", "v0.10.0"),
        ("containerd", "v2.2.7", "v0.11.0"),
        ("containerd", "v2.3.4", "v0.12.0"),
        ("containerd", "v2.9.0", "v0.12.0"),
        ("containerd", "v1.6.20", None),
        ("cri-o", "1.26.1", "v0.2.0"),
        ("CRI-O", "1.28.3", "v0.3.1"),
        ("cri-o", "1.32.0", "v0.9.0"),
        ("cri-o", "1.35.0", "v0.11.0"),
        ("podman", "5.0", None),
        ("containerd", "not-a-version", None),
    ],
)
def test_nri_version_inference(runtime: str, version: str, nri: str | None) -> None:
    got = infer_nri_version(runtime, version)
    assert (str(got) if got else None) == nri


def test_runtime_info_capabilities() -> None:
    current = RuntimeInfo.from_configure("nri-harness", "v0.0.1", "v0.12.3-0.20260820221634-8ec8b285eae3", 5000, 2000)
    assert current.nri_version == NRIVersion(0, 12, 3)
    assert (current.registration_timeout, current.request_timeout) == (5.0, 2.0)
    assert current.valid_events == 0x3FFF
    assert current.dedicated_event_rpcs
    assert current.unsolicited_updates_safe
    old = RuntimeInfo.from_configure("containerd", "v2.0.0", "", 0, 0)
    assert (old.nri_version, old.nri_version_inferred, old.request_timeout) == (NRIVersion(0, 8, 0), True, None)
    assert old.valid_events == 0x7FF
    assert not old.dedicated_event_rpcs
    assert not old.unsolicited_updates_safe
    assert RuntimeInfo.from_configure("containerd", "v2.3.4", "v0.12.0", 1, 1).unsolicited_updates_safe is False
    assert valid_event_mask(None) == 0x7FF
    with pytest.raises(ValueError, match="not a version"):
        NRIVersion.parse("latest")


def test_merge_rules() -> None:
    owners = Owners()
    merged = merge_adjustment(None, ContainerAdjustment(cpus=CPUSet({1}), annotations={"a": "1"}), "c", "10-a", owners)
    merged = merge_adjustment(merged, ContainerAdjustment(mems=CPUSet({0}), env={"E": "x"}), "c", "20-b", owners)
    assert (merged.cpus, merged.mems, dict(merged.annotations), dict(merged.env)) == (CPUSet({1}), CPUSet({0}), {"a": "1"}, {"E": "x"})
    with pytest.raises(OwnershipConflict, match='plugins "20-b" and "10-a" both tried to set Annotations a'):
        merge_adjustment(merged, ContainerAdjustment(annotations={"a": "2"}), "c", "20-b", owners)
    pb = api_pb2.OwningPlugins()
    owners.to_proto(pb)
    assert pb.owners["c"].simple[21] == "10-a"
    assert pb.owners["c"].compound[1].owners["a"] == "10-a"
    updates: dict[str, ContainerUpdate] = {}
    merge_update(updates, ContainerUpdate("x", cpus=CPUSet({1}), ignore_failure=True), "10-a", owners)
    merge_update(updates, ContainerUpdate("x", mems=CPUSet({1})), "20-b", owners)
    assert updates["x"] == ContainerUpdate("x", cpus=CPUSet({1}), mems=CPUSet({1}), ignore_failure=False)
    ctr = Container(id="c", pod_sandbox_id="p", annotations={"old": "1", "keep": "2"}, env=("A=1", "B=2"))
    out = apply_adjustment(ctr, ContainerAdjustment(cpus=CPUSet({3}), annotations={"-old": "", "new": "3"},
                                                    env={"A": "9", "-B": ""}))
    assert dict(out.annotations) == {"keep": "2", "new": "3"}
    assert out.env == ("A=9",)
    assert out.cpus == CPUSet({3})


def test_resources_decoded_once_per_wire_form_equal_a_fresh_decode() -> None:
    """The memo of decoded resources returns what decoding returns, per distinct bytes."""
    convert._RESOURCES_SEEN.clear()  # from empty: earlier tests may have filled it up to its bound
    seen = []
    for shares in (2, 256, 2, 1024, 256):
        pb = api_pb2.LinuxResources()
        pb.cpu.shares.value = shares
        pb.cpu.cpus = "0-3" if shares > 2 else ""
        pb.memory.limit.value = shares << 20
        got = convert.resources_from_proto(pb)
        assert got == convert._decode_resources(pb, "resources")
        assert got.cpu_shares == shares
        assert got.memory_limit == shares << 20
        seen.append(got)
    assert seen[0] is seen[2]
    assert seen[1] is seen[4]
    assert len({id(r) for r in seen}) == 3


def test_resources_memo_is_bounded_and_keeps_no_errors() -> None:
    for i in range(convert._RESOURCES_SEEN_MAX + 10):
        pb = api_pb2.LinuxResources()
        pb.cpu.shares.value = 10_000 + i
        assert convert.resources_from_proto(pb).cpu_shares == 10_000 + i
        assert len(convert._RESOURCES_SEEN) <= convert._RESOURCES_SEEN_MAX
    bad = api_pb2.LinuxResources()
    bad.cpu.cpus = "0-x"
    for who in ("container a", "container b"):  # each failure names its own object
        with pytest.raises(ConversionError, match=f"{who}.cpu.cpus: invalid CPU list"):
            convert.resources_from_proto(bad, who)


def test_updates_sharing_resources_encode_as_each_one_alone() -> None:
    cpus, other = CPUSet.parse("0-7,64-71"), CPUSet.parse("8-9")
    updates = [
        ContainerUpdate("a", cpus=cpus),
        ContainerUpdate("b", cpus=other, mems=CPUSet({0})),
        ContainerUpdate("c", cpus=cpus, ignore_failure=True),
        ContainerUpdate("d", cpus=cpus, memory_limit=1 << 30),
        ContainerUpdate("e", cpus=cpus),
    ]
    together = api_pb2.UpdateContainersRequest()
    convert.updates_to_proto(updates, together.update)
    alone = api_pb2.UpdateContainersRequest()
    for u in updates:
        alone.update.append(convert.update_to_proto(u))
    assert together.SerializeToString() == alone.SerializeToString()
    assert [convert.update_from_proto(pb) for pb in together.update] == updates


@pytest.mark.parametrize("field", ["pod_resources", "pod_overhead"])
def test_a_bad_set_in_pod_resources_is_named(field: str) -> None:
    pb = api_pb2.PodSandbox(id="p1")
    getattr(pb.linux, field).cpu.cpus = "3-1"
    with pytest.raises(ConversionError, match=rf"pod p1: linux\.{field}\.cpu\.cpus"):
        convert.pod_from_proto(api_pb2.PodSandbox.FromString(pb.SerializeToString()))
