"""Test doubles for the DRA tests: a policy that enforces the real one's claim rules, claim builders.

FakePolicy follows the interface of topodra.policy.policy.Policy (claim,
release, pick, claimed, claims, reserved_cpus) and its rules: a CPU is in at
most one claim, reserved and unknown CPUs are refused, re-claiming the same
id with the same CPUs is a no-op. Every change is reported like the real
policy does: one shared container whose cpuset is the unclaimed CPUs.
"""

from __future__ import annotations

from typing import Any

from topodra.cpuset import CPUSet
from topodra.dra.devices import DRIVER
from topodra.policy.api import Assignment, Changes, PolicyError
from topodra.topology.model import CoreType

SHARED = "ctr-shared"


class FakePolicy:
    def __init__(self, online: CPUSet, reserved: CPUSet | None = None) -> None:
        self.online = online
        self._reserved = reserved or CPUSet()
        self._claims: dict[str, CPUSet] = {}
        self.calls: list[tuple[str, str]] = []

    @property
    def reserved_cpus(self) -> CPUSet:
        return self._reserved

    def _shared(self) -> Changes:
        free = self.online - self._reserved
        for c in self._claims.values():
            free -= c
        return {SHARED: Assignment(cpus=free or self._reserved)}

    def claim(self, claim_id: str, cpus: CPUSet) -> Changes:
        self.calls.append(("claim", claim_id))
        if not cpus:
            raise PolicyError(f"claim {claim_id}: no CPUs")
        if claim_id in self._claims:
            if self._claims[claim_id] == cpus:
                return {}
            raise PolicyError(f"claim {claim_id} already holds {self._claims[claim_id]}")
        if not cpus <= self.online:
            raise PolicyError(f"CPUs {cpus - self.online} are not online")
        if cpus & self._reserved:
            raise PolicyError(f"CPUs {cpus & self._reserved} are reserved")
        for other, held in self._claims.items():
            if held & cpus:
                raise PolicyError(f"CPUs {held & cpus} are held by claim {other}")
        self._claims[claim_id] = cpus
        return self._shared()

    def release(self, claim_id: str) -> Changes:
        self.calls.append(("release", claim_id))
        if self._claims.pop(claim_id, None) is None:
            return {}
        return self._shared()

    def pick(self, count: int, within: CPUSet, *, prefer: CoreType | None = None) -> CPUSet:
        free = within - self._reserved
        for held in self._claims.values():
            free -= held
        if len(free) < count:
            raise PolicyError(f"only {len(free)} free CPUs in {within}, {count} wanted")
        return free.take(count)

    def claimed(self, claim_id: str) -> CPUSet | None:
        return self._claims.get(claim_id)

    def claims(self) -> dict[str, CPUSet]:
        return dict(self._claims)


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

    def add(self, claim: dict[str, Any]) -> dict[str, Any]:
        m = claim["metadata"]
        self.claims[(m["namespace"], m["name"])] = claim
        return claim

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
