"""From NRI's view of a container to the policy's request, as the kubelet encoded it."""

from __future__ import annotations

from dataclasses import fields

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topodra.agent.container_request import container_request, qos_class, shares_to_milli
from topodra.nri.types import Container, LinuxResources, Pod
from topodra.policy.api import ContainerRequest, QoSClass


def _ctr(res: LinuxResources | None, path: str = "") -> Container:
    return Container(id="c1", pod_sandbox_id="p1", name="app", resources=res, cgroups_path=path)


@given(st.integers(min_value=1, max_value=256_000))
def test_shares_round_trip_the_kubelet_formula(milli: int) -> None:
    shares = max(2, milli * 1024 // 1000)
    back = shares_to_milli(shares)
    assert abs(back - milli) <= 1 or milli < 3


@pytest.mark.parametrize(
    ("parent", "qos"),
    [
        ("/kubepods/burstable/pod123", QoSClass.BURSTABLE),
        ("kubepods-besteffort-pod123.slice", QoSClass.BEST_EFFORT),
        ("/kubepods/pod123", QoSClass.GUARANTEED),
        ("kubepods-pod123.slice", QoSClass.GUARANTEED),
    ],
)
def test_qos_from_cgroup_parent(parent: str, qos: QoSClass) -> None:
    assert qos_class(Pod(id="p1", cgroup_parent=parent), _ctr(None)) is qos


def test_qos_from_resources_when_no_cgroup_path() -> None:
    pod = Pod(id="p1")
    assert qos_class(pod, _ctr(LinuxResources(cpu_shares=2))) is QoSClass.BEST_EFFORT
    g = LinuxResources(cpu_shares=2048, cpu_quota=200_000, cpu_period=100_000, memory_limit=1 << 30)
    assert qos_class(pod, _ctr(g)) is QoSClass.GUARANTEED
    assert qos_class(pod, _ctr(LinuxResources(cpu_shares=512))) is QoSClass.BURSTABLE


def test_guaranteed_request_is_the_exact_limit() -> None:
    pod = Pod(id="p1", uid="u1", name="db", namespace="ns", cgroup_parent="/kubepods/podu1",
              annotations={"prefer-isolated-cpus.resource-policy.nri.io": "false"})
    res = LinuxResources(cpu_shares=3072, cpu_quota=300_000, cpu_period=100_000, memory_limit=1 << 30)
    req = container_request(pod, _ctr(res), claims=("claim-1",))
    assert req.qos is QoSClass.GUARANTEED
    assert req.cpu_request_milli == 3000
    assert req.cpu_limit_milli == 3000
    assert req.memory_request == 1 << 30
    assert req.claims == ("claim-1",)
    assert req.annotations["prefer-isolated-cpus.resource-policy.nri.io"] == "false"
    assert (req.pod_uid, req.pod_name, req.namespace) == ("u1", "db", "ns")


def test_best_effort_requests_nothing() -> None:
    req = container_request(Pod(id="p", cgroup_parent="/kubepods/besteffort/podx"), _ctr(LinuxResources(cpu_shares=2)))
    assert req.cpu_request_milli == 0
    assert req.cpu_limit_milli is None


@given(
    st.sampled_from(["/kubepods/pod1", "/kubepods/burstable/pod1", "/kubepods/besteffort/pod1", ""]),
    st.none() | st.integers(0, 1 << 20), st.none() | st.integers(-1, 1 << 22), st.none() | st.integers(0, 1 << 40),
    st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2), st.lists(st.text(max_size=4), max_size=2),
)
def test_requests_equal_the_dataclass_built_from_their_fields(
    parent: str, shares: int | None, quota: int | None, memory: int | None, annotations: dict[str, str], claims: list[str]
) -> None:
    """``container_request`` fills the slots directly: the same request ``ContainerRequest(...)``
    makes from its fields, hash and repr included."""
    pod = Pod(id="p1", uid="u1", name="web", namespace="ns", cgroup_parent=parent, annotations=annotations)
    res = LinuxResources(cpu_shares=shares, cpu_quota=quota, cpu_period=100_000, memory_limit=memory)
    got = container_request(pod, _ctr(res), tuple(claims))
    again = ContainerRequest(**{f.name: getattr(got, f.name) for f in fields(ContainerRequest)})
    assert got == again
    assert repr(got) == repr(again)
    assert got.annotations == annotations
    assert got.annotations is not pod.annotations
    assert (got.id, got.name, got.pod_uid, got.pod_name, got.namespace, got.claims) == ("c1", "app", "u1", "web", "ns", tuple(claims))
