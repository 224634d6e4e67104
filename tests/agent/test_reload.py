"""The agent watches its configuration file: a valid change applies, an invalid one is ignored."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from topodra.agent.agent import Agent
from topodra.agent.config import load_config
from topodra.cpuset import CPUSet

BASE = "nodeName: n1\ntopology: synthetic:1s4c2t\nmetricsAddress: ''\nstateAddress: ''\nnri: {enabled: false}\ndra: {enabled: false}\n"


def _write(path: Path, text: str, bump: float) -> None:
    path.write_text(text)
    st = path.stat()
    os.utime(path, (st.st_atime, st.st_mtime + bump))  # a distinct mtime even on coarse clocks


def test_file_changes_are_applied_or_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    _write(cfg, BASE + "policy: {reservedCPUs: '0'}\n", 0)

    async def main() -> None:
        agent = Agent(load_config(cfg), config_path=cfg, reload_interval=0.02)
        await agent.start()
        try:
            assert agent.policy.reserved_cpus == CPUSet([0])
            _write(cfg, BASE + "policy: {reservedCPUs: '0-1'}\n", 1)
            for _ in range(200):
                if agent.policy.reserved_cpus == CPUSet([0, 1]):
                    break
                await asyncio.sleep(0.01)
            assert agent.policy.reserved_cpus == CPUSet([0, 1])
            _write(cfg, BASE + "policy: {reservedCPUs: 'nonsense'}\n", 2)
            for _ in range(200):
                if b'topodra_config_reloads_total{result="invalid"} 1.0' in agent.metrics.render():
                    break
                await asyncio.sleep(0.01)
            assert b'topodra_config_reloads_total{result="invalid"} 1.0' in agent.metrics.render()
            assert agent.policy.reserved_cpus == CPUSet([0, 1])  # the bad file changed nothing
            _write(cfg, BASE.replace("n1", "n2") + "policy: {reservedCPUs: '0-1'}\n", 3)
            applied = b'topodra_config_reloads_total{result="applied"} 2.0'
            for _ in range(500):  # wait for the reload of the third file itself
                if applied in agent.metrics.render():
                    break
                await asyncio.sleep(0.01)
            assert applied in agent.metrics.render()
            assert agent.node.config.node_name == "n1"  # restart-only field kept
        finally:
            await agent.stop()

    asyncio.run(main())


def test_reload_applies_only_what_a_fresh_start_would_accept(tmp_path: Path) -> None:
    """The reload runs the --check/start validation first: a file that names a hook that cannot
    be imported changes nothing at all (not even its valid policy part)."""
    cfg = tmp_path / "config.yaml"
    _write(cfg, BASE + "policy: {reservedCPUs: '0'}\n", 0)

    async def main() -> None:
        agent = Agent(load_config(cfg), config_path=cfg, reload_interval=3600)
        await agent.start()
        try:
            before = [d.to_api() for d in agent.node.devices]
            for bad in (
                "policy: {reservedCPUs: '0-1'}\ndevices: {attributeHook: 'no_such_module_xyz:f'}\n",
                "policy: {reservedCPUs: '100-200'}\n",
                "policy: {reservedCPUCount: 1000000}\n",
            ):
                _write(cfg, BASE + bad, 1)
                assert await agent.reload() == {}
                assert agent.policy.reserved_cpus == CPUSet([0])
                assert agent.node.config.devices.attribute_hook is None
                assert [d.to_api() for d in agent.node.devices] == before
            assert b'topodra_config_reloads_total{result="invalid"} 3.0' in agent.metrics.render()
            assert b'result="applied"' not in agent.metrics.render()
            _write(cfg, BASE + "policy: {reservedCPUs: '0-1'}\n", 2)
            await agent.reload()
            assert agent.policy.reserved_cpus == CPUSet([0, 1])
            assert len(agent.node.devices) == len(before)  # CPU 1 reserved now: published tainted
            taints = {d.name: d.taints for d in agent.node.devices if d.taints}
            assert taints == {n: ({"key": "native.cpu/reserved", "effect": "NoSchedule"},) for n in ("cpu0", "cpu1")}
        finally:
            await agent.stop()

    asyncio.run(main())
