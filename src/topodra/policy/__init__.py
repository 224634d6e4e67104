"""The pure topology-aware CPU and memory policy: containers and claims in, changes out."""

from topodra.policy.api import (
    Assignment,
    BadRequestError,
    Changes,
    ContainerRequest,
    NodeSet,
    NoFitError,
    PolicyError,
    QoSClass,
    SnapshotError,
)
from topodra.policy.classify import GrantKind
from topodra.policy.config import CPUPriority, PolicyConfig, TopologyLevel
from topodra.policy.grants import Grant
from topodra.policy.policy import Policy
from topodra.policy.stats import CPUUsage, PolicyStats, PoolStats

__all__ = [
    "Assignment",
    "BadRequestError",
    "CPUPriority",
    "CPUUsage",
    "Changes",
    "ContainerRequest",
    "Grant",
    "GrantKind",
    "NoFitError",
    "NodeSet",
    "Policy",
    "PolicyConfig",
    "PolicyError",
    "PolicyStats",
    "PoolStats",
    "QoSClass",
    "SnapshotError",
    "TopologyLevel",
]
