"""The worker processes of the two peers in `python -m bench.xmin`:

    python -m bench.xmin_workers pgqueuer DSN [BATCH]  # one PgQueuer QueueManager process
    python -m bench.xmin_workers skiplocked DSN        # one process of the generic queue

Each prints "ready" once it can take jobs and runs until SIGTERM. Their tasks only write
the start record (bench/xmin_record.py).

- pgqueuer: a `QueueManager` on asyncpg (PgQueuer's recommended driver) and uvloop, its
  documented defaults (batch_size 10 unless BATCH says otherwise; LISTEN/NOTIFY
  wake-ups), a 5 s dequeue timeout as bench/pgq_worker.py uses.
- skiplocked: the queue every tutorial shows. THREADS threads, each with its own
  autocommit psycopg connection: claim one job with `UPDATE ... WHERE id = (SELECT ...
  FOR UPDATE SKIP LOCKED LIMIT 1)` over a partial index on pending rows, run it, mark it
  done; IDLE_SECONDS of sleep after an empty claim (no LISTEN).
"""

from __future__ import annotations

import signal
import sys
import threading
from datetime import timedelta

import psycopg

from bench.xmin_record import record

THREADS = 4
IDLE_SECONDS = 0.01

SKIPLOCKED_SCHEMA = """
CREATE SCHEMA skiplocked;
CREATE TABLE skiplocked.jobs (
    id         bigserial PRIMARY KEY,
    payload    jsonb NOT NULL,
    status     text NOT NULL DEFAULT 'pending',
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX jobs_pending_idx ON skiplocked.jobs (id) WHERE status = 'pending';
"""
SKIPLOCKED_CLAIM = (
    "UPDATE skiplocked.jobs SET status = 'running'"
    " WHERE id = (SELECT id FROM skiplocked.jobs WHERE status = 'pending'"
    "             ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)"
    " RETURNING id, payload")
SKIPLOCKED_FINISH = "UPDATE skiplocked.jobs SET status = 'done' WHERE id = %s"
SKIPLOCKED_ENQUEUE = ("INSERT INTO skiplocked.jobs (payload)"
                      " SELECT %s::jsonb FROM generate_series(1, %s)")


def _skiplocked_thread(dsn: str, stop: threading.Event, ready: threading.Barrier) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        ready.wait()
        while not stop.is_set():
            row = conn.execute(SKIPLOCKED_CLAIM).fetchone()
            if row is None:
                stop.wait(IDLE_SECONDS)
                continue
            job_id, payload = row
            record(float(payload["t"]))
            conn.execute(SKIPLOCKED_FINISH, (job_id,))


def skiplocked_main(dsn: str) -> None:
    stop = threading.Event()
    ready = threading.Barrier(THREADS + 1)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threads = [threading.Thread(target=_skiplocked_thread, args=(dsn, stop, ready))
               for _ in range(THREADS)]
    for t in threads:
        t.start()
    ready.wait(60)
    print("ready", flush=True)
    stop.wait()
    for t in threads:
        t.join()


async def _pgqueuer(dsn: str, batch: int) -> None:
    import asyncio

    import asyncpg
    from pgqueuer import AsyncpgDriver, QueueManager
    from pgqueuer.models import Job
    from pgqueuer.queries import Queries

    from bench.pgq_worker import report_ready_after_listening

    conn = await asyncpg.connect(dsn)
    qm = QueueManager(Queries(AsyncpgDriver(conn)))

    @qm.entrypoint("xmin")
    async def xmin(job: Job) -> None:
        assert job.payload is not None
        record(float(job.payload))

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, qm.shutdown.set)
    report_ready_after_listening()
    await qm.run(batch_size=batch, dequeue_timeout=timedelta(seconds=5))
    await conn.close()


def main(argv: list[str]) -> None:
    if len(argv) not in (2, 3) or argv[0] not in ("pgqueuer", "skiplocked"):
        raise SystemExit("usage: python -m bench.xmin_workers pgqueuer|skiplocked DSN [BATCH]")
    system, dsn = argv[:2]
    if system == "skiplocked":
        skiplocked_main(dsn)
    else:
        from bench.common import run_async

        run_async(_pgqueuer(dsn, int(argv[2]) if len(argv) == 3 else 10))


if __name__ == "__main__":
    main(sys.argv[1:])
