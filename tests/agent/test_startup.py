"""Ready before registering: the agent takes every local resource (ports, sockets, state
directory, checkpoint) before the runtime or the kubelet sees it, so a taken port ends the start
with one clear line and no peer ever saw a plugin that then vanished."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import topodra
from topodra.agent.agent import Agent, AgentError
from topodra.agent.config import parse_config
from topodra.embedded.runtime import EmbeddedRuntime

SRC = str(Path(topodra.__file__).resolve().parents[1])


@pytest.fixture
def base() -> Iterator[Path]:
    # unix socket paths are limited to 108 bytes: keep the directory short.
    path = Path(tempfile.mkdtemp(prefix="tdst-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _config(base: Path, **extra: object) -> dict[str, object]:
    for sub in ("kubelet/plugins_registry", "cdi", "state"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    return {
        "nodeName": "n1",
        "topology": "synthetic:1s4c2t",
        "kubeletRoot": str(base / "kubelet"),
        "cdiDir": str(base / "cdi"),
        "stateDir": str(base / "state"),
        "nri": {"socket": str(base / "nri.sock")},
        "kube": {"server": "http://127.0.0.1:9"},  # never reached: the start fails first
        **extra,
    }


def _assert_never_registered(runtime: EmbeddedRuntime, base: Path) -> None:
    assert runtime.all_plugins() == [], runtime.log
    assert list((base / "kubelet" / "plugins_registry").iterdir()) == []  # the kubelet saw nothing


def test_port_taken_the_agent_exits_and_never_registered(base: Path) -> None:
    """The agent process, its metrics port taken: exit 1 with one line naming the address, and
    neither the runtime double nor the kubelet's registration directory ever saw it."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    cfg = base / "agent.yaml"
    cfg.write_text(json.dumps(_config(base, metricsAddress=f"127.0.0.1:{port}")))

    async def main() -> None:
        async with EmbeddedRuntime(base / "nri.sock") as runtime:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p)}
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "topodra", "agent", "--config", str(cfg),
                env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )
            out, err = await asyncio.wait_for(proc.communicate(), 60)
            assert proc.returncode == 1, (out, err)
            lines = err.decode().strip().splitlines()
            assert lines == [f"error: cannot listen on 127.0.0.1:{port} for /healthz, /metrics, /readyz: "
                             "Address already in use"], err.decode()
            _assert_never_registered(runtime, base)

    try:
        asyncio.run(main())
    finally:
        taken.close()


def test_state_socket_in_use_fails_the_start_before_any_registration(base: Path) -> None:
    """The same rule for the /state socket (in-process: a second agent on the same state dir)."""

    async def main() -> None:
        async with EmbeddedRuntime(base / "nri.sock") as runtime:
            first = Agent(parse_config(_config(base, metricsAddress="", dra={"enabled": False})), reload_interval=3600)
            await first.start()
            try:
                await runtime.wait_for_plugins(1)
                before = len(runtime.all_plugins())
                second = Agent(parse_config(_config(base, metricsAddress="")), reload_interval=3600)
                with pytest.raises(AgentError, match=r"cannot listen on unix:.*state\.sock for /state: .*in use"):
                    await second.start()
                assert len(runtime.all_plugins()) == before
                assert list((base / "kubelet" / "plugins_registry").iterdir()) == []
                assert second.http is None
                assert second.state_http is None
            finally:
                await first.stop()

    asyncio.run(main())


def test_state_is_local_and_the_metrics_address_does_not_serve_it(base: Path) -> None:
    """Defaults: /metrics and the probes on metricsAddress, /state only on the unix socket in
    stateDir (mode 0600), which `topodra agent --state` reads."""
    from typer.testing import CliRunner

    from topodra.agent.http import get
    from topodra.cli import app

    cfg = base / "agent.yaml"
    cfg.write_text(json.dumps(_config(base, metricsAddress="127.0.0.1:0", nri={"enabled": False}, dra={"enabled": False})))

    async def main() -> None:
        agent = Agent(parse_config(json.loads(cfg.read_text())), reload_interval=3600)
        await agent.start()
        try:
            assert agent.http is not None
            metrics = f"127.0.0.1:{agent.http.port}"
            assert (await get(metrics, "/metrics"))[0] == 200
            assert (await get(metrics, "/healthz"))[0] == 200
            assert (await get(metrics, "/state"))[0] == 404
            sock = base / "state" / "state.sock"
            assert sock.stat().st_mode & 0o077 == 0
            status, body = await get(f"unix:{sock}", "/state")
            assert status == 200
            assert json.loads(body)["node"] == "n1"
            assert (await get(f"unix:{sock}", "/metrics"))[0] == 404
            r = await asyncio.to_thread(CliRunner().invoke, app, ["agent", "--config", str(cfg), "--state"])
            assert r.exit_code == 0, r.output
            assert json.loads(r.output)["node"] == "n1"
        finally:
            await agent.stop()
        assert not (base / "state" / "state.sock").exists()
        r = await asyncio.to_thread(CliRunner().invoke, app, ["agent", "--config", str(cfg), "--state"])
        assert r.exit_code == 2
        assert f"no agent answers on unix:{base}/state/state.sock" in " ".join(r.output.split())

    asyncio.run(main())


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"kube": {"server": "https://127.0.0.1:9", "tokenFile": "/nonexistent/token"}},
         "cannot set up the Kubernetes API client (kube section): No such file or directory: /nonexistent/token"),
        ({"kube": {"kubeconfig": "/nonexistent/kubeconfig"}}, "cannot set up the Kubernetes API client"),
        ({"cdiDir": "/proc/no/cdi"}, "cannot create /proc/no/cdi"),
    ],
)
def test_local_start_failures_are_one_line_and_register_nothing(
    base: Path, extra: dict[str, object], needle: str
) -> None:
    async def main() -> None:
        async with EmbeddedRuntime(base / "nri.sock") as runtime:
            agent = Agent(parse_config({**_config(base, metricsAddress="127.0.0.1:0"), **extra}), reload_interval=3600)
            with pytest.raises(AgentError) as err:
                await agent.start()
            assert needle in str(err.value)
            assert "\n" not in str(err.value)
            _assert_never_registered(runtime, base)
            assert agent.http is None  # released
            assert not (base / "state" / "state.sock").exists()

    asyncio.run(main())
