"""The scheduler and kubelet loop for pods other clients write to the playground's API server.

While ``topodra playground --hold`` keeps the node running, ``kubectl --server URL apply`` may
create pods and ``kubectl delete`` remove them: kube-scheduler and the kubelet would act on those
writes, so this does too. A new pod is scheduled and started, a deleted one is stopped and its
claims are released, and pods left pending are tried again whenever a pod goes away (what freed
CPUs may let them run), as kube-scheduler retries unschedulable pods on cluster events.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from topodra.embedded.store import KINDS, WatchEvent
from topodra.kube.errors import ApiError
from topodra.playground.world import Playground, PlaygroundError

__all__ = ["PodFollower"]

PODS = KINDS[("", "pods")]


class PodFollower:
    """``await PodFollower(pg).run()`` until cancelled; ``lines`` says what it did."""

    def __init__(self, pg: Playground) -> None:
        self.pg = pg
        self.lines: list[str] = []

    async def run(self) -> None:
        watch = self.pg.store.watch(PODS)
        try:
            async for event in watch:
                await self.handle(event)
        finally:
            watch.close()

    async def handle(self, event: WatchEvent) -> None:
        """One watch event of a pod (events of pods the playground itself runs change nothing)."""
        if event.type == "ADDED" and self._new(event.object):
            await self._start(event.object)
        elif event.type == "DELETED":
            await self._stop(event.object)
            for key in list(self.pg.pod_errors):
                ns, _, name = key.partition("/")
                try:
                    pod = self.pg.store.get(PODS, ns, name)
                except ApiError:
                    continue
                if (pod.get("status") or {}).get("phase") == "Pending":
                    await self._start(pod)

    def _new(self, pod: Mapping[str, Any]) -> bool:
        meta = pod.get("metadata") or {}
        assert self.pg.kubelet is not None
        return (
            meta.get("uid") not in self.pg.kubelet.pods
            and f"{meta.get('namespace', 'default')}/{meta.get('name')}" not in self.pg.pod_errors
            and (pod.get("status") or {}).get("phase", "Pending") == "Pending"
            and not (pod.get("spec") or {}).get("nodeName")
        )

    async def _start(self, pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        try:
            self.lines.append(await self.pg.retry_pod(str(meta.get("name")), str(meta.get("namespace", "default"))))
        except (ApiError, PlaygroundError) as err:  # deleted meanwhile
            self.lines.append(f"pod/{meta.get('name')}: {err}")

    async def _stop(self, pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace', 'default')}/{meta.get('name')}"
        assert self.pg.kubelet is not None
        if meta.get("uid") in self.pg.kubelet.pods:
            try:
                await self.pg.kubelet.stop_pod(pod)
            finally:
                self.pg.scheduler.release(pod)
            await self.pg.settle()
            self.lines.append(f"pod/{meta.get('name')} stopped")
        elif key in self.pg.pod_errors:
            self.pg.scheduler.release(pod)  # a pending pod's generated claims go with it
        self.pg.pod_errors.pop(key, None)
