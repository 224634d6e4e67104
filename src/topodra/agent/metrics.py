"""The agent's Prometheus metrics, in one registry owned by the agent (no globals)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["AgentMetrics"]

_LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 2.0)


class AgentMetrics:
    """Counters, gauges and histograms the agent updates; ``render()`` gives the text format."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.cpus = Gauge(
            "topodra_cpus",
            "CPUs per pool, CPU kind and use (exclusive, shared, claimed, reserved, isolated, free).",
            ["pool", "kind", "use"],
            registry=r,
        )
        self.containers = Gauge("topodra_containers", "Containers placed by the policy.", ["placement"], registry=r)
        self.claims = Gauge("topodra_claims", "Prepared DRA claims.", registry=r)
        self.prepare_total = Counter(
            "topodra_dra_prepare", "NodePrepareResources claims handled.", ["result"], registry=r
        )
        self.unprepare_total = Counter(
            "topodra_dra_unprepare", "NodeUnprepareResources claims handled.", ["result"], registry=r
        )
        self.prepare_seconds = Histogram(
            "topodra_dra_prepare_seconds", "Prepare latency per call.", registry=r, buckets=_LATENCY_BUCKETS
        )
        self.unprepare_seconds = Histogram(
            "topodra_dra_unprepare_seconds", "Unprepare latency per call.", registry=r, buckets=_LATENCY_BUCKETS
        )
        self.nri_event_seconds = Histogram(
            "topodra_nri_event_seconds",
            "Time to answer an NRI event, by event.",
            ["event"],
            registry=r,
            buckets=_LATENCY_BUCKETS,
        )
        self.nri_errors = Counter("topodra_nri_event_errors", "NRI events answered with an error.", ["event"], registry=r)
        self.updates_sent = Counter(
            "topodra_unsolicited_updates_sent", "Container updates pushed with an unsolicited UpdateContainers.", registry=r
        )
        self.updates_failed = Counter(
            "topodra_unsolicited_updates_failed", "Unsolicited container updates the runtime reported failed.", registry=r
        )
        self.cgroup_writes = Counter(
            "topodra_cgroup_writes",
            "Container cpusets written straight to their cgroups (delivery 'replies'), by result.",
            ["result"],
            registry=r,
        )
        self.delivery = Gauge(
            "topodra_nri_delivery",
            "How changes outside NRI events reach containers (1 for the mode in use).",
            ["mode"],
            registry=r,
        )
        self.checkpoint_recoveries = Counter(
            "topodra_dra_checkpoint_recoveries",
            "Damaged DRA checkpoints repaired at start-up, by how (previous-generation, rebuilt).",
            ["how"],
            registry=r,
        )
        self.config_reloads = Counter("topodra_config_reloads", "Configuration reloads.", ["result"], registry=r)
        self.cpuset_drift = Counter(
            "topodra_cpuset_drift",
            "Containers whose cgroup cpuset or mems differed from their assignment (then repaired).",
            registry=r,
        )
        self.start_repushes = Counter(
            "topodra_start_window_repushes",
            "Assignments sent again after PostStartContainer because an update overlapped the start.",
            registry=r,
        )
        self.offer_changes = Counter(
            "topodra_offer_changes",
            "Changes of the CPUs offered in the ResourceSlices (exclusive grants withdrawn or returned).",
            registry=r,
        )
        self.exclusive_moved = Counter(
            "topodra_exclusive_moved_by_claim",
            "Exclusive containers moved because a prepared claim took their CPUs (the publication race).",
            registry=r,
        )
        self._machine_and_status_metrics(r)

    def _machine_and_status_metrics(self, r: CollectorRegistry) -> None:
        """The machine's changes (hotplug) and the claim status writer."""
        self.machine_changes = Counter(
            "topodra_machine_changes",
            "CPU/NUMA hotplug or isolated-set changes seen (applied, or refused: no policy fits).",
            ["result"],
            registry=r,
        )
        self.offline_cpus = Gauge("topodra_offline_cpus", "Present CPUs that are offline.", registry=r)
        self.offline_claims = Gauge(
            "topodra_claims_on_offline_cpus", "Prepared claims holding a CPU that is offline.", registry=r
        )
        self.unhealthy_devices = Gauge(
            "topodra_unhealthy_devices", "Devices reported Unhealthy to the kubelet (a CPU offline).", registry=r
        )

        self.claim_status_writes = Counter(
            "topodra_dra_claim_status_writes",
            "ResourceClaim status.devices writes, by result (ok, retry, failed, gone: the claim was deleted "
            "or re-created, dropped: too many claims waiting).",
            ["result"],
            registry=r,
        )
        self.claim_status_seconds = Histogram(
            "topodra_dra_claim_status_write_seconds",
            "Time to write one claim's status.devices (off the Prepare path).",
            registry=r,
            buckets=_LATENCY_BUCKETS,
        )

    def claim_status_written(self, result: str, seconds: float) -> None:
        """The claim status writer's report of one write."""
        self.claim_status_writes.labels(result).inc()
        if result == "ok":
            self.claim_status_seconds.observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
