"""Runs a scenario on a playground and checks its expectations."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from topodra.cpuset import CPUSet
from topodra.embedded.store import KINDS
from topodra.playground.scenario import Check, Scenario, Step
from topodra.playground.world import Playground, PlaygroundError
from topodra.topology.machine import load_machine, machine_label
from topodra.topology.model import Topology

__all__ = ["CheckResult", "StepResult", "evaluate", "resolve_topology", "run_scenario"]

@dataclass(frozen=True)
class CheckResult:
    check: Check
    ok: bool
    message: str


@dataclass
class StepResult:
    index: int
    step: Step
    lines: list[str] = field(default_factory=list)
    checks: list[CheckResult] = field(default_factory=list)
    #: what went wrong that no expectation of the step asked for: a pod it applied that does not
    #: run, or a step that does nothing at all
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks) and not self.problems


def _pod_status(pg: Playground, name: str, namespace: str) -> dict[str, object]:
    """The pod's status as the playground's API server holds it (empty: no such pod)."""
    from topodra.embedded.store import KINDS
    from topodra.kube.errors import ApiError

    try:
        pod = pg.store.get(KINDS[("", "pods")], namespace, name)
    except ApiError:
        return {}
    status = pod.get("status")
    return dict(status) if isinstance(status, dict) else {}


def step_problems(pg: Playground, step: Step) -> list[str]:
    """Pods the step applied that are not running and that none of its expectations names
    (a scenario that expects a pod to stay pending says so), and a step with nothing in it."""
    if not (step.apply or step.delete or step.restart_agent or step.expect):
        return ["nothing to apply: the file holds no Kubernetes object"]
    expected = {tuple(c.target.split("/")[:2]) for c in step.expect}
    out: list[str] = []
    for m in step.apply:
        if m.obj.get("kind") != "Pod" or not isinstance(m.obj.get("metadata"), dict):
            continue
        meta = m.obj["metadata"]
        ns, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
        if (ns, name) in expected:
            continue
        status = _pod_status(pg, name, ns)
        phase = status.get("phase") or "Pending"
        if phase != "Running":
            out.append(f"pod {ns}/{name} is {phase}: {status.get('message') or 'not scheduled'}")
    return out


def resolve_topology(spec: str | None) -> tuple[Topology, str]:
    """Any machine ``load_machine`` reads (default: the hybrid laptop fixture) -> (topology, label)."""
    from topodra.playground.world import DEFAULT_TOPOLOGY
    from topodra.topology.errors import TopologyError

    name = spec or DEFAULT_TOPOLOGY
    try:
        return load_machine(name), machine_label(name)
    except TopologyError as err:
        raise PlaygroundError(str(err)) from None


def _find(pg: Playground, target: str) -> CPUSet | None:
    ns, pod, container = target.split("/")
    for row in pg.rows():
        if row.pod == f"{ns}/{pod}" and (not container or row.container == container):
            return row.cpus
    return None


def _snapshot(pg: Playground) -> dict[str, CPUSet]:
    return {f"{row.pod}/{row.container}": row.cpus for row in pg.rows()}


def _refused(pg: Playground, check: Check, text: str, label: str) -> CheckResult:
    """A ``failed`` check: the pod was scheduled and its containers refused, for ``text``."""
    ns, pod, _ = check.target.split("/")
    status = _pod_status(pg, pod, ns)
    why = str(status.get("message") or "")
    if status.get("phase") != "Failed":
        return CheckResult(check, False, f"{label}: expected its containers to be refused, but it is {status.get('phase') or 'not there'}")
    if text not in why:
        return CheckResult(check, False, f"{label}: refused, but the reason {why!r} does not mention {text!r}")
    return CheckResult(check, True, f"{label}: scheduled, then refused ({why})")


def evaluate(pg: Playground, check: Check, history: Mapping[int, Mapping[str, CPUSet]] | None = None) -> CheckResult:
    """One expectation against the runtime's current state (``history``: each earlier step's CPUs)."""
    label = check.target.removeprefix("default/").rstrip("/")
    if check.failed is not None:
        return _refused(pg, check, check.failed, label)
    if check.pending is not None:
        ns, pod, _ = check.target.split("/")
        msg = pg.pod_errors.get(f"{ns}/{pod}")
        if msg is None:
            return CheckResult(check, False, f"{label}: expected to be pending, but it was not refused")
        if check.pending not in msg:
            return CheckResult(check, False, f"{label}: pending, but the reason {msg!r} does not mention {check.pending!r}")
        return CheckResult(check, True, f"{label}: pending ({msg})")
    cpus = _find(pg, check.target)
    if cpus is None:
        ns, pod, _ = check.target.split("/")
        why = pg.pod_errors.get(f"{ns}/{pod}")
        return CheckResult(check, False, f"{label}: not running ({why})" if why else f"{label}: no such running container")
    problems = []
    if check.cpus is not None and cpus != check.cpus:
        problems.append(f"cpus {cpus}, expected {check.cpus}")
    if check.as_in_step is not None:
        before = (history or {}).get(check.as_in_step, {}).get(check.target)
        if before is None:
            problems.append(f"was not running after step {check.as_in_step}")
        elif before != cpus:
            problems.append(f"cpus {cpus}, expected {before} as after step {check.as_in_step}")
    if check.count is not None and len(cpus) != check.count:
        problems.append(f"{len(cpus)} CPUs ({cpus}), expected {check.count}")
    if check.cores is not None:
        problems.extend(_whole_cores(pg.topology, cpus, check.cores))
    if check.core_type is not None:
        wrong = CPUSet(c for c in cpus if pg.topology.cpu(c).core_type.value != check.core_type)
        if wrong:
            problems.append(f"CPUs {wrong} are not {check.core_type}")
    if check.isolated is not None:
        topo = pg.topology
        isolated = topo.isolated | CPUSet(c for c, info in topo.cpus.items() if info.isolated)
        wrong = cpus - isolated if check.isolated else cpus & isolated
        if wrong:
            problems.append(f"CPUs {wrong} are {'not ' if check.isolated else ''}isolated")
    problems.extend(_placement_checks(pg, check, cpus))
    for other, must_overlap in ((check.excludes, False), (check.includes, True)):
        if other is None:
            continue
        theirs = _find(pg, other)
        name = other.removeprefix("default/")
        if theirs is None:
            problems.append(f"{name} is not running")
        elif not must_overlap and not cpus.isdisjoint(theirs):
            problems.append(f"shares CPUs {cpus & theirs} with {name}")
        elif must_overlap and not theirs <= cpus:
            problems.append(f"lacks CPUs {theirs - cpus} of {name}")
    if check.pcie_local:
        problems.extend(_pcie_problems(pg, check.target, cpus))
    if problems:
        return CheckResult(check, False, f"{label}: " + "; ".join(problems))
    return CheckResult(check, True, f"{label}: CPUs {cpus} as expected")


def _whole_cores(topology: Topology, cpus: CPUSet, expected: int) -> list[str]:
    """Why ``cpus`` are not exactly ``expected`` whole cores (every online thread of each)."""
    cores = {topology.cpu(c).core for c in cpus if c in topology.cpus}
    partial = [core for core in sorted(cores) if not (topology.cpus_of_core(core) & topology.online) <= cpus]
    out = []
    if partial:
        out.append(f"CPUs {cpus} hold part of core(s) {', '.join(map(str, partial))}, expected whole cores")
    if len(cores) != expected:
        out.append(f"CPUs {cpus} span {len(cores)} core(s), expected {expected}")
    return out


def _placement_checks(pg: Playground, check: Check, cpus: CPUSet) -> list[str]:
    """``mems`` and ``allocated``: the memory nodes, and the CPUs against the scheduler's choice."""
    out: list[str] = []
    if check.mems is not None:
        mems = next((r.mems for r in pg.rows() if f"{r.pod}/{r.container}" == check.target), None)
        if mems != check.mems:
            out.append(f"mems {mems}, expected {check.mems}")
    if check.allocated:
        chosen = allocated_cpus(pg, check.target)
        if isinstance(chosen, str):
            out.append(chosen)
        elif chosen != cpus:
            out.append(f"CPUs {cpus}, but the scheduler allocated the CPUs {chosen}")
    return out


def allocated_cpus(pg: Playground, target: str) -> CPUSet | str:
    """The CPUs of the devices the scheduler allocated to the claims a container uses (from the
    claims' ``status.allocation`` and the node's devices), or why there are none to compare."""
    from topodra.dra.devices import DRIVER, DeviceModelConfig, build_devices
    from topodra.embedded.store import KINDS
    from topodra.kube.errors import ApiError

    ns, pod_name, container = target.split("/")
    try:
        pod = pg.store.get(KINDS[("", "pods")], ns, pod_name)
    except ApiError:
        return f"pod {ns}/{pod_name} does not exist"
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    names = {c["name"] for ctr in spec.get("containers") or () if ctr.get("name") == container
             for c in (ctr.get("resources") or {}).get("claims") or ()}
    claim_of = {s["name"]: s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or ()}
    claim_of |= {r["name"]: r["resourceClaimName"] for r in spec.get("resourceClaims") or () if r.get("resourceClaimName")}
    if pg.agent is not None:
        devices = {d.name: d for d in pg.agent.node.devices}
    else:
        devices = {d.name: d for d in build_devices(pg.topology, DeviceModelConfig(model=pg.model, group_by=pg.group_by))}  # type: ignore[arg-type]
    out = CPUSet()
    for name in sorted(names):
        try:
            claim = pg.store.get(KINDS[("resource.k8s.io", "resourceclaims")], ns, claim_of.get(name) or "")
        except ApiError:
            return f"claim {name!r} of pod {ns}/{pod_name} does not exist"
        for r in ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or ():
            if r.get("driver") != DRIVER:
                continue
            device = devices.get(r["device"])
            if device is None or (device.allow_multiple_allocations and r.get("consumedCapacity")):
                return f"device {r['device']} of claim {claim['metadata']['name']}: topodra picks its CPUs, not the scheduler"
            out |= device.cpus
    return out if names else f"{container} uses no claim"


def _pcie_problems(pg: Playground, target: str, cpus: CPUSet) -> list[str]:
    """``pcieLocal``: CPUs outside the PCIe root of a GPU allocated to the same pod."""
    from topodra.dra.devices import PCIE_ROOT_ATTRIBUTE
    from topodra.sim.gpus import GPU_DRIVER, gpu_devices

    ns, pod, _ = target.split("/")
    gpus = {d.name: d for d in gpu_devices(pg.topology)}
    roots = {r.name: r for r in pg.topology.pci_roots}
    names = [
        r["device"]
        for c in pg.scheduler.pod_claims(pg.store.get(KINDS[("", "pods")], ns, pod))
        for r in ((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
        if r.get("driver") == GPU_DRIVER
    ]
    if not names:
        return [f"no {GPU_DRIVER} device is allocated to pod {ns}/{pod}"]
    out = []
    for name in names:
        root = roots[str(gpus[name].attributes[PCIE_ROOT_ATTRIBUTE])]
        if not cpus <= root.cpus:
            out.append(f"CPUs {cpus - root.cpus} are not local to {root.name} of {name} (its CPUs: {root.cpus})")
    return out


async def _restart_agent(pg: Playground, step: Step, res: StepResult) -> None:
    """Restart the agent; a refusal is the step's expectation (``agentRefused``) or a problem."""
    from topodra.agent.agent import AgentError

    try:
        await pg.restart_agent()
    except AgentError as err:
        res.lines.append(f"agent refused to start: {err}")
        if step.agent_refused is None:
            res.problems.append(f"the agent refused to start: {err}")
        else:
            ok = step.agent_refused in str(err)
            res.checks.append(CheckResult(Check(target="agent"), ok, f"agent refused: {err}" if ok else f"agent refused, but not with {step.agent_refused!r}: {err}"))
        return
    res.lines.append("agent restarted")
    if step.agent_refused is not None:
        res.checks.append(CheckResult(Check(target="agent"), False, f"agent started; expected a refusal containing {step.agent_refused!r}"))


async def run_scenario(
    pg: Playground,
    scenario: Scenario,
    *,
    before_step: Callable[[int, Step], Awaitable[None]] | None = None,
    after_step: Callable[[StepResult], Awaitable[None]] | None = None,
) -> list[StepResult]:
    results: list[StepResult] = []
    history: dict[int, dict[str, CPUSet]] = {}
    for i, step in enumerate(scenario.steps, 1):
        if before_step is not None:
            await before_step(i, step)
        res = StepResult(i, step)
        if step.cpu_manager_policy is not None and pg.kubelet is not None:
            path = pg.kubelet.write_cpu_manager_state(step.cpu_manager_policy, pg.topology.online)
            res.lines.append(f"kubelet restarted with cpuManagerPolicy: {step.cpu_manager_policy} ({path.name})")
        if step.gates:  # the API server and the scheduler restarted with these gates
            pg.store.gates.update(step.gates)
            res.lines.append("feature gates " + ", ".join(f"{k}={str(v).lower()}" for k, v in sorted(step.gates.items())))
        if step.apply:
            by_source: dict[str, list[dict[str, object]]] = {}
            for m in step.apply:
                by_source.setdefault(m.source.rsplit(":", 1)[0], []).append(m.obj)
            for source, objs in by_source.items():
                res.lines.extend(await pg.apply(objs, source=source))
        for ns, name in step.delete:
            res.lines.append(await pg.delete_pod(name, ns))
        if step.restart_agent:
            await _restart_agent(pg, step, res)
        await pg.settle()
        res.checks += [evaluate(pg, c.for_model(pg.model), history) for c in step.expect]
        res.problems += step_problems(pg, step)
        history[i] = _snapshot(pg)
        results.append(res)
        if after_step is not None:
            await after_step(res)
    return results
