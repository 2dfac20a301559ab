"""A database that lost a worker's claim while the run goes on (as after a failover to a
replica that never received it) offers the job again. The worker that still runs it must
not run it twice at once: it stops the old run and starts the job again only once that run
has ended, under a new fence, and the old run's outcome is not recorded against the new.

The row is rewound by hand on the same server (the timeline does not change, so the
claims' epoch hold, tested in tests/integration/test_epoch.py and tests/ha, stays out of it):
this is the worker's own guard."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from tests.faults.conftest import Db
from tests.faults.helpers import enqueue, job_row, wait_settled
from tests.support.fleet import Fleet
from tests.support.workers import scalar, wait_for

pytestmark = pytest.mark.faults

FAST = {"heartbeat_interval": "0.3s", "stale_after": "3s", "lease": "6s"}


def runs(dsn: str, job_id: int) -> list[tuple[int, Any, Any]]:
    """(token, first sign of life, last sign of life) of each run of the job, by start."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [(int(r[0]), r[1], r[2]) for r in conn.execute(
            "SELECT token, min(at), max(at) FROM audit WHERE job_id = %s"
            " GROUP BY token ORDER BY min(at)", (job_id,)).fetchall()]


def rewind(dsn: str, job_id: int) -> None:
    """The row as a replica that never received the claim has it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE pgfleet.jobs SET state = 'queued', attempt = 0,"
                     " lease_holder = NULL, lease_expires_at = NULL, started_at = NULL,"
                     " fence = NULL WHERE id = %s", (job_id,))


def test_a_job_offered_again_while_its_lost_run_goes_on_waits_for_that_run(
        db: Db, cfleet: Callable[..., Fleet]) -> None:
    dsn = db.dsn
    # Two threads: one is free to take the job again at once.
    f = cfleet({"default": {"processes": 1, "threads": 2, "kill_grace": "1s"}},
               supervisor=FAST)
    f.wait_workers(1)
    # Its first run swallows every interrupt for 4 s: the lost run goes on after the
    # worker stops it.
    [job_id] = enqueue(dsn, [{"task": "faults.gil_sort",
                              "args": {"seconds": 4.0, "later": 0.5, "stubborn": True}}])
    wait_for(lambda: scalar(dsn, "SELECT count(*) FROM audit WHERE job_id = %s"
                                 " AND event = 'tick'", (job_id,)) >= 1)
    rewind(dsn, job_id)
    wait_settled(dsn, log=f.log)
    found = runs(dsn, job_id)
    assert len(found) == 2, (found, f.log()[-3000:])
    (first, _, first_end), (second, second_start, _) = found
    assert first != second
    assert second_start > first_end, (found, f.log()[-3000:])
    row = job_row(dsn, job_id)
    # The second run, at attempt 1 again, is the one recorded; the first left no error.
    assert (row["state"], row["attempt"], row["errors"]) == ("succeeded", 1, []), row
