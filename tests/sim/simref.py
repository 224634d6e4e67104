"""A slow, plain reference of the structured allocator's search: the oracle for the fast one.

Only the property tests use it (``test_allocator_simref.py``). Written from kube-scheduler's
search as Kubernetes 1.36's incubating allocator does it
(``staging/src/k8s.io/dynamic-resource-allocation/structured/internal/incubating/``:
``allocateOne``, ``isSelectable`` and ``allocateDevice`` in ``allocator_incubating.go``,
``distinctAttributeConstraint`` in ``constraint.go``; ``GatherPools``'s device order in
``pools_incubating.go``), not from ``topodra.sim.allocator``: depth-first over claims,
requests and device slots; devices in pool (driver, name), slice (name) and list order; inside
a request combinations (a slot starts after the previous slot's device); per device: in use,
then selectable (class selectors, then the request's), then ``allocateDevice`` (counters,
taints, constraints in order); exact rollback.

Upstream quirks that change the answer are kept: ``distinctAttribute`` keeps one
value per request name (removing a device forgets the request's value), and
counters charged by a device that a taint or a constraint then rejects stay
charged for the rest of the call.

It also counts kube-scheduler's work (allocateOne calls, devices visited,
allocation checks), so tests compare the fast search's counted work with it.

Scope: one node's slices, complete pools of one generation, ``exactly``
requests (``ExactCount`` and ``All``), no admin access, no consumable capacity,
no ``firstAvailable``, at most 32 devices per claim; anything else is rejected.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from topodra.sim.cel import compile_selector
from topodra.sim.objects import Claim, Device, DeviceClass, Slice, parse_claim, parse_class, parse_slice

__all__ = ["RefStats", "reference_allocate"]


@dataclass
class RefStats:
    """The scheduler's counted work for one Allocate call."""

    calls: int = 0
    visits: int = 0
    checks: int = 0


@dataclass
class _Dev:
    driver: str
    pool: str
    device: Device
    counters: dict[str, dict[str, Fraction]] = field(default_factory=dict)


def _typed(driver: str, device: Device, name: str) -> tuple[str, Any] | None:
    attrs = device.attributes
    value: Any
    if name in attrs:
        value = attrs[name]
    elif "/" in name and name.split("/", 1)[0] == driver and name.split("/", 1)[1] in attrs:
        value = attrs[name.split("/", 1)[1]]
    else:
        return None
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, list):
        return ("list", None)
    return ("version", str(value))


class _Ref:
    def __init__(self, devices: list[_Dev], classes: dict[str, DeviceClass], claims: list[Claim], in_use: set[tuple[str, str, str]], available: dict[str, dict[str, dict[str, Fraction]]]) -> None:
        self.devices = devices
        self.classes = classes
        self.claims = claims
        self.in_use = in_use
        self.available = available
        self.consumed: dict[str, dict[str, dict[str, Fraction]]] = {}
        self.allocating: set[int] = set()
        self.results: list[list[tuple[str, int]]] = [[] for _ in claims]
        self.max_calls: int | None = None
        # constraint state per claim: [kind, attribute, requests, num, stored, per-request values]
        self.cons: list[list[dict[str, Any]]] = [
            [
                {
                    "distinct": c.distinct_attribute is not None,
                    "attr": c.distinct_attribute or c.match_attribute or "",
                    "requests": c.requests,
                    "num": 0,
                    "stored": None,
                    "values": {},
                }
                for c in claim.constraints
            ]
            for claim in claims
        ]
        self.stats = RefStats()

    def selectable(self, d: _Dev, cls: DeviceClass, selectors: Sequence[str]) -> bool:
        return all(compile_selector(expr).matches(d.device.cel()) for expr in (*cls.selectors, *selectors))

    def charge(self, d: _Dev, sign: int) -> None:
        used = self.consumed.setdefault(d.pool, {})
        for cset, counters in d.counters.items():
            u = used.setdefault(cset, {})
            for name, q in counters.items():
                u[name] = u.get(name, Fraction(0)) + sign * q

    def over(self, pool: str) -> bool:
        used = self.consumed.get(pool, {})
        for cset, counters in self.available.get(pool, {}).items():
            for name, value in counters.items():
                if used.get(cset, {}).get(name, Fraction(0)) > value:
                    return True
        return False

    def allocate_device(self, ci: int, req: str, i: int, tolerations: Any) -> bool:
        self.stats.checks += 1
        d = self.devices[i]
        key = (d.driver, d.pool, d.device.name)
        if i in self.allocating or key in self.in_use:
            return False
        if d.counters:
            self.charge(d, 1)
            if self.over(d.pool):
                self.charge(d, -1)
                return False
        for t in d.device.taints:
            if t.effect in ("NoSchedule", "NoExecute") and not any(tol.tolerates(t) for tol in tolerations):
                return False  # counters stay charged (upstream)
        added: list[dict[str, Any]] = []
        for c in self.cons[ci]:
            if c["requests"] and req not in c["requests"]:
                continue
            v = _typed(d.driver, d.device, c["attr"])
            ok = v is not None
            if ok and c["num"] > 0:
                assert v is not None
                if c["distinct"]:
                    if v[0] == "list":
                        ok = not c["values"]
                    else:
                        ok = v not in c["values"].values()
                else:
                    ok = v[0] != "list" and v == c["stored"]
            if not ok:
                for a in added:
                    self.remove(a, req)
                return False  # counters stay charged (upstream)
            if c["distinct"]:
                c["values"][req] = v
            elif c["num"] == 0:
                c["stored"] = v
            c["num"] += 1
            added.append(c)
        self.allocating.add(i)
        self.results[ci].append((req, i))
        return True

    def remove(self, c: dict[str, Any], req: str) -> None:
        if c["distinct"]:
            c["values"].pop(req, None)
        c["num"] -= 1

    def deallocate(self, ci: int, req: str, i: int) -> None:
        for c in self.cons[ci]:
            if not c["requests"] or req in c["requests"]:
                self.remove(c, req)
        self.allocating.discard(i)
        self.results[ci].pop()
        if self.devices[i].counters:
            self.charge(self.devices[i], -1)

    def one(self, ci: int, ri: int, di: int, start: int, all_devices: dict[tuple[int, int], list[int]]) -> bool:
        self.stats.calls += 1
        if self.max_calls is not None and self.stats.calls > self.max_calls:
            raise ReferenceTooLong(f"the reference search passed {self.max_calls} calls")
        if ci == len(self.claims):
            return True
        claim = self.claims[ci]
        if ri == len(claim.requests):
            return self.one(ci + 1, 0, 0, 0, all_devices)
        spec = claim.requests[ri].exactly
        assert spec is not None
        cls = self.classes[spec.class_name]
        if spec.mode == "All":
            devs = all_devices[(ci, ri)]
            if not devs:
                return False
            if di == len(devs):
                return self.one(ci, ri + 1, 0, 0, all_devices)
            if not self.allocate_device(ci, spec.name, devs[di], spec.tolerations):
                return False
            if self.one(ci, ri, di + 1, 0, all_devices):
                return True
            self.deallocate(ci, spec.name, devs[di])
            return False
        if di == spec.count:
            return self.one(ci, ri + 1, 0, 0, all_devices)
        for i in range(start, len(self.devices)):
            self.stats.visits += 1
            d = self.devices[i]
            if i in self.allocating or (d.driver, d.pool, d.device.name) in self.in_use:
                continue
            if not self.selectable(d, cls, spec.selectors):
                continue
            if not self.allocate_device(ci, spec.name, i, spec.tolerations):
                continue
            if self.one(ci, ri, di + 1, i + 1, all_devices):
                return True
            self.deallocate(ci, spec.name, i)
        return False


class ReferenceTooLong(Exception):
    """The reference search passed its ``max_calls``: a case too large to compare in a test."""


def reference_allocate(
    slices: Sequence[Mapping[str, Any]],
    classes: Sequence[Mapping[str, Any]],
    claims: Sequence[Mapping[str, Any]],
    in_use: set[tuple[str, str, str]] | None = None,
    max_calls: int | None = None,
) -> tuple[list[list[tuple[str, str]]] | None, RefStats]:
    """Per claim the (request, device) pairs kube-scheduler would pick (``None``: no solution), and
    its work; ``ReferenceTooLong`` once the search makes more than ``max_calls`` calls."""
    parsed: list[Slice] = [parse_slice(s, {}) for s in slices]
    used = in_use or set()
    pools: dict[tuple[str, str], list[Slice]] = {}
    for s in parsed:
        pools.setdefault((s.driver, s.pool), []).append(s)
    devices: list[_Dev] = []
    available: dict[str, dict[str, dict[str, Fraction]]] = {}
    for (driver, pool), group in sorted(pools.items()):
        avail = available.setdefault(pool, {})
        for s in sorted(group, key=lambda s: s.name):
            for cset, counters in s.shared_counters.items():
                avail[cset] = {n: q.amount for n, q in counters.items()}
        for s in sorted(group, key=lambda s: s.name):
            for d in s.devices:
                consumes = {cset: {n: q.amount for n, q in cs} for cset, cs in d.consumes_counters}
                devices.append(_Dev(driver, pool, d, consumes))
        for dv in devices:  # counters of devices already allocated are not available
            if dv.pool == pool and (driver, pool, dv.device.name) in used:
                for cset, cs in dv.counters.items():
                    for n, q in cs.items():
                        if n in avail.get(cset, {}):
                            avail[cset][n] -= q
    cls_map = {c.name: c for c in (parse_class(c) for c in classes)}
    parsed_claims = [parse_claim(c) for c in claims]
    ref = _Ref(devices, cls_map, parsed_claims, used, available)
    ref.max_calls = max_calls
    all_devices: dict[tuple[int, int], list[int]] = {}
    for ci, claim in enumerate(parsed_claims):
        total = 0
        for ri, r in enumerate(claim.requests):
            if r.first_available or r.exactly is None or r.exactly.admin_access or r.exactly.capacity_requests:
                raise ValueError("simref: only exactly requests without admin access or capacity")
            if r.exactly.mode == "All":
                cls = cls_map[r.exactly.class_name]
                all_devices[(ci, ri)] = [i for i, d in enumerate(devices) if ref.selectable(d, cls, r.exactly.selectors)]
                total += len(all_devices[(ci, ri)])
            else:
                total += r.exactly.count
        if total > 32:
            raise ValueError("simref: more than 32 devices in a claim")
    if not ref.one(0, 0, 0, 0, all_devices):
        return None, ref.stats
    return [[(req, devices[i].device.name) for req, i in ref.results[ci]] for ci in range(len(parsed_claims))], ref.stats
