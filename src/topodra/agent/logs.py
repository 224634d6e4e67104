"""Structured logging for the agent: text for people, JSON lines for log pipelines."""

from __future__ import annotations

import json
import logging
import time

__all__ = ["setup_logging"]

#: Libraries that log routine work at INFO.
_CHATTY = ("httpx2", "httpx", "httpcore")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, sort_keys=True)


def setup_logging(level: str = "info", fmt: str = "text") -> None:
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The HTTP client logs every request at INFO (each slice write, claim read and status write):
    # the agent's own lines say what happened; the requests show at debug.
    for name in _CHATTY:
        logging.getLogger(name).setLevel(logging.NOTSET if level.upper() == "DEBUG" else logging.WARNING)
