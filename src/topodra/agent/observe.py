"""What the agent tells about itself: notable events, work left for after a reply, gauges, the
HTTP listeners.

- ``EventLog``: notable events for /state and the UI, each logged right after the step that
  made it (a CreateContainer reply goes out before any formatting or writing).
- ``AfterStep``: work a step leaves for after its reply (the offer, the log lines, the
  CreateContainer latencies), run once per burst in one loop callback.
- ``refresh_gauges``, ``probe_routes``, ``start_endpoints``: the /metrics gauges, the probes,
  the listeners on ``metricsAddress`` and ``stateAddress``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Final

from topodra.agent.config import AgentConfig
from topodra.agent.http import HttpEndpoint, Route, parse_listen
from topodra.agent.metrics import AgentMetrics
from topodra.agent.state import AgentError
from topodra.dra.health import DeviceHealth
from topodra.policy import Policy
from topodra.topology.model import Topology

__all__ = ["NOTES_KEPT", "AfterStep", "CreateTimes", "EventLog", "probe_routes", "refresh_gauges", "start_endpoints"]

#: Notes and offers are logged under the agent's name (what operators filter on).
log = logging.getLogger("topodra.agent.agent")

#: Notable events kept for ``EventLog.events``.
NOTES_KEPT: Final = 200


class AfterStep:
    """Runs the registered work right after the current step, once per burst; ``hold`` keeps it
    for an explicit ``run`` (the warm-up answers calls without a loop turn between them)."""

    def __init__(self) -> None:
        self._work: list[Callable[[], None]] = []
        self._pending = False

    def add(self, work: Callable[[], None]) -> None:
        self._work.append(work)

    def soon(self) -> bool:
        """Schedule the work after the current step; False without a running loop."""
        if self._pending:
            return True
        try:
            asyncio.get_running_loop().call_soon(self.run)
        except RuntimeError:
            return False
        self._pending = True
        return True

    def hold(self) -> None:
        """Until the next ``run``, schedule nothing: the caller runs it."""
        self._pending = True

    def run(self) -> None:
        self._pending = False
        for work in self._work:
            work()


class _Note:
    """A notable event, formatted when first read: off the reply path of the event behind it."""

    __slots__ = ("_args", "_line", "_text", "at")

    def __init__(self, at: float, text: str, args: tuple[object, ...]) -> None:
        self.at = at
        self._text = text
        self._args: tuple[object, ...] | None = args or None
        self._line: str | None = None

    @property
    def text(self) -> str:
        if self._args is not None:
            self._text, self._args = self._text % self._args, None
        return self._text

    @property
    def line(self) -> str:
        if self._line is None:
            self._line = f"{time.strftime('%H:%M:%S', time.localtime(self.at))} {self.text}"
        return self._line


class EventLog:
    """Recent notable events, newest last; each logged to ``logger`` after the current step."""

    def __init__(self, after: AfterStep, logger: logging.Logger = log) -> None:
        self.logger = logger
        self._after = after
        self._notes: list[_Note] = []
        self._backlog: list[_Note] = []  # notes not logged yet
        after.add(self.flush)

    def note(self, text: str, *args: object) -> None:
        """Record ``text``, or ``text % args`` formatted only when read or logged."""
        notes = self._notes
        note = _Note(time.time(), text, args)
        notes.append(note)
        if len(notes) > 2 * NOTES_KEPT:
            del notes[:-NOTES_KEPT]
        self._backlog.append(note)
        if not self._after.soon():  # no loop: write it now
            self.flush()

    def flush(self) -> None:
        if self._backlog:
            backlog, self._backlog = self._backlog, []
            for note in backlog:
                self.logger.info("%s", note.text)

    @property
    def events(self) -> list[str]:
        """The recent notable events, oldest first, each as "HH:MM:SS text" (UI, /state)."""
        return self.recent(NOTES_KEPT)

    def recent(self, count: int) -> list[str]:
        """The last ``count`` notable events, oldest first."""
        return [n.line for n in self._notes[-count:]] if count > 0 else []


class CreateTimes:
    """CreateContainer latencies, observed after the reply (one histogram lookup, at start)."""

    def __init__(self, metrics: AgentMetrics, after: AfterStep) -> None:
        self._histogram = metrics.nri_event_seconds.labels("CreateContainer")
        self._after = after
        self._times: list[float] = []
        after.add(self.observe)

    def add(self, seconds: float) -> None:
        self._times.append(seconds)
        self._after.soon()

    def observe(self) -> None:
        if self._times:
            times, self._times = self._times, []
            for seconds in times:
                self._histogram.observe(seconds)


def refresh_gauges(
    metrics: AgentMetrics, policy: Policy, topology: Topology, health: Sequence[DeviceHealth]
) -> None:
    """The CPU, container, claim and device gauges from the policy's statistics."""
    stats = policy.stats()
    m = metrics
    m.cpus.clear()
    for pool in stats.pools:
        u = pool.usage
        for use, cpus in (
            ("exclusive", u.allocated),
            ("shared", u.shared),
            ("claimed", u.claimed),
            ("reserved", u.reserved),
            ("isolated", u.isolated),
            ("free", u.free),
        ):
            for kind in topology.core_types():
                m.cpus.labels(pool.name, kind.value, use).set(len(cpus & topology.cpus_of_type(kind)))
    m.containers.clear()
    for placement, n in stats.containers.items():
        m.containers.labels(placement).set(n)
    m.claims.set(len(policy.claims()))
    m.offline_cpus.set(len(topology.offline))
    m.offline_claims.set(len(policy.offline_claims()))
    m.unhealthy_devices.set(sum(1 for h in health if not h.healthy))


def probe_routes(
    metrics: Callable[[], tuple[int, str, bytes]],
    healthy: Callable[[], tuple[bool, str]],
    ready: Callable[[], tuple[bool, str]],
) -> dict[str, Route]:
    """/metrics and the two probes (200 or 503 with the reason)."""

    def probe(check: Callable[[], tuple[bool, str]]) -> Route:
        def handler() -> tuple[int, str, bytes]:
            ok, why = check()
            return (200 if ok else 503), "text/plain", (why + "\n").encode()

        return Route(handler)

    return {"/metrics": Route(metrics), "/healthz": probe(healthy), "/readyz": probe(ready)}


async def start_endpoints(
    config: AgentConfig, routes: dict[str, Route], state_routes: dict[str, Route]
) -> tuple[HttpEndpoint | None, HttpEndpoint | None]:
    """Listen for ``routes`` on ``metricsAddress`` and ``state_routes`` on ``stateAddress`` (a
    unix socket in ``stateDir`` by default); one listener when both name the same address.
    Returns (metrics endpoint, state endpoint)."""
    listeners: dict[str, dict[str, Route]] = {}
    if config.metrics_address:
        listeners.setdefault(config.metrics_address, {}).update(routes)
    if config.state_listen:
        listeners.setdefault(config.state_listen, {}).update(state_routes)
        if not parse_listen(config.state_listen).is_local:
            log.warning("/state (claims, containers, CPU sets) is served without authentication on %s", config.state_listen)
    metrics_endpoint = state_endpoint = None
    started: list[HttpEndpoint] = []
    for address, served in listeners.items():
        endpoint = HttpEndpoint(served)
        try:
            await endpoint.start(address)
        except OSError as err:
            for other in started:
                await other.stop()
            what = ", ".join(sorted({"/" + r.split("/")[1] for r in served}))  # /state, not each sub-path
            why = os.strerror(err.errno) if err.errno else str(err)
            raise AgentError(f"cannot listen on {address} for {what}: {why}") from None
        started.append(endpoint)
        if address == config.metrics_address:
            metrics_endpoint = endpoint
        if address == config.state_listen:
            state_endpoint = endpoint
    return metrics_endpoint, state_endpoint
