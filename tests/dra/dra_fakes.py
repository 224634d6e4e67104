"""Helpers for the DRA tests: the real policy with a call log, claim builders, a tiny scheduler."""

from __future__ import annotations

from typing import Any

from topodra.cpuset import CPUSet
from topodra.dra.devices import DRIVER
from topodra.policy.api import Changes, ContainerRequest, QoSClass
from topodra.policy.config import PolicyConfig
from topodra.policy.policy import Policy
from topodra.topology.model import CoreType, Topology

SHARED = "ctr-shared"


class RecordingPolicy:
    """The real topodra Policy, with one shared container (so claims produce changes) and a call log."""

    def __init__(self, topology: Topology, reserved: CPUSet | None = None, *, shared: bool = True) -> None:
        self.inner = Policy(topology, PolicyConfig(reserved_cpus=reserved or CPUSet()))
        if shared:
            self.inner.add(
                ContainerRequest(
                    id=SHARED, name="app", pod_uid="pod-shared", pod_name="shared", namespace="default",
                    qos=QoSClass.BURSTABLE, cpu_request_milli=100,
                )
            )
        self.calls: list[tuple[str, str]] = []

    @property
    def reserved_cpus(self) -> CPUSet:
        return self.inner.reserved_cpus

    @property
    def topology(self) -> Topology:
        return self.inner.topology

    def claim(self, claim_id: str, cpus: CPUSet, *, memory: str = "local") -> Changes:
        self.calls.append(("claim", claim_id))
        return self.inner.claim(claim_id, cpus, memory=memory)

    def release(self, claim_id: str) -> Changes:
        self.calls.append(("release", claim_id))
        return self.inner.release(claim_id)

    def pick(
        self, count: int, within: CPUSet, *, prefer: CoreType | None = None, whole_cores: bool = False,
        spread: bool = False,
    ) -> CPUSet:
        return self.inner.pick(count, within, prefer=prefer, whole_cores=whole_cores, spread=spread)

    def claimed(self, claim_id: str) -> CPUSet | None:
        return self.inner.claimed(claim_id)

    def claims(self) -> dict[str, CPUSet]:
        return self.inner.claims()


def make_claim(
    uid: str,
    devices: list[str],
    *,
    namespace: str = "default",
    name: str | None = None,
    pool: str = "node-a",
    driver: str = DRIVER,
    consumed: dict[str, str] | None = None,
    pods: tuple[str, ...] = ("pod-1",),
    allocated: bool = True,
) -> dict[str, Any]:
    """A ResourceClaim JSON object allocated to ``devices`` of ``pool``."""
    results = []
    for i, dev in enumerate(devices):
        r: dict[str, Any] = {"request": "cpu", "driver": driver, "pool": pool, "device": dev}
        if consumed is not None:
            r["consumedCapacity"] = {"cpu": consumed.get(dev, "1")}
            r["shareID"] = f"share-{uid}-{i}"
        results.append(r)
    status: dict[str, Any] = {}
    if allocated:
        status["allocation"] = {"devices": {"results": results}}
        status["reservedFor"] = [{"resource": "pods", "name": f"pod-{p}", "uid": p} for p in pods]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": namespace, "name": name or f"claim-{uid}", "uid": uid},
        "spec": {"devices": {"requests": [{"name": "cpu", "exactly": {"deviceClassName": DRIVER}}]}},
        "status": status,
    }


class ClaimStore:
    """An in-memory claim fetcher: ``await store.fetch(namespace, name)``."""

    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.fetches = 0
        self.lists = 0
        self.reachable = True

    def add(self, claim: dict[str, Any]) -> dict[str, Any]:
        m = claim["metadata"]
        self.claims[(m["namespace"], m["name"])] = claim
        return claim

    def delete(self, namespace: str, name: str) -> None:
        del self.claims[(namespace, name)]

    async def list_all(self) -> list[dict[str, Any]]:
        self.lists += 1
        if not self.reachable:
            raise ConnectionError("API server unreachable")
        return list(self.claims.values())

    async def fetch(self, namespace: str, name: str) -> dict[str, Any]:
        self.fetches += 1
        try:
            return self.claims[(namespace, name)]
        except KeyError:
            raise LookupError(f'resourceclaims "{name}" not found in namespace {namespace!r}') from None


# --- a tiny scheduler for end-to-end tests: real CEL over published ResourceSlice devices ---------

def cel_matches(expression: str, device: dict[str, Any], driver: str = DRIVER) -> bool:
    """Evaluate a DRA selector against a published (API JSON) device, as the scheduler does."""
    from cel_expr_python import cel  # type: ignore[import-untyped]

    attrs: dict[str, dict[str, Any]] = {}
    for name, value in (device.get("attributes") or {}).items():
        domain, _, ident = (name if "/" in name else f"{driver}/{name}").rpartition("/")
        ((_, inner),) = value.items()
        attrs.setdefault(domain, {})[ident] = inner
    env = cel.NewEnv(variables={"device": cel.Type.DYN})
    result = env.compile(expression).eval(data={"device": {"driver": driver, "attributes": attrs}}).value()
    if not isinstance(result, bool):
        raise AssertionError(f"{expression!r} gave {result!r}")
    return result


def allocate(
    claim: dict[str, Any],
    slices: list[dict[str, Any]],
    classes: dict[str, dict[str, Any]],
    taken: set[str],
) -> list[dict[str, Any]]:
    """First-fit allocation of a claim's ExactCount requests (no constraints), like the allocator's order."""
    results = []
    devices = [
        (s["spec"]["driver"], s["spec"]["pool"]["name"], d)
        for s in sorted(slices, key=lambda s: s["metadata"]["name"])
        for d in s["spec"]["devices"]
    ]
    for request in claim["spec"]["devices"]["requests"]:
        exact = request["exactly"]
        cls = classes[exact["deviceClassName"]]
        exprs = [s["cel"]["expression"] for s in cls["spec"].get("selectors", [])]
        exprs += [s["cel"]["expression"] for s in exact.get("selectors", [])]
        want_capacity = (exact.get("capacity") or {}).get("requests") or {}
        need = exact.get("count", 1)
        for driver, pool, dev in devices:
            if need == 0:
                break
            key = f"{driver}/{pool}/{dev['name']}"
            if key in taken and not dev.get("allowMultipleAllocations"):
                continue
            if not all(cel_matches(e, dev, driver) for e in exprs):
                continue
            result: dict[str, Any] = {"request": request["name"], "driver": driver, "pool": pool, "device": dev["name"]}
            if dev.get("allowMultipleAllocations"):
                result["consumedCapacity"] = {k: want_capacity.get(k, "1") for k in dev.get("capacity", {})}
                result["shareID"] = f"share-{len(taken)}"
            taken.add(key)
            results.append(result)
            need -= 1
        if need:
            raise AssertionError(f"cannot allocate request {request['name']}")
    return results
