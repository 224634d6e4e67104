"""The one parser of ``status.allocation``: what the agent and the simulator both read."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topodra.dra.allocation import AllocationFormatError, parse_allocation
from topodra.quantity import Quantity
from topodra.sim.allocator import ClaimAllocation, DeviceResult, allocation_of_claim

SHAPES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["request", "driver", "pool", "device", "results", "devices", "allocation", "consumedCapacity", "shareID", "tolerations", "config", "nodeSelector", "cpu"]), inner, max_size=4),
    max_leaves=12,
)


@given(SHAPES)
def test_any_shape_parses_or_names_the_field(status: Any) -> None:
    try:
        parse_allocation({"status": status})
    except AllocationFormatError as e:
        assert "status" in str(e)


def test_what_the_simulator_writes_reads_back_the_same() -> None:
    written = ClaimAllocation(
        "ns/c",
        (
            DeviceResult("cpus", "native.cpu", "node-a", "cpu3"),
            DeviceResult("g/p", "native.cpu", "node-a", "numa0", share_id="s-1", consumed_capacity={"cpu": Quantity(Fraction(4))}),
        ),
        ({"source": "FromClass", "opaque": {"driver": "native.cpu", "parameters": {}}},),
        {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]},
    )
    claim = {"metadata": {"name": "c", "namespace": "ns"}, "status": {"allocation": written.to_api()}}
    assert allocation_of_claim(claim) == written
    parsed = parse_allocation(claim)
    assert parsed is not None
    assert [r.device for r in parsed.results] == ["cpu3", "numa0"]


@pytest.mark.parametrize(
    ("allocation", "needle"),
    [
        ({"devices": {"results": [{"driver": "d", "pool": "p", "device": "x"}]}}, "results[0].request is missing"),
        ({"devices": {"results": "no"}}, "results is not a list"),
        ({"devices": {"results": [{"request": "r", "driver": "d", "pool": "p", "device": "x", "consumedCapacity": {"cpu": "1.5.2"}}]}}, "invalid quantity '1.5.2'"),
    ],
)
def test_malformed_allocations_name_the_field(allocation: dict[str, Any], needle: str) -> None:
    with pytest.raises(AllocationFormatError, match=r"status\.allocation\.devices") as e:
        parse_allocation({"status": {"allocation": allocation}})
    assert needle in str(e.value)


def test_no_allocation_is_none() -> None:
    assert parse_allocation({}) is None
    assert parse_allocation({"status": {}}) is None
    assert parse_allocation({"status": {"allocation": {"devices": {"results": []}}}}) is None
