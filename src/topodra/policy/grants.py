"""A container's grant: what the policy gave it, as plain immutable data."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from topodra.policy.api import ContainerRequest
from topodra.policy.classify import MIXED, SHARED, GrantKind

__all__ = ["Grant"]


@dataclass(frozen=True, slots=True, init=False)
class Grant:
    """Where one container runs and what it is charged for.

    CPU and node sets are bitmasks. ``pool`` is the CPU pool (shared and mixed
    containers follow its shared set); ``mem_pool`` the pool whose memory nodes
    the container uses (an ancestor of ``pool`` when the memory did not fit).
    """

    request: ContainerRequest
    kind: GrantKind
    pool: int
    exclusive: int = 0  # exclusive CPUs (exclusive, mixed)
    isolated: bool = False  # exclusive CPUs are kernel-isolated ones
    milli: int = 0  # shared CPU charged to the pool subtree (shared, mixed; >= 1 for shared)
    mem_pool: int = 0
    mems: int = 0  # NUMA nodes for cpuset.mems
    memory: int = 0  # bytes charged to mem_pool's subtree
    hide_hyperthreads: bool = False
    memory_preserve: bool = False
    degraded: str = ""  # why this grant is not what the request asked for (after sync/reconfigure)
    claims: tuple[str, ...] = ()  # the DRA claims a claimed container runs on

    def __init__(
        self,
        request: ContainerRequest,
        kind: GrantKind,
        pool: int,
        exclusive: int = 0,
        isolated: bool = False,
        milli: int = 0,
        mem_pool: int = 0,
        mems: int = 0,
        memory: int = 0,
        hide_hyperthreads: bool = False,
        memory_preserve: bool = False,
        degraded: str = "",
        claims: tuple[str, ...] = (),
    ) -> None:
        """The fields set through their slots: one grant is built per operation, and a frozen
        dataclass's own ``__init__`` (``object.__setattr__`` per field) takes several times as long."""
        s_req, s_kind, s_pool, s_excl, s_iso, s_milli, s_mpool, s_mems, s_mem, s_hide, s_pres, s_deg, s_claims = (
            _SETTERS
        )
        s_req(self, request)
        s_kind(self, kind)
        s_pool(self, pool)
        s_excl(self, exclusive)
        s_iso(self, isolated)
        s_milli(self, milli)
        s_mpool(self, mem_pool)
        s_mems(self, mems)
        s_mem(self, memory)
        s_hide(self, hide_hyperthreads)
        s_pres(self, memory_preserve)
        s_deg(self, degraded)
        s_claims(self, claims)

    @property
    def follows_pool(self) -> bool:
        """Shared and mixed containers run on their pool's shared set."""
        return self.kind is SHARED or self.kind is MIXED


#: Each field's slot setter, in field order (they bypass the frozen ``__setattr__``).
_SETTERS: tuple[Callable[[Grant, Any], None], ...] = tuple(getattr(Grant, f.name).__set__ for f in fields(Grant))
