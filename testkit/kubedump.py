"""A large cluster dump as ``kubectl get nodes,deviceclasses,resourceslices,resourceclaimtemplates,
resourceclaims,pods -A -o yaml`` writes it, for the simulator's large-input tests and benchmarks.

One ``kind: List`` document, keys sorted, sequences not indented under their key (kubectl's
layout), ``metadata.managedFields`` on every object as the API server keeps them. The Nodes carry
a kubelet's status; the ResourceSlices are the node agent's own (``topodra.sim.cluster``); most
Pods are bound (``spec.nodeName``, phase Running, their generated claims allocated and reserved),
some arrive pending with an unallocated claim, and every node runs two DaemonSet pods without
claims. Deterministic for a given size and seed. Nothing here is stored in the repo: callers write
the file where they need it (``python -m testkit.kubedump OUT --mb 50``).
"""

from __future__ import annotations

import argparse
import hashlib
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml

from topodra.sim.cluster import ClusterSpec, build_cluster

__all__ = ["DumpSpec", "dump_items", "spec_for_size", "write_dump"]

_STAMP = "2026-12-01T07:56:49Z"
_LETTERS = "bcdfghjklmnpqrstvwxz2456789"


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """kubectl writes shared values out in full: no anchors and aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


@dataclass(frozen=True)
class DumpSpec:
    """What to write: nodes of one machine, claim pods bound per node, pending pods at the end."""

    nodes: int = 1000
    machine: str = "32"  # a topodra.topology spec or CPU count (sim run --topology)
    bound_per_node: int = 12  # bound pods with a one-CPU claim on each node
    pending: int = 500  # pods at the end without a node, each with an unallocated claim
    namespaces: int = 16
    seed: int = 1
    first_pod_claims_nothing: bool = False  # the first claim pod lost its resourceClaims (a bad input)

    @property
    def pods(self) -> int:
        return self.nodes * (self.bound_per_node + 2) + self.pending


def _uid(*parts: object) -> str:
    h = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=16).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _managed(manager: str, operation: str, fields: dict[str, Any], subresource: str | None = None, api: str = "v1") -> dict[str, Any]:
    entry = {"apiVersion": api, "fieldsType": "FieldsV1", "fieldsV1": fields, "manager": manager, "operation": operation, "time": _STAMP}
    if subresource:
        entry["subresource"] = subresource
    return entry


def _node(name: str, machine: str, cpus: int, rv: int) -> dict[str, Any]:
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": f"m{cpus}",
        "topodra.io/machine": machine,
        "topology.kubernetes.io/zone": f"zone-{hash(name) % 3}",
    }
    conditions = [
        {"lastHeartbeatTime": _STAMP, "lastTransitionTime": _STAMP, "message": msg, "reason": reason, "status": status, "type": kind}
        for kind, status, reason, msg in (
            ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        )
    ]
    resources = {"cpu": str(cpus), "ephemeral-storage": "101430960Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0", "memory": f"{cpus * 4}Gi", "pods": "110"}
    status_fields = {"f:status": {"f:allocatable": {f"f:{k}": {} for k in resources}, "f:capacity": {f"f:{k}": {} for k in resources}, "f:conditions": {
        "k:{\"type\":\"Ready\"}": {".": {}, "f:lastHeartbeatTime": {}, "f:lastTransitionTime": {}, "f:message": {}, "f:reason": {}, "f:status": {}, "f:type": {}}}, "f:nodeInfo": {"f:bootID": {}}}}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
            "creationTimestamp": _STAMP,
            "labels": labels,
            "managedFields": [
                _managed("kubelet", "Update", {"f:metadata": {"f:annotations": {".": {}, "f:volumes.kubernetes.io/controller-managed-attach-detach": {}}, "f:labels": {".": {}, **{f"f:{k}": {} for k in labels}}}}),
                _managed("kube-controller-manager", "Update", {"f:metadata": {"f:annotations": {"f:node.alpha.kubernetes.io/ttl": {}}}, "f:spec": {"f:podCIDR": {}, "f:podCIDRs": {".": {}, "v:\"10.244.0.0/24\"": {}}}}),
                _managed("kubelet", "Update", status_fields, subresource="status"),
            ],
            "name": name,
            "resourceVersion": str(rv),
            "uid": _uid("node", name),
        },
        "spec": {"podCIDR": "10.244.0.0/24", "podCIDRs": ["10.244.0.0/24"], "providerID": f"kind://docker/cluster/{name}"},
        "status": {
            "addresses": [{"address": "172.18.0.2", "type": "InternalIP"}, {"address": name, "type": "Hostname"}],
            "allocatable": resources,
            "capacity": resources,
            "conditions": conditions,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "images": [{"names": [f"registry.k8s.io/{img}@sha256:{_uid(img).replace('-', '') * 2}", f"registry.k8s.io/{img}:v1.36.2"], "sizeBytes": 30_000_000 + i}
                       for i, img in enumerate(("kube-proxy", "pause", "etcd", "coredns/coredns"))],
            "nodeInfo": {
                "architecture": "amd64", "bootID": _uid("boot", name), "containerRuntimeVersion": "containerd://2.1.0",
                "kernelVersion": "6.8.0-45-generic", "kubeProxyVersion": "", "kubeletVersion": "v1.36.2", "machineID": _uid("machine", name).replace("-", ""),
                "operatingSystem": "linux", "osImage": "Debian GNU/Linux 12 (bookworm)", "systemUUID": _uid("system", name),
            },
        },
    }


def _with_meta(obj: dict[str, Any], rv: int, manager: str) -> dict[str, Any]:
    """An object as the API server returns it: uid, resourceVersion, creationTimestamp, managedFields."""
    meta = obj["metadata"]
    name = meta["name"]
    fields: dict[str, Any] = {"f:spec": {f"f:{k}": {} for k in obj.get("spec", {})}}
    meta.update({
        "creationTimestamp": _STAMP,
        "generation": 1,
        "managedFields": [_managed(manager, "Update", fields, api=obj["apiVersion"])],
        "resourceVersion": str(rv),
        "uid": _uid(obj["kind"], meta.get("namespace", ""), name),
    })
    return obj


def _claim_spec(count: int) -> dict[str, Any]:
    return {"devices": {"requests": [{"exactly": {"allocationMode": "ExactCount", "count": count, "deviceClassName": "native.cpu"}, "name": "cpu"}]}}


def _template(ns: str, rv: int) -> dict[str, Any]:
    obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "one-cpu", "namespace": ns},
           "spec": {"metadata": {}, "spec": _claim_spec(1)}}
    return _with_meta(obj, rv, "kubectl-client-side-apply")


def _suffix(*parts: object) -> str:
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest()
    return "".join(_LETTERS[b % len(_LETTERS)] for b in digest[:5])


@dataclass(frozen=True)
class _PodPlan:
    name: str
    namespace: str
    node: str | None  # bound there; None: pending
    claim: str | None  # generated claim name; None: a pod without claims
    device: str | None  # the allocated device of a bound pod's claim
    app: str


def _claim(p: _PodPlan, rv: int) -> dict[str, Any]:
    assert p.claim is not None
    pod_uid = _uid("Pod", p.namespace, p.name)
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "annotations": {"resource.kubernetes.io/pod-claim-name": "cpu"},
            "finalizers": ["resource.kubernetes.io/delete-protection"],
            "generateName": f"{p.name}-cpu-",
            "name": p.claim,
            "namespace": p.namespace,
            "ownerReferences": [{"apiVersion": "v1", "blockOwnerDeletion": True, "controller": True, "kind": "Pod", "name": p.name, "uid": pod_uid}],
        },
        "spec": _claim_spec(1),
        "status": {},
    }
    _with_meta(obj, rv, "kube-controller-manager")
    if p.node is not None:
        obj["status"] = {
            "allocation": {
                "allocationTimestamp": _STAMP,
                "devices": {"results": [{"device": p.device, "driver": "native.cpu", "pool": p.node, "request": "cpu"}]},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [p.node]}]}]},
            },
            "reservedFor": [{"name": p.name, "resource": "pods", "uid": pod_uid}],
        }
        obj["metadata"]["managedFields"].append(
            _managed("kube-scheduler", "Update", {"f:status": {"f:allocation": {".": {}, "f:allocationTimestamp": {}, "f:devices": {".": {}, "f:results": {}}, "f:nodeSelector": {}},
                                                              "f:reservedFor": {".": {}, f"k:{{\"resource\":\"pods\",\"name\":\"{p.name}\",\"uid\":\"{pod_uid}\"}}": {}}}},
                     subresource="status", api="resource.k8s.io/v1"))
    return obj


def _pod(p: _PodPlan, rv: int, claims_nothing: bool) -> dict[str, Any]:
    container: dict[str, Any] = {
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}],
        "image": f"registry.example.com/{p.app}:1.4.2",
        "imagePullPolicy": "IfNotPresent",
        "name": p.app,
        "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
        "resources": {"limits": {"memory": "512Mi"}, "requests": {"cpu": "100m", "memory": "256Mi"}},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "volumeMounts": [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": "kube-api-access-x2b7q", "readOnly": True}],
    }
    spec: dict[str, Any] = {
        "containers": [container],
        "dnsPolicy": "ClusterFirst",
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "serviceAccount": "default",
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
        "tolerations": [
            {"effect": "NoExecute", "key": f"node.kubernetes.io/{t}", "operator": "Exists", "tolerationSeconds": 300} for t in ("not-ready", "unreachable")
        ],
        "volumes": [{"name": "kube-api-access-x2b7q", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}},
            {"downwardAPI": {"items": [{"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}, "path": "namespace"}]}},
        ]}}],
    }
    status: dict[str, Any] = {"qosClass": "Burstable"}
    if p.claim is not None and not claims_nothing:
        container["resources"]["claims"] = [{"name": "cpu"}]
        spec["resourceClaims"] = [{"name": "cpu", "resourceClaimTemplateName": "one-cpu"}]
        status["resourceClaimStatuses"] = [{"name": "cpu", "resourceClaimName": p.claim}]
    if p.node is not None:
        spec["nodeName"] = p.node
        status.update({
            "conditions": [{"lastProbeTime": None, "lastTransitionTime": _STAMP, "status": "True", "type": t}
                           for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "containerStatuses": [{
                "containerID": f"containerd://{_uid('ctr', p.name).replace('-', '')}", "image": container["image"], "imageID": container["image"],
                "lastState": {}, "name": p.app, "ready": True, "restartCount": 0, "started": True, "state": {"running": {"startedAt": _STAMP}},
            }],
            "hostIP": "172.18.0.2", "hostIPs": [{"ip": "172.18.0.2"}], "phase": "Running", "podIP": "10.244.1.7", "podIPs": [{"ip": "10.244.1.7"}], "startTime": _STAMP,
        })
    else:
        status.update({
            "conditions": [{"lastProbeTime": None, "lastTransitionTime": _STAMP, "message": "0/1 nodes are available: 1 cannot allocate all claims.",
                            "reason": "Unschedulable", "status": "False", "type": "PodScheduled"}],
            "phase": "Pending",
        })
    meta: dict[str, Any] = {
        "generateName": p.name.rsplit("-", 1)[0] + "-",
        "labels": {"app": p.app, "pod-template-hash": "7d4b9c8f6d"},
        "name": p.name,
        "namespace": p.namespace,
        "ownerReferences": [{"apiVersion": "apps/v1", "blockOwnerDeletion": True, "controller": True, "kind": "ReplicaSet", "name": f"{p.app}-7d4b9c8f6d", "uid": _uid("rs", p.namespace, p.app)}],
    }
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}
    _with_meta(obj, rv, "kube-controller-manager")
    meta["managedFields"].append(_managed("kubelet", "Update", {"f:status": {"f:conditions": {f"k:{{\"type\":\"{c['type']}\"}}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}
                                                                                              for c in status["conditions"]}, "f:containerStatuses": {}, "f:hostIP": {}, "f:phase": {}, "f:podIP": {}, "f:startTime": {}}},
                                          subresource="status"))
    return obj


def _plans(spec: DumpSpec, nodes: list[str], devices: dict[str, list[str]]) -> Iterator[_PodPlan]:
    rnd = random.Random(spec.seed)
    apps = [f"app{i:02d}" for i in range(32)]
    for n, node in enumerate(nodes):
        for d in ("kube-proxy", "node-exporter"):
            yield _PodPlan(f"{d}-{_suffix(d, node)}", "kube-system", node, None, None, d)
        for k in range(spec.bound_per_node):
            ns, app = f"team-{rnd.randrange(spec.namespaces):02d}", rnd.choice(apps)
            name = f"{app}-7d4b9c8f6d-{_suffix(node, k)}{n % 10}"
            yield _PodPlan(name, ns, node, f"{name}-cpu-{_suffix(name, 'cpu')}", devices[node][k], app)
    for k in range(spec.pending):
        ns, app = f"team-{rnd.randrange(spec.namespaces):02d}", rnd.choice(apps)
        name = f"{app}-7d4b9c8f6d-{_suffix('pending', k)}p{k % 10}"
        yield _PodPlan(name, ns, None, f"{name}-cpu-{_suffix(name, 'cpu')}", None, app)


def dump_items(spec: DumpSpec) -> Iterator[dict[str, Any]]:
    """The List's items in kubectl's order: nodes, device classes, slices, templates, claims, pods."""
    cluster = build_cluster(ClusterSpec(nodes=spec.nodes, machines={spec.machine: 1.0}))
    cpus = len(cluster.slices[0]["spec"]["devices"])
    if spec.bound_per_node > cpus:
        raise ValueError(f"bound_per_node {spec.bound_per_node}: a node of machine {spec.machine} has {cpus} devices")
    rv = 1000
    names = [n["metadata"]["name"] for n in cluster.nodes]
    for name in names:
        rv += 1
        yield _node(name, spec.machine, cpus, rv)
    for c in cluster.classes:
        rv += 1
        yield _with_meta({**c, "metadata": dict(c["metadata"])}, rv, "kubectl-client-side-apply")
    devices: dict[str, list[str]] = {}
    for s in cluster.slices:
        rv += 1
        devices[s["spec"]["nodeName"]] = [d["name"] for d in s["spec"]["devices"]]
        yield _with_meta({**s, "metadata": dict(s["metadata"])}, rv, "topodra")
    for i in range(spec.namespaces):
        rv += 1
        yield _template(f"team-{i:02d}", rv)
    plans = list(_plans(spec, names, devices))
    for p in plans:
        if p.claim is not None:
            rv += 1
            yield _claim(p, rv)
    first = True
    for p in plans:
        rv += 1
        bad = spec.first_pod_claims_nothing and first and p.claim is not None
        first = first and not bad
        yield _pod(p, rv, bad)


def write_list(items: Iterator[dict[str, Any]], out: TextIO) -> None:
    """``items`` as kubectl writes a List: ``apiVersion``, then ``items:`` with each object a
    sequence entry at column 0, then ``kind: List`` and the List's metadata."""
    out.write("apiVersion: v1\nitems:\n")
    for item in items:
        text = yaml.dump(item, Dumper=_Dumper, default_flow_style=False, sort_keys=True, width=1 << 20)
        lines = text.splitlines(keepends=True)
        out.write("- " + lines[0])
        out.writelines("  " + line for line in lines[1:])
    out.write('kind: List\nmetadata:\n  resourceVersion: ""\n')


def write_dump(path: str | Path, spec: DumpSpec) -> int:
    """Write the dump of ``spec`` to ``path``; its size in bytes."""
    p = Path(path)
    with p.open("w") as f:
        write_list(dump_items(spec), f)
    return p.stat().st_size


#: Bytes one node adds to a dump of the default shape (its Node, its slice of 32 devices, two
#: DaemonSet pods and 12 bound pods with their claims), measured on a 20-node dump.
_BYTES_PER_NODE = 130_000


def spec_for_size(mb: float, **kw: Any) -> DumpSpec:
    """A dump of the default shape of about ``mb`` megabytes (10^6 bytes)."""
    nodes = max(1, round(mb * 1e6 / _BYTES_PER_NODE))
    return DumpSpec(nodes=nodes, pending=max(1, nodes // 2), **kw)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m testkit.kubedump", description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("out", type=Path)
    ap.add_argument("--mb", type=float, default=50.0, help="about this many megabytes")
    ap.add_argument("--first-pod-claims-nothing", action="store_true")
    args = ap.parse_args(argv)
    spec = spec_for_size(args.mb, first_pod_claims_nothing=args.first_pod_claims_nothing)
    size = write_dump(args.out, spec)
    print(f"{args.out}: {size / 1e6:.1f} MB, {spec.nodes} nodes, {spec.pods} pods")


if __name__ == "__main__":
    main()
