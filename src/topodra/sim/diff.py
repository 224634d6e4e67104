"""Compare a replay with what a real cluster did: exact matches and mismatches, pod by pod.

The recording is either Kubernetes objects read back from the cluster
(``kubectl get pods,resourceclaims -o yaml``: Pods with ``spec.nodeName`` or a
``PodScheduled=False`` condition, ResourceClaims with ``status.allocation``),
compared with the replay's final state; or a step log (``{"steps": [...]}``, the
format of the recorded runs in the repository's ``tests/data/sched-recorded``: every
pod's outcome when it was created, deletions, pods scheduled later), compared step
by step.

What is compared: the node (or that the pod stayed pending, with the part of
kube-scheduler's message before its preemption summary), and per pod claim the
results (request, driver, pool, device, consumed capacity, the copied tolerations, in order),
the allocation's nodeSelector and ``config`` (where the recording has it), ``reservedFor``,
and for deletions what became of each claim; the pod's
``status.nodeAllocatableResourceClaimStatuses`` (claims named by their pod claim name,
quantities by value) where the recording has them. Generated claim names, uids and shareIDs
are random in a real cluster and are not compared (in a message, a generated claim's name
stands for its pod claim). Where the real scheduler broke a tie between equally scored
nodes at random, the replay follows the recorded node if its own best nodes
include it (the row says ``tie`` and names the tied nodes), so later steps see the
same state. Scores are compared per node: the totals, and each plugin's weighted
score where the recording has them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from topodra.dra.allocation import AllocationFormatError, parse_allocation
from topodra.quantity import QuantityError, parse_quantity
from topodra.sim.replay import Replay, replay
from topodra.sim.replaysteps import ClaimState, Step
from topodra.yamldocs import YamlFileError, expand_lists, load_documents

__all__ = ["Outcome", "Recorded", "DiffRow", "DiffReport", "load_recorded", "diff_replay", "filter_message"]

#: The first words the PostFilter plugins add after the Filter part (DynamicResources' messages in
#: 1.36's dynamicresources.go, then DefaultPreemption's).
_POST_FILTER = (
    "still not schedulable",
    "no new claims to deallocate",
    "deallocation of ResourceClaim completed",
    "deletion of ResourceClaim completed",
    "preemption: ",
)


def filter_message(message: str | None) -> str | None:
    """The Filter part of an unschedulable message (without what PostFilter added: the claim
    deallocation's and the preemption's summaries)."""
    if message is None:
        return None
    cut = len(message)
    for marker in _POST_FILTER:
        at = message.find(". " + marker)
        if at >= 0:
            cut = min(cut, at + 1)
    return message[:cut].strip()


def _unnamed(message: str | None, claims: Mapping[str, ClaimOutcome]) -> str | None:
    """``message`` with the generated claims' names (random in a cluster) replaced by their pod
    claim names."""
    for pod_claim, c in claims.items():
        if message is not None and c.generated and c.name:
            message = message.replace(c.name, f"<{pod_claim}>")
    return message


@dataclass(frozen=True)
class ClaimOutcome:
    name: str | None  # compared only for claims that are not generated
    generated: bool | None
    results: tuple[tuple[str, ...], ...]
    node_selector: str | None
    reserved_for: tuple[str, ...]
    state: str | None = None
    config: str | None = None  # status.allocation.devices.config as JSON (None: not recorded)

    def text(self) -> str:
        if self.state is not None:
            return f"{self.state} reservedFor={list(self.reserved_for)}"
        devices = ",".join(r[3] for r in self.results) or "unallocated"
        return f"{devices} reservedFor={list(self.reserved_for)}"


@dataclass(frozen=True)
class Outcome:
    """One pod step (or a pod's final state), reduced to what is compared."""

    op: str  # create | scheduled-later | delete | still-pending | state
    pod: str
    node: str | None = None
    message: str | None = None
    claims: Mapping[str, ClaimOutcome] = field(default_factory=dict)
    pending: tuple[str, ...] = ()
    feasible: frozenset[str] | None = None  # nodes that passed Filter (None: not recorded)
    scores: tuple[tuple[str, int], ...] | None = None  # total score per node when several passed
    plugin_scores: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] | None = None  # node -> (plugin, weighted score)
    node_allocatable: str | None = None  # nodeAllocatableResourceClaimStatuses, canonical (None: not recorded)

    def text(self) -> str:
        if self.op == "still-pending":
            return f"pending: {', '.join(self.pending)}"
        parts = []
        if self.op != "delete":
            parts.append(self.node if self.node is not None else f"unschedulable: {self.message}")
        parts.extend(f"{k}: {c.text()}" for k, c in sorted(self.claims.items()))
        if self.node_allocatable not in (None, "[]"):
            parts.append(f"nodeAllocatable {self.node_allocatable}")
        return "; ".join(parts)

    def same(self, other: Outcome) -> list[str]:
        """What differs (empty: an exact match)."""
        out = []
        if self.op != "delete" and self.node != other.node:
            out.append("node")
        if (
            self.op != "delete"
            and self.node is None
            and other.node is None
            and _unnamed(self.message, self.claims) != _unnamed(other.message, other.claims)
        ):
            out.append("message")
        if self.pending != other.pending:
            out.append("pending pods")
        if self.feasible is not None and other.feasible is not None and self.feasible != other.feasible:
            out.append("feasible nodes")
        if self.scores is not None and other.scores is not None and self.scores != other.scores:
            out.append("scores")
        elif self.plugin_scores is not None and other.plugin_scores is not None and self.plugin_scores != other.plugin_scores:
            out.append("plugin scores")
        if self.node_allocatable is not None and other.node_allocatable is not None and self.node_allocatable != other.node_allocatable:
            out.append("nodeAllocatableResourceClaimStatuses")
        for k in sorted(set(self.claims) | set(other.claims)):
            a, b = self.claims.get(k), other.claims.get(k)
            if a is None or b is None:
                out.append(f"claim {k} missing")
                continue
            for what, x, y in (
                ("devices", a.results, b.results),
                ("nodeSelector", a.node_selector, b.node_selector),
                ("reservedFor", a.reserved_for, b.reserved_for),
                ("state", a.state, b.state),
            ):
                if x != y:
                    out.append(f"claim {k} {what}")
            if a.config is not None and b.config is not None and a.config != b.config:
                out.append(f"claim {k} config")
            if a.generated is not None and b.generated is not None and a.generated != b.generated:
                out.append(f"claim {k} generated")
            elif not a.generated and not b.generated and a.name and b.name and a.name != b.name:
                out.append(f"claim {k} name")
        return out


@dataclass(frozen=True)
class Recorded:
    """A recording: its outcomes, whether they are steps or a final state, and the node of each pod."""

    outcomes: tuple[Outcome, ...]
    form: str  # "steps" | "state"
    nodes: Mapping[str, str]  # pod -> recorded node (last binding)


@dataclass(frozen=True)
class DiffRow:
    key: str
    recorded: str
    replayed: str
    verdict: str  # match | tie | MISMATCH | missing | extra
    differs: tuple[str, ...] = ()
    tied: tuple[str, ...] = ()  # a tie: the nodes with the best total, the real scheduler's among them


@dataclass
class DiffReport:
    rows: list[DiffRow]
    replay: Replay

    @property
    def matches(self) -> int:
        return sum(r.verdict in ("match", "tie") for r in self.rows)

    @property
    def mismatches(self) -> int:
        return len(self.rows) - self.matches

    def as_dict(self) -> dict[str, Any]:
        return {
            "matches": self.matches,
            "mismatches": self.mismatches,
            "rows": [
                {"step": r.key, "verdict": r.verdict, "recorded": r.recorded, "replayed": r.replayed, "differs": list(r.differs)}
                | ({"tie": list(r.tied)} if r.tied else {})
                for r in self.rows
            ],
        }


# --- reading recordings ----------------------------------------------------------------------


def _results(allocation: Mapping[str, Any] | None, where: str) -> tuple[tuple[tuple[str, ...], ...], str | None]:
    try:
        parsed = parse_allocation({"status": {"allocation": allocation}}) if allocation else None
    except AllocationFormatError as e:
        raise YamlFileError(f"{where}: {e}") from None
    if parsed is None:
        return (), None
    rows = tuple(
        (
            r.request,
            r.driver,
            r.pool,
            r.device,
            json.dumps({k: str(q.amount) for k, q in sorted((r.consumed_capacity or {}).items())}),
            json.dumps([dict(t) for t in r.tolerations], sort_keys=True) if r.tolerations else "",
        )
        for r in parsed.results
    )
    sel = json.dumps(parsed.node_selector, sort_keys=True) if parsed.node_selector is not None else None
    return rows, sel


def _config(allocation: Mapping[str, Any] | None) -> str | None:
    """An allocation's ``devices.config`` as canonical JSON (``[]`` when it has none); None
    without an allocation."""
    if not allocation:
        return None
    return json.dumps((allocation.get("devices") or {}).get("config") or [], sort_keys=True)


def _node_allocatable(statuses: Any, pod_claim_of: Mapping[str, str], where: str) -> str:
    """``nodeAllocatableResourceClaimStatuses`` in a form both sides share: each claim by its pod
    claim name where known (generated names are random), quantities by value, sorted."""
    if not isinstance(statuses, list):
        raise YamlFileError(f"{where}: nodeAllocatableResourceClaimStatuses must be a list")
    rows = []
    for s in statuses:
        name = str(s.get("resourceClaimName"))
        try:
            resources = {str(k): str(parse_quantity(v).amount) for k, v in sorted((s.get("resources") or {}).items())}
        except QuantityError as e:
            raise YamlFileError(f"{where}: nodeAllocatableResourceClaimStatuses: {e}") from None
        rows.append([pod_claim_of.get(name, name), list(s.get("containers") or ()), resources])
    return json.dumps(sorted(rows), sort_keys=True)


def _step_claim(c: Mapping[str, Any], where: str) -> ClaimOutcome:
    if "state" in c:
        return ClaimOutcome(c.get("claimName"), c.get("generated"), (), None, tuple(c.get("reservedForAfter") or ()), str(c["state"]))
    allocation = None
    if c.get("results"):
        allocation = {"devices": {"results": c["results"]}, "nodeSelector": c.get("nodeSelector")}
    results, sel = _results(allocation, where)
    config = json.dumps(c["config"] or [], sort_keys=True) if "config" in c and c.get("results") else None
    return ClaimOutcome(c.get("claimName"), c.get("generated"), results, sel, tuple(c.get("reservedFor") or ()), config=config)


def _from_steps(doc: Mapping[str, Any], source: str) -> Recorded:
    outcomes: list[Outcome] = []
    nodes: dict[str, str] = {}
    last_delete = ""
    # A log that records the pods' node-allocatable statuses leaves them out where there are none.
    statuses = any(isinstance(s, Mapping) and "nodeAllocatableResourceClaimStatuses" in s for s in doc.get("steps") or ())
    for i, s in enumerate(doc.get("steps") or ()):
        where = f"{source}: steps[{i}]"
        if not isinstance(s, Mapping):
            raise YamlFileError(f"{where}: expected an object")
        op = s.get("op")
        claims = {str(c.get("podClaimName")): _step_claim(c, where) for c in s.get("claims") or ()}
        if op == "update" or (op == "delete" and s.get("kind") not in (None, "Pod")):
            continue  # an object written or deleted (a slice, a DeviceTaintRule): no pod outcome
        alloc = None
        if statuses:
            names = {str(c.get("claimName")): str(c.get("podClaimName")) for c in s.get("claims") or ()}
            alloc = _node_allocatable(s.get("nodeAllocatableResourceClaimStatuses") or [], names, where)
        if op == "observe":
            outcomes += _observed(s.get("pods") or {}, where)
        elif op == "delete":
            last_delete = str(s.get("pod") or s.get("name"))
            outcomes.append(Outcome("delete", last_delete, claims=claims))
        elif op == "still-pending":
            outcomes.append(Outcome("still-pending", last_delete, pending=tuple(s.get("pods") or ())))
        elif op in ("create", "scheduled-later"):
            node = s.get("node")
            pod = str(s.get("name"))
            if node == "unschedulable" or node is None:
                outcomes.append(Outcome(str(op), pod, None, filter_message(s.get("message")), claims))
            else:
                nodes[pod] = str(node)
                feasible = frozenset(s["feasibleNodes"]) if s.get("feasibleNodes") else None
                scores = s.get("scores")
                totals = tuple(sorted((str(n), int(v["total"])) for n, v in scores.items())) if scores else None
                plugins = _plugin_scores({str(n): v.get("plugins") or {} for n, v in scores.items()}) if scores else None
                outcomes.append(
                    Outcome(
                        str(op), pod, str(node), None, claims,
                        feasible=feasible, scores=totals, plugin_scores=plugins, node_allocatable=alloc,
                    )
                )
        else:
            raise YamlFileError(f"{where}: unknown op {op!r}")
    return Recorded(tuple(outcomes), "steps", nodes)


def _observed(pods: Mapping[str, Any], where: str) -> list[Outcome]:
    """An ``observe`` step (the recorder read every pod after a wait): each pod's node, or that it
    is gone (deleted: evicted, or removed by the recorder), with its claims."""
    out = []
    for pod, seen in pods.items():
        if not isinstance(seen, Mapping) or not seen.get("exists"):
            out.append(Outcome("observe", str(pod), None, "gone"))
            continue
        claims = {str(c.get("podClaimName")): _step_claim(c, where) for c in seen.get("claims") or ()}
        node = seen.get("node")
        message = None
        for cond in seen.get("conditions") or ():
            if not node and cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                message = filter_message(cond.get("message"))
        out.append(Outcome("observe", str(pod), str(node) if node else None, message, claims))
    return out


def _plugin_scores(per_node: Mapping[str, Mapping[str, Any]]) -> tuple[tuple[str, tuple[tuple[str, int], ...]], ...]:
    return tuple(sorted((n, tuple(sorted((str(p), int(v)) for p, v in plugins.items()))) for n, plugins in per_node.items()))


def _from_objects(objs: Sequence[Mapping[str, Any]]) -> Recorded:
    claims: dict[str, Mapping[str, Any]] = {}
    for o in objs:
        if o.get("kind") == "ResourceClaim":
            meta = o.get("metadata") or {}
            claims[f"{meta.get('namespace') or 'default'}/{meta.get('name')}"] = o
    outcomes: list[Outcome] = []
    nodes: dict[str, str] = {}
    for o in objs:
        if o.get("kind") != "Pod":
            continue
        meta, spec, status = o.get("metadata") or {}, o.get("spec") or {}, o.get("status") or {}
        pod, ns = str(meta.get("name")), str(meta.get("namespace") or "default")
        generated = {str(s.get("name")): str(s.get("resourceClaimName")) for s in status.get("resourceClaimStatuses") or () if s.get("resourceClaimName")}
        per_claim: dict[str, ClaimOutcome] = {}
        for rc in spec.get("resourceClaims") or ():
            pc = str(rc.get("name"))
            name = rc.get("resourceClaimName") or generated.get(pc)
            claim = claims.get(f"{ns}/{name}") if name else None
            if claim is None:
                continue
            cstatus = claim.get("status") or {}
            results, sel = _results(cstatus.get("allocation"), f"ResourceClaim {name}")
            reserved = tuple(str(r.get("name")) for r in cstatus.get("reservedFor") or ())
            per_claim[pc] = ClaimOutcome(
                str(name), not rc.get("resourceClaimName"), results, sel, reserved, config=_config(cstatus.get("allocation"))
            )
        node = spec.get("nodeName")
        names = {c.name: pc for pc, c in per_claim.items() if c.name}
        alloc = _node_allocatable(status.get("nodeAllocatableResourceClaimStatuses") or [], names, f"Pod {pod}") if node else None
        message = None
        if not node:
            for cond in status.get("conditions") or ():
                if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                    message = filter_message(cond.get("message"))
        else:
            nodes[pod] = str(node)
        outcomes.append(Outcome("state", pod, str(node) if node else None, message, per_claim, node_allocatable=alloc))
    return Recorded(tuple(outcomes), "state", nodes)


def load_recorded(path: str | Path) -> Recorded:
    """A recording file: a step log (JSON with ``steps``) or Kubernetes objects (YAML/JSON, Lists too)."""
    docs = load_documents(path)
    if len(docs) == 1 and isinstance(docs[0].obj, Mapping) and "steps" in docs[0].obj:
        return _from_steps(docs[0].obj, str(path))
    objs = [d.obj for d in expand_lists(docs) if isinstance(d.obj, Mapping)]
    if not any(o.get("kind") == "Pod" for o in objs):
        raise YamlFileError(f"{path}: no Pods and no steps: nothing recorded to compare with")
    return _from_objects(objs)


# --- comparing -----------------------------------------------------------------------------------


def _claim_outcome(c: ClaimState) -> ClaimOutcome:
    results, sel = _results(c.allocation, f"claim {c.claim}")
    return ClaimOutcome(c.claim, c.generated, results, sel, tuple(c.reserved_for), c.state, _config(c.allocation))


def _outcome(step: Step, op: str | None = None) -> Outcome:
    claims = {c.pod_claim: _claim_outcome(c) for c in step.claims}
    if step.op == "still-pending":
        return Outcome("still-pending", step.pod, pending=tuple(step.pending))
    message = filter_message(step.failure) if step.node is None else None
    feasible = frozenset(step.feasible) if step.feasible else None
    scores = tuple(sorted(step.scores.items())) if step.scores else None
    plugins = _plugin_scores(step.plugin_scores) if step.plugin_scores else None
    alloc = None
    if step.node is not None:
        alloc = _node_allocatable(step.node_allocatable, {c.claim: c.pod_claim for c in step.claims}, f"step {step.pod}")
    return Outcome(
        op or step.op, step.pod, step.node, message, claims,
        feasible=feasible, scores=scores, plugin_scores=plugins, node_allocatable=alloc,
    )


def _keyed(outcomes: Iterable[Outcome]) -> dict[str, Outcome]:
    out: dict[str, Outcome] = {}
    for o in outcomes:
        base = f"{o.op} {o.pod}" if o.op != "still-pending" else f"still-pending after delete {o.pod}"
        key, n = base, 1
        while key in out:
            n += 1
            key = f"{base} #{n}"
        out[key] = o
    return out


def diff_replay(
    objects: Iterable[tuple[Any, str]],
    recorded: Recorded,
    *,
    percentage_of_nodes_to_score: int | None = None,
    gates: Mapping[str, bool] | None = None,
    evictions: bool = True,
) -> DiffReport:
    """Replay ``objects`` (following the recorded node on ties, with the cluster's feature
    ``gates``; ``evictions``: as for ``replay``) and compare with ``recorded``."""
    r = replay(
        objects, prefer=recorded.nodes.get, percentage_of_nodes_to_score=percentage_of_nodes_to_score, gates=gates, evictions=evictions
    )
    if recorded.form == "steps":
        ties = {(s.op if s.op != "bound" else "create", s.pod): tuple(s.top) for s in r.steps if s.followed_hint}
        # evictions are not steps of a recording: what they leave is seen at its observe steps
        mine = _keyed(_outcome(s, "create" if s.op == "bound" else None) for s in r.steps if s.op != "evicted")
    else:
        final = r.final_pods()
        ties = {("state", s.pod): tuple(s.top) for s in r.steps if s.followed_hint and final.get(s.pod, s).node == s.node}
        mine = _keyed(_outcome(s) for s in final.values())
    theirs = _keyed(recorded.outcomes)
    rows = []
    for key, rec in theirs.items():
        got = mine.get(key)
        if got is None:
            rows.append(DiffRow(key, rec.text(), "-", "missing"))
            continue
        differs = tuple(rec.same(got))
        tied = ties.get((rec.op, rec.pod), ()) if not differs else ()
        verdict = "MISMATCH" if differs else ("tie" if tied else "match")
        rows.append(DiffRow(key, rec.text(), got.text(), verdict, differs, tied))
    rows.extend(DiffRow(key, "-", got.text(), "extra") for key, got in mine.items() if key not in theirs)
    return DiffReport(rows, r)
