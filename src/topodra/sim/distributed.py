"""Sweep cells on a Dask distributed cluster (``sim sweep --cluster ADDRESS``).

A sweep is a grid of independent runs; on a cluster every cell is one task.
The engine is Dask distributed (why, against Ray: docs/simulator.md), imported
only here and only when an address is given, so the simulator needs it only
with the ``cluster`` extra. Workers must be able to import the same topodra.

``ADDRESS`` is a scheduler address (``tcp://host:8786``), or ``local`` /
``local:N`` for a local cluster of N worker processes started for the sweep.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

__all__ = ["EngineError", "map_on_cluster"]

_T = TypeVar("_T")
_R = TypeVar("_R")

CONNECT_TIMEOUT_S = 20


class EngineError(RuntimeError):
    """The cluster cannot be used: the package is missing, or the address does not answer."""


def _distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise EngineError("--cluster needs Dask distributed: pip install 'topodra[cluster]'") from None
    return distributed


def map_on_cluster(address: str, fn: Callable[[_T], _R], jobs: Sequence[_T]) -> Iterator[tuple[int, _R]]:
    """Run ``fn`` on every job on the cluster at ``address``; yields (job index, result) as they finish."""
    dist = _distributed()
    cluster = None
    if address == "local" or address.startswith("local:"):
        _, _, n = address.partition(":")
        if n and not n.isdigit():
            raise EngineError(f"--cluster {address!r}: expected local or local:N (N worker processes)")
        cluster = dist.LocalCluster(n_workers=int(n) if n else None, threads_per_worker=1, dashboard_address=None)
        target: Any = cluster
    else:
        target = address
    try:
        try:
            client = dist.Client(target, timeout=CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as e:
            raise EngineError(f"--cluster {address}: cannot reach the Dask scheduler ({e})") from None
        with client:
            futures = client.map(fn, list(jobs), pure=False)
            index = {f.key: i for i, f in enumerate(futures)}
            for fut in dist.as_completed(futures):
                yield index[fut.key], fut.result()
    finally:
        if cluster is not None:
            cluster.close()
