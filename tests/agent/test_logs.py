"""The agent's log: its own lines at info, the HTTP client's request lines only at debug."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from topodra.agent.logs import setup_logging


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    levels = {n: logging.getLogger(n).level for n in ("httpx2", "httpx", "httpcore")}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, lvl in levels.items():
        logging.getLogger(name).setLevel(lvl)


@pytest.mark.usefixtures("restore_logging")
def test_http_requests_are_not_logged_at_info(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("info")
    logging.getLogger("httpx2").info('HTTP Request: GET https://127.0.0.1:6443/api/v1/nodes/n "HTTP/1.1 200 OK"')
    logging.getLogger("httpx2").warning("a warning of the client")
    logging.getLogger("topodra.agent.agent").info("agent started on node n")
    err = capsys.readouterr().err
    assert "HTTP Request" not in err
    assert "a warning of the client" in err
    assert "agent started on node n" in err


@pytest.mark.usefixtures("restore_logging")
def test_http_requests_are_logged_at_debug(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("debug")
    logging.getLogger("httpx2").info('HTTP Request: GET https://127.0.0.1:6443/api/v1/nodes/n "HTTP/1.1 200 OK"')
    assert "HTTP Request" in capsys.readouterr().err
