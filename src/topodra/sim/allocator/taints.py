"""Device taints (``DRADeviceTaints``, beta and on in Kubernetes 1.36): upstream's
``taintPreventsAllocation`` (``allocator_incubating.go``, see the package docstring)."""

from __future__ import annotations

from topodra.sim.objects import Device, RequestSpec

__all__ = ["taint_prevents_allocation"]


def taint_prevents_allocation(d: Device, spec: RequestSpec) -> bool:
    """A ``NoSchedule`` or ``NoExecute`` taint that the request does not tolerate (other effects,
    ``None`` included, do not prevent allocation)."""
    for t in d.taints:
        if t.effect in ("NoSchedule", "NoExecute") and not any(tol.tolerates(t) for tol in spec.tolerations):
            return True
    return False
