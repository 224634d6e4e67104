"""The pure topology-aware CPU and memory policy: containers and claims in, changes out."""

from topodra.policy.api import Assignment, Changes, ContainerRequest, NodeSet, PolicyError, QoSClass
from topodra.policy.classify import GrantKind
from topodra.policy.config import CPUPriority, PolicyConfig, TopologyLevel
from topodra.policy.grants import Grant
from topodra.policy.policy import Policy
from topodra.policy.stats import CPUUsage, PolicyStats, PoolStats

__all__ = [
    "Assignment",
    "CPUPriority",
    "CPUUsage",
    "Changes",
    "ContainerRequest",
    "Grant",
    "GrantKind",
    "NodeSet",
    "Policy",
    "PolicyConfig",
    "PolicyError",
    "PolicyStats",
    "PoolStats",
    "QoSClass",
    "TopologyLevel",
]
