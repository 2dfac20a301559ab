"""Where the backend's CPU goes in a bulk enqueue: the same chunks inserted with parts of
the table taken away, each variant in a transaction that is rolled back.

    python -m bench.bulk_parts [--runs 11] [--jobs 50000]

A scratch database (created, migrated and dropped) as the server's superuser. Each sample:
BEGIN; TRUNCATE pgfleet.jobs; the variant's DDL; then the chunks of `jobs` no-op jobs
`{"task", "args": {"i": i}, "queue"}` as enqueue_many sends them (binary arrays,
client.BULK_CHUNK rows per statement), timed by the backend's CPU (/proc/PID/stat);
ROLLBACK. Variants alternate within each round; the figure is the median per variant, and
the differences between variants are what each part costs. Absolute figures move with
the machine's load; the differences within one run are the result.
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Callable
from typing import Any

import psycopg

from bench import common
from bench.probes import _cpu_ms
from pgfleet.client import enqueue as client
from pgfleet.sql import arrays as bulk_arrays, store

LIMIT_TRIGGERS = ("jobs_args_limits", "jobs_meta_limits", "jobs_names_limits",
                  "jobs_run_at_limits")
PARTIAL_INDEXES = ("jobs_dead_idx", "jobs_ended_badly_idx", "jobs_ended_badly_queue_idx",
                   "jobs_finished_idx", "jobs_lease_expiry_idx", "jobs_queued_key_idx",
                   "jobs_running_key_idx", "jobs_unique_key_idx")
CHECKS = ("jobs_attempt_check", "jobs_crashes_check", "jobs_max_attempts_check",
          "jobs_priority_check", "jobs_queue_check", "jobs_running_leased",
          "jobs_task_check", "jobs_unique_key_check")

Ddl = Callable[[psycopg.Connection[Any]], None]


def _run(*statements: str) -> Ddl:
    def apply(conn: psycopg.Connection[Any]) -> None:
        for statement in statements:
            conn.execute(statement.encode())
    return apply


_NO_LIMITS = [f"ALTER TABLE pgfleet.jobs DISABLE TRIGGER {t}" for t in LIMIT_TRIGGERS]
_NO_NOTIFY = ["ALTER TABLE pgfleet.jobs DISABLE TRIGGER jobs_notify"]
_BARE = (["ALTER TABLE pgfleet.jobs DISABLE TRIGGER USER"]
         + [f"DROP INDEX pgfleet.{i}" for i in PARTIAL_INDEXES]
         + [f"ALTER TABLE pgfleet.jobs DROP CONSTRAINT {c}" for c in CHECKS])
_NO_CLAIM = ["DROP INDEX pgfleet.jobs_claim_idx"]
_NO_PKEY = ["ALTER TABLE pgfleet.jobs DROP CONSTRAINT jobs_pkey CASCADE"]

VARIANTS: dict[str, Ddl] = {
    "as shipped": _run(),
    "without the 4 limit triggers": _run(*_NO_LIMITS),
    "without the notify trigger": _run(*_NO_NOTIFY),
    "no triggers, partial indexes, CHECKs": _run(*_BARE),
    "  and no claim index": _run(*_BARE, *_NO_CLAIM),
    "  and no primary key (heap only)": _run(*_BARE, *_NO_CLAIM, *_NO_PKEY),
}


def sample(conn: psycopg.Connection[Any], ddl: Ddl, chunks: list[dict[str, Any]]) -> float:
    conn.execute("BEGIN")
    try:
        conn.execute("TRUNCATE pgfleet.jobs")
        ddl(conn)
        sql = store.q("enqueue_many_ids")
        with conn.cursor() as cur:
            bulk_arrays.register(cur.adapters)
            cur.execute(sql, chunks[0], binary=True)  # plan and caches outside the clock
            cur.execute("TRUNCATE pgfleet.jobs")
            before = _cpu_ms(conn.info.backend_pid)
            for params in chunks:
                cur.execute(sql, params, binary=True).fetchone()
            return _cpu_ms(conn.info.backend_pid) - before
    finally:
        conn.execute("ROLLBACK")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--jobs", type=int, default=50_000)
    args = parser.parse_args()
    jobs = [{"task": "bench.noop", "args": {"i": i}, "queue": "enqueue"}
            for i in range(args.jobs)]
    rows = client._rows(jobs)
    chunks = [store.enqueue_many_params(rows[i:i + client.BULK_CHUNK])
              for i in range(0, len(rows), client.BULK_CHUNK)]
    db = common.Database()
    db.name = f"pgfleet_bulk_parts_{os.getpid()}"
    db.dsn = common.with_db(common.SERVER, db.name)
    db.create()
    out: dict[str, list[float]] = {name: [] for name in VARIANTS}
    try:
        with db.connect() as conn:
            for index in range(args.runs):
                names = list(VARIANTS) if index % 2 == 0 else list(VARIANTS)[::-1]
                for name in names:
                    out[name].append(sample(conn, VARIANTS[name], chunks))
    finally:
        db.drop()
    shipped = statistics.median(out["as shipped"])
    print(f"backend CPU of {args.jobs:,} rows in chunks of {client.BULK_CHUNK:,},"
          f" {args.runs} rounds (ms, median; us per row; share of as shipped)")
    for name, values in out.items():
        median = statistics.median(values)
        print(f"{name:40s} {median:6.0f} ms {1000 * median / args.jobs:6.2f} us"
              f" {median / shipped:6.2f}   [{', '.join(f'{v:.0f}' for v in values)}]")


if __name__ == "__main__":
    main()
