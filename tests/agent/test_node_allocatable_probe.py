"""The agent publishes nodeAllocatableResourceMappings when the API server keeps them (``devices.nodeAllocatable``:
``auto`` probes once with a dry-run create, ``on``, ``off``), and says so in one line."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any

import pytest

from topodra.gates import NODE_ALLOCATABLE
from topodra.playground.world import Playground
from topodra.topology import synthetic_topology

TOPO = synthetic_topology("1s1n1l4c2t")


def _published(switch: str | None, gate: bool) -> tuple[list[Any], list[str], set[str]]:
    """(each published device's mappings, the agent's notes about them, slices whose fields the server dropped)."""

    async def main() -> tuple[list[Any], list[str], set[str]]:
        overrides = {"devices": {"nodeAllocatable": switch}} if switch else {}
        async with Playground(topology=TOPO, gates={NODE_ALLOCATABLE: gate}, agent_overrides=overrides) as pg:
            assert pg.agent is not None
            reconciler = pg.agent.publisher.reconciler
            assert reconciler is not None
            await reconciler.wait_written(10)
            mappings = [d.get("nodeAllocatableResourceMappings") for s in pg.slices() for d in s["spec"].get("devices", [])]
            notes = [n for n in pg.agent.notes.recent(50) if "nodeAllocatableResourceMappings" in n]
            return mappings, notes, set(reconciler.dropped_fields)

    return asyncio.run(main())


def test_auto_publishes_them_to_a_server_that_keeps_them() -> None:
    mappings, notes, dropped = _published(None, gate=True)
    assert mappings == [{"cpu": {"allocationMultiplier": "1"}}] * (len(TOPO.online) - 1)  # the shared floor is not offered
    assert len(notes) == 1
    assert "published; the API server keeps them (DRANodeAllocatableResources on)" in notes[0]
    assert not dropped


def test_auto_leaves_them_out_for_a_server_that_drops_them() -> None:
    mappings, notes, dropped = _published(None, gate=False)
    assert mappings == [None] * (len(TOPO.online) - 1)
    assert len(notes) == 1
    assert "not published; the API server drops them (DRANodeAllocatableResources off)" in notes[0]
    assert not dropped  # nothing was sent that the server dropped


def test_on_publishes_them_regardless_and_the_dropped_field_is_reported() -> None:
    mappings, notes, dropped = _published("on", gate=False)
    assert mappings == [None] * (len(TOPO.online) - 1)
    assert notes == [n for n in notes if "published (devices.nodeAllocatable: on)" in n]
    assert len(notes) == 1
    assert dropped  # the server's answer lacks them: reported by the slice writes


def test_off_never_builds_them() -> None:
    mappings, notes, _ = _published("off", gate=True)
    assert mappings == [None] * (len(TOPO.online) - 1)
    assert len(notes) == 1
    assert "not published (devices.nodeAllocatable: off)" in notes[0]


def test_the_probe_line_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="topodra")
    _published(None, gate=True)
    lines = [r.getMessage() for r in caplog.records if "nodeAllocatableResourceMappings" in r.getMessage()]
    assert len(lines) == 1


def test_a_reload_of_the_switch_republishes_at_once(caplog: pytest.LogCaptureFixture) -> None:
    """auto found a server that drops the mappings; a reload to on sends them without a restart
    (this server drops them again, and the slice write says so)."""

    async def main() -> tuple[set[str], set[str], int]:
        async with Playground(topology=TOPO, gates={NODE_ALLOCATABLE: False}) as pg:
            agent = pg.agent
            assert agent is not None
            reconciler = agent.publisher.reconciler
            assert reconciler is not None
            await reconciler.wait_written(10)
            before = set(reconciler.dropped_fields)
            config = agent.node.config
            await agent.reload(config.model_copy(update={"devices": replace(config.devices, node_allocatable="on")}))
            await reconciler.wait_written(10)
            puts = sum(1 for m, p in pg.api.requests if m == "PUT" and "resourceslices" in p)
            return before, set(reconciler.dropped_fields), puts

    caplog.set_level(logging.ERROR, logger="topodra.dra.reconciler")
    before, after, puts = asyncio.run(main())
    assert before == set()
    assert after == {"playground-native.cpu-0"}
    assert puts == 1
