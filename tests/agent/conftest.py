"""Shared fixtures of the agent tests.

- The agent refuses configuration files that group or others can write: tests that write one
  must not depend on the developer's umask (0002 on many desktops).
- ``make_agent``: an agent on a given machine with its state and CDI directories in a fresh
  temporary directory, never started unless the test starts it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

from topodra.agent.agent import Agent
from topodra.agent.config import parse_config
from topodra.topology.model import Topology

#: ``make_agent(topology, **config)``: config keys as in the file (``nodeName``, ``nri``, ...).
MakeAgent = Callable[..., Agent]


@pytest.fixture(autouse=True)
def _private_umask() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.fixture
def make_agent(tmp_path_factory: pytest.TempPathFactory) -> MakeAgent:
    def make(topology: Topology, **config: object) -> Agent:
        tmp = tmp_path_factory.mktemp("agent")
        base: dict[str, object] = {
            "nodeName": "n", "stateDir": str(tmp / "state"), "cdiDir": str(tmp / "cdi"), "metricsAddress": "",
        }
        return Agent(parse_config({**base, **config}), topology=topology)

    return make
