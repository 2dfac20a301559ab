"""Shared buffers per claim while a REPEATABLE READ snapshot is held open, as jobs run.

    python -m bench.held_snapshot [--cycles 2000] [--no-hold] [--no-move]

Each cycle enqueues one job, claims (EXPLAIN ANALYZE BUFFERS of pgfleet.claim_jobs, for
real) and completes it; every 20 cycles the heads move, as maintenance moves them once
per pass (--no-move: never, the claim as it was before the heads). Buffers, not time:
the count does not depend on the machine's load. On the shared server, in a database of
its own (a snapshot holds back only its own database)."""

from __future__ import annotations

import argparse
import statistics

import psycopg

import pgfleet
from pgfleet.sql import fleet as fleet_store, migrate, store

ADMIN = "host=127.0.0.1 user=postgres dbname=postgres"
DSN = "host=127.0.0.1 user=postgres dbname=pgfleet_bench_held_snapshot"
CLAIM = ("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT * FROM pgfleet.claim_jobs("
         "'default', 10, 'w', 30, 1048576, 0, false, NULL, NULL, NULL, NULL)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=2000)
    parser.add_argument("--no-hold", action="store_true")
    parser.add_argument("--no-move", action="store_true")
    opts = parser.parse_args()
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS pgfleet_bench_held_snapshot")
        admin.execute("CREATE DATABASE pgfleet_bench_held_snapshot")
    migrate.migrate(DSN)
    holder = psycopg.connect(DSN)
    if not opts.no_hold:
        holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM pgfleet.jobs").fetchone()
    buffers: list[int] = []
    with psycopg.connect(DSN, autocommit=True) as conn:
        for i in range(opts.cycles):
            pgfleet.enqueue(conn, "noop")
            row = conn.execute(CLAIM).fetchone()
            assert row is not None
            plan = row[0][0]["Plan"]
            buffers.append(plan["Shared Hit Blocks"] + plan["Shared Read Blocks"])
            for job_id, fence in conn.execute(
                    "SELECT id, fence FROM pgfleet.jobs WHERE state = 'running'").fetchall():
                store.complete_succeeded(conn, worker="w", done=[(job_id, fence)])
            if not opts.no_move and i % 20 == 0:
                fleet_store.move_heads(conn)
            if i + 1 in (100, opts.cycles // 2, opts.cycles):
                print(f"after {i + 1} jobs: median buffers per claim (last 100)"
                      f" {statistics.median(buffers[-100:]):.0f}", flush=True)
    holder.rollback()
    holder.close()
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute("DROP DATABASE pgfleet_bench_held_snapshot")


if __name__ == "__main__":
    main()
