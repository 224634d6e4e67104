"""Group numbers stay stable while CPUs go offline and online (``topology.follow``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from testkit.sysfs_writer import publish_sysfs, with_offline

from topodra.cpuset import CPUSet
from topodra.topology.follow import carry_numbers
from topodra.topology.model import CPUInfo, Topology
from topodra.topology.synthetic import synthetic_topology
from topodra.topology.sysfs import read_topology

MACHINE = synthetic_topology("2s1d1n1l4c2t")  # 16 CPUs, cores (0,8) (1,9) ... two packages

_FIELDS = ("package", "die", "cluster", "core", "l2", "l3")


def _numbers(t: Topology) -> dict[int, tuple[int | None, ...]]:
    return {c: tuple(getattr(i, f) for f in _FIELDS) for c, i in t.cpus.items()}


def test_the_reader_renumbers_after_a_hotplug_and_carrying_undoes_it(tmp_path: Path) -> None:
    publish_sysfs(MACHINE, tmp_path / "m")
    before = read_topology(tmp_path / "m")
    publish_sysfs(with_offline(MACHINE, CPUSet([0, 8])), tmp_path / "m")  # core 0 wholly offline
    after = read_topology(tmp_path / "m")
    assert after.cpus[1].core != before.cpus[1].core  # the reader numbers by lowest online CPU
    carried = carry_numbers(before.cpus, after)
    assert dict(_numbers(carried).items()) == {c: _numbers(before)[c] for c in carried.cpus}
    assert carried.cpus_of_core(before.cpus[1].core) == CPUSet([1, 9])


def test_a_group_never_seen_gets_a_number_nobody_had(tmp_path: Path) -> None:
    # the agent started with core (1,9) offline; it comes online later
    publish_sysfs(with_offline(MACHINE, CPUSet([1, 9])), tmp_path / "m")
    start = read_topology(tmp_path / "m")
    publish_sysfs(MACHINE, tmp_path / "m")
    now = carry_numbers(start.cpus, read_topology(tmp_path / "m"))
    for c, info in start.cpus.items():
        assert now.cpus[c].core == info.core
    assert now.cpus[1].core == now.cpus[9].core
    assert now.cpus[1].core not in {i.core for i in start.cpus.values()}


def test_nothing_to_carry_returns_the_same_machine() -> None:
    assert carry_numbers(MACHINE.cpus, MACHINE) is MACHINE
    assert carry_numbers({}, MACHINE) is MACHINE


@settings(max_examples=40, deadline=None)
@given(steps=st.lists(st.lists(st.sampled_from(list(MACHINE.online)), max_size=12, unique=True), max_size=5))
def test_numbers_are_stable_and_distinct_over_any_hotplug_sequence(steps: list[list[int]]) -> None:
    seen: dict[int, CPUInfo] = dict(MACHINE.cpus)
    for off in steps:
        if CPUSet(off) == MACHINE.online:
            continue
        current = with_offline(MACHINE, CPUSet(off)) if off else MACHINE
        # renumber like the reader does (by lowest online CPU), then carry
        shuffled = _renumbered_by_lowest(current)
        got = carry_numbers(seen, shuffled)
        for c, info in got.cpus.items():
            for f in _FIELDS:
                assert getattr(info, f) == getattr(MACHINE.cpus[c], f), (c, f)
        seen.update(got.cpus)


def _renumbered_by_lowest(t: Topology) -> Topology:
    from dataclasses import replace

    cpus = dict(t.cpus)
    for f in ("die", "cluster", "core"):
        firsts = sorted({min(c for c in cpus if getattr(cpus[c], f) == getattr(i, f)) for i in cpus.values()})
        index = {getattr(cpus[c], f): n for n, c in enumerate(firsts)}
        numbers: dict[int, dict[str, Any]] = {c: {f: index[getattr(i, f)]} for c, i in cpus.items()}
        cpus = {c: replace(i, **numbers[c]) for c, i in cpus.items()}
    return replace(t, cpus=cpus)
