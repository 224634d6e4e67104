"""Pruning by counting: a slot whose request cannot be completed from here is decided without
walking it.

When the acceptable devices left (free, selected, fitting, untainted, accepted by the
constraints already fixed, grouped by the values the unfixed ``matchAttribute`` constraints
would fix) are fewer than the slots still to fill in every group, the plain search would try
every combination and fail. What it would count in doing so is a closed form
(``hopeless_group_work``), added in bulk. Declines (don't know) where counting cannot decide:
counters on the node (a rejection leaves them charged) or a ``distinctAttribute`` on the
request.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from topodra.sim.allocator.constraints import lookup_attribute
from topodra.sim.allocator.results import AllocationError
from topodra.sim.allocator.taints import taint_prevents_allocation
from topodra.sim.allocator.types import Slot

if TYPE_CHECKING:
    from topodra.sim.allocator.bitsets import Bitsets
    from topodra.sim.allocator.search import Search

__all__ = ["Prune", "hopeless_group_work"]


class Prune:
    def __init__(self, search: Search, bits: Bitsets) -> None:
        self.s = search
        self.bits = bits

    def answer(self, at: Slot) -> bool | None:
        s = self.s
        if s.has_counters or self.bits.distinct_applies(at.ci, at.rd, at.rkey):
            return None
        groups = self._groups(at)
        if groups is None:
            return None
        checked, free_positions, by_group = groups
        rd, rkey = at.rd, at.rkey
        # Every group is too small: the scheduler's loop visits everything from ``start``.
        for pos in free_positions:
            s.is_selectable(s.cands[pos], rd, rkey, True)

        def checks_from(t: int) -> int:
            """Checked positions at ``t`` or later."""
            return len(checked) - bisect.bisect_left(checked, t)

        D = s.D
        calls, visits, checks = 1, D - at.start, checks_from(at.start)
        for positions in by_group:
            g_calls, g_visits, g_checks = hopeless_group_work(positions, checks_from, D)
            calls += g_calls
            visits += g_visits
            checks += g_checks
        s.stats.calls -= 1  # this call was counted on entry
        s.stats.pruned += 1
        s.add_counted(calls, visits, checks)
        return False

    def answer_rest(self, at: Slot, pos: int) -> bool | None:
        return None

    def _groups(self, at: Slot) -> tuple[list[int], list[int], list[list[int]]] | None:
        """Positions reaching allocateDevice, the free positions, and the accepted positions by
        group; None as soon as some group could fill the slots left (then the search must walk)."""
        s = self.s
        ci, rd = at.ci, at.rd
        need = rd.num_devices - at.di
        cons = [c for c in s.constraints[ci] if c.matches(rd.base, rd.sub)]
        unfixed = [c for c in cons if c.num == 0]
        fixed = [c for c in cons if c.num > 0]
        spec = rd.spec
        groups: dict[Any, list[int]] = {}
        checked: list[int] = []  # positions reaching allocateDevice
        first_error: AllocationError | None = None
        free_positions: list[int] = []
        for pos in range(at.start, s.D):
            cand = s.cands[pos]
            if spec.admin_access:
                if ci in s.allocating.get(cand.id, ()):
                    continue
            elif s.device_in_use(cand):
                continue
            free_positions.append(pos)
            try:
                sel = s.is_selectable(cand, rd, at.rkey, False)
            except AllocationError as e:
                if first_error is None:
                    first_error = e
                continue
            if not sel or not s.cmp_request_over_capacity(cand, spec):
                continue
            checked.append(pos)
            key = _group_key(cand.device, cand.pool.driver, pos, spec, fixed, unfixed)
            if key is None:
                continue
            g = groups.setdefault(key, [])
            g.append(pos)
            if len(g) >= need:
                return None
        if first_error is not None:
            raise first_error
        return checked, free_positions, list(groups.values())


def _group_key(device: Any, driver: str, pos: int, spec: Any, fixed: list[Any], unfixed: list[Any]) -> tuple[Any, ...] | None:
    """The group of an accepted device (the values the unfixed constraints would fix), or None
    when a taint or a fixed constraint rejects it."""
    if taint_prevents_allocation(device, spec):
        return None
    for c in fixed:
        if not c.accepts(lookup_attribute(device, driver, c.name)):
            return None
    parts = []
    for c in unfixed:
        v = lookup_attribute(device, driver, c.name)
        if v is None:
            return None
        parts.append(("list", pos) if v[0] == "list" else v)
    return tuple(parts)


def hopeless_group_work(positions: Sequence[int], checks_from: Callable[[int], int], D: int) -> tuple[int, int, int]:
    """The scheduler's calls, visits and checks for trying every choice among ``positions`` (the
    accepted devices of one group, ascending) when none can complete the request: each position
    starts a subtree that visits the devices after it and tries the later positions in turn.
    ``checks_from(t)``: how many checked positions are at ``t`` or later; ``D``: devices in all.
    One formula for ``Prune`` and the first-fit shortcut (``firstfit``)."""
    s_calls = s_visits = s_checks = 0
    for a in reversed(positions):
        g_calls = 1 + s_calls
        g_visits = (D - a - 1) + s_visits
        g_checks = checks_from(a + 1) + s_checks
        s_calls += g_calls
        s_visits += g_visits
        s_checks += g_checks
    return s_calls, s_visits, s_checks
