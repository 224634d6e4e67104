"""The components that answer NRI events, built on one ``NodeState``: the agent's own, or a
scratch one for the warm-up (agent/warmup.py), wired the same way.

Who owns what: ``NodeState`` the data and the lock; ``StartWindow`` the containers starting;
``DevicePublisher`` the devices' publication and the offer; ``ChangeRouter`` how each change
reaches the runtime; ``ClaimBridge`` the DRA driver's view of the policy; ``NriHandlers`` one
policy operation per event; ``EventLog``/``CreateTimes``/``AfterStep`` what is told after a reply.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from topodra.agent.claims import ClaimBridge
from topodra.agent.metrics import AgentMetrics
from topodra.agent.nri_handlers import NriHandlers
from topodra.agent.observe import AfterStep, CreateTimes, EventLog
from topodra.agent.observe import log as agent_log
from topodra.agent.publisher import DevicePublisher
from topodra.agent.router import ChangeRouter
from topodra.agent.start_window import StartWindow
from topodra.agent.state import NodeState

__all__ = ["NodeParts"]


@dataclass(frozen=True, eq=False)
class NodeParts:
    state: NodeState
    metrics: AgentMetrics
    after: AfterStep
    notes: EventLog
    window: StartWindow
    publisher: DevicePublisher
    router: ChangeRouter
    claims: ClaimBridge
    nri: NriHandlers

    @classmethod
    def build(cls, state: NodeState, *, logger: logging.Logger = agent_log) -> NodeParts:
        """Every component on ``state``; ``logger`` gets the notes and the offers."""
        metrics = AgentMetrics()
        after = AfterStep()  # after a step: the offer first, then the notes, then the latencies
        publisher = DevicePublisher(state, metrics, after, logger)
        notes = EventLog(after, logger)
        window = StartWindow()
        router = ChangeRouter(state, window, publisher, metrics, notes)
        claims = ClaimBridge(state, router, publisher, metrics, notes)
        nri = NriHandlers(state, router, window, claims, metrics, notes, CreateTimes(metrics, after))
        return cls(state, metrics, after, notes, window, publisher, router, claims, nri)
