"""Log set-up: one line per event, plain text by default, JSON with --log-format json."""

from __future__ import annotations

import json
import logging
import os
import sys
import time

# What every LogRecord carries; anything else on a record came from `extra=` and is emitted
# as its own JSON field (job_id, task, queue, attempt, ...).
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def utc_stamp(record: logging.LogRecord) -> str:
    """The record's time in UTC, ISO 8601 with milliseconds and Z. Not local time: Django
    (and any code calling time.tzset) moves the process's zone to its settings, so local
    times of one fleet would be in different, unmarked zones; the job lines' times are UTC."""
    return (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z")


class PlainFormatter(logging.Formatter):
    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return utc_stamp(record)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": utc_stamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in entry:
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def setup(fmt: str = "plain", level: str | None = None) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(PlainFormatter(
            "%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s"
        ))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level or os.environ.get("PGFLEET_LOG_LEVEL", "INFO").upper())
