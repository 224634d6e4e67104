"""Shared helpers for benchmarks: a result record and timing utilities."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass


@dataclass
class Result:
    """One reported figure. ``met`` is None when there is no goal."""

    name: str
    value: float
    unit: str
    goal: str | None = None
    met: bool | None = None
    note: str = ""
    bench: str = ""

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def time_calls(fn: Callable[[], object], repeat: int) -> list[float]:
    """Wall time of ``repeat`` calls of ``fn``, in seconds each."""
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def percentile(values: list[float], p: float) -> float:
    """The p-th percentile (0..100) by nearest rank."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


def median(values: list[float]) -> float:
    return statistics.median(values)
