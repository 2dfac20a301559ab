"""One PgQueuer worker process for the peer comparison: `python -m bench.pgq_worker DSN BATCH`.

Runs a QueueManager (no scheduler) with a no-op async entrypoint until SIGTERM/SIGINT.
Uses uvloop when installed, as PgQueuer's own CLI does.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from datetime import timedelta

import psycopg
from pgqueuer import PsycopgDriver, QueueManager
from pgqueuer.models import Job
from pgqueuer.queries import Queries


async def main(dsn: str, batch_size: int) -> None:
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    qm = QueueManager(Queries(PsycopgDriver(conn)))

    @qm.entrypoint("noop")
    async def noop(job: Job) -> None:
        return None

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, qm.shutdown.set)
    print("ready", flush=True)
    await qm.run(batch_size=batch_size, dequeue_timeout=timedelta(seconds=5))
    await conn.close()


if __name__ == "__main__":
    try:
        from uvloop import new_event_loop as loop_factory
    except ImportError:
        loop_factory = None  # type: ignore[assignment]
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(main(sys.argv[1], int(sys.argv[2])))
