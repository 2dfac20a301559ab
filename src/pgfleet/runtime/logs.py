"""Log set-up: one line per event, plain text by default, JSON with --log-format json.

Lines reach stderr through a writer thread and a bounded queue, never from the thread
that logs: a reader of stderr that stops (a hung log shipper, a full pipe) must not stop
a thread that holds a promise (renewing leases, killing a frozen worker, exiting before a
lease runs out). When the queue is full a line is dropped and counted, and the count is
written once the reader drains again."""

from __future__ import annotations

import atexit
import json
import logging
import os
import queue
import sys
import threading
import time
from typing import TextIO

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


# Lines waiting for the writer thread: about a minute of a busy worker's logging.
QUEUE_LINES = 10_000


class DroppingHandler(logging.Handler):
    """Formats in the logging thread and hands the line to a writer thread; drops it when
    QUEUE_LINES are waiting. Each process (a fork included) gets its own queue and
    writer, made on its first line."""

    def __init__(self, stream: TextIO, capacity: int = QUEUE_LINES) -> None:
        super().__init__()
        self.stream = stream
        self.capacity = capacity
        self.dropped = 0
        self._pid = -1
        self._lines: queue.Queue[str] = queue.Queue(capacity)
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        # The parent's writer thread does not exist here, and its queue's lock may have
        # been held at the fork.
        self._pid = -1

    def _queue(self) -> queue.Queue[str]:
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._lines = queue.Queue(self.capacity)
            self.dropped = 0
            threading.Thread(target=self._write, args=(self._lines,), daemon=True,
                             name="pgfleet-log-writer").start()
        return self._lines

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + "\n"
        except Exception:  # a record that cannot be formatted is logging's to report
            self.handleError(record)
            return
        try:
            self._queue().put_nowait(line)
        except queue.Full:
            self.dropped += 1

    def _write(self, lines: queue.Queue[str]) -> None:
        reported = 0
        while True:
            line = lines.get()
            try:
                if self.dropped != reported:
                    self.stream.write(f"{self.dropped - reported} log lines dropped: stderr"
                                      " was not read\n")
                    reported = self.dropped
                self.stream.write(line)
                self.stream.flush()
            except (OSError, ValueError):
                pass  # stderr closed: nothing is left to tell
            finally:
                lines.task_done()

    def drain(self, timeout: float) -> None:
        """Wait up to `timeout` for this process's waiting lines to be written."""
        if self._pid != os.getpid():
            return
        deadline = time.monotonic() + timeout
        while self._lines.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.005)


def drain(timeout: float = 0.2) -> None:
    """Give the writer thread up to `timeout` to write what is waiting (before an exit)."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, DroppingHandler):
            handler.drain(timeout)


# At a normal exit the lines still waiting are written, for at most this long.
EXIT_DRAIN = 1.0


def setup(fmt: str = "plain", level: str | None = None) -> None:
    handler = DroppingHandler(sys.stderr)
    atexit.register(handler.drain, EXIT_DRAIN)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(PlainFormatter(
            "%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s"
        ))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level or os.environ.get("PGFLEET_LOG_LEVEL", "INFO").upper())
