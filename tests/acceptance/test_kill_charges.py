"""A worker killed from outside (SIGKILL: an operator, the OOM killer) charges an attempt
only to the jobs whose task code it was running. The jobs it had claimed ahead (prefetch)
and not started go back with their attempt refunded: with max_attempts 1 they used to end
`dead` without ever running."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

import psycopg

import pgfleet
from tests.faults import books
from tests.support.fleet import Fleet, alive
from tests.support.workers import scalar, wait_for

REFUNDED = "worker died: SIGKILL (not running its task: attempt refunded)"


def rows(dsn: str, ids: list[int]) -> dict[int, tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        found = conn.execute("SELECT id, state::text, attempt, refunds, crashes, errors"
                             " FROM pgfleet.jobs WHERE id = ANY(%s)", (ids,)).fetchall()
    return {r[0]: tuple(r[1:]) for r in found}


def test_a_sigkill_charges_the_running_job_and_refunds_the_prefetched_ones(
    dsn: str, fleet: Callable[..., Fleet]
) -> None:
    f = fleet({"default": {"processes": 1, "threads": 1, "prefetch": 10}})
    [worker] = f.wait_workers(1)
    # One transaction, claimed by id: the sleeper runs, the ten behind it wait in the
    # worker's own queue (threads 1 + prefetch 10 = one claim of eleven).
    ids = pgfleet.enqueue_many(dsn, [{"task": "sleep", "args": {"seconds": 1.5},
                                      "max_attempts": 2},
                                     *[{"task": "noop", "max_attempts": 1}] * 10])
    sleeper, prefetched = ids[0], ids[1:]
    wait_for(lambda: scalar(dsn, "SELECT count(*) FROM audit WHERE job_id = %s"
                                 " AND event = 'started'", (sleeper,)) == 1)
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.jobs WHERE state = 'running'") == 11
    os.kill(worker, signal.SIGKILL)
    wait_for(lambda: not alive(worker))
    wait_for(lambda: all(r[0] in ("succeeded", "dead") for r in rows(dsn, ids).values()),
             timeout=60)

    found = rows(dsn, ids)
    state, attempt, refunds, crashes, errors = found[sleeper]
    assert (state, attempt, refunds, crashes) == ("succeeded", 2, 0, 1)
    assert [e["error"] for e in errors] == ["worker died: SIGKILL"]
    for job_id in prefetched:
        state, attempt, refunds, crashes, errors = found[job_id]
        # Attempt 1 was given back uncharged (the number is kept: it is the fence), so
        # the run that succeeded is attempt 2 within max_attempts 1 + 1 refund.
        assert (state, attempt, refunds, crashes) == ("succeeded", 2, 1, 0), job_id
        assert [e["error"] for e in errors] == [REFUNDED], job_id
    log = f.log()
    assert log.count("before running it") == 10
    books.check(dsn, ids)
