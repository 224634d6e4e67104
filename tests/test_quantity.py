"""CPU and memory amounts as the kubelet reads them: the one conversion the policy and the playground share."""

from __future__ import annotations

import pytest

from topodra.quantity import QuantityError, cpu_milli, memory_bytes


@pytest.mark.parametrize(
    ("value", "milli"),
    [(2, 2000), ("750m", 750), ("1.5", 1500), (0.25, 250), ("0.0001", 1), ("1.5m", 2), ("2e0", 2000), ("1k", 1_000_000)],
)
def test_cpu_milli_rounds_up_like_milli_value(value: object, milli: int) -> None:
    assert cpu_milli(value) == milli


@pytest.mark.parametrize(
    ("value", "size"),
    [("512Mi", 512 << 20), ("1G", 10**9), (7, 7), ("1.1Gi", 1181116007), ("0.5", 1), ("1m", 1), ("1e3", 1000)],
)
def test_memory_bytes_rounds_up_like_value(value: object, size: int) -> None:
    assert memory_bytes(value) == size


@pytest.mark.parametrize("value", ["-1", "two", "", True, None, float("nan"), "1K", "1e99"])
def test_bad_amounts_name_the_field(value: object) -> None:
    with pytest.raises(QuantityError, match=r"^limits\.cpu: expected a CPU quantity"):
        cpu_milli(value, "limits.cpu")
    with pytest.raises(QuantityError, match=r"^memory: expected a memory quantity"):
        memory_bytes(value)


def test_negative_amounts_say_so() -> None:
    with pytest.raises(QuantityError, match="which is negative"):
        memory_bytes("-1Mi")
