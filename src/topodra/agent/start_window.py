"""The start window: a container created whose PostStartContainer has not come yet.

An update reaching such a container may be stored in its spec only (containerd writes it there
but never into the starting task), so one sent during the window is sent again once the start
is over; and its cgroup says nothing yet (the drift check leaves it alone).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["StartWindow"]


class StartWindow:
    """Containers starting, and those of them an update reached while they were."""

    def __init__(self) -> None:
        self._starting: set[str] = set()
        self._overlapped: set[str] = set()

    def created(self, container_id: str) -> None:
        self._starting.add(container_id)

    def synchronized(self, starting: Iterable[str]) -> None:
        """The runtime's view after Synchronize: exactly these are starting."""
        self._starting = set(starting)
        self._overlapped &= self._starting

    def sent(self, container_ids: Iterable[str]) -> None:
        """Updates for these containers go out now: those still starting get them again after the start."""
        if self._starting:
            self._overlapped |= self._starting.intersection(container_ids)

    def started(self, container_id: str) -> bool:
        """The start is over; True when an update overlapped it (to be sent again)."""
        self._starting.discard(container_id)
        if container_id in self._overlapped:
            self._overlapped.discard(container_id)
            return True
        return False

    def forget(self, container_id: str) -> None:
        self._starting.discard(container_id)
        self._overlapped.discard(container_id)

    def starting(self, container_id: str) -> bool:
        return container_id in self._starting

    def __bool__(self) -> bool:
        """Any container starting."""
        return bool(self._starting)
