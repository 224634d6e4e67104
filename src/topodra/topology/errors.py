"""The one error type of topology discovery: it names the file and the bad content."""

from __future__ import annotations

__all__ = ["TopologyError"]


class TopologyError(ValueError):
    """A sysfs tree that cannot be read into a consistent topology.

    ``path`` is the file (or directory) at fault and ``content`` the text that
    could not be used (truncated), so an operator can go and look at it.
    """

    def __init__(self, path: str, problem: str, content: str | None = None) -> None:
        self.path = path
        self.problem = problem
        self.content = content
        msg = f"{path}: {problem}"
        if content is not None:
            shown = content if len(content) <= 80 else content[:77] + "..."
            msg += f" (content: {shown!r})"
        super().__init__(msg)
