"""The agent refuses configuration files that group or others can write: tests that write one
must not depend on the developer's umask (0002 on many desktops)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _private_umask() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)
