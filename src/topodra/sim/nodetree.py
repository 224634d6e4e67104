"""The order in which kube-scheduler 1.36 lists nodes: its cache's node tree
(pkg/scheduler/backend/cache/node_tree.go, v1.36.2), from which the snapshot's node list and
so the Filter scan's order come. Zones are kept in the order their first node arrived and
nodes within a zone in arrival order; the list takes one node of each zone in turn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["node_tree_order", "zone_key"]

ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"


def zone_key(labels: Mapping[str, str]) -> str:
    """utilnode.GetZoneKey: region and zone (the beta labels first), "" for neither."""
    zone = labels[BETA_ZONE] if BETA_ZONE in labels else labels.get(ZONE, "")
    region = labels[BETA_REGION] if BETA_REGION in labels else labels.get(REGION, "")
    if not region and not zone:
        return ""
    return region + ":\x00:" + zone


def node_tree_order(labels: Sequence[Mapping[str, str]]) -> list[int]:
    """The positions of nodes given in arrival order (each by its labels), in the order
    ``nodeTree.list()`` returns them."""
    zones: dict[str, list[int]] = {}
    for i, node_labels in enumerate(labels):
        zones.setdefault(zone_key(node_labels), []).append(i)
    if len(zones) <= 1:
        return list(range(len(labels)))
    out: list[int] = []
    columns = list(zones.values())
    for k in range(max(len(c) for c in columns)):
        out.extend(c[k] for c in columns if k < len(c))
    return out
