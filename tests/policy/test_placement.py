"""Placement shortcuts give what the rules they stand for give, on random states."""

from __future__ import annotations

import contextlib

from hypothesis import given, settings
from hypothesis import strategies as st

from topodra.policy import Policy, PolicyConfig, PolicyError, QoSClass
from topodra.topology.synthetic import synthetic_topology

from .helpers import GIB, request

D = "resource-policy.nri.io"
MACHINE = synthetic_topology("2s1d2n2l2c2t+hbm")  # 64 GiB DRAM per NUMA node, 16 GiB HBM per socket

containers = st.lists(
    st.tuples(
        st.sampled_from([QoSClass.GUARANTEED, QoSClass.BURSTABLE]),
        st.sampled_from([500, 1000, 2000]),
        st.sampled_from([0, 1, 8, 30, 60]),  # GiB
        st.sampled_from(["", "hbm", "dram,hbm"]),
    ),
    max_size=12,
)


@settings(deadline=None, max_examples=100)
@given(placed=containers, probe=st.sampled_from([1, 8, 20, 40, 70, 130]), kind=st.sampled_from(["", "hbm", "dram,hbm"]))
def test_memory_fit_for_many_pools_is_the_rule_for_each(
    placed: list[tuple[QoSClass, int, int, str]], probe: int, kind: str
) -> None:
    policy = Policy(MACHINE, PolicyConfig())
    for n, (qos, cpu, gib, kinds) in enumerate(placed):
        annotations = {f"memory-type.{D}": kinds} if kinds else None
        with contextlib.suppress(PolicyError):  # what does not fit is left out
            policy.add(request(f"c{n}", qos, cpu, memory=gib * GIB, annotations=annotations))
    req = request("probe", memory=probe * GIB, annotations={f"memory-type.{D}": kind} if kind else None)
    need = policy._classify(req)
    placer = policy._placer
    fit = placer._mem_fitter(need)
    rule = [placer._mem_fit(i, need) for i in range(len(policy.pools))]
    assert [fit(i) for i in range(len(policy.pools))] == rule
    assert placer._mem_fits(need) == rule  # the table _ranked reads
