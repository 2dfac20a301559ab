"""One PgQueuer worker process for the peer comparison:
`python -m bench.pgq_worker DSN BATCH DRIVER` (DRIVER: asyncpg, PgQueuer's recommended
driver, or psycopg).

Runs a QueueManager (no scheduler) with a no-op async entrypoint until SIGTERM/SIGINT.
Uses uvloop when installed, as PgQueuer's own CLI does. Prints "ready" once the manager
listens for its channel (as pgfleet's bench waits for registered workers), so a drain's
clock never charges PgQueuer for its own start-up.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from datetime import timedelta
from typing import Any

from pgqueuer import AsyncpgDriver, PsycopgDriver, QueueManager
from pgqueuer.core import listeners
from pgqueuer.models import Job
from pgqueuer.queries import Queries

from bench.common import run_async

DRIVERS = ("asyncpg", "psycopg")


async def open_driver(dsn: str, driver: str) -> tuple[Any, Any]:
    """(PgQueuer driver, connection to close afterwards)."""
    if driver == "asyncpg":
        import asyncpg

        conn = await asyncpg.connect(dsn)
        return AsyncpgDriver(conn), conn
    if driver == "psycopg":
        import psycopg

        pconn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        return PsycopgDriver(pconn), pconn
    raise SystemExit(f"pgq_worker: unknown driver {driver!r} (one of {', '.join(DRIVERS)})")


def report_ready_after_listening() -> None:
    """QueueManager.run looks this function up on the module at call time; wrapped, it
    prints "ready" right after the LISTEN, before the first dequeue."""
    listen = listeners.initialize_notice_event_listener

    async def listen_then_report(*args: Any, **kwargs: Any) -> Any:
        result = await listen(*args, **kwargs)
        print("ready", flush=True)
        return result

    listeners.initialize_notice_event_listener = listen_then_report  # type: ignore[assignment]


async def main(dsn: str, batch_size: int, driver: str) -> None:
    pg_driver, conn = await open_driver(dsn, driver)
    qm = QueueManager(Queries(pg_driver))

    @qm.entrypoint("noop")
    async def noop(job: Job) -> None:
        return None

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, qm.shutdown.set)
    report_ready_after_listening()
    await qm.run(batch_size=batch_size, dequeue_timeout=timedelta(seconds=5))
    await conn.close()


if __name__ == "__main__":
    run_async(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
