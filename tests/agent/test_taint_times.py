"""The taints' ``timeAdded``: stamped once when first published, kept while the device keeps the
taint (and across a restart, from the published slices), new when the taint comes back."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

from topodra.agent.taint_times import TaintTimes, rfc3339
from topodra.dra.devices import build_devices
from topodra.topology.synthetic import synthetic_topology

DEVICES = build_devices(synthetic_topology("1s2c1t"))  # cpu1, cpu0
OFFLINE = {"key": "native.cpu/offline", "effect": "NoExecute"}


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 12, 4, 10, 0, 0, 700_000, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def test_a_taint_keeps_its_first_time_until_it_goes() -> None:
    clock = Clock()
    times = TaintTimes(clock)
    cpu1, cpu0 = DEVICES
    tainted = replace(cpu0, taints=(OFFLINE,))
    first = times.stamp([cpu1, tainted])
    assert first[0] is cpu1  # untainted devices pass as they are
    assert first[1].taints == ({**OFFLINE, "timeAdded": "2026-12-04T10:00:00Z"},)
    assert times.stamp([cpu1, tainted])[1] is first[1]  # the same object while unchanged
    clock.now += timedelta(minutes=5)
    again = replace(cpu0, taints=(OFFLINE,))  # rebuilt (a reload, the next offer): same taint, same time
    assert times.stamp([cpu1, again])[1].taints[0]["timeAdded"] == "2026-12-04T10:00:00Z"
    assert times.stamp([cpu1])[0] is cpu1  # cpu0 withdrawn for a while: its time is kept
    assert times.stamp([cpu1, again])[1].taints[0]["timeAdded"] == "2026-12-04T10:00:00Z"
    assert times.stamp([cpu1, cpu0])[1] is cpu0  # back online: untainted, its time forgotten
    back = times.stamp([cpu1, replace(cpu0, taints=(OFFLINE,))])[1]
    assert back.taints[0]["timeAdded"] == "2026-12-04T10:05:00Z"


def test_times_published_before_a_restart_are_kept() -> None:
    times = TaintTimes(Clock())
    times.seed([{"name": "cpu0", "taints": [{**OFFLINE, "timeAdded": "2026-12-01T08:00:00Z"}]}, {"name": "cpu1"}])
    stamped = times.stamp([replace(DEVICES[1], taints=(OFFLINE, {"key": "native.cpu/reserved", "effect": "NoSchedule"}))])
    assert [t["timeAdded"] for t in stamped[0].taints] == ["2026-12-01T08:00:00Z", "2026-12-04T10:00:00Z"]


def test_rfc3339_is_utc_whole_seconds() -> None:
    east = datetime(2026, 12, 4, 12, 30, 15, 999_999, tzinfo=UTC).astimezone(timezone(timedelta(hours=2)))
    assert rfc3339(east) == "2026-12-04T12:30:15Z"
