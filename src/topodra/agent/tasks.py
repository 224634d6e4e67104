"""The agent's long-running tasks: started by name, failures logged, ended together."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any

__all__ = ["Tasks"]

log = logging.getLogger("topodra.agent.agent")


class Tasks:
    def __init__(self) -> None:
        self._tasks: list[asyncio.Task[Any]] = []

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> None:
        task = asyncio.create_task(coro, name=f"topodra-{name}")
        task.add_done_callback(self._done)
        self._tasks.append(task)

    @staticmethod
    def _done(task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("agent task %s failed: %r", task.get_name(), exc, exc_info=exc)

    def problems(self) -> list[str]:
        """The tasks that ended (none should while the agent runs)."""
        return [f"task {t.get_name()} ended" for t in self._tasks if t.done() and not t.cancelled()]

    async def cancel(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
