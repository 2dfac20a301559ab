"""Run workers for tests: in a thread of the test process, or as `pgfleet worker` processes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg

from pgfleet.core.backoff import Backoff
from pgfleet.tasks import load_registry
from pgfleet.worker import Worker, build_settings

TASKS = "tests.support.jobtasks"


@contextmanager
def worker_thread(dsn: str, queue: str = "default", *, modules: Sequence[str] = (TASKS,),
                  **settings: Any) -> Iterator[Worker]:
    settings.setdefault("poll_interval", 0.2)
    settings.setdefault("backoff", Backoff(initial=0.05, max=0.2, jitter=0.0))
    worker = Worker(build_settings(None, queue, dsn=dsn,
                                   registry=load_registry(list(modules)), **settings))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.request_stop("quick")
        thread.join(10)
        assert not thread.is_alive(), "worker thread did not stop"


def worker_process(dsn: str, queue: str = "default", *extra: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PGFLEET_DATABASE_URL=dsn)
    return subprocess.Popen(
        [sys.executable, "-m", "pgfleet", "worker", "--queue", queue, "--tasks", TASKS,
         "--poll-interval", "0.2", *extra],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.05) -> Any:
    """Poll until predicate() is truthy; fail with the last value after `timeout` seconds.
    A generous bound that only guards against hangs, never a performance assertion."""
    deadline = time.monotonic() + timeout
    value = predicate()
    while not value:
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s (last value {value!r})")
        time.sleep(interval)
        value = predicate()
    return value


def scalar(dsn: str, sql: str, params: Any = None) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(sql, params).fetchone()
        return row[0] if row else None


def states(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT state::text, count(*) FROM pgfleet.jobs GROUP BY 1").fetchall()
    return {r[0]: r[1] for r in rows}
