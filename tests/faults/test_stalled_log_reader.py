"""A reader of stderr that stops (a hung log shipper, a full pipe) does not stop a worker:
its lines wait in a bounded queue (beyond it they are dropped and counted), and its jobs,
heartbeats and lease renewals go on."""

from __future__ import annotations

import pgfleet
from tests.support.workers import scalar, states, wait_for, worker_process

JOBS = 200


def test_a_worker_whose_stderr_nobody_reads_keeps_working(dsn: str) -> None:
    # Each failure logs its error: 200 of 10 kB are thirty times what a pipe holds.
    pgfleet.enqueue_many(dsn, [{"task": "fail", "args": {"message": "x" * 10_000},
                                "max_attempts": 1} for _ in range(JOBS)])
    worker = worker_process(dsn, "default", "--threads", "4")  # stderr: a pipe, never read
    try:
        wait_for(lambda: states(dsn).get("dead") == JOBS, timeout=60)
        beat = scalar(dsn, "SELECT heartbeat_at FROM pgfleet.processes WHERE kind = 'worker'")
        wait_for(lambda: scalar(dsn, "SELECT heartbeat_at FROM pgfleet.processes"
                                     " WHERE kind = 'worker'") > beat, timeout=30)
        assert worker.poll() is None
    finally:
        worker.terminate()
        assert worker.stderr is not None
        tail = worker.stderr.read().decode()  # now read: the worker can write and exit
        worker.wait(30)
    # Nothing was lost: the lines waited for the reader (up to logs.QUEUE_LINES of them).
    assert tail.count("; the job is dead") == JOBS
