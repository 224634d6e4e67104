"""The agent refuses to start beside a kubelet whose CPU manager is ``static``: one line naming the
setting and the file, before the runtime or the kubelet saw it."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from topodra.agent.agent import Agent, AgentError
from topodra.agent.config import parse_config
from topodra.agent.cpumanager import CPUManagerError, check_cpu_manager, kubelet_cpu_manager_policy
from topodra.embedded.runtime import EmbeddedRuntime

STATIC_STATE = {"policyName": "static", "defaultCpuSet": "0-7", "entries": {}, "checksum": 1}


@pytest.fixture
def base() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="tdcm-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_no_files_and_policy_none_pass(base: Path) -> None:
    assert kubelet_cpu_manager_policy(base / "config.yaml", base / "cpu_manager_state") is None
    (base / "config.yaml").write_text("kind: KubeletConfiguration\ncpuManagerPolicy: none\n")
    (base / "cpu_manager_state").write_text(json.dumps({**STATIC_STATE, "policyName": "none"}))
    check_cpu_manager(base / "config.yaml", base / "cpu_manager_state")


def test_static_in_the_config_names_the_setting_and_the_file(base: Path) -> None:
    (base / "config.yaml").write_text("kind: KubeletConfiguration\ncpuManagerPolicy: static\n")
    with pytest.raises(CPUManagerError) as err:
        check_cpu_manager(base / "config.yaml", base / "cpu_manager_state")
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith(f"the kubelet runs cpuManagerPolicy: static ({base / 'config.yaml'}); topodra requires cpuManagerPolicy: none")


def test_the_running_kubelets_state_wins_over_its_config(base: Path) -> None:
    # Configured none but still running static (not restarted since): the state file says so.
    (base / "config.yaml").write_text("cpuManagerPolicy: none\n")
    (base / "cpu_manager_state").write_text(json.dumps(STATIC_STATE))
    assert kubelet_cpu_manager_policy(base / "config.yaml", base / "cpu_manager_state") == ("static", base / "cpu_manager_state")


def test_a_malformed_file_is_reported_not_ignored(base: Path) -> None:
    (base / "cpu_manager_state").write_text("{not json")
    with pytest.raises(CPUManagerError, match=r"cpu_manager_state: not JSON"):
        check_cpu_manager(base / "config.yaml", base / "cpu_manager_state")
    (base / "cpu_manager_state").unlink()
    (base / "config.yaml").write_text("- a list\n")
    with pytest.raises(CPUManagerError, match=r"expected a mapping, got list"):
        check_cpu_manager(base / "config.yaml", base / "cpu_manager_state")


def _config(base: Path, **extra: object) -> dict[str, object]:
    for sub in ("kubelet/plugins_registry", "cdi", "state"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    return {
        "nodeName": "n1",
        "topology": "synthetic:1s4c2t",
        "kubeletRoot": str(base / "kubelet"),
        "cdiDir": str(base / "cdi"),
        "stateDir": str(base / "state"),
        "metricsAddress": "",
        "nri": {"socket": str(base / "nri.sock")},
        "kube": {"server": "http://127.0.0.1:9"},
        **extra,
    }


def test_the_agent_refuses_to_register_beside_a_static_kubelet(base: Path) -> None:
    cfg = _config(base)
    (base / "kubelet" / "cpu_manager_state").write_text(json.dumps(STATIC_STATE))

    async def main() -> None:
        async with EmbeddedRuntime(base / "nri.sock") as runtime:
            agent = Agent(parse_config(cfg), reload_interval=3600)
            with pytest.raises(AgentError, match=r"^the kubelet runs cpuManagerPolicy: static \(.*cpu_manager_state\)"):
                await agent.start()
            assert runtime.all_plugins() == []
            assert list((base / "kubelet" / "plugins_registry").iterdir()) == []

    asyncio.run(main())


def test_the_kubelet_config_path_is_configurable(base: Path) -> None:
    other = base / "etc-kubelet.yaml"
    other.write_text("cpuManagerPolicy: static\n")
    config = parse_config(_config(base, kubeletConfig=str(other)))
    assert config.kubelet_config_file == other
    assert config.cpu_manager_state == base / "kubelet" / "cpu_manager_state"

    async def main() -> None:
        agent = Agent(config, reload_interval=3600)
        with pytest.raises(AgentError, match=r"etc-kubelet\.yaml"):
            await agent.start()

    asyncio.run(main())
