"""The reference of issue 16: a bare claim + finish loop on asyncpg, no features.

    python -m bench.bare_loop DSN BATCH

One process: claim up to BATCH due jobs of queue 'default' with pgfleet's own claim shape
(SKIP LOCKED CTE over the partial claim index, lease the rows), finish exactly those rows,
repeat; two autocommit statements per batch, prepared once. No task lookup, no threads, no
heartbeats, no metrics, no fencing (the finish goes by id alone). When a claim comes back
short it waits for a NOTIFY on pgfleet_jobs (or 50 ms) before claiming again. Runs until
SIGTERM.

The session plans every execution for its parameters (plan_cache_mode =
force_custom_plan): asyncpg prepares both statements, and a generic plan that PostgreSQL
caches while the table is empty (the loop polls an empty queue before jobs arrive) seq-scans
and sorts the whole table on every claim and joins it back by a nested loop: measured,
~300 jobs/s instead of thousands. pgfleet's psycopg connections prepare a statement after
its fifth execution and can fall into the same trap (see bench/results/HISTORY.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys

import asyncpg

from bench.common import run_async

CLAIM = """
WITH c AS MATERIALIZED (
    SELECT id FROM pgfleet.jobs
     WHERE queue = 'default' AND state = 'queued' AND run_at <= now()
     ORDER BY priority, run_at, id
     LIMIT $1
       FOR UPDATE SKIP LOCKED
)
UPDATE pgfleet.jobs j
   SET state = 'running', attempt = j.attempt + 1, lease_holder = $2,
       lease_expires_at = now() + interval '60 seconds', started_at = now()
  FROM c
 WHERE j.id = c.id
RETURNING j.id, j.task, j.args
"""

FINISH = """
UPDATE pgfleet.jobs
   SET state = 'succeeded', finished_at = now(), lease_holder = NULL, lease_expires_at = NULL
 WHERE id = ANY($1::bigint[])
"""


async def main(dsn: str, batch: int) -> None:
    conn = await asyncpg.connect(dsn, server_settings={"plan_cache_mode": "force_custom_plan"})
    wake = asyncio.Event()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    listener = await asyncpg.connect(dsn)
    await listener.add_listener("pgfleet_jobs", lambda *_: wake.set())
    claim, finish = await conn.prepare(CLAIM), await conn.prepare(FINISH)
    holder = f"bare-{os.getpid()}"
    print("ready", flush=True)
    while not stop.is_set():
        rows = await claim.fetch(batch, holder)
        if rows:
            await finish.fetch([r["id"] for r in rows])
        if len(rows) < batch:
            wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), 0.05)
    await listener.close()
    await conn.close()


if __name__ == "__main__":
    run_async(main(sys.argv[1], int(sys.argv[2])))
