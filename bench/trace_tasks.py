"""Tasks for bench/latency_trace.py, with the stamps it needs: imported in each worker, this
module wraps three worker methods to note, on CLOCK_MONOTONIC (one clock for every process
of the machine), when a notification reached the worker, when its claim was sent and
answered, and when the job was handed to a thread. The task writes them beside its own
start. A bench probe only: pgfleet itself carries no such hooks."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import psycopg

import pgfleet
from pgfleet.sql import store
from pgfleet.worker import claims, executor, loop

_last_notify = [0.0]
_stamps: dict[int, tuple[float, ...]] = {}
_local = threading.local()

_on_notify = loop.Worker._on_notify
_claim = claims.Claims.__call__
_hand = executor.Executor.hand


def _noted_notify(self: loop.Worker, queue: str) -> None:
    _last_notify[0] = time.monotonic()
    _on_notify(self, queue)


def _noted_claim(self: claims.Claims, conn: psycopg.Connection[Any], limit: int,
                 **kwargs: Any) -> list[store.ClaimedJob]:
    sent = time.monotonic()
    jobs = _claim(self, conn, limit, **kwargs)
    answered = time.monotonic()
    for job in jobs:
        _stamps[job.id] = (_last_notify[0], sent, answered)
    return jobs


def _noted_hand(self: executor.Executor, running: executor.Running) -> None:
    job_id = running.job.id
    _stamps[job_id] = (*_stamps.get(job_id, (0.0, 0.0, 0.0)), time.monotonic())
    _hand(self, running)


loop.Worker._on_notify = _noted_notify  # type: ignore[method-assign]
claims.Claims.__call__ = _noted_claim  # type: ignore[method-assign]
executor.Executor.hand = _noted_hand  # type: ignore[method-assign]


def _db() -> psycopg.Connection[Any]:
    conn = getattr(_local, "conn", None)
    if conn is None:
        conn = _local.conn = psycopg.connect(os.environ["BENCH_DSN"], autocommit=True)
    return conn


@pgfleet.task(name="trace.record")
def record() -> None:
    started = time.monotonic()
    job = pgfleet.current_job()
    assert job is not None
    notified, sent, answered, handed = _stamps.pop(job.id, (0.0, 0.0, 0.0, 0.0))
    _db().execute("INSERT INTO bench_trace VALUES (%s, %s, %s, %s, %s, %s, clock_timestamp())",
                  (job.id, notified, sent, answered, handed, started))


@pgfleet.task(name="trace.noop")
def noop() -> None:
    """Background load."""
