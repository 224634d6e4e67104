"""Start agent processes fast, for crash tests that restart the agent hundreds of times.

A new ``python -m topodra agent`` spends a second or more importing (grpc,
lightkube, pydantic, prometheus) before it does anything, which would make a
soak of a thousand crash-restart cycles take hours. The fork server here
imports all that once, then forks each agent from that clean, pre-imported
image: every agent is still its own process, with fresh state, its own
environment (``TOPODRA_CRASH_AT``), killed for real and reaped for real.

The server (``python -m testkit.agentfork``) is synchronous: no event
loop or thread exists when it forks. It reads one JSON request a line on
stdin (``{"argv": [...], "env": {...}, "log": path}``), answers ``pid N``,
and reports ``exit N CODE`` (negative: killed by a signal) when a child ends.

``ForkingPlayground`` is a ``Playground`` whose agent processes come from
such a server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import signal
import sys
from pathlib import Path
from typing import Any

from topodra.playground.world import Playground, PlaygroundError

__all__ = ["AgentForker", "ForkedProcess", "ForkingPlayground", "serve"]


# --- the server (its own process) ------------------------------------------------------------------
def _preload() -> None:
    import topodra.agent.agent
    import topodra.agent.cli
    import topodra.cli
    import topodra.dra.kubeletplugin
    import topodra.dra.reconciler
    import topodra.kube.client
    import topodra.nri.stub
    import topodra.topology.synthetic  # noqa: F401


def _child(request: dict[str, Any]) -> None:
    """In the forked child: become the agent; never returns."""
    code = 1
    try:
        os.setpgid(0, 0)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(log, 2)
        os.environ.update(request.get("env") or {})
        from topodra import faults
        from topodra.cli import main

        faults.rearm()
        sys.argv = ["topodra", *request["argv"]]
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException as exc:
        with contextlib.suppress(Exception):
            os.write(2, f"agent child failed: {exc!r}\n".encode())
    finally:
        os._exit(code)


def serve() -> None:
    """The fork server's loop (see the module docstring)."""
    _preload()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out = sys.stdout
    buffer = b""
    stdin = sys.stdin.fileno()
    children: set[int] = set()
    while True:
        ready, _, _ = select.select([stdin], [], [], 0.01)
        if ready:
            chunk = os.read(stdin, 65536)
            if not chunk:  # the test process is gone: take the agents with us
                for child in children:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(child, signal.SIGKILL)
                break
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                request = json.loads(line)
                out.flush()
                pid = os.fork()
                if pid == 0:
                    _child(request)
                children.add(pid)
                out.write(f"pid {pid}\n")
                out.flush()
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            children.discard(pid)
            out.write(f"exit {pid} {os.waitstatus_to_exitcode(status)}\n")
            out.flush()


# --- the client (the test's event loop) ----------------------------------------------------------
class ForkedProcess:
    """The part of ``asyncio.subprocess.Process`` the playground uses, for a forked agent."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._done = asyncio.get_running_loop().create_future()

    def _exited(self, code: int) -> None:
        self.returncode = code
        if not self._done.done():
            self._done.set_result(code)

    async def wait(self) -> int:
        return await asyncio.shield(self._done)

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class AgentForker:
    """A running fork server: ``await forker.spawn(argv, env, log)``."""

    def __init__(self) -> None:
        self._server: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._pids: asyncio.Queue[int] = asyncio.Queue()
        self._children: dict[int, ForkedProcess] = {}
        self._early: dict[int, int] = {}  # exits reported before the pid was claimed

    async def start(self) -> None:
        import topodra

        src = str(Path(topodra.__file__).resolve().parents[1])
        repo = str(Path(__file__).resolve().parents[1])  # the folder holding testkit/
        pythonpath = os.pathsep.join(p for p in (src, repo, os.environ.get("PYTHONPATH", "")) if p)
        self._server = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "testkit.agentfork",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": pythonpath},
        )
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self._server is not None
        assert self._server.stdout is not None
        async for raw in self._server.stdout:
            words = raw.decode().split()
            if words[:1] == ["pid"]:
                await self._pids.put(int(words[1]))
            elif words[:1] == ["exit"]:
                pid, code = int(words[1]), int(words[2])
                child = self._children.pop(pid, None)
                if child is None:
                    self._early[pid] = code
                else:
                    child._exited(code)

    async def spawn(self, argv: list[str], env: dict[str, str], log: Path) -> ForkedProcess:
        assert self._server is not None
        assert self._server.stdin is not None
        request = {"argv": argv, "env": env, "log": str(log)}
        self._server.stdin.write(json.dumps(request).encode() + b"\n")
        await self._server.stdin.drain()
        pid = await asyncio.wait_for(self._pids.get(), 30)
        child = ForkedProcess(pid)
        if pid in self._early:
            child._exited(self._early.pop(pid))
        else:
            self._children[pid] = child
        return child

    async def stop(self) -> None:
        for child in list(self._children.values()):
            child.kill()
        if self._server is not None:
            if self._server.stdin is not None:
                self._server.stdin.close()
            try:
                await asyncio.wait_for(self._server.wait(), 10)
            except TimeoutError:
                self._server.kill()
                await self._server.wait()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader


class ForkingPlayground(Playground):
    """A playground whose agent (``agent_process``) is forked from an ``AgentForker``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.forker = AgentForker()

    async def start(self) -> None:
        await self.forker.start()
        await super().start()

    async def stop(self) -> None:
        try:
            await super().stop()
        finally:
            await self.forker.stop()

    async def _start_agent_process(self, env: Any) -> None:
        assert self.runtime is not None
        assert self.workdir is not None
        path = self.child_config()
        before = {p.id for p in self.runtime.plugins}
        proc = await self.forker.spawn(["agent", "--config", str(path)], dict(env), self.workdir / "agent.log")
        self.process = proc  # type: ignore[assignment]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while not any(p.id not in before and p.synchronized for p in self.runtime.plugins):
            if proc.returncode is not None or loop.time() > deadline:
                log = (self.workdir / "agent.log").read_text()[-2000:]
                raise PlaygroundError(f"the agent process did not connect (exit {proc.returncode}):\n{log}")
            await asyncio.sleep(0.01)


if __name__ == "__main__":
    serve()
