"""Crash safety at random: 50 cycles of random work with the agent killed at a random moment.

Each cycle kills the agent (an armed crash point, including a checkpoint slot torn mid-write, or a
SIGKILL a few milliseconds into an operation), restarts it and checks that the agent, its
checkpoint, the CDI specs, the runtime and the kubelet agree (``testkit.crashsoak``). The
seed is random unless ``TOPODRA_SOAK_SEED`` is set; a failure names it, so it can be replayed with
``python -m testkit.crashsoak --seed N``. The long soak is that command (1,000 cycles).
"""

from __future__ import annotations

import asyncio
import os
import random

import pytest
from testkit.crashsoak import run_soak

CYCLES = 50


@pytest.mark.slow
def test_random_crash_restart_cycles_lose_and_double_nothing() -> None:
    seed = int(os.environ.get("TOPODRA_SOAK_SEED") or random.randrange(1 << 30))
    report = asyncio.run(run_soak(CYCLES, seed))
    assert report.cycles == CYCLES
    assert sum(report.kills.values()) >= CYCLES, "every cycle ends with the agent killed"
    assert report.ops["start"] > 0
    assert report.ops["delete"] > 0
