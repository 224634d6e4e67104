"""Scenario files: apply and delete objects step by step, optionally checking the CPU sets.

A scenario is a YAML mapping with ``steps`` (a plain Kubernetes YAML file
is a one-step scenario)::

    title: The upstream example, then its pod goes away
    topology: 20em64t-hybrid-1p6c2t+2ca4co1t   # optional: fixture, synthetic:SPEC or host
    model: cpu                                  # optional: cpu | core | core-or-thread | grouped
    groupBy: numa                               # optional, grouped devices: numa | l3 | socket | machine
    steps:
    - title: Shared workloads
      apply: [background.yaml]                  # files (relative to the scenario) or inline objects
    - title: A pod claims a P-core
      apply: [upstream-prototype.yaml]
      expect:
        pcore-test/ctr0: {count: 1, coreType: P-core}
        web/nginx: {excludes: pcore-test/ctr0}
    - title: Deleting the claiming pod gives the CPUs back at once
      delete: [pcore-test]                      # pod names, or namespace/name
      restartAgent: false                       # optional: restart the agent after the step
      featureGates: {DRANodeAllocatableResources: true}   # optional: switch gates before the step
      kubeletCpuManagerPolicy: static           # optional: the kubelet restarted with this policy
      agentRefused: cpuManagerPolicy            # optional: the agent's restart is refused, saying this

``expect`` maps ``pod/container`` (namespace ``default`` unless written
``ns/pod/container``) to checks: ``cpus`` (exact list: the scenario then
holds only on its own topology), ``count``, ``cores`` (exactly that many whole
cores, every thread of each),
``coreType`` (every CPU of that kind), ``excludes`` (no CPU shared with that
container), ``includes`` (all CPUs of that container), ``asInStep`` (the same CPUs as
after that earlier step), ``pending`` (the pod
could not be scheduled and the message contains this text), ``failed`` (the pod was
scheduled but its containers could not be created: the agent refused them, and the
message contains this text), ``mems`` (exact memory nodes), ``allocated: true``
(exactly the CPUs of the devices the scheduler allocated to the container's claims:
Prepare gave what the scheduler chose), ``isolated`` (true: every CPU is kernel-isolated;
false: none is), ``pcieLocal`` (true: every CPU is local to the PCIe root of the
``gpu.example.com`` device allocated to the same pod), and ``byModel`` (model ->
checks that replace the ones named for that device model; ``null`` drops one:
``{count: 1, byModel: {core: {count: null, cores: 1}}}``).

``gpus: true`` puts the made-up ``gpu.example.com`` driver on the node (a GPU per
PCIe root, ``topodra.sim.gpus``).

``featureGates`` (top level) are the gates the API server and the scheduler start with
(``topodra.gates``; default: Kubernetes 1.36's); a step's ``featureGates`` switch them
before the step, as restarting those with other ``--feature-gates`` does (the agent
probes the API server at its start: restart it too, ``restartAgent``).

``kubeletCpuManagerPolicy`` (``none`` or ``static``) restarts the embedded kubelet with that CPU
manager policy before the step: it writes its ``cpu_manager_state`` as a kubelet does. An agent
(re)started beside a ``static`` one refuses to start; ``agentRefused: TEXT`` expects the step's
``restartAgent`` to be refused with a message containing TEXT (an unexpected refusal, or a start
where one was expected, fails the step). Until the next restart the node has no agent.

``isolate: N`` makes the
kernel isolate the last N cores of whatever machine the scenario runs on (all their threads, as
``isolcpus=`` would on a latency-tuned node): the cores at the far end from CPU 0.

``requires`` states what a machine needs for the expectations to hold
(``cpus``: at least that many online CPUs; ``maxCpus``: at most that many;
``numaCpus``: a NUMA node with at least that many; ``coreTypes``: kinds of core
that must be present, e.g. ``[P-core]``; ``models``: the device models the
expectations are written for; ``gpus``: at least that many made-up GPUs whose
PCIe root has CPUs local to it alone, ``topodra.sim.gpus.alignable_gpus``): on a
machine without them, or with another ``--model``, the playground says so in one
line instead of reporting failed expectations.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from topodra.cpuset import CPUSet, CPUSetParseError
from topodra.dra.devices import MODELS, ordered_cpus
from topodra.playground.manifests import Manifest, ManifestError, load_manifests, parse_manifests
from topodra.topology.model import Topology
from topodra.yamldocs import read_text

__all__ = ["Check", "Scenario", "ScenarioError", "Step", "builtin_scenario", "builtin_names", "load_scenario"]

_CHECK_KEYS = {
    "cpus", "count", "cores", "coreType", "excludes", "includes", "pending", "failed", "asInStep", "mems", "allocated",
    "isolated", "pcieLocal", "byModel",
}
_STEP_KEYS = {"title", "apply", "delete", "expect", "restartAgent", "featureGates", "kubeletCpuManagerPolicy", "agentRefused"}
_CPU_MANAGER_POLICIES = ("none", "static")
_REQUIRES_KEYS = {"cpus", "maxCpus", "numaCpus", "coreTypes", "models", "gpus"}
_SCENARIO_KEYS = {"title", "topology", "model", "groupBy", "isolate", "gpus", "requires", "featureGates", "steps"}
_GROUP_BY = ("numa", "l3", "socket", "machine")


class ScenarioError(ValueError):
    """A scenario file that cannot be run; names the file and what is wrong."""


@dataclass(frozen=True)
class Check:
    target: str  # namespace/pod/container (container may be "" for pending checks)
    cpus: CPUSet | None = None
    count: int | None = None
    as_in_step: int | None = None  # the same CPUs as after that (earlier) step
    core_type: str | None = None
    excludes: str | None = None
    includes: str | None = None
    pending: str | None = None
    failed: str | None = None
    mems: CPUSet | None = None
    allocated: bool = False
    isolated: bool | None = None  # every CPU kernel-isolated (True) or none (False)
    pcie_local: bool = False
    cores: int | None = None  # exactly this many whole cores
    by_model: tuple[tuple[str, Check], ...] = ()  # the check as it reads for a device model

    def for_model(self, model: str) -> Check:
        """The check as it reads for ``model`` (its ``byModel`` entry, else itself)."""
        return dict(self.by_model).get(model, self)


@dataclass
class Step:
    title: str
    apply: list[Manifest] = field(default_factory=list)
    delete: list[tuple[str, str]] = field(default_factory=list)  # (namespace, name)
    expect: list[Check] = field(default_factory=list)
    restart_agent: bool = False
    gates: dict[str, bool] = field(default_factory=dict)
    cpu_manager_policy: str | None = None  # the kubelet restarted with this CPU manager policy
    agent_refused: str | None = None  # the agent's restart is refused with a message containing this


@dataclass
class Scenario:
    title: str
    steps: list[Step]
    topology: str | None = None
    model: str | None = None
    group_by: str = "numa"  # of grouped devices
    source: str = ""
    min_cpus: int = 0
    min_numa_cpus: int = 0
    max_cpus: int | None = None
    core_types: tuple[str, ...] = ()
    gpus: bool = False
    min_gpus: int = 0
    models: tuple[str, ...] = ()  # the device models its expectations are written for (empty: any)
    isolate: int = 0  # the kernel isolates this many cores (the last ones)
    gates: dict[str, bool] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """What the user named: a built-in scenario's name, else its file."""
        return self.source.removeprefix("builtin:") or self.title

    def unmet_model(self, model: str) -> str | None:
        """Why the expectations do not hold with ``model`` devices, or None."""
        if not self.models or model in self.models:
            return None
        return (
            f"{self.title!r} is written for {' or '.join(self.models)} devices; its expectations do not hold "
            f"with --model {model} (run it without --model, or with {' or '.join(self.models)})"
        )

    def machine(self, topology: Topology) -> Topology:
        """``topology`` with the scenario's isolated cores: the last ``isolate`` cores in topology
        order, every thread of them, added to the kernel's isolated CPUs."""
        if not self.isolate:
            return topology
        order = ordered_cpus(topology, topology.online, "topology-reversed")
        cores = list(dict.fromkeys(topology.cpus[c].core for c in order))[: self.isolate]
        cpus = CPUSet(c for core in cores for c in topology.cpus_of_core(core))
        return replace(topology, isolated=topology.isolated | cpus)

    def unmet(self, topology: Topology) -> str | None:
        """Why ``topology`` cannot run this scenario's expectations, or None."""
        missing = []
        cores = len({i.core for i in topology.cpus.values() if i.id in topology.online})
        if self.isolate and cores <= self.isolate:
            missing.append(f"more than {self.isolate} cores to isolate (it has {cores})")
        if len(topology.online) < self.min_cpus:
            missing.append(f"at least {self.min_cpus} online CPUs (it has {len(topology.online)})")
        largest = max((len(topology.cpus_of_node(n) & topology.online) for n in topology.numa_nodes()), default=0)
        if largest < self.min_numa_cpus:
            missing.append(f"a NUMA node of at least {self.min_numa_cpus} online CPUs (its largest has {largest})")
        if self.min_gpus:
            from topodra.sim.gpus import alignable_gpus, no_gpu_reason

            gpus = len(alignable_gpus(topology))
            if gpus < self.min_gpus:
                why = no_gpu_reason(topology) or f"it has {gpus}"
                missing.append(
                    f"{self.min_gpus} PCIe roots holding a device, a made-up GPU each, with CPUs local to that root alone ({why})"
                )
        if self.max_cpus is not None and len(topology.online) > self.max_cpus:
            missing.append(f"at most {self.max_cpus} online CPUs (it has {len(topology.online)})")
        have = {t.value for t in topology.core_types()}
        lacking = [t for t in self.core_types if t not in have]
        if lacking:
            missing.append(f"{' and '.join(lacking)} CPUs (it has {', '.join(sorted(have)) or 'none'})")
        return " and ".join(missing) or None


def _target(text: str, where: str) -> str:
    parts = str(text).split("/")
    if len(parts) == 2:
        return f"default/{parts[0]}/{parts[1]}"
    if len(parts) == 3:
        return "/".join(parts)
    if len(parts) == 1 and parts[0]:
        return f"default/{parts[0]}/"
    raise ScenarioError(f"{where}: {text!r} is not pod/container or namespace/pod/container")


def _parse_check(target: str, spec: Any, where: str) -> Check:
    if not isinstance(spec, dict):
        raise ScenarioError(f"{where}: expect[{target}] must be a mapping of checks, got {spec!r}")
    unknown = set(spec) - _CHECK_KEYS
    if unknown:
        raise ScenarioError(f"{where}: expect[{target}]: unknown check(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(_CHECK_KEYS))}")
    by_model = spec.get("byModel") or {}
    if not isinstance(by_model, dict) or not all(m in MODELS and isinstance(v, dict) for m, v in by_model.items()):
        raise ScenarioError(f"{where}: expect[{target}].byModel must map a model ({', '.join(MODELS)}) to checks, got {by_model!r}")
    base = {k: v for k, v in spec.items() if k != "byModel"}
    variants = tuple(
        (m, _one_check(target, {k: v for k, v in {**base, **over}.items() if v is not None}, f"{where}: byModel.{m}"))
        for m, over in by_model.items()
    )
    return replace(_one_check(target, base, where), by_model=variants)


def _whole(value: Any, what: str, where: str) -> int | None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise ScenarioError(f"{where}: {what} must be a whole number (got {value!r})")
    return value


def _one_check(target: str, spec: dict[str, Any], where: str) -> Check:
    cpus, mems = (_cpu_list(spec, key, target, where) for key in ("cpus", "mems"))
    allocated = spec.get("allocated", False)
    if not isinstance(allocated, bool):
        raise ScenarioError(f"{where}: expect[{target}].allocated must be true or false, got {allocated!r}")
    return Check(
        target=_target(target, where),
        cpus=cpus,
        count=_whole(spec.get("count"), f"expect[{target}].count", where),
        cores=_whole(spec.get("cores"), f"expect[{target}].cores", where),
        as_in_step=_step_number(spec.get("asInStep"), target, where),
        core_type=spec.get("coreType"),
        excludes=_target(spec["excludes"], where) if "excludes" in spec else None,
        includes=_target(spec["includes"], where) if "includes" in spec else None,
        pending=str(spec["pending"]) if "pending" in spec else None,
        failed=str(spec["failed"]) if "failed" in spec else None,
        mems=mems,
        allocated=allocated,
        isolated=_flag(spec, "isolated", target, where),
        pcie_local=_bool(spec.get("pcieLocal", False), f"{where}: expect[{target}].pcieLocal"),
    )


def _gates(raw: Any, where: str) -> dict[str, bool]:
    """A ``featureGates`` mapping (gate -> true/false) of gates topodra models."""
    from topodra.gates import FeatureGateError, feature_gates

    if not isinstance(raw, dict) or not all(isinstance(v, bool) for v in raw.values()):
        raise ScenarioError(f"{where}: featureGates must map gate names to true or false, got {raw!r}")
    try:
        feature_gates(raw)
    except FeatureGateError as err:
        raise ScenarioError(f"{where}: featureGates: {err}") from None
    return {str(k): v for k, v in raw.items()}


def _cpu_list(spec: dict[str, Any], key: str, target: str, where: str) -> CPUSet | None:
    if key not in spec:
        return None
    try:
        return CPUSet.parse(str(spec[key]))
    except CPUSetParseError as err:
        raise ScenarioError(f"{where}: expect[{target}].{key}: {err}") from None


def _kubelet_keys(step: Step, raw: dict[str, Any], where: str) -> None:
    """``kubeletCpuManagerPolicy`` and ``agentRefused`` of one step."""
    policy = raw.get("kubeletCpuManagerPolicy")
    if policy is not None:
        if policy not in _CPU_MANAGER_POLICIES:
            raise ScenarioError(f"{where}: kubeletCpuManagerPolicy: must be {' or '.join(_CPU_MANAGER_POLICIES)} (got {policy!r})")
        step.cpu_manager_policy = policy
    refused = raw.get("agentRefused")
    if refused is not None:
        if not isinstance(refused, str) or not refused:
            raise ScenarioError(f"{where}: agentRefused: must be the text the refusal contains (got {refused!r})")
        if not step.restart_agent:
            raise ScenarioError(f"{where}: agentRefused needs restartAgent: true (only a start can be refused)")
        step.agent_refused = refused


def _flag(spec: dict[str, Any], key: str, target: str, where: str) -> bool | None:
    value = spec.get(key)
    if value is not None and not isinstance(value, bool):
        raise ScenarioError(f"{where}: expect[{target}].{key} must be true or false, got {value!r}")
    return value


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ScenarioError(f"{where} must be true or false, got {value!r}")
    return value


def _step_number(value: Any, target: str, where: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ScenarioError(f"{where}: expect[{target}].asInStep must be an earlier step's number, got {value!r}")
    return value


def _objects(items: Any, base: Path | None, where: str, loader: Any) -> list[Manifest]:
    if not isinstance(items, list):
        items = [items]
    out: list[Manifest] = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            try:
                out.extend(loader(item))
            except ManifestError as err:
                raise ScenarioError(str(err)) from None
        elif isinstance(item, dict):
            try:
                out.extend(parse_manifests(yaml.safe_dump(item), f"{where} apply[{i}]"))
            except ManifestError as err:
                raise ScenarioError(str(err)) from None
        else:
            raise ScenarioError(f"{where}: apply[{i}] must be a file name or an object, got {item!r}")
    return out


def parse_scenario(data: Any, source: str, loader: Any) -> Scenario:
    if not isinstance(data, dict) or not isinstance(data.get("steps"), list):
        raise ScenarioError(f"{source}: a scenario is a mapping with a list of steps")
    unknown = set(data) - _SCENARIO_KEYS
    if unknown:
        raise ScenarioError(f"{source}: unknown key(s) {', '.join(sorted(map(str, unknown)))}; known: {', '.join(sorted(_SCENARIO_KEYS))}")
    steps: list[Step] = []
    for i, raw in enumerate(data["steps"]):
        where = f"{source}: step {i + 1}"
        if not isinstance(raw, dict):
            raise ScenarioError(f"{where}: must be a mapping, got {raw!r}")
        unknown = set(raw) - _STEP_KEYS
        if unknown:
            raise ScenarioError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(_STEP_KEYS))}")
        step = Step(title=str(raw.get("title") or f"step {i + 1}"))
        if "apply" in raw:
            step.apply = _objects(raw["apply"], None, where, loader)
        for name in raw.get("delete") or []:
            ns, _, pod = str(name).rpartition("/")
            step.delete.append((ns or "default", pod))
        expect = raw.get("expect") or {}
        if not isinstance(expect, dict):
            raise ScenarioError(f"{where}: expect must be a mapping of pod/container to checks")
        step.expect = [_parse_check(str(k), v, where) for k, v in expect.items()]
        step.restart_agent = bool(raw.get("restartAgent", False))
        if "featureGates" in raw:
            step.gates = _gates(raw["featureGates"], where)
        _kubelet_keys(step, raw, where)
        steps.append(step)
    model = data.get("model")
    if model is not None and model not in MODELS:
        raise ScenarioError(f"{source}: model must be {', '.join(MODELS)}, got {model!r}")
    group_by = data.get("groupBy", "numa")
    if group_by not in _GROUP_BY:
        raise ScenarioError(f"{source}: groupBy must be {', '.join(_GROUP_BY)}, got {group_by!r}")
    requires = data.get("requires") or {}
    if not isinstance(requires, dict) or set(requires) - _REQUIRES_KEYS:
        raise ScenarioError(f"{source}: requires must be a mapping with {', '.join(sorted(_REQUIRES_KEYS))}")
    min_cpus = _whole(requires.get("cpus", 0), "requires.cpus", source) or 0
    min_numa_cpus = _whole(requires.get("numaCpus", 0), "requires.numaCpus", source) or 0
    core_types = requires.get("coreTypes", [])
    isolate = data.get("isolate", 0)
    if not isinstance(isolate, int) or isinstance(isolate, bool) or isolate < 0:
        raise ScenarioError(f"{source}: isolate must be a whole number of cores, got {isolate!r}")
    max_cpus = _whole(requires.get("maxCpus"), "requires.maxCpus", source)
    if not isinstance(core_types, list) or not all(t in ("P-core", "E-core") for t in core_types):
        raise ScenarioError(f"{source}: requires.coreTypes must be a list of P-core / E-core, got {core_types!r}")
    min_gpus = requires.get("gpus", 0)
    if not isinstance(min_gpus, int) or isinstance(min_gpus, bool) or min_gpus < 0:
        raise ScenarioError(f"{source}: requires.gpus must be a whole number, got {min_gpus!r}")
    gpus = _bool(data.get("gpus", False), f"{source}: gpus")
    if min_gpus and not gpus:
        raise ScenarioError(f"{source}: requires.gpus needs gpus: true")
    models = requires.get("models", [])
    if not isinstance(models, list) or not all(m in MODELS for m in models):
        raise ScenarioError(f"{source}: requires.models must be a list of {', '.join(MODELS)}, got {models!r}")
    return Scenario(
        title=str(data.get("title") or source),
        steps=steps,
        topology=data.get("topology"),
        model=model,
        group_by=group_by,
        source=source,
        min_cpus=min_cpus,
        min_numa_cpus=min_numa_cpus,
        max_cpus=max_cpus,
        core_types=tuple(core_types),
        gpus=gpus,
        min_gpus=min_gpus,
        models=tuple(models),
        isolate=isolate,
        gates=_gates(data["featureGates"], source) if "featureGates" in data else {},
    )


def load_scenario(path: str | Path) -> Scenario:
    """A scenario file, or a plain manifest file as a one-step scenario."""
    p = Path(path)
    try:
        text = read_text(p)
    except OSError as err:
        raise ScenarioError(f"cannot read {p}: {err.strerror or err}") from None
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        # Same message as for manifests: file:line:column.
        try:
            parse_manifests(text, str(p))
        except ManifestError as merr:
            raise ScenarioError(str(merr)) from None
        raise ScenarioError(f"{p}: invalid YAML: {err}") from None
    if len(docs) == 1 and isinstance(docs[0], dict) and "steps" in docs[0] and "kind" not in docs[0]:
        return parse_scenario(docs[0], str(p), lambda name: load_manifests(p.parent / name))
    try:
        manifests = parse_manifests(text, str(p))
    except ManifestError as err:
        raise ScenarioError(str(err)) from None
    return Scenario(title=p.name, steps=[Step(title=f"apply {p.name}", apply=manifests)], source=str(p))


def _builtin_dir() -> Any:
    return resources.files("topodra.playground") / "scenarios"


def builtin_names() -> list[str]:
    return sorted(
        f.name.removesuffix(".yaml")
        for f in _builtin_dir().iterdir()
        if f.name.endswith(".yaml") and "steps:" in f.read_text()
    )


def builtin_scenario(name: str = "default") -> Scenario:
    base = _builtin_dir()
    f = base / f"{name}.yaml"
    if not f.is_file() or name not in builtin_names():  # the others are manifests the scenarios apply
        raise ScenarioError(f"no built-in scenario {name!r}; there are: {', '.join(builtin_names())}")
    data = yaml.safe_load(f.read_text())
    return parse_scenario(
        data, f"builtin:{name}", lambda fname: parse_manifests((base / fname).read_text(), f"builtin:{fname}")
    )
