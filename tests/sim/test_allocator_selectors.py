"""The allocator's selector shortcut: a selector that reads only ``device.driver`` is evaluated once
per driver. It must give what evaluating it on each device gives (value or error), and must not
claim expressions that read anything else."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from topodra.sim.allocator import Allocator, reads_only_driver
from topodra.sim.cel import CelError, compile_selector
from topodra.sim.objects import parse_slice

from .builders import DRIVER, attrs, claim, dclass, device, req, slice_

#: terms that read only the driver (some through literals that look like other fields)
DRIVER_TERMS = [
    f'device.driver == "{DRIVER}"',
    "device.driver == 'other.example.com'",
    'device . driver.startsWith("dra")',
    "size(device.driver) > 3",
    '"""device.attributes""" != device.driver',
    "\"device.capacity['x']\" == device.driver",
    "true",
    "device.driver.endsWith('.com') ? 1 > 0 : 0 > 1",
    "int(device.driver) > 0",  # an error on every device of the driver
]
#: terms that read more than the driver
OTHER_TERMS = [
    f'device.attributes["{DRIVER}"].n > 1',
    f'.device.attributes["{DRIVER}"].n == 0',
    f'"\'\'\'" + device.attributes["{DRIVER}"].s + "\'\'\'" == "x"',
    f'device.capacity["{DRIVER}"].mem.compareTo(quantity("1Gi")) > 0',
    "device.allowMultipleAllocations",
    'device["driver"] == "x"',
    "has(device.attributes.x)",
    f'device.driver == "{DRIVER}" // && device.attributes["{DRIVER}"].n > 1',
    f'[device].all(d, d.driver == "{DRIVER}")',
]


@st.composite
def expression(draw: Any) -> tuple[str, bool]:
    """An expression of 1-3 terms and whether some term reads more than the driver."""
    terms = draw(st.lists(st.tuples(st.booleans(), st.integers(0, 99)), min_size=1, max_size=3))
    parts, other = [], False
    for is_other, k in terms:
        pool = OTHER_TERMS if is_other else DRIVER_TERMS
        parts.append(f"({pool[k % len(pool)]})")
        other = other or is_other
    ops = draw(st.lists(st.sampled_from([" && ", " || "]), min_size=len(parts) - 1, max_size=len(parts) - 1))
    out = parts[0]
    for op, p in zip(ops, parts[1:], strict=True):
        out += op + p
    return out, other


def _outcome(expr: str, dev: Any) -> tuple[str, Any]:
    try:
        return ("ok", compile_selector(expr).matches(dev.cel()))
    except CelError as e:
        return (type(e).__name__, str(e))


def _device(name: str, driver: str, n: int | None, s: str | None, mem: str | None) -> Any:
    a = attrs(**{k: v for k, v in (("n", n), ("s", s)) if v is not None})
    d = device(name, a, {"mem": mem} if mem else None)
    return parse_slice(slice_(f"sl-{name}", "node-1", [d], driver=driver)).devices[0]


devices_of_one_driver = st.lists(
    st.tuples(st.one_of(st.none(), st.integers(0, 3)), st.one_of(st.none(), st.sampled_from(["x", "y"])), st.one_of(st.none(), st.sampled_from(["1Mi", "2Gi"]))),
    min_size=2,
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(expression(), st.sampled_from([DRIVER, "other.example.com", "d.example.com"]), devices_of_one_driver)
def test_driver_only_selector_has_one_outcome_per_driver(ex: tuple[str, bool], driver: str, shapes: list[Any]) -> None:
    expr, reads_other = ex
    assert reads_only_driver(expr) == (not reads_other)
    outcomes = {_outcome(expr, _device(f"d{i}", driver, *shape)) for i, shape in enumerate(shapes)}
    if reads_only_driver(expr):
        assert len(outcomes) == 1


def test_one_evaluation_per_driver_with_the_same_results() -> None:
    """16 devices with distinct contents, a driver-only class: one engine evaluation (a class that
    reads an attribute needs one per device), the same devices and counted evaluations as usual."""
    devs = [device(f"d{i}", attrs(n=i)) for i in range(16)]
    slices = [slice_("s", "node-1", devs)]
    claims = [claim("c", req("r", "cls", 16))]
    by_driver = Allocator(slices, [dclass("cls", f'device.driver == "{DRIVER}"')], budget=None)
    by_device = Allocator(slices, [dclass("cls", f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].n >= 0')], budget=None)
    got1, st1 = by_driver.allocate_with_stats("node-1", claims)
    got2, st2 = by_device.allocate_with_stats("node-1", claims)
    assert got1 is not None
    assert got2 is not None
    assert [r.device for r in got1[0].results] == [r.device for r in got2[0].results] == [f"d{i}" for i in range(16)]
    assert (st1.engine_evals, st2.engine_evals) == (1, 16)
    assert st1.cel_evals == st2.cel_evals == 16  # the scheduler's count does not change
