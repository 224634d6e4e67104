"""Annotations and request classification: first match wins, malformed input is an error."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topodra.policy import ContainerRequest, Policy, PolicyConfig, PolicyError, QoSClass
from topodra.policy.annotations import parse_bool, parse_preferences
from topodra.policy.classify import GrantKind, Isolation, Need, classify
from topodra.policy.config import CPUPriority, TopologyLevel
from topodra.topology.model import CoreType, MemoryKind
from topodra.topology.synthetic import synthetic_topology

from .helpers import besteffort, burstable, guaranteed, request

D = "resource-policy.nri.io"


def kind_of(
    req: ContainerRequest, config: PolicyConfig | None = None, *, reserved: bool = True, isolated: bool = False
) -> Need:
    return classify(req, config or PolicyConfig(), has_reserved=reserved, has_isolated=isolated)


def test_scope_precedence_container_pod_plain() -> None:
    ann = {
        f"hide-hyperthreads.{D}": "false",
        f"hide-hyperthreads.{D}/pod": "true",
        f"hide-hyperthreads.{D}/container.db": "false",
    }
    assert parse_preferences(ann, "db").hide_hyperthreads is False
    assert parse_preferences(ann, "web").hide_hyperthreads is True
    del ann[f"hide-hyperthreads.{D}/pod"]
    assert parse_preferences(ann, "web").hide_hyperthreads is False


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (f"prefer-isolated-cpus.{D}", "yes please"),
        (f"prefer-shared-cpus.{D}/pod", "maybe"),
        (f"cpu.preserve.{D}/container.ctr", "ture"),
        (f"prefer-cpu-priority.{D}", "urgent"),
        (f"unlimited-burstable.{D}", "rack"),
        (f"memory-type.{D}", "dram,optane"),
        (f"memory-type.{D}", " , "),
    ],
)
def test_malformed_annotation_names_key_and_value(key: str, value: str) -> None:
    with pytest.raises(PolicyError) as e:
        parse_preferences({key: value}, "ctr")
    assert key in str(e.value)
    assert repr(value.split(",")[-1].strip()) in str(e.value) or repr(value) in str(e.value)


def test_unrelated_annotations_are_ignored_quickly() -> None:
    assert parse_preferences({"app": "x", "other.io/y": "z"}, "ctr") == parse_preferences({}, "ctr")


def test_go_parse_bool_spellings() -> None:
    for v in ("1", "t", "T", "TRUE", "true", "True"):
        assert parse_bool("k", v) is True
    for v in ("0", "f", "F", "FALSE", "false", "False"):
        assert parse_bool("k", v) is False
    with pytest.raises(PolicyError, match="k: 'yes'"):
        parse_bool("k", "yes")


def test_memory_types_and_mixed() -> None:
    p = parse_preferences({f"memory-type.{D}": "DRAM, hbm"}, "c")
    assert p.memory_types == frozenset({MemoryKind.DRAM, MemoryKind.HBM})
    p = parse_preferences({f"memory-type.{D}": "mixed"}, "c")
    assert p.memory_types == frozenset(MemoryKind)


def test_require_vs_prefer_isolated_more_specific_wins() -> None:
    ann = {f"prefer-isolated-cpus.{D}/container.c": "false", f"require-isolated-cpus.{D}": "true"}
    p = parse_preferences(ann, "c")
    assert p.prefer_isolated is False
    assert p.require_isolated is None
    ann = {f"prefer-isolated-cpus.{D}": "false", f"require-isolated-cpus.{D}/pod": "true"}
    p = parse_preferences(ann, "c")
    assert p.require_isolated is True
    assert p.prefer_isolated is None
    assert p.isolation_key == f"require-isolated-cpus.{D}/pod"


def test_rule_order() -> None:
    # claims beat everything
    r = guaranteed("a", 2, claims=("c1",), annotations={f"cpu.preserve.{D}": "true"})
    assert kind_of(r).kind is GrantKind.CLAIMED
    # preserve beats reserved
    r = guaranteed("a", 2, namespace="kube-system", annotations={f"cpu.preserve.{D}": "true"})
    assert kind_of(r).kind is GrantKind.PRESERVE
    # kube-system -> reserved, unless annotated false; only when reserved CPUs exist
    assert kind_of(guaranteed("a", 2, namespace="kube-system")).kind is GrantKind.RESERVED
    r = guaranteed("a", 2, namespace="kube-system", annotations={f"prefer-reserved-cpus.{D}": "false"})
    assert kind_of(r).kind is GrantKind.EXCLUSIVE
    assert kind_of(guaranteed("a", 2, namespace="kube-system"), reserved=False).kind is GrantKind.EXCLUSIVE
    r = besteffort("a", annotations={f"prefer-reserved-cpus.{D}": "true"})
    assert kind_of(r).kind is GrantKind.RESERVED
    cfg = PolicyConfig(reserved_pool_namespaces=("infra-*",))
    assert kind_of(burstable("a", namespace="infra-logs"), cfg).kind is GrantKind.RESERVED


def test_shared_classes() -> None:
    n = kind_of(besteffort("a"))
    assert (n.kind, n.milli) == (GrantKind.SHARED, 0)
    n = kind_of(burstable("a", 300, limit=2000))
    assert (n.kind, n.milli, n.burst_limit, n.unlimited_level) == (GrantKind.SHARED, 300, 2000, None)
    n = kind_of(burstable("a", 300))
    assert n.burst_limit is None
    assert n.unlimited_level is TopologyLevel.PACKAGE
    r = burstable("a", 300, annotations={f"unlimited-burstable.{D}": "numa"})
    assert kind_of(r).unlimited_level is TopologyLevel.NUMA
    for cpus in (0.5, 1.5, 2.5):
        n = kind_of(guaranteed("a", cpus))
        assert (n.kind, n.milli) == (GrantKind.SHARED, int(cpus * 1000))
    r = guaranteed("a", 2, annotations={f"prefer-shared-cpus.{D}": "true"})
    assert kind_of(r).kind is GrantKind.SHARED
    assert kind_of(guaranteed("a", 2), PolicyConfig(prefer_shared_cpus=True)).kind is GrantKind.SHARED


def test_exclusive_and_isolation_defaults() -> None:
    n = kind_of(guaranteed("a", 2), isolated=True)
    assert (n.kind, n.exclusive, n.isolation) == (GrantKind.EXCLUSIVE, 2, Isolation.PREFER)
    assert kind_of(guaranteed("a", 3), isolated=True).isolation is Isolation.NO
    assert kind_of(guaranteed("a", 1), isolated=False).isolation is Isolation.NO
    assert kind_of(guaranteed("a", 1), PolicyConfig(prefer_isolated_cpus=False), isolated=True).isolation is Isolation.NO
    r = guaranteed("a", 4, annotations={f"prefer-isolated-cpus.{D}": "true"})
    assert kind_of(r, isolated=True).isolation is Isolation.PREFER
    r = guaranteed("a", 1, annotations={f"prefer-isolated-cpus.{D}": "false"})
    assert kind_of(r, isolated=True).isolation is Isolation.NO
    r = guaranteed("a", 4, annotations={f"require-isolated-cpus.{D}": "true"})
    assert kind_of(r).isolation is Isolation.REQUIRE


def test_mixed_only_when_annotated() -> None:
    r = guaranteed("a", 2.5, annotations={f"prefer-shared-cpus.{D}": "false"})
    n = kind_of(r)
    assert (n.kind, n.exclusive, n.milli) == (GrantKind.MIXED, 2, 500)
    r = guaranteed("a", 0.5, annotations={f"prefer-shared-cpus.{D}": "false"})
    assert kind_of(r).kind is GrantKind.SHARED


def test_cpu_priority_and_memory() -> None:
    r = guaranteed("a", 2, annotations={f"prefer-cpu-priority.{D}": "low"}, memory=5)
    n = kind_of(r)
    assert n.core_types == frozenset({CoreType.E_CORE})
    assert n.memory == 5
    n = kind_of(guaranteed("a", 2), PolicyConfig(default_cpu_priority=CPUPriority.HIGH))
    assert n.core_types == frozenset({CoreType.P_CORE})
    r = guaranteed("a", 2, annotations={f"prefer-cpu-priority.{D}": "default"})
    assert kind_of(r, PolicyConfig(default_cpu_priority=CPUPriority.LOW)).core_types == frozenset({CoreType.E_CORE})
    assert kind_of(guaranteed("a", 2)).memory_kinds == frozenset({MemoryKind.DRAM})


@pytest.mark.parametrize(
    ("field", "value"),
    [("cpu_request_milli", -1), ("memory_request", -5), ("cpu_limit_milli", -2), ("memory_limit", True)],
)
def test_invalid_requests_name_the_field(field: str, value: object) -> None:
    import dataclasses

    changes: dict[str, Any] = {field: value}
    r = dataclasses.replace(request("a", QoSClass.BURSTABLE, 100), **changes)
    with pytest.raises(PolicyError, match=field):
        kind_of(r)


def test_empty_id_and_duplicate_claims() -> None:
    with pytest.raises(PolicyError, match="empty id"):
        kind_of(request("", QoSClass.BEST_EFFORT, 0))
    with pytest.raises(PolicyError, match="claims"):
        kind_of(guaranteed("a", 1, claims=("x", "x")))


KEYS = [
    f"prefer-isolated-cpus.{D}",
    f"require-isolated-cpus.{D}",
    f"prefer-shared-cpus.{D}",
    f"prefer-cpu-priority.{D}",
    f"hide-hyperthreads.{D}",
    f"unlimited-burstable.{D}",
    f"memory-type.{D}",
    f"cpu.preserve.{D}",
    "unrelated.example.com/x",
]


@given(
    st.dictionaries(
        st.builds(lambda k, scope: k + scope, st.sampled_from(KEYS), st.sampled_from(["", "/pod", "/container.c"])),
        st.text(max_size=12) | st.sampled_from(["true", "false", "high", "low", "dram,hbm", "numa", "mixed"]),
        max_size=5,
    )
)
def test_annotation_parsing_never_crashes(annotations: dict[str, str]) -> None:
    try:
        prefs = parse_preferences(annotations, "c")
    except PolicyError as e:
        assert any(k in str(e) for k in annotations)
        return
    req = guaranteed("a", 2, annotations=annotations, name="c")
    n = classify(req, PolicyConfig(), has_reserved=True, has_isolated=True)
    assert n.kind in set(GrantKind)
    assert prefs.hide_hyperthreads in (True, False)


_POLICIES = [
    Policy(synthetic_topology("1s1d1n1l2c2t"), PolicyConfig(reserved_cpu_count=1)),
    Policy(synthetic_topology("1s1d1n1l2c2t"), PolicyConfig(prefer_shared_cpus=True, reserved_pool_namespaces=("sys-*",))),
]


@given(
    policy=st.sampled_from(_POLICIES),
    reqs=st.lists(
        st.builds(
            request,
            cid=st.sampled_from(["a", "b", "c"]),
            qos=st.sampled_from(list(QoSClass)),
            cpu=st.sampled_from([0, 1, 500, 1000, 1500, 2000]),
            limit=st.sampled_from([-1, None, 1000, 4000]),
            memory=st.sampled_from([0, 1 << 20]),
            namespace=st.sampled_from(["default", "kube-system", "sys-a"]),
            name=st.sampled_from(["x", "y"]),
            claims=st.sampled_from([(), ("k",)]),
            annotations=st.sampled_from([None, {"team": "a"}, {f"hide-hyperthreads.{D}": "true", "team": "b"}]),
        ),
        max_size=12,
    ),
)
def test_the_policy_reads_each_request_as_classify_does(policy: Policy, reqs: list[ContainerRequest]) -> None:
    """The policy keeps one reading per distinct request without placement annotations: it is
    always classify's."""
    part = policy._part
    for req in reqs:
        assert policy._classify(req) == classify(
            req, policy.config, has_reserved=part.reserved != 0, has_isolated=part.isolated != 0
        )


def test_parsed_annotations_are_reused_and_a_bad_one_fails_every_time() -> None:
    ann = {f"hide-hyperthreads.{D}/container.db": "true", "team": "a"}
    first = parse_preferences(ann, "db")
    assert first.hide_hyperthreads is True
    assert parse_preferences(dict(reversed(list(ann.items()))), "db") == first
    assert parse_preferences(ann, "web").hide_hyperthreads is False  # the scope names the container
    for _ in range(2):
        with pytest.raises(PolicyError, match="not a boolean"):
            parse_preferences({f"hide-hyperthreads.{D}": "maybe"}, "db")
