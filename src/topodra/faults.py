"""Crash points: deterministic process crashes for restart-safety tests.

``crash_point("prepare.saved")`` kills the process on the spot (``os._exit``,
no cleanup, no flush: as close to SIGKILL as a process can do to itself) when
``TOPODRA_CRASH_AT`` names that point, e.g. ``TOPODRA_CRASH_AT=prepare.saved``
or ``prepare.saved@2`` (at its second pass). Unset, it costs one dict lookup.
The tests start the agent as a child process with a crash point armed, then
restart it and check that no CPU was lost or given out twice.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

__all__ = ["CRASH_EXIT_CODE", "ENV", "POINTS", "armed", "crash_point", "held", "rearm"]

ENV = "TOPODRA_CRASH_AT"
CRASH_EXIT_CODE = 86

#: Every crash point in the code, in flow order (tests iterate over these).
POINTS = (
    "prepare.claimed",  # policy claimed the CPUs; no CDI spec, no checkpoint yet
    "prepare.cdi-written",  # CDI spec on disk; checkpoint not yet written
    "prepare.saved",  # checkpoint written; containers not yet pushed, kubelet not answered
    "prepare.pushed",  # shrunk containers pushed; kubelet not answered
    "unprepare.released",  # policy released; checkpoint still has the claim
    "unprepare.saved",  # checkpoint without the claim; CDI spec still there
    "unprepare.cdi-removed",  # everything recorded; containers not yet widened
    "create.placed",  # CreateContainer placed in the policy; reply not sent
    "stop.removed",  # StopContainer released in the policy; reply not sent
    "checkpoint.torn",  # a checkpoint slot half written (any Prepare/Unprepare save)
)


def _armed() -> dict[str, int]:
    out: dict[str, int] = {}
    for item in os.environ.get(ENV, "").split(","):
        name, _, count = item.strip().partition("@")
        if name:
            out[name] = int(count) if count.isdigit() and int(count) > 0 else 1
    return out


_ARMED = _armed()


def rearm() -> None:
    """Read ``TOPODRA_CRASH_AT`` again (a process forked after import, as the crash soak does)."""
    _ARMED.clear()
    _ARMED.update(_armed())


def armed() -> dict[str, int]:
    """The armed points and how many passes each has left (a copy)."""
    return dict(_ARMED)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """No crash point fires or counts inside: code run on scratch state (the agent's NRI
    warm-up), whose passes are not the ones a test arms."""
    saved = dict(_ARMED)
    _ARMED.clear()
    try:
        yield
    finally:
        _ARMED.clear()
        _ARMED.update(saved)


def crash_point(name: str) -> None:
    """Die here if ``TOPODRA_CRASH_AT`` arms this point (see the module docstring)."""
    if not _ARMED:
        return
    left = _ARMED.get(name)
    if left is None:
        return
    if left > 1:
        _ARMED[name] = left - 1
        return
    sys.stderr.write(f"topodra: crash point {name} reached, exiting\n")
    sys.stderr.flush()
    os._exit(CRASH_EXIT_CODE)
