"""Issue 13: a queue its supervisor gave up on shows in `pgfleet status` (text and
--json), read from the database, so any host sees it; a reload gives it a fresh start
and the mark goes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pgfleet
from tests.support.fleet import Fleet, config_text
from tests.support.workers import wait_for


def status(dsn: str, *options: str) -> str:
    done = subprocess.run([sys.executable, "-m", "pgfleet", "status", *options],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PGFLEET_DATABASE_URL": dsn})
    assert done.returncode == 0, done.stderr
    return done.stdout


def queue(dsn: str, name: str) -> dict[str, Any] | None:
    found = [q for q in json.loads(status(dsn, "--json"))["queues"] if q["queue"] == name]
    return found[0] if found else None


def failed_on(dsn: str, name: str) -> list[dict[str, str]]:
    entry = queue(dsn, name)
    return entry["failed_on"] if entry else []


QUEUES = {"broken": {"tasks": ["tests.support.broken_tasks"]}, "default": {"processes": 1}}


def test_a_failed_queue_shows_in_status_until_a_reload(
        dsn: str, fleet: Callable[..., Fleet]) -> None:
    f = fleet(QUEUES)
    wait_for(lambda: failed_on(dsn, "broken"), timeout=60)
    [entry] = failed_on(dsn, "broken")
    assert entry["host"] == socket.gethostname()
    assert entry["supervisor"].startswith(f"{socket.gethostname()}:{f.pid}:")
    assert entry["reason"] == "workers died at start-up 3 times in a row"
    assert failed_on(dsn, "default") == []

    text = status(dsn)
    header = text.splitlines()[0]
    assert header.split()[-3:] == ["PAUSED", "FAILED", "ON"]
    [line] = [row for row in text.splitlines() if row.startswith("broken ")]
    assert line.split()[-2:] == ["no", socket.gethostname()]
    [line] = [row for row in text.splitlines() if row.startswith("default ")]
    assert line.split()[-2:] == ["no", "-"]
    assert (f"queue broken failed on {socket.gethostname()} ({entry['supervisor']}): "
            "workers died at start-up 3 times in a row") in text

    # A reload gives every queue a fresh start: the mark is gone once the new maintenance
    # process records the state, and comes back when the queue fails again.
    f.config.write_text(config_text({"default": {"processes": 1}}))
    f.signal(signal.SIGHUP)
    wait_for(lambda: "reloading" in f.log() and not failed_on(dsn, "broken"), timeout=60)
    assert queue(dsn, "broken") is None


def test_a_queue_failed_by_its_crash_limit_shows_in_status(
        dsn: str, fleet: Callable[..., Fleet]) -> None:
    f = fleet({"crashy": {"processes": 1}, "default": {"processes": 1}},
              supervisor={"crash_limit": {"count": 2, "window": "1m"}})
    f.wait_workers(1, "crashy")
    pgfleet.enqueue_many(dsn, [{"task": "crash", "queue": "crashy", "max_attempts": 1}] * 4)
    wait_for(lambda: failed_on(dsn, "crashy"), timeout=60)
    [entry] = failed_on(dsn, "crashy")
    assert entry["reason"] == "workers crashed 2 times within 60s"
    assert entry["supervisor"].startswith(f"{socket.gethostname()}:{f.pid}:")
    assert failed_on(dsn, "default") == []
