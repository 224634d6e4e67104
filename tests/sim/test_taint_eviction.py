"""The device taint eviction controller's rule (``sim/taintevict.py``) and the replay's use of it:
slices rewritten with NoExecute taints, the clock moved by ``wait``, the pods evicted (our own
data, shaped as the recorded ``v7-device-taint-eviction``)."""

from __future__ import annotations

from typing import Any

import pytest

from topodra.dra.allocation import AllocatedResult
from topodra.sim.objects import Taint
from topodra.sim.replay import Replay
from topodra.sim.taintevict import TimedTaint, claim_eviction_time

from .builders import dclass, device, slice_

D = "dra.example.com"
OFFLINE = Taint("x/offline", "", "NoExecute")


def _result(*tolerations: dict[str, Any]) -> AllocatedResult:
    return AllocatedResult(request="r", driver=D, pool="p", device="d0", tolerations=tuple(tolerations))


@pytest.mark.parametrize(
    ("tolerations", "when"),
    [
        ((), 10.0),  # not tolerated: at the taint's time
        (({"key": "x/offline", "operator": "Exists", "effect": "NoExecute"},), None),  # for ever
        (({"key": "x/offline", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2},), 12.0),
        (({"key": "x/offline", "operator": "Exists"},), 10.0),  # no effect: the scheduler's match, not the controller's
        (({"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}, {"key": "x/offline", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 3}), 13.0),
        (({"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}, {"operator": "Exists", "effect": "NoExecute"}), None),
        (({"key": "x/offline", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": -4},), 10.0),
        (({"key": "x/offline", "operator": "Equal", "value": "other", "effect": "NoExecute"},), 10.0),
    ],
)
def test_claim_eviction_time_as_upstream(tolerations: tuple[dict[str, Any], ...], when: float | None) -> None:
    taints = (TimedTaint(OFFLINE, 10.0), TimedTaint(Taint("x/iso", "", "NoSchedule"), 0.0))
    assert claim_eviction_time([_result(*tolerations)], lambda *_: taints) == when


def _node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}


def _slice(*taints: dict[str, Any]) -> dict[str, Any]:
    return slice_("n1-0", "n1", [device(f"d{i}", taints=list(taints)) if taints else device(f"d{i}") for i in range(3)])


def _pod(name: str, *tolerations: dict[str, Any]) -> list[dict[str, Any]]:
    exactly: dict[str, Any] = {"deviceClassName": "c", "count": 1}
    if tolerations:
        exactly["tolerations"] = list(tolerations)
    template = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": f"t-{name}"},
        "spec": {"spec": {"devices": {"requests": [{"name": "r", "exactly": exactly}]}}},
    }
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "x"}], "resourceClaims": [{"name": "c0", "resourceClaimTemplateName": f"t-{name}"}]},
    }
    return [template, pod]


FOREVER = {"key": "x/offline", "operator": "Exists", "effect": "NoExecute"}
TWO_SECONDS = {**FOREVER, "tolerationSeconds": 2}


def _run(evictions: bool = True) -> Replay:
    r = Replay(evictions=evictions)
    objs = [dclass("c", f'device.driver == "{D}"'), _node("n1"), _slice(), *_pod("plain"), *_pod("stays", FOREVER), *_pod("soon", TWO_SECONDS)]
    objs += [_slice({"key": "x/offline", "effect": "NoExecute"}), {"op": "wait", "seconds": 1}, {"op": "wait", "seconds": 2}]
    for i, o in enumerate(objs):
        r.apply(o, f"test:{i}")
    return r


def test_a_noexecute_taint_evicts_what_does_not_tolerate_it_when_its_time_comes() -> None:
    r = _run()
    evicted = [s.pod for s in r.steps if s.op == "evicted"]
    assert evicted == ["plain", "soon"]  # plain at once, soon after its 2 s
    observed = [(s.pod, s.node or s.failure) for s in r.steps if s.op == "observe"]
    assert observed == [("plain", "gone"), ("stays", "n1"), ("soon", "n1"), ("plain", "gone"), ("stays", "n1"), ("soon", "gone")]
    assert sorted(r.final_pods()) == ["stays"]
    # the evicted pods' generated claims are gone with them: their devices are free again
    r.apply(_slice(), "untainted")
    r.apply(_pod("again")[0], "t")
    r.apply(_pod("again")[1], "p")
    assert r.final_pods()["again"].node == "n1"


def test_without_the_eviction_controller_nothing_is_evicted() -> None:
    r = _run(evictions=False)
    assert not [s for s in r.steps if s.op == "evicted"]
    assert sorted(r.final_pods()) == ["plain", "soon", "stays"]


def test_device_taint_rules_are_kept_but_taint_nothing() -> None:
    """As the 1.36.2 scheduler does (its slice tracker drops the rules' events): recorded in
    tests/data/sched-recorded v8-device-taint-rules."""
    rule = {
        "apiVersion": "resource.k8s.io/v1beta2", "kind": "DeviceTaintRule", "metadata": {"name": "all"},
        "spec": {"deviceSelector": {"driver": D}, "taint": {"key": "x/offline", "effect": "NoExecute"}},
    }
    r = Replay()
    for i, o in enumerate([dclass("c", f'device.driver == "{D}"'), _node("n1"), _slice(), rule, *_pod("plain")]):
        r.apply(o, f"test:{i}")
    assert r.final_pods()["plain"].node == "n1"
    r.apply({"op": "delete", "kind": "DeviceTaintRule", "name": "all"}, "del")
    assert r.rules == {}


def test_a_bad_wait_is_one_line() -> None:
    from topodra.sim.replay import ReplayError

    with pytest.raises(ReplayError, match=r"src: a wait needs seconds >= 0, got 'soon'"):
        Replay().apply({"op": "wait", "seconds": "soon"}, "src")
