"""Shared fixtures for the topology tests."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

#: Creating many tiny files is several times faster on tmpfs than on some disks.
FAST_TMP = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


@pytest.fixture
def fast_tmp() -> Iterator[Path]:
    """A temp dir on tmpfs when there is one (removed afterwards)."""
    path = Path(tempfile.mkdtemp(prefix="topodra-test-", dir=FAST_TMP))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
