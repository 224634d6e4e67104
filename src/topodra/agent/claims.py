"""The claim bridge: the DRA driver's side of the agent.

The driver prepares and releases claims over ``ClaimBridge`` (the policy as claims see it:
grouped devices pick among the offered CPUs first), and hands back each claim's changes once
its checkpoint is written (``changed``): the moved containers are pushed then. A container's
``DRA_CPUSET_<uid>`` variables are checked against the prepared claims here too.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from topodra.agent.config import AgentConfig
from topodra.agent.metrics import AgentMetrics
from topodra.agent.observe import EventLog
from topodra.agent.publisher import DevicePublisher
from topodra.agent.router import ChangeRouter
from topodra.agent.state import AgentError, NodeState
from topodra.cpuset import CPUSet
from topodra.dra.driver import ClaimFetcher, ClaimLister, ClaimRef, Driver, PrepareResult, UnprepareResult
from topodra.nri.types import Container, Pod
from topodra.policy.api import Changes, PolicyError
from topodra.topology.model import CoreType, Topology

if TYPE_CHECKING:
    from topodra.kube.client import KubeClient

__all__ = ["ClaimBridge", "MeteredDriver", "claim_fetchers", "kube_client"]


class MeteredDriver(Driver):
    """The DRA driver with Prepare/Unprepare counts and latency recorded."""

    metrics: AgentMetrics

    async def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        t0 = time.perf_counter()
        out = await super().prepare(claims)
        self.metrics.prepare_seconds.observe(time.perf_counter() - t0)
        for r in out.values():
            self.metrics.prepare_total.labels("error" if r.error else "ok").inc()
        return out

    async def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, UnprepareResult]:
        t0 = time.perf_counter()
        out = await super().unprepare(claims)
        self.metrics.unprepare_seconds.observe(time.perf_counter() - t0)
        for r in out.values():
            self.metrics.unprepare_total.labels("error" if r.error else "ok").inc()
        return out


class ClaimBridge:
    """The policy as the DRA driver uses it (``dra.driver.ClaimPolicy``), and the driver's
    changes back into the agent. ``driver``: set once the DRA side is up."""

    def __init__(
        self, state: NodeState, router: ChangeRouter, publisher: DevicePublisher, metrics: AgentMetrics, notes: EventLog
    ) -> None:
        self.state = state
        self.router = router
        self.publisher = publisher
        self.metrics = metrics
        self.notes = notes
        self.driver: Driver | None = None

    # --- ``ClaimPolicy`` --------------------------------------------------------------------------
    @property
    def topology(self) -> Topology:
        return self.state.policy.topology

    def claim(self, claim_id: str, cpus: CPUSet, *, memory: str = "local") -> Changes:
        # Restoring after a restart: a claim's CPUs may be offline now (kept for it, reported).
        state = self.state
        return self.router.decided(state.policy.claim(claim_id, cpus, keep_offline=state.restoring, memory=memory))

    def release(self, claim_id: str) -> Changes:
        return self.router.decided(self.state.policy.release(claim_id))

    def claimed(self, claim_id: str) -> CPUSet | None:
        return self.state.policy.claimed(claim_id)

    def pick(
        self, count: int, within: CPUSet, *, prefer: CoreType | None = None, whole_cores: bool = False,
        spread: bool = False,
    ) -> CPUSet:
        """Among the offered CPUs first (the shared floor and exclusive grants are not for
        claims), all of the device when the offer cannot hold the claim (an allocation made from
        older slices)."""
        policy = self.state.policy
        try:
            return policy.pick(count, within & self.publisher.offer, prefer=prefer, whole_cores=whole_cores, spread=spread)
        except PolicyError:
            return policy.pick(count, within, prefer=prefer, whole_cores=whole_cores, spread=spread)

    # --- the driver's side ------------------------------------------------------------------------
    async def changed(self, changes: Changes) -> None:
        """Claim prepared/released/restored (its checkpoint written): push the moved containers now."""
        moved = self.publisher.tracker.moved(self.state.policy, changes)
        if moved:
            # The publication race: the claim was allocated from slices published before these
            # exclusive grants were withdrawn. The policy moved them; count and say so.
            self.metrics.exclusive_moved.inc(len(moved))
            self.notes.note("claim took exclusive CPUs of " + ", ".join(sorted(moved)) + ": moved them")
        self.router.claim_changed(changes)
        if changes:
            self.notes.note("claim change moves " + ", ".join(f"{c}->{a.cpus}" for c, a in sorted(changes.items())))

    async def admit(self, pod: Pod, container: Container) -> bool:
        """Whether the container's pod was just recorded as a consumer of a prepared claim it
        names (``Driver.admit_consumer``): its check is worth another try."""
        return self.driver is not None and await self.driver.admit_consumer(pod.uid, container.env)

    def container_claims(self, pod: Pod, container: Container) -> tuple[str, ...]:
        """Verified claim UIDs of a container's ``DRA_CPUSET_<uid>`` variables (errors refuse it)."""
        if self.driver is None:
            return ()
        return tuple(sorted(self.driver.container_claims(pod.uid, container.env)))


def kube_client(config: AgentConfig) -> KubeClient:
    """The API client the ``kube`` section names (a URL and token file, else a kubeconfig or the
    in-cluster service account)."""
    from topodra.kube.client import KubeClient

    kube = config.kube
    try:
        if kube.server:
            if kube.token_file is not None:
                kube.token_file.read_bytes()  # unreadable: one line now, not a 401 at every request
            return KubeClient.for_url(kube.server, token_file=kube.token_file, ca_file=kube.ca_file)
        return KubeClient.from_environment(str(kube.kubeconfig) if kube.kubeconfig else None)
    except Exception as err:  # lightkube's ConfigError, a missing token file, ...
        why = f"{err.strerror}: {err.filename}" if isinstance(err, OSError) and err.strerror else str(err)
        raise AgentError(f"cannot set up the Kubernetes API client (kube section): {why}") from None


def claim_fetchers(kube: KubeClient) -> tuple[ClaimFetcher, ClaimLister]:
    """(fetch one claim, list every claim: only to repair a damaged checkpoint) through ``kube``."""
    from topodra.kube.client import RESOURCE_CLAIMS

    async def fetch(namespace: str, name: str) -> dict[str, Any]:
        result: dict[str, Any] = await kube.get(RESOURCE_CLAIMS, name, namespace)
        return result

    async def list_claims() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = (await kube.list(RESOURCE_CLAIMS, chunk_size=500))[0]
        return items

    return fetch, list_claims
