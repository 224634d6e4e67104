"""sim diff compares Filter messages without the random letters of generated claim names."""

from __future__ import annotations

from topodra.sim.diff import Outcome


def _failed(pod: str, message: str) -> Outcome:
    return Outcome("create", pod, None, message)


def test_a_generated_claims_letters_are_not_compared() -> None:
    recorded = _failed("k-05", 'running "DynamicResources" filter plugin: claim recorded/k-05-c0-9hd6m: selector #0: CEL runtime error: no such overload')
    replayed = _failed("k-05", 'running "DynamicResources" filter plugin: claim recorded/k-05-c0-cn8s6: selector #0: CEL runtime error: no such overload')
    assert recorded.same(replayed) == []
    other_claim = _failed("k-05", 'running "DynamicResources" filter plugin: claim recorded/k-05-c1-cn8s6: selector #0: CEL runtime error: no such overload')
    assert recorded.same(other_claim) == ["message"]
    other_text = _failed("k-05", 'running "DynamicResources" filter plugin: claim recorded/k-05-c0-cn8s6: selector #1: CEL runtime error: no such overload')
    assert recorded.same(other_text) == ["message"]
