"""Prepare/Unprepare without gRPC: CPUs, CDI specs, checkpoint, restart, bad input."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topodra.cpuset import CPUSet
from topodra.dra import cdi
from topodra.dra.checkpoint import CheckpointError, load_checkpoint
from topodra.dra.devices import DeviceModelConfig, build_devices
from topodra.dra.driver import ClaimCheckError, ClaimEnvError, ClaimRef, Driver, parse_claim_env
from topodra.policy.api import Changes
from topodra.topology import synthetic_topology

from .dra_fakes import SHARED, ClaimStore, RecordingPolicy, make_claim

T = TypeVar("T")
TOPO = synthetic_topology("1s1n1l8c2t")  # 16 CPUs
RESERVED = CPUSet([0, 8])


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


class Rig:
    """A driver over a fake policy and claim store, in a temp dir."""

    def __init__(self, tmp: Path, *, model: str = "cpu", policy: RecordingPolicy | None = None) -> None:
        self.tmp = tmp
        self.policy = policy or RecordingPolicy(TOPO, RESERVED)
        self.store = ClaimStore()
        self.pushed: list[Changes] = []
        self.devices = build_devices(TOPO, DeviceModelConfig(model=model), exclude=RESERVED)  # type: ignore[arg-type]
        self.driver = self.new_driver()

    def new_driver(self) -> Driver:
        async def on_changes(changes: Changes) -> None:
            self.pushed.append(changes)

        return Driver(
            policy=self.policy,
            lock=asyncio.Lock(),
            fetch_claim=self.store.fetch,
            list_claims=self.store.list_all,
            cdi_dir=self.tmp / "cdi",
            checkpoint_path=self.tmp / "plugin" / "checkpoint.json",
            devices=self.devices,
            pool="node-a",
            on_changes=on_changes,
        )

    def prepare(self, *uids: str) -> dict[str, Any]:
        refs = [ClaimRef("default", u, f"claim-{u}") for u in uids]
        return run(self.driver.prepare(refs))

    def unprepare(self, *uids: str) -> dict[str, Any]:
        refs = [ClaimRef("default", u, f"claim-{u}") for u in uids]
        return run(self.driver.unprepare(refs))

    def spec_cpus(self, uid: str) -> CPUSet | None:
        return cdi.read_spec_cpus(self.tmp / "cdi", uid)


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    return Rig(tmp_path)


def test_prepare_claims_cpus_writes_cdi_and_checkpoint(rig: Rig) -> None:
    rig.store.add(make_claim("u1", ["cpu4", "cpu5"]))
    res = rig.prepare("u1")["u1"]
    assert res.error == ""
    assert res.claim.cpus == CPUSet([4, 5])
    assert [(d.request, d.pool, d.device) for d in res.devices] == [("cpu", "node-a", "cpu4"), ("cpu", "node-a", "cpu5")]
    assert res.cdi_ids == ("native.cpu/cpuset=claim-u1",)
    assert rig.policy.claimed("u1") == CPUSet([4, 5])
    spec = json.loads((rig.tmp / "cdi" / "native.cpu-cpuset_claim-u1.json").read_text())
    assert spec["kind"] == "native.cpu/cpuset"
    assert spec["devices"][0]["name"] == "claim-u1"
    assert spec["devices"][0]["containerEdits"]["env"] == ["DRA_CPUSET_u1=4-5"]
    saved = load_checkpoint(rig.tmp / "plugin" / "checkpoint.json")
    assert saved["u1"].cpus == CPUSet([4, 5])
    assert saved["u1"].pod_uids == ("pod-1",)
    # the shared container was pushed off the claimed CPUs at once
    assert rig.pushed[-1][SHARED].cpus == TOPO.online - RESERVED - CPUSet([4, 5])
    assert rig.driver.prepared("u1") == res.claim


def test_prepare_is_idempotent(rig: Rig) -> None:
    rig.store.add(make_claim("u1", ["cpu4"]))
    first = rig.prepare("u1")["u1"]
    pushes, calls = len(rig.pushed), len(rig.policy.calls)
    again = rig.prepare("u1", "u1")["u1"]
    assert again.claim == first.claim
    assert again.cdi_ids == first.cdi_ids
    assert len(rig.pushed) == pushes
    assert len(rig.policy.calls) == calls


def test_repeated_prepare_adds_new_consumer_pods(rig: Rig) -> None:
    rig.store.add(make_claim("u1", ["cpu4"], pods=("p1",)))
    rig.prepare("u1")
    rig.store.add(make_claim("u1", ["cpu4"], pods=("p1", "p2")))
    rig.prepare("u1")
    assert rig.driver.check_container_claim("p2", "u1", CPUSet([4])) == CPUSet([4])
    assert load_checkpoint(rig.tmp / "plugin" / "checkpoint.json")["u1"].pod_uids == ("p1", "p2")


def test_repeated_prepare_with_changed_allocation_fails(rig: Rig) -> None:
    rig.store.add(make_claim("u1", ["cpu4"]))
    rig.prepare("u1")
    rig.store.add(make_claim("u1", ["cpu6"]))
    assert "allocation changed" in rig.prepare("u1")["u1"].error
    assert rig.policy.claimed("u1") == CPUSet([4])


def test_repeated_prepare_rewrites_a_removed_spec(rig: Rig) -> None:
    rig.store.add(make_claim("u1", ["cpu4"]))
    rig.prepare("u1")
    cdi.remove_spec(rig.tmp / "cdi", "u1")
    rig.prepare("u1")
    assert rig.spec_cpus("u1") == CPUSet([4])


def test_unprepare_releases_and_is_idempotent(rig: Rig) -> None:
    rig.store.add(make_claim("u1", ["cpu4", "cpu12"]))
    rig.prepare("u1")
    res = rig.unprepare("u1")["u1"]
    assert res.error == ""
    assert res.changes[SHARED].cpus == TOPO.online - RESERVED
    assert rig.pushed[-1] == res.changes
    assert rig.policy.claimed("u1") is None
    assert rig.spec_cpus("u1") is None
    assert load_checkpoint(rig.tmp / "plugin" / "checkpoint.json") == {}
    assert rig.unprepare("u1")["u1"].error == ""
    assert rig.unprepare("never-seen")["never-seen"].error == ""


def test_unprepare_works_after_the_claim_is_deleted(rig: Rig) -> None:
    rig.store.add(make_claim("u1", ["cpu4"]))
    rig.prepare("u1")
    rig.store.claims.clear()
    assert rig.unprepare("u1")["u1"].error == ""
    assert rig.policy.claims() == {}


def test_every_claim_gets_an_answer(rig: Rig) -> None:
    rig.store.add(make_claim("good", ["cpu1"]))
    rig.store.add(make_claim("unalloc", [], allocated=False))
    res = rig.prepare("good", "unalloc", "missing")
    assert set(res) == {"good", "unalloc", "missing"}
    assert res["good"].error == ""
    assert "not allocated" in res["unalloc"].error
    assert "cannot fetch" in res["missing"].error
    assert "not found" in res["missing"].error


def _admin(claim: dict[str, Any]) -> dict[str, Any]:
    claim["status"]["allocation"]["devices"]["results"][0]["adminAccess"] = True
    return claim


@pytest.mark.parametrize(
    ("claim", "needle"),
    [
        (make_claim("u1", ["cpu4"], allocated=False), "not allocated"),
        ({**make_claim("u1", ["cpu4"]), "metadata": {"namespace": "default", "name": "claim-u1", "uid": "other"}}, "UID 'other'"),
        (make_claim("u1", ["cpu99"]), "'cpu99' is not a native.cpu device"),
        (make_claim("u1", ["cpu0"]), "'cpu0' is not a native.cpu device"),  # reserved CPUs are not published
        (make_claim("u1", ["cpu4"], pool="node-b"), "another pool"),
        (make_claim("u1", ["cpu4", "cpu4"]), "allocated twice"),
        (_admin(make_claim("u1", ["cpu4"])), "adminAccess is not supported"),
    ],
)
def test_bad_claims_are_refused_without_leaks(rig: Rig, claim: dict[str, Any], needle: str) -> None:
    rig.store.add(claim)
    res = rig.prepare("u1")["u1"]
    assert needle in res.error
    assert rig.policy.claims() == {}
    assert rig.spec_cpus("u1") is None
    assert rig.pushed == []


def test_devices_of_other_drivers_are_ignored(rig: Rig) -> None:
    rig.store.add(make_claim("u1", ["gpu0"], driver="gpu.example.com"))
    res = rig.prepare("u1")["u1"]
    assert res.error == ""
    assert res.devices == ()
    assert res.cdi_ids == ()
    assert rig.policy.claims() == {}


def test_cpus_already_claimed_are_refused(rig: Rig) -> None:
    rig.store.add(make_claim("u1", ["cpu4", "cpu5"]))
    rig.store.add(make_claim("u2", ["cpu5", "cpu6"]))
    res = rig.prepare("u1", "u2")
    assert res["u1"].error == ""
    assert "CPUs 5 are already prepared for claim(s) u1" in res["u2"].error
    assert rig.policy.claims() == {"u1": CPUSet([4, 5])}
    assert rig.spec_cpus("u2") is None


def test_policy_refusal_is_a_claim_error(tmp_path: Path) -> None:
    policy = RecordingPolicy(TOPO, RESERVED)
    policy.claim("agent-owned", CPUSet([7]))  # claimed outside this driver
    rig = Rig(tmp_path, policy=policy)
    rig.store.add(make_claim("u1", ["cpu7"]))
    assert "policy refuses CPUs 7" in rig.prepare("u1")["u1"].error
    assert rig.spec_cpus("u1") is None


def test_a_refused_prepare_is_one_warning_line_with_the_reason(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    policy = RecordingPolicy(TOPO, RESERVED)
    policy.claim("agent-owned", CPUSet([7]))
    rig = Rig(tmp_path, policy=policy)
    rig.store.add(make_claim("u1", ["cpu7"]))
    rig.store.add(make_claim("u2", ["cpu4"]))
    caplog.set_level(logging.DEBUG, logger="topodra.dra.driver")
    res = rig.prepare("u1", "u2", "../bad")
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [(r.levelno, r.exc_info) for r in loud] == [(logging.WARNING, None)]
    first = next(r.error for r in res.values() if r.error)
    assert loud[0].getMessage() == f"Prepare refused 2 of 3 claim(s): {first} (and 1 more)"
    assert res["u2"].error == ""
    assert "already claimed" in res["u1"].error


def test_invalid_uid_is_refused(rig: Rig) -> None:
    res = rig.prepare("../../etc/passwd")
    assert "not a valid UID" in res["../../etc/passwd"].error
    assert "not a valid UID" in rig.unprepare("a/b")["a/b"].error


def test_failed_checkpoint_write_rolls_back(rig: Rig) -> None:
    (rig.tmp / "plugin").write_text("a file where the plugin directory should be")
    rig.store.add(make_claim("u1", ["cpu4"]))
    res = rig.prepare("u1")["u1"]
    assert "cannot record" in res.error
    assert rig.policy.claims() == {}
    assert rig.spec_cpus("u1") is None
    assert rig.pushed[-1][SHARED].cpus == TOPO.online - RESERVED  # net effect: nothing claimed
    assert rig.driver.prepared("u1") is None


# --- grouped devices -----------------------------------------------------------------------------

def test_grouped_device_cpus_are_picked_by_the_policy(tmp_path: Path) -> None:
    rig = Rig(tmp_path, model="grouped")
    assert [d.name for d in rig.devices] == ["numa0"]
    rig.store.add(make_claim("g1", ["numa0"], consumed={"numa0": "4"}))
    rig.store.add(make_claim("g2", ["numa0"], consumed={"numa0": "3"}))
    res = rig.prepare("g1", "g2")
    a, b = res["g1"].claim.cpus, res["g2"].claim.cpus
    assert len(a) == 4
    assert len(b) == 3
    assert a.isdisjoint(b)
    assert (a | b).isdisjoint(RESERVED)
    assert res["g1"].devices[0].share_id == "share-g1-0"
    assert rig.spec_cpus("g2") == b
    # restart keeps the picked CPUs, not a new pick
    rig.policy = RecordingPolicy(TOPO, RESERVED)
    rig.driver = rig.new_driver()
    run(rig.driver.restore())
    assert rig.prepare("g1")["g1"].claim.cpus == a


@pytest.mark.parametrize(("amount", "needle"), [("500m", "not a positive whole number"), ("15", "free CPUs"), ("x", "invalid quantity")])
def test_grouped_bad_amounts(tmp_path: Path, amount: str, needle: str) -> None:
    rig = Rig(tmp_path, model="grouped")
    rig.store.add(make_claim("g1", ["numa0"], consumed={"numa0": amount}))
    assert needle in rig.prepare("g1")["g1"].error
    assert rig.policy.claims() == {}


def test_grouped_without_consumed_capacity_takes_the_whole_device(tmp_path: Path) -> None:
    rig = Rig(tmp_path, model="grouped")
    rig.store.add(make_claim("g1", ["numa0"]))
    # the policy keeps CPUs for its shared containers: the whole group is refused with them ...
    assert "no shared CPU" in rig.prepare("g1")["g1"].error
    # ... and granted without them
    rig = Rig(tmp_path / "empty", model="grouped", policy=RecordingPolicy(TOPO, RESERVED, shared=False))
    rig.store.add(make_claim("g1", ["numa0"]))
    assert rig.prepare("g1")["g1"].claim.cpus == TOPO.online - RESERVED


def test_core_devices_claim_all_threads(tmp_path: Path) -> None:
    rig = Rig(tmp_path, model="core")
    rig.store.add(make_claim("c1", ["core3"]))
    assert rig.prepare("c1")["c1"].claim.cpus == TOPO.cpus_of_core(3)


# --- restart ---------------------------------------------------------------------------------------

def test_restart_answers_with_the_same_cpus_and_frees_on_unprepare(rig: Rig) -> None:
    rig.store.add(make_claim("u1", ["cpu4", "cpu5"]))
    first = rig.prepare("u1")["u1"]
    # a new process: new policy, new driver, same checkpoint and CDI dir
    rig.policy = RecordingPolicy(TOPO, RESERVED)
    rig.pushed.clear()
    rig.driver = rig.new_driver()
    report = run(rig.driver.restore())
    assert report.restored == ("u1",)
    assert rig.policy.claimed("u1") == CPUSet([4, 5])
    assert rig.pushed
    assert rig.pushed[-1][SHARED].cpus == TOPO.online - RESERVED - CPUSet([4, 5])
    again = rig.prepare("u1")["u1"]
    assert again.claim == first.claim
    assert again.cdi_ids == first.cdi_ids
    assert rig.unprepare("u1")["u1"].error == ""
    assert rig.policy.claims() == {}


def test_restore_rewrites_missing_specs_and_removes_stale_ones(rig: Rig) -> None:
    rig.store.add(make_claim("u1", ["cpu4"]))
    rig.prepare("u1")
    cdi.remove_spec(rig.tmp / "cdi", "u1")
    cdi.write_spec(rig.tmp / "cdi", "stale", CPUSet([9]))
    rig.policy = RecordingPolicy(TOPO, RESERVED)
    rig.driver = rig.new_driver()
    report = run(rig.driver.restore())
    assert report.removed_stale_specs == ("stale",)
    assert rig.spec_cpus("u1") == CPUSet([4])
    assert rig.spec_cpus("stale") is None


def test_restore_with_cpus_now_reserved(rig: Rig) -> None:
    rig.store.add(make_claim("u1", ["cpu4"]))
    rig.prepare("u1")
    rig.policy = RecordingPolicy(TOPO, CPUSet([4]))  # the claim would hold every reserved CPU
    rig.driver = rig.new_driver()
    report = run(rig.driver.restore())
    assert "reserved" in report.failed["u1"]
    assert rig.policy.claims() == {}
    assert "cannot restore" in rig.prepare("u1")["u1"].error
    assert rig.driver.prepared("u1") is None
    assert rig.unprepare("u1")["u1"].error == ""
    assert load_checkpoint(rig.tmp / "plugin" / "checkpoint.json") == {}


def test_restore_with_a_cpu_now_reserved_keeps_the_claim_while_a_reserved_cpu_is_left(rig: Rig) -> None:
    rig.store.add(make_claim("u1", ["cpu4"]))
    rig.prepare("u1")
    rig.policy = RecordingPolicy(TOPO, RESERVED | CPUSet([4]))
    rig.driver = rig.new_driver()
    report = run(rig.driver.restore())
    assert not report.failed
    assert rig.policy.claims() == {"u1": CPUSet([4])}


CORRUPTIONS: dict[str, Callable[[bytes], bytes]] = {
    "truncated": lambda b: b[: len(b) // 2],
    "bit-flipped": lambda b: b[: len(b) // 2] + bytes([b[len(b) // 2] ^ 0x01]) + b[len(b) // 2 + 1 :],
    "wrong-version": lambda b: b.replace(b'"version":2', b'"version":99'),
    "not-json": lambda b: b"\x00\xff not a checkpoint",
}
CHECKPOINT = "plugin/checkpoint.json"


def _restart(rig: Rig) -> Any:
    rig.policy = RecordingPolicy(TOPO, RESERVED)
    rig.driver = rig.new_driver()
    return run(rig.driver.restore())


def _damage(path: Path, how: str) -> None:
    before = path.read_bytes()
    path.write_bytes(CORRUPTIONS[how](before))
    assert path.read_bytes() != before


@pytest.mark.parametrize("how", sorted(CORRUPTIONS))
def test_damaged_newest_slot_falls_back_to_the_previous_generation_without_loss(rig: Rig, how: str) -> None:
    rig.store.add(make_claim("u1", ["cpu4"]))
    rig.store.add(make_claim("u2", ["cpu5", "cpu6"]))
    rig.prepare("u1")  # generation 0, slot checkpoint.json
    rig.prepare("u2")  # generation 1, slot checkpoint.json.1: the newest
    newest = rig.tmp / (CHECKPOINT + ".1")
    _damage(newest, how)
    report = _restart(rig)
    assert report.recovery == "previous-generation"
    assert report.problems
    assert str(newest) in report.problems[0]
    # u2 is missing from the previous generation; its CDI spec and the API server bring it back.
    assert rig.policy.claims() == {"u1": CPUSet([4]), "u2": CPUSet([5, 6])}
    assert (rig.tmp / (CHECKPOINT + ".1.damaged")).exists(), "the damaged slot is kept for inspection"
    assert load_checkpoint(rig.tmp / CHECKPOINT).keys() == {"u1", "u2"}
    assert rig.prepare("u2")["u2"].claim.cpus == CPUSet([5, 6])
    assert _restart(rig).recovery == "", "repaired: the next start finds a sound checkpoint"


@pytest.mark.parametrize("how", sorted(CORRUPTIONS))
def test_no_good_slot_rebuilds_from_cdi_specs_and_the_api_server(rig: Rig, how: str) -> None:
    rig.store.add(make_claim("u1", ["cpu4", "cpu5"]))
    rig.prepare("u1")
    (rig.tmp / "plugin" / "checkpoint.json.1").unlink(missing_ok=True)
    _damage(rig.tmp / CHECKPOINT, how)
    cdi.write_spec(rig.tmp / "cdi", "gone", CPUSet([9]))  # a spec whose claim no longer exists
    report = _restart(rig)
    assert report.recovery == "rebuilt"
    assert rig.policy.claims() == {"u1": CPUSet([4, 5])}
    assert rig.driver.prepared("u1").devices == rig.prepare("u1")["u1"].claim.devices  # type: ignore[union-attr]
    assert rig.spec_cpus("gone") is None
    assert load_checkpoint(rig.tmp / CHECKPOINT).keys() == {"u1"}


def test_lost_unprepare_is_not_resurrected(rig: Rig) -> None:
    rig.store.add(make_claim("u1", ["cpu4"]))
    rig.store.add(make_claim("u2", ["cpu5"]))
    rig.prepare("u1")  # gen 0
    rig.prepare("u2")  # gen 1
    rig.unprepare("u2")  # gen 2 (slot 0), spec removed
    rig.store.delete("default", "claim-u2")
    _damage(rig.tmp / CHECKPOINT, "bit-flipped")  # gen 1 still says u2 is prepared
    report = _restart(rig)
    assert report.recovery == "previous-generation"
    assert rig.policy.claims() == {"u1": CPUSet([4])}
    assert any("u2" in n for n in report.notes)


def test_damage_with_the_api_server_away_is_a_clear_error_and_claims_nothing(rig: Rig) -> None:
    rig.store.add(make_claim("u1", ["cpu4"]))
    rig.prepare("u1")
    _damage(rig.tmp / CHECKPOINT, "truncated")
    rig.store.reachable = False
    with pytest.raises(CheckpointError, match=r"checkpoint\.json.*API server"):
        _restart(rig)
    assert rig.policy.claims() == {}


def test_a_torn_write_is_detected_and_the_other_slot_used(rig: Rig) -> None:
    rig.store.add(make_claim("u1", ["cpu4"]))
    rig.prepare("u1")
    good = (rig.tmp / CHECKPOINT).read_bytes()
    (rig.tmp / (CHECKPOINT + ".1")).write_bytes(good[: len(good) // 3])  # a crash mid-write of gen 1
    report = _restart(rig)
    assert report.recovery == "previous-generation"
    assert rig.policy.claims() == {"u1": CPUSet([4])}
    assert rig.store.lists == 0, "checkpoint and specs agree: no need to ask the API server"


# --- containers --------------------------------------------------------------------------------------

def test_check_container_claim(rig: Rig) -> None:
    rig.store.add(make_claim("u1", ["cpu4", "cpu5"], pods=("p1",)))
    rig.prepare("u1")
    assert rig.driver.check_container_claim("p1", "u1", CPUSet([4, 5])) == CPUSet([4, 5])
    with pytest.raises(ClaimCheckError, match="forged or stale"):
        rig.driver.check_container_claim("p1", "u1", CPUSet([4, 5, 6]))
    with pytest.raises(ClaimCheckError, match="not a consumer"):
        rig.driver.check_container_claim("p2", "u1", CPUSet([4, 5]))
    with pytest.raises(ClaimCheckError, match="not prepared"):
        rig.driver.check_container_claim("p1", "u9", CPUSet([4]))
    assert rig.driver.container_claims("p1", ["PATH=/bin", "DRA_CPUSET_u1=4-5"]) == {"u1": CPUSet([4, 5])}


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        (["DRA_CPUSET_u1=4-x"], "invalid CPU list"),
        (["DRA_CPUSET_u1="], "empty cpuset"),
        (["DRA_CPUSET_u1"], "no value"),
        (["DRA_CPUSET_=1"], "not a valid UID"),
        (["DRA_CPUSET_a/b=1"], "not a valid UID"),
        (["DRA_CPUSET_u1=1", "DRA_CPUSET_u1=2"], "twice"),
    ],
)
def test_parse_claim_env_is_strict(env: list[str], needle: str) -> None:
    with pytest.raises(ClaimEnvError, match=needle):
        parse_claim_env(env)


def test_parse_claim_env_ignores_other_variables() -> None:
    assert parse_claim_env(["A=1", "DRA_CPUSET=3", "DRA_CPUSET_u1=1,3", "DRA_CPUSET_u1=1,3"]) == {"u1": CPUSet([1, 3])}


# --- concurrency and invariants ---------------------------------------------------------------------------

def test_concurrent_prepares_never_double_a_cpu(tmp_path: Path) -> None:
    rig = Rig(tmp_path, model="grouped", policy=RecordingPolicy(TOPO, RESERVED, shared=False))
    for i in range(8):
        rig.store.add(make_claim(f"g{i}", ["numa0"], consumed={"numa0": "2"}))

    async def go() -> list[dict[str, Any]]:
        return await asyncio.gather(
            *(rig.driver.prepare([ClaimRef("default", f"g{i}", f"claim-g{i}")]) for i in range(8))
        )

    results = run(go())
    ok = [r for res in results for r in res.values() if not r.error]
    assert len(ok) == 7  # 14 allowed CPUs, 2 each
    union = CPUSet()
    for r in ok:
        assert union.isdisjoint(r.claim.cpus)
        union |= r.claim.cpus
    assert rig.policy.claims() == {u: p.cpus for u, p in rig.driver.prepared_claims().items()}


@settings(max_examples=40)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(0, 5), st.sets(st.integers(1, 15), min_size=1, max_size=3)), max_size=25))
def test_random_prepare_unprepare_keeps_state_consistent(tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[bool, int, set[int]]]) -> None:
    rig = Rig(tmp_path_factory.mktemp("rig"))
    for prepare, n, cpus in ops:
        uid = f"u{n}"
        if prepare:
            if rig.driver.prepared(uid) is None:
                rig.store.add(make_claim(uid, [f"cpu{c}" for c in sorted(cpus)]))
            rig.prepare(uid)
        else:
            rig.unprepare(uid)
        prepared = rig.driver.prepared_claims()
        assert rig.policy.claims() == {u: p.cpus for u, p in prepared.items()}
        assert set(cdi.spec_uids(rig.tmp / "cdi")) == set(prepared)
        saved = load_checkpoint(rig.tmp / "plugin" / "checkpoint.json")
        assert {u: c.cpus for u, c in saved.items()} == {u: p.cpus for u, p in prepared.items()}


# --- identity ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("namespace", "name"), [("other", "claim-u1"), ("default", "claim-other")])
def test_a_prepared_uid_under_another_name_is_refused(rig: Rig, namespace: str, name: str) -> None:
    rig.store.add(make_claim("u1", ["cpu4"]))
    rig.prepare("u1")
    forged = ClaimRef(namespace, "u1", name)
    res = run(rig.driver.prepare([forged]))["u1"]
    assert res.claim is None
    assert "was prepared for claim default/claim-u1" in res.error
    un = run(rig.driver.unprepare([forged]))["u1"]
    assert "was prepared for claim default/claim-u1" in un.error
    assert rig.policy.claimed("u1") == CPUSet([4]), "a forged Unprepare releases nothing"
    assert rig.prepare("u1")["u1"].claim.cpus == CPUSet([4])


# --- bounded work ----------------------------------------------------------------------------------------

class GatedStore(ClaimStore):
    """Fetches of claims named ``slow-*`` wait at a gate; counts how many are in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.in_flight = 0
        self.most = 0
        self.saturated = asyncio.Event()
        self.bound = 0

    async def fetch(self, namespace: str, name: str) -> dict[str, Any]:
        if not name.startswith("slow-"):
            return await super().fetch(namespace, name)
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        if self.in_flight >= self.bound:
            self.saturated.set()
        try:
            await self.gate.wait()
            return await super().fetch(namespace, name)
        finally:
            self.in_flight -= 1


def test_a_huge_prepare_is_bounded_and_does_not_stall_other_calls(tmp_path: Path) -> None:
    async def main() -> None:
        rig = Rig(tmp_path)
        store = GatedStore()
        store.bound = 4
        store.add(make_claim("u1", ["cpu4"]))
        driver = Driver(
            policy=rig.policy,
            lock=asyncio.Lock(),
            fetch_claim=store.fetch,
            cdi_dir=tmp_path / "cdi",
            checkpoint_path=tmp_path / "plugin" / "checkpoint.json",
            devices=rig.devices,
            pool="node-a",
            fetch_concurrency=4,
            prepare_deadline=3600,
        )
        flood = [ClaimRef("default", f"x{i}", f"slow-{i}") for i in range(20_000)]
        big = asyncio.create_task(driver.prepare(flood))
        await asyncio.wait_for(store.saturated.wait(), 30)
        # Another pod's claim is prepared while the huge call is stuck on the API server.
        small = await asyncio.wait_for(driver.prepare([ClaimRef("default", "u1", "claim-u1")]), 30)
        assert small["u1"].error == ""
        assert not big.done()
        assert store.most == 4, "at most fetch_concurrency fetches in flight"
        store.gate.set()
        answers = await asyncio.wait_for(big, 60)
        assert len(answers) == len(flood)
        assert all("not found" in a.error for a in answers.values())
        assert store.most == 4

    run(main())


def test_the_prepare_deadline_answers_every_claim(tmp_path: Path) -> None:
    async def main() -> None:
        rig = Rig(tmp_path)
        store = GatedStore()
        store.bound = 2
        driver = Driver(
            policy=rig.policy,
            lock=asyncio.Lock(),
            fetch_claim=store.fetch,
            cdi_dir=tmp_path / "cdi",
            checkpoint_path=tmp_path / "plugin" / "checkpoint.json",
            devices=rig.devices,
            pool="node-a",
            fetch_concurrency=2,
            prepare_deadline=0.2,
        )
        flood = [ClaimRef("default", f"x{i}", f"slow-{i}") for i in range(1000)]
        answers = await asyncio.wait_for(driver.prepare(flood), 30)  # the gate never opens
        assert set(answers) == {r.uid for r in flood}
        assert all("0.2 s deadline" in a.error for a in answers.values())
        assert store.in_flight == 0, "fetches still running after the deadline were cancelled"

    run(main())


def test_many_huge_calls_at_once_stay_bounded(tmp_path: Path) -> None:
    from topodra.dra.driver import FETCHES_IN_FLIGHT

    async def main() -> None:
        rig = Rig(tmp_path)
        store = GatedStore()
        store.bound = FETCHES_IN_FLIGHT
        store.add(make_claim("u1", ["cpu4"]))
        driver = Driver(
            policy=rig.policy,
            lock=asyncio.Lock(),
            fetch_claim=store.fetch,
            cdi_dir=tmp_path / "cdi",
            checkpoint_path=tmp_path / "plugin" / "checkpoint.json",
            devices=rig.devices,
            pool="node-a",
            fetch_concurrency=4,
            prepare_deadline=3600,
        )
        calls = [
            asyncio.create_task(driver.prepare([ClaimRef("default", f"x{c}-{i}", f"slow-{c}-{i}") for i in range(100)]))
            for c in range(10)
        ]
        await asyncio.wait_for(store.saturated.wait(), 30)
        small = asyncio.create_task(driver.prepare([ClaimRef("default", "u1", "claim-u1")]))
        store.gate.set()  # the small call queued behind at most the workers already waiting
        assert (await asyncio.wait_for(small, 30))["u1"].error == ""
        for answers in await asyncio.wait_for(asyncio.gather(*calls), 60):
            assert len(answers) == 100
        assert store.most == FETCHES_IN_FLIGHT

    run(main())


@pytest.mark.parametrize("model", ["cpu", "core"])
def test_a_claim_allocated_an_offline_device_is_refused_never_given_an_offline_cpu(rig: Rig, model: str) -> None:
    """A claim tolerating the offline or unhealthy taint (or every taint) can be allocated such a
    device: Prepare refuses it, naming the offline CPUs."""
    from testkit.sysfs_writer import with_offline

    from topodra.dra.devices import follow_devices
    from topodra.topology.follow import carry_numbers

    cfg = DeviceModelConfig(model=model)  # type: ignore[arg-type]
    known = build_devices(TOPO, cfg, reserved=RESERVED)
    gone = CPUSet([5])  # cpu5; in the core model one thread of core 5 (5, 13)
    now = carry_numbers(TOPO.cpus, with_offline(TOPO, gone))
    rig.policy = RecordingPolicy(now, RESERVED)
    rig.devices = follow_devices(known, build_devices(now, cfg, reserved=RESERVED), now.online)
    rig.driver = rig.new_driver()
    device = next(d.name for d in rig.devices if d.cpus & gone)
    rig.store.add(make_claim("u1", [device]))
    out = rig.prepare("u1")["u1"]
    assert "the policy refuses CPUs" in out.error
    assert out.error.endswith("CPUs 5 are not online")
    assert rig.policy.claims() == {}
    assert rig.spec_cpus("u1") is None
