"""The one interface through which an acceleration takes part in the plain search.

At every ``allocateOne`` call that looks for a device (a ``Slot``), the search asks its
accelerations in order (last-request solver, dead-state memo, pruning by counting, mask scan)
and then runs its own device loop. An acceleration answers only in one of two ways:

- ``True`` / ``False``: what the plain search would answer for this slot. It has then added to
  the call's ``SearchStats`` exactly the work the plain search would have counted (calls,
  visits, checks, CEL evaluations; the Filter budget is charged the same way, so the timeout
  falls where it would) and left the search state as the plain search would leave it (for
  ``True``: the devices picked, the rest of the search completed by the search itself);
- ``None``: don't know. The next acceleration is asked, and in the end the plain loop runs.

``answer_rest`` is the same question for the rest of a device loop already under way (the
device at ``pos - 1`` was just taken back); only the solver answers it.

A wrapper such as the memo may run the steps after it (``Search.answer(slot, after=...)``) and
return their answer: that is the plain search's answer too.
"""

from __future__ import annotations

from typing import Protocol

from topodra.sim.allocator.types import Slot

__all__ = ["Acceleration"]


class Acceleration(Protocol):
    def answer(self, at: Slot) -> bool | None:
        """allocateOne's answer for ``at`` as the plain search would give it, or None (don't know)."""
        ...

    def answer_rest(self, at: Slot, pos: int) -> bool | None:
        """The answer of ``at``'s device loop continued from position ``pos``, or None."""
        ...
