"""PolicyConfig: strict parsing, errors that name the field and the value."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from topodra.cpuset import CPUSet
from topodra.policy import CPUPriority, PolicyConfig, TopologyLevel
from topodra.policy.config import parse_cpu_quantity
from topodra.topology.model import MemoryKind


def test_defaults() -> None:
    c = PolicyConfig()
    assert c.pin_cpu
    assert c.pin_memory
    assert c.prefer_isolated_cpus
    assert not c.prefer_shared_cpus
    assert c.reserved_cpus is None
    assert c.reserved_cpu_count is None
    assert c.default_memory_types == (MemoryKind.DRAM,)
    assert c.default_cpu_priority is CPUPriority.NONE
    assert c.unlimited_burstable is TopologyLevel.PACKAGE


def test_camel_and_snake_case_both_read() -> None:
    a = PolicyConfig.model_validate(
        {"reservedCPUs": "0-1", "pinMemory": False, "preferIsolatedCPUs": False, "defaultCPUPriority": "HIGH"}
    )
    b = PolicyConfig.model_validate(
        {"reserved_cpus": "0-1", "pin_memory": False, "prefer_isolated_cpus": False, "default_cpu_priority": "high"}
    )
    assert a == b
    assert a.reserved_cpus == CPUSet.parse("0-1")
    assert a.default_cpu_priority is CPUPriority.HIGH


@pytest.mark.parametrize(
    ("value", "milli"),
    [
        (2, 2000), ("2", 2000), ("750m", 750), ("1.5", 1500), (0.25, 250), ("0.0001", 1), ("1.25", 1250),
        # the Kubernetes grammar (topodra.quantity), rounded up like MilliValue()
        ("2e0", 2000), ("1e3", 1_000_000), ("1.5m", 2), ("1k", 1_000_000), ("+1", 1000), (".5", 500),
    ],
)
def test_cpu_quantities(value: object, milli: int) -> None:
    assert parse_cpu_quantity(value, "x") == milli


@pytest.mark.parametrize(
    "value", ["-1", "two", "", True, -3, float("nan"), float("inf"), "1K", "1 m", "1Gb", "1e99", None]
)
def test_bad_cpu_quantities(value: object) -> None:
    with pytest.raises(ValueError, match="x:"):
        parse_cpu_quantity(value, "x")


def test_reserved_count_rounds_up() -> None:
    assert PolicyConfig.model_validate({"reservedCPUCount": "750m"}).reserved_cpu_count == 1
    assert PolicyConfig.model_validate({"reservedCPUCount": "2"}).reserved_cpu_count == 2
    assert PolicyConfig.model_validate({"reservedCPUCount": 1.5}).reserved_cpu_count == 2


@pytest.mark.parametrize(
    ("data", "field", "fragment"),
    [
        ({"reservedCPUs": "0-x"}, "reservedCPUs", "0-x"),
        ({"availableCPUs": "3-1"}, "availableCPUs", "3-1"),
        ({"reservedCPUCount": "lots"}, "reservedCPUCount", "lots"),
        ({"defaultCPUPriority": "urgent"}, "defaultCPUPriority", "urgent"),
        ({"unlimitedBurstable": "rack"}, "unlimitedBurstable", "rack"),
        ({"defaultMemoryTypes": ["dram", "optane"]}, "defaultMemoryTypes", "optane"),
        ({"reservedPoolNamespaces": "kube-*"}, "reservedPoolNamespaces", "kube-*"),
        ({"reservedPoolNamespaces": [""]}, "reservedPoolNamespaces", "''"),
        ({"pinCPU": "maybe"}, "pinCPU", "maybe"),
        ({"typo": 1}, "typo", "1"),
    ],
)
def test_errors_name_field_and_value(data: dict[str, object], field: str, fragment: str) -> None:
    with pytest.raises(ValidationError) as e:
        PolicyConfig.model_validate(data)
    text = str(e.value)
    assert field in text
    assert fragment in text


def test_reserved_set_and_count_are_exclusive() -> None:
    with pytest.raises(ValidationError, match="either reservedCPUs"):
        PolicyConfig.model_validate({"reservedCPUs": "0", "reservedCPUCount": 1})


def test_memory_types_from_comma_string() -> None:
    c = PolicyConfig.model_validate({"defaultMemoryTypes": "dram,HBM"})
    assert c.default_memory_types == (MemoryKind.DRAM, MemoryKind.HBM)
    with pytest.raises(ValidationError, match="must not be empty"):
        PolicyConfig.model_validate({"defaultMemoryTypes": []})


def test_reserved_namespaces() -> None:
    c = PolicyConfig(reserved_pool_namespaces=("monitoring-*", "infra"))
    assert c.reserved_namespace("kube-system")
    assert c.reserved_namespace("monitoring-prod")
    assert c.reserved_namespace("infra")
    assert not c.reserved_namespace("infra2")
    assert not PolicyConfig().reserved_namespace("default")


def test_json_round_trip() -> None:
    c = PolicyConfig.model_validate(
        {
            "reservedCPUs": "0,64",
            "availableCPUs": "0-127",
            "excludedCPUs": "100",
            "defaultMemoryTypes": ["dram", "pmem"],
            "reservedPoolNamespaces": ["infra-*"],
            "colocatePods": True,
        }
    )
    data = c.to_json()
    assert data["reservedCPUs"] == "0,64"
    assert PolicyConfig.model_validate(data) == c


def test_cpu_lists_accept_id_lists() -> None:
    assert PolicyConfig.model_validate({"reservedCPUs": [0, 1, 5]}).reserved_cpus == CPUSet([0, 1, 5])
    with pytest.raises(ValidationError, match="reservedCPUs"):
        PolicyConfig.model_validate({"reservedCPUs": [0, True]})
