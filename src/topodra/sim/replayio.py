"""``sim replay`` as a stream: objects are replayed as they are read, steps written as they happen.

A cluster dump of tens of megabytes is read one object at a time (``topodra.yamldocs``), so
neither the file nor the list of steps is ever held whole, and a bad object ends the replay as
soon as it is read. ``StepWriter`` writes each step as ``sim replay -o yaml|json`` prints the
whole list (the same text), one step at a time.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from topodra.sim.replay import Replay
from topodra.sim.replaysteps import Step
from topodra.yamldocs import stream_files

__all__ = ["ReplayProgress", "StepWriter", "replay_files"]


class StepWriter:
    """Steps to ``out`` as ``yaml.safe_dump_all`` (``yaml``) or ``json.dumps(indent=2)`` (``json``)
    would write the whole list; ``close`` ends the JSON list."""

    def __init__(self, out: TextIO, form: str) -> None:
        if form not in ("yaml", "json"):
            raise ValueError(f"output {form!r}: must be yaml or json")
        self.out = out
        self.form = form
        self.count = 0
        self._dump: Callable[[Any], str] = self._yaml_dumper() if form == "yaml" else self._json

    @staticmethod
    def _yaml_dumper() -> Callable[[Any], str]:
        import yaml

        dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's emitter writes the same text, faster
        return lambda step: yaml.dump(step, Dumper=dumper, sort_keys=False)

    @staticmethod
    def _json(step: Any) -> str:
        return "  " + json.dumps(step, indent=2).replace("\n", "\n  ")  # a JSON string holds no raw newline

    def write(self, steps: Sequence[Step]) -> None:
        for step in steps:
            text = self._dump(step.as_dict())
            if self.form == "yaml":
                self.out.write(text if self.count == 0 else "---\n" + text)
            else:
                self.out.write(("[\n" if self.count == 0 else ",\n") + text)
            self.count += 1

    def close(self) -> None:
        if self.form == "json":
            self.out.write("\n]\n" if self.count else "[]\n")
        self.out.flush()


@dataclass
class ReplayProgress:
    """What a replay has done so far, for a progress bar or line."""

    read: int = 0  # characters of the input read (about bytes)
    total: int = 0
    objects: int = 0
    pods: int = 0  # pods bound or scheduled
    pending: int = 0

    def line(self) -> str:
        return (
            f"replay: read {self.read / 1e6:.1f} of {self.total / 1e6:.1f} MB, {self.objects:,} objects, "
            f"{self.pods:,} pods placed, {self.pending:,} pending"
        )


def replay_files(
    paths: Sequence[str | Path],
    *,
    on_steps: Callable[[Sequence[Step]], None],
    progress: Callable[[ReplayProgress], None] | None = None,
    percentage_of_nodes_to_score: int | None = None,
    gates: Mapping[str, bool] | None = None,
    evictions: bool = True,
) -> tuple[Replay, int]:
    """Replay the objects of ``paths`` in order as they are read; every object's steps go to
    ``on_steps`` and are then dropped from the replay's list. Returns the replay (its final
    state and pending pods) and how many objects were read. Bad YAML raises ``YamlFileError``,
    an object the replay cannot apply ``ReplayError``."""
    r = Replay(percentage_of_nodes_to_score=percentage_of_nodes_to_score, gates=gates, evictions=evictions)
    state = ReplayProgress()

    def read(done: int, total: int) -> None:
        state.read, state.total = done, total

    for doc in stream_files(paths, read):
        steps = r.apply(doc.obj, doc.source)
        state.objects += 1
        state.pods += sum(1 for s in steps if s.node is not None)
        state.pending = len(r.pending)
        on_steps(steps)
        del r.steps[:]  # written: a long replay keeps none of them
        if progress is not None:
            progress(state)
    return r, state.objects
