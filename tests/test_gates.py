"""``--feature-gates`` as Kubernetes components read it, for the gates topodra models."""

from __future__ import annotations

import pytest

from topodra.gates import (
    DEFAULTS,
    LIST_TYPE_ATTRIBUTES,
    NODE_ALLOCATABLE,
    FeatureGateError,
    feature_gates,
    parse_feature_gates,
)


def test_defaults_are_136s() -> None:
    assert DEFAULTS == {NODE_ALLOCATABLE: False, LIST_TYPE_ATTRIBUTES: False}  # alpha in 1.36
    assert feature_gates() == DEFAULTS
    assert feature_gates({NODE_ALLOCATABLE: True}) == {NODE_ALLOCATABLE: True, LIST_TYPE_ATTRIBUTES: False}


@pytest.mark.parametrize(("text", "gates"), [
    ("", {}),
    ("DRANodeAllocatableResources=true", {NODE_ALLOCATABLE: True}),
    (" DRANodeAllocatableResources = False ,", {NODE_ALLOCATABLE: False}),
    ("DRANodeAllocatableResources=1", {NODE_ALLOCATABLE: True}),
])
def test_parsed_as_component_base_parses_them(text: str, gates: dict[str, bool]) -> None:
    assert parse_feature_gates(text) == gates


@pytest.mark.parametrize(("text", "message"), [
    ("DRANodeAllocatableResources", "missing bool value for DRANodeAllocatableResources"),
    ("DRANodeAllocatableResources=yes", "invalid value of DRANodeAllocatableResources=yes"),
    ("DRAFoo=true", r"unrecognized feature gate: DRAFoo \(topodra models DRAListTypeAttributes, DRANodeAllocatableResources\)"),
])
def test_bad_values_say_which_entry(text: str, message: str) -> None:
    with pytest.raises(FeatureGateError, match=message):
        parse_feature_gates(text)


def test_an_unknown_override_is_refused_too() -> None:
    with pytest.raises(FeatureGateError, match="unrecognized feature gate: DRAFoo"):
        feature_gates({"DRAFoo": True})
