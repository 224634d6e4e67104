"""Workloads as Kubernetes YAML: ResourceClaimTemplates, ResourceClaims, DeviceClasses and Pods.

A file is a plain multi-document manifest (the upstream prototype example
loads unchanged). Each Pod stands for a kind of pod; the simulator creates
many of them, each with fresh claims instantiated from the pod's
``resourceClaims`` (``resourceClaimTemplateName``, or ``resourceClaimName``
whose spec is copied per pod). An optional document

    apiVersion: sim.topodra.io/v1alpha1
    kind: Workload
    spec:
      pods: 10000            # how many pods to create (default: the caller's --pods)
      mix: {pcore-test: 3}   # pod name -> weight (default: every pod, weight 1)
      churn: {every: 10, delete: 5}   # after every 10 pods delete the 5 oldest bound pods

tunes the run. A Pod labelled ``sim.topodra.io/model: cpu|core|grouped`` is
only used for clusters of that device model, so one file can carry the
per-CPU, per-core and grouped variants of the same request.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from topodra.sim.scheduler import Pod

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

__all__ = ["Workload", "WorkloadError", "load_workload", "builtin_workloads", "MODEL_LABEL"]

MODEL_LABEL = "sim.topodra.io/model"


class WorkloadError(ValueError):
    """A workload file the simulator cannot use (names the file, document and field)."""


@dataclass
class Workload:
    """A workload: claim templates, claims, device classes and the pods that use them."""

    name: str
    templates: dict[str, Mapping[str, Any]]  # ResourceClaimTemplate name -> claim spec
    claims: dict[str, Mapping[str, Any]]  # ResourceClaim name -> claim spec
    classes: list[Mapping[str, Any]]
    pods: list[Mapping[str, Any]]
    pod_count: int | None = None
    mix: dict[str, float] = field(default_factory=dict)
    churn_every: int = 0
    churn_delete: int = 0

    def pods_for(self, model: str) -> list[Mapping[str, Any]]:
        chosen = [p for p in self.pods if (p.get("metadata", {}).get("labels") or {}).get(MODEL_LABEL, model) == model]
        if self.mix:
            chosen = [p for p in chosen if p["metadata"]["name"] in self.mix]
        if not chosen:
            raise WorkloadError(f"workload {self.name}: no pod applies to device model {model!r}")
        return chosen

    def generate(self, model: str, count: int, namespace: str = "default") -> Iterator[Pod]:
        """``count`` pods, kinds interleaved by weight (smooth weighted round robin)."""
        kinds = self.pods_for(model)
        weights = {p["metadata"]["name"]: float(self.mix.get(p["metadata"]["name"], 1.0)) for p in kinds}
        total = sum(weights.values())
        credit = dict.fromkeys(weights, 0.0)
        by_name = {p["metadata"]["name"]: p for p in kinds}
        specs = {name: self._claim_specs(p) for name, p in by_name.items()}
        for n in range(count):
            for k, w in weights.items():
                credit[k] += w
            kind = max(credit, key=lambda k: credit[k])
            credit[kind] -= total
            pod_name = f"{kind}-{n}"
            claims = tuple(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": f"{pod_name}-{ref}", "namespace": namespace, "uid": f"uid-{pod_name}-{ref}"},
                    "spec": spec,
                }
                for ref, spec in specs[kind]
            )
            yield Pod(pod_name, claims, namespace, template=kind)

    def _claim_specs(self, pod: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
        out = []
        name = pod["metadata"]["name"]
        for i, ref in enumerate((pod.get("spec") or {}).get("resourceClaims") or []):
            where = f"workload {self.name}: Pod {name}: spec.resourceClaims[{i}]"
            if ref.get("resourceClaimTemplateName"):
                t = ref["resourceClaimTemplateName"]
                if t not in self.templates:
                    raise WorkloadError(f"{where}.resourceClaimTemplateName: no ResourceClaimTemplate {t!r} (known: {', '.join(sorted(self.templates)) or 'none'})")
                out.append((ref.get("name", t), self.templates[t]))
            elif ref.get("resourceClaimName"):
                c = ref["resourceClaimName"]
                if c not in self.claims:
                    raise WorkloadError(f"{where}.resourceClaimName: no ResourceClaim {c!r}")
                out.append((ref.get("name", c), self.claims[c]))
            else:
                raise WorkloadError(f"{where}: needs resourceClaimTemplateName or resourceClaimName")
        if not out:
            raise WorkloadError(f"workload {self.name}: Pod {name} claims no resources")
        return out


def _check_claim_refs(pod: Mapping[str, Any], where: str) -> None:
    """A Pod's ``resourceClaims`` as far as the Pod alone can tell (its templates and claims may
    come later in the file): at least one, each naming a template or a claim."""
    name = (pod.get("metadata") or {}).get("name")
    refs = (pod.get("spec") or {}).get("resourceClaims") or []
    if not isinstance(refs, list) or not refs:
        raise WorkloadError(f"{where}: Pod {name} claims no resources (spec.resourceClaims is empty)")
    for i, ref in enumerate(refs):
        if not isinstance(ref, Mapping) or not (ref.get("resourceClaimTemplateName") or ref.get("resourceClaimName")):
            raise WorkloadError(f"{where}: Pod {name}: spec.resourceClaims[{i}]: needs resourceClaimTemplateName or resourceClaimName")


def _builtin_root() -> Traversable:
    """The built-in workloads' directory: beside this module when the package is installed as
    files (as pip installs it), which spares a run importing ``importlib.resources`` and its
    readers; else through ``importlib.resources``."""
    here = Path(__file__).with_name("workloads")
    if here.is_dir():
        return here
    from importlib import resources

    return resources.files("topodra.sim") / "workloads"


def builtin_workloads() -> list[str]:
    """Names of the workloads shipped with topodra (``topodra sim run --workload NAME``)."""
    root = _builtin_root()
    return sorted(p.name[: -len(".yaml")] for p in root.iterdir() if p.name.endswith(".yaml"))


#: The built-in workloads parsed ahead of time (``scripts/genworkloads.py`` writes it, a test
#: checks it): name -> the SHA-256 of its YAML and its documents. A run of a built-in then
#: needs no YAML parser (importing and parsing one is a visible share of a small ``sim run``); a built-in
#: whose YAML no longer matches its hash is parsed from the YAML.
BUILTIN_INDEX = "builtin.json"


def load_workload(source: str | Path) -> Workload:
    """Load a workload from a file path or a built-in name."""
    path = Path(source)
    if path.is_dir():
        raise WorkloadError(f"{path}: is a directory, not a workload file")
    if path.is_file():
        from topodra.yamldocs import read_text  # yaml only for a file: built-ins come from the index

        try:
            text, name = read_text(path), path.stem
        except OSError as err:
            raise WorkloadError(f"cannot read {path}: {err.strerror or err}") from None
        return _workload(name, text, source=str(path))
    root = _builtin_root()
    res = root / f"{source}.yaml"
    if not res.is_file():
        if "/" in str(source) or path.suffix in (".yaml", ".yml", ".json"):
            raise WorkloadError(f"cannot read {path}: no such file")
        raise WorkloadError(f"no workload file {str(source)!r} and no built-in workload of that name (built-in: {', '.join(builtin_workloads())})")
    text, name = res.read_text(), str(source)
    index = root / BUILTIN_INDEX
    entry = json.loads(index.read_text()).get(name) if index.is_file() else None
    if entry is not None and entry["sha256"] == hashlib.sha256(text.encode()).hexdigest():
        return _workload(name, text, docs=entry["documents"])
    return parse_workload(text, name)


def builtin_index() -> dict[str, Any]:
    """What :data:`BUILTIN_INDEX` holds, computed from the built-in YAML files."""
    root = _builtin_root()
    out: dict[str, Any] = {}
    for name in builtin_workloads():
        text = (root / f"{name}.yaml").read_text()
        out[name] = {"sha256": hashlib.sha256(text.encode()).hexdigest(), "documents": [d for d, _ in _yaml_documents(text, name, None)]}
    return out


def parse_workload(text: str, name: str = "workload") -> Workload:
    """Parse a multi-document manifest; any malformed part raises ``WorkloadError``."""
    return _workload(name, text)


def _workload(name: str, text: str, docs: list[Any] | None = None, source: str | None = None) -> Workload:
    """The workload of ``docs``, else of the YAML ``text`` (read from the file ``source``, which
    errors then name by line), read a document at a time; malformed: ``WorkloadError``."""
    try:
        if docs is None:
            return _parse_workload(_yaml_documents(text, name, source), name)
        return _parse_workload(((d, f"document {i + 1}") for i, d in enumerate(docs)), name)
    except WorkloadError:
        raise
    except (AttributeError, TypeError, KeyError, ValueError, IndexError) as e:
        raise WorkloadError(f"workload {name}: malformed manifest ({type(e).__name__}: {e})") from None


def _yaml_documents(text: str, name: str, source: str | None) -> Iterator[tuple[Any, str]]:
    """(document, where it is) as they are read (``kind: List`` items one by one): by file:line
    for a file, else "document N"; bad YAML is one line, with file:line:column for a file."""
    from topodra.yamldocs import YamlFileError, iter_documents

    try:
        for i, doc in enumerate(iter_documents(text, source or name)):
            yield doc.obj, doc.source if source else f"document {i + 1}"
    except YamlFileError as e:
        raise WorkloadError(str(e) if source else f"workload {name}: not valid YAML: {e}") from None


def _check_selectors(spec: Any, where: str) -> None:
    """Selectors that do not compile are refused with the workload, as an API server refuses
    them at create time, rather than failing every pod that uses them."""
    from topodra.sim.cel import CelCompileError, compile_selector

    requests = ((spec.get("devices") if isinstance(spec, Mapping) else None) or {}).get("requests") or []
    for i, req in enumerate(requests if isinstance(requests, list) else []):
        if not isinstance(req, Mapping):
            continue
        subs = [("exactly", req.get("exactly"))] + [(f"firstAvailable[{j}]", s) for j, s in enumerate(req.get("firstAvailable") or [])]
        for label, sub in subs:
            for k, sel in enumerate((sub.get("selectors") or []) if isinstance(sub, Mapping) else []):
                expr = ((sel or {}).get("cel") or {}).get("expression") if isinstance(sel, Mapping) else None
                try:
                    compile_selector(expr)
                except CelCompileError as err:
                    raise WorkloadError(
                        f"{where}.devices.requests[{i}].{label}.selectors[{k}]: CEL does not compile: {err.message}"
                    ) from None


def _parse_workload(docs: Iterable[tuple[Any, str]], name: str) -> Workload:
    wl = Workload(name=name, templates={}, claims={}, classes=[], pods=[])
    for doc, at in docs:
        where = f"workload {name}: {at}"
        if not isinstance(doc, Mapping):
            raise WorkloadError(f"{where}: expected an object, got {type(doc).__name__}")
        kind = doc.get("kind")
        meta = doc.get("metadata") or {}
        obj_name = str(meta.get("name") or "")
        if kind != "Workload" and not obj_name:
            raise WorkloadError(f"{where} ({kind}): metadata.name is missing")
        if kind == "ResourceClaimTemplate":
            spec = ((doc.get("spec") or {}).get("spec")) or {}
            _check_selectors(spec, f"{where} ({kind} {obj_name}): spec.spec")
            wl.templates[obj_name] = spec
        elif kind == "ResourceClaim":
            _check_selectors(doc.get("spec") or {}, f"{where} ({kind} {obj_name}): spec")
            wl.claims[obj_name] = doc.get("spec") or {}
        elif kind == "DeviceClass":
            _check_selectors({"devices": {"requests": [{"name": "class", "exactly": doc.get("spec") or {}}]}}, f"{where} ({kind} {obj_name})")
            wl.classes.append(doc)
        elif kind == "Pod":
            _check_claim_refs(doc, where)  # now: a bad pod ends the load before the rest is read
            wl.pods.append(doc)
        elif kind == "Workload":
            spec = doc.get("spec") or {}
            if spec.get("pods") is not None:
                if not isinstance(spec["pods"], int) or spec["pods"] < 1:
                    raise WorkloadError(f"{where}: spec.pods must be a positive integer, got {spec['pods']!r}")
                wl.pod_count = spec["pods"]
            mix = spec.get("mix") or {}
            if not isinstance(mix, Mapping) or any(not isinstance(v, int | float) or v <= 0 for v in mix.values()):
                raise WorkloadError(f"{where}: spec.mix must map pod names to positive weights")
            wl.mix = {str(k): float(v) for k, v in mix.items()}
            churn = spec.get("churn") or {}
            wl.churn_every = int(churn.get("every", 0))
            wl.churn_delete = int(churn.get("delete", 0))
        elif kind in ("Namespace", "ConfigMap", "Deployment", "Service"):
            continue
        else:
            raise WorkloadError(f"{where}: unsupported kind {kind!r} (ResourceClaimTemplate, ResourceClaim, DeviceClass, Pod, Workload)")
    if not wl.pods:
        raise WorkloadError(f"workload {name}: has no Pod to schedule")
    unknown = set(wl.mix) - {p["metadata"]["name"] for p in wl.pods}
    if unknown:
        raise WorkloadError(f"workload {name}: spec.mix names unknown pods: {', '.join(sorted(unknown))}")
    for p in wl.pods:
        wl._claim_specs(p)  # validate references up front
    return wl
