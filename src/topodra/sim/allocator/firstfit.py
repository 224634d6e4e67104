"""First fit without the search: the allocator's answer for plain requests, from a bitmap.

For claims whose requests are all plain ``exactly`` requests (ExactCount, no constraints,
no admin access, no capacity requests, no ``firstAvailable``) on a node whose devices have
no taints, no counters, no shared or consumable capacity and no per-device node selection,
kube-scheduler's depth-first search takes, request after request, the first ``count`` free
devices (in pool, slice and list order) that the selectors accept, without ever backing up
when each request finds them. Its counted work is then a closed form: per request ``count``
+ 1 allocateOne calls, devices visited up to the last one taken, one allocation check per
device taken, and every selector evaluation of the free devices visited; one more call per
claim and one at the end. A single request that cannot be filled is decided by the
allocator's own counting rule (``prune``), reproduced here.

The selector results per device position are computed once per node template (nodes with
the same device shapes in the same order) and request, so each node costs a few numpy
operations over its in-use bitmap instead of an allocator call (~1 ms). Anything outside
these conditions -- or a selector that fails to evaluate, a result that would reach the
Filter timeout, an unfillable request among several -- returns ``None`` and the caller runs
the general allocator. ``tests/sim/test_firstfit.py`` checks equality with the allocator.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from topodra.sim.allocator.prune import hopeless_group_work
from topodra.sim.allocator.results import ClaimAllocation, DeviceResult, SearchStats
from topodra.sim.allocator.search import Allocator
from topodra.sim.cel import CelError, compile_selector
from topodra.sim.objects import MAX_RESULTS, Claim, Device, DeviceClass, DeviceID, Node, RequestSpec

__all__ = ["Fit", "FirstFit", "plain_specs"]


@dataclass(frozen=True, slots=True)
class _Req:
    """A request of a plain template with its class and selectors (what the first-fit path evaluates)."""

    spec: RequestSpec
    cls: DeviceClass
    selectors: tuple[str, ...]  # class then request selectors, in the allocator's order
    tolerations: tuple[Mapping[str, Any], ...]  # as the allocation result writes them


def plain_specs(claims: Sequence[Claim], classes: Mapping[str, DeviceClass]) -> list[list[_Req]] | None:
    """Per claim its plain requests, or None when some claim or request is not plain."""
    out: list[list[_Req]] = []
    for claim in claims:
        if claim.constraints:
            return None
        reqs: list[_Req] = []
        total = 0
        for req in claim.requests:
            spec = req.exactly
            if req.first_available or spec is None:
                return None
            if spec.mode != "ExactCount" or spec.count < 1 or spec.admin_access or spec.capacity_requests:
                return None
            cls = classes.get(spec.class_name)
            if cls is None:
                return None  # the allocator's error
            total += spec.count
            reqs.append(_Req(spec, cls, cls.selectors + spec.selectors, tuple(t.raw for t in spec.tolerations)))
        if total > MAX_RESULTS:
            return None
        out.append(reqs)
    return out


@dataclass(slots=True)
class _Template:
    """One node template: its devices in search order, or None when the shortcut does not apply."""

    devices: list[Device] | None
    no_invalid: bool  # no invalid pool on the node (a failed search would be an error)
    masks: dict[tuple[str, ...], tuple[np.ndarray[Any, np.dtype[np.bool_]], np.ndarray[Any, np.dtype[np.int64]]] | None]


class FirstFit:
    """The shortcut for one scheduler: selector masks per (template, selectors), cached."""

    def __init__(self, allocator: Allocator) -> None:
        self.allocator = allocator
        self._templates: dict[int, _Template] = {}
        self._sel: dict[tuple[str, str], bool | None] = {}  # (expression, fingerprint) -> result, None: error
        self.hits = 0

    def template(self, template: int, node: Node) -> _Template:
        t = self._templates.get(template)
        if t is None:
            t = self._templates[template] = self._describe(node)
        return t

    def _describe(self, node: Node) -> _Template:
        pools = self.allocator.pools_for(node)
        devices: list[Device] = []
        for p in pools:
            if not p.usable:
                continue
            for s in p.slices:
                if s.per_device_node_selection or not s.node_name:
                    return _Template(None, False, {})
                for d in s.devices:
                    if d.taints or d.consumes_counters or d.allow_multiple or any(c.policy for c in d.capacity.values()):
                        return _Template(None, False, {})
                    devices.append(d)
        return _Template(devices, not any(p.invalid for p in pools), {})

    def _mask(self, t: _Template, exprs: tuple[str, ...]) -> tuple[np.ndarray[Any, np.dtype[np.bool_]], np.ndarray[Any, np.dtype[np.int64]]] | None:
        """Positions the selectors accept and the evaluations each position costs (the allocator
        evaluates class then request selectors and stops at the first false); None on an error."""
        got = t.masks.get(exprs, False)
        if got is not False:
            assert got is None or isinstance(got, tuple)
            return got
        assert t.devices is not None
        ok = np.zeros(len(t.devices), dtype=bool)
        evals = np.zeros(len(t.devices), dtype=np.int64)
        result: tuple[np.ndarray[Any, np.dtype[np.bool_]], np.ndarray[Any, np.dtype[np.int64]]] | None = (ok, evals)
        for pos, d in enumerate(t.devices):
            n = 0
            match = True
            for expr in exprs:
                n += 1
                hit = self._eval(expr, d)
                if hit is None:
                    result = None
                    break
                if not hit:
                    match = False
                    break
            if result is None:
                break
            ok[pos] = match
            evals[pos] = n
        t.masks[exprs] = result
        return result

    def _eval(self, expr: str, d: Device) -> bool | None:
        if d.list_attribute and not self.allocator.list_type_attributes:
            return None  # the allocator's error (Allocator.evaluate)
        key = (expr, d.fingerprint)
        if key in self._sel:
            return self._sel[key]
        try:
            hit: bool | None = compile_selector(expr, lists=self.allocator.list_type_attributes).matches(d.cel())
        except CelError:
            hit = None
        if len(self._sel) > 100_000:
            self._sel.clear()
        self._sel[key] = hit
        return hit

    def allocate(
        self,
        template: int,
        node: Node,
        held: np.ndarray[Any, np.dtype[np.bool_]],
        claims: Sequence[Claim],
        specs: list[list[_Req]],
        configs: Sequence[tuple[Mapping[str, Any], ...]],
        name_of: Callable[[int], DeviceID],
    ) -> tuple[list[ClaimAllocation] | None, SearchStats] | None:
        """The allocator's (result, stats) for ``claims`` on ``node`` given its devices in use
        (``held``, by position), or None when the shortcut does not apply (the caller allocates).
        ``configs``: each claim's allocation config (it depends on the claim specs only);
        ``name_of``: the node's device id at a position."""
        got = self.fit(template, node, held, claims, specs, configs, name_of)
        if got is None:
            return None
        fit, stats = got
        return (fit.build() if fit is not None else None), stats

    def fit(
        self,
        template: int,
        node: Node,
        held: np.ndarray[Any, np.dtype[np.bool_]],
        claims: Sequence[Claim],
        specs: list[list[_Req]],
        configs: Sequence[tuple[Mapping[str, Any], ...]],
        name_of: Callable[[int], DeviceID],
    ) -> tuple[Fit | None, SearchStats] | None:
        """``allocate`` with the allocation records left to build (``Fit.build``): most nodes
        filtered are never chosen."""
        t = self.template(template, node)
        devices = t.devices
        if devices is None or len(held) != len(devices):
            return None
        D = len(devices)
        stats = SearchStats(devices=D)
        free = ~held
        picked: list[list[tuple[_Req, int]]] = []
        single = len(specs) == 1 and len(specs[0]) == 1
        for reqs in specs:
            mine: list[tuple[_Req, int]] = []
            for r in reqs:
                got = self._mask(t, r.selectors)
                if got is None:
                    return None
                ok, evals = got
                at = (free & ok).nonzero()[0]
                n = r.spec.count
                if at.size < n:
                    if not single or not t.no_invalid:
                        return None
                    stats = _unfillable(D, at.tolist(), int(evals[free].sum()), n, D)
                    if self._times_out(stats):
                        return None
                    self.hits += 1
                    return None, stats
                chosen = at[:n]
                last = int(chosen[-1]) + 1
                stats.calls += n + 1
                stats.visits += last
                stats.checks += n
                stats.cel_evals += int(evals[:last][free[:last]].sum())
                free[chosen] = False  # taken by this pod: not free for its next requests
                mine.extend((r, p) for p in chosen.tolist())
            stats.calls += 1
            picked.append(mine)
        stats.calls += 1
        if self._times_out(stats):
            return None
        self.hits += 1
        return Fit(node, devices, name_of, claims, picked, configs), stats

    def _times_out(self, stats: SearchStats) -> bool:
        """Would the allocator stop at its Filter deadline (the counted work only grows, so the
        total decides)? Then the general path runs, to stop where it stops."""
        b = self.allocator.budget
        return b is not None and b.seconds(stats) >= b.timeout_s


def _unfillable(D: int, checked: list[int], evals: int, need: int, devices: int) -> SearchStats:
    """The allocator's counted work when one request cannot be filled: every free device is
    visited and evaluated, and each choice of fewer than ``need`` accepted devices is tried
    (the sums ``_prune`` adds for one group of accepted positions)."""
    def checks_from(p: int) -> int:
        return len(checked) - bisect.bisect_left(checked, p)

    calls, visits, checks = 1, D, checks_from(0)
    s_calls, s_visits, s_checks = hopeless_group_work(checked, checks_from, D)
    return SearchStats(calls=calls + s_calls, visits=visits + s_visits, checks=checks + s_checks, cel_evals=evals, devices=devices)


@dataclass(slots=True)
class Fit:
    """The devices a first fit took, per claim, until their allocation records are needed."""

    node: Node
    devices: list[Device]
    name_of: Callable[[int], DeviceID]
    claims: Sequence[Claim]
    picked: list[list[tuple[_Req, int]]]
    configs: Sequence[tuple[Mapping[str, Any], ...]]

    def build(self, claims: Sequence[Claim] | None = None) -> list[ClaimAllocation]:
        """The records, for ``claims`` (default: the claims fitted; another pod's claims with
        the same specs get the same devices)."""
        return _build(self.node, self.devices, self.name_of, self.claims if claims is None else claims, self.picked, self.configs)

    def positions(self) -> list[list[int]]:
        """The device positions taken, per claim."""
        return [[p for _, p in mine] for mine in self.picked]


def _build(
    node: Node,
    devices: list[Device],
    name_of: Callable[[int], DeviceID],
    claims: Sequence[Claim],
    picked: list[list[tuple[_Req, int]]],
    configs: Sequence[tuple[Mapping[str, Any], ...]],
) -> list[ClaimAllocation]:
    """The allocation records as the allocator's ``_build`` writes them (node-local slices:
    the node selector names the node)."""
    out = []
    selector = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node.name]}]}]}
    for claim, mine, config in zip(claims, picked, configs, strict=True):
        results = []
        for r, pos in mine:
            d = devices[pos]  # the template's device: same shape (binding conditions) as the node's
            driver, pool, name = name_of(pos)
            results.append(
                DeviceResult(
                    request=r.spec.name,
                    driver=driver,
                    pool=pool,
                    device=name,
                    tolerations=r.tolerations,
                    binding_conditions=d.binding_conditions,
                    binding_failure_conditions=d.binding_failure_conditions,
                )
            )
        out.append(ClaimAllocation(claim.key, tuple(results), config, selector))
    return out
