"""Enqueue -> start latency of pgfleet beside PgQueuer and a bare floor, on one machine.

    python -m bench.latency_peers                      # 3 rounds x 300 jobs, idle and at 1,000/s
    python -m bench.latency_peers --rounds 5 --output bench/results/latency-peers.json

Every system is timed the same way: a job's creation time (its enqueue transaction's now())
to its task's first statement (clock_timestamp() of an INSERT the task makes on a connection
of its own), both on the database clock. One job every 5-15 ms from one client; "loaded"
adds 1,000 no-op jobs/s from a second client, in ticks of 10 jobs, through the same system's
bulk enqueue.

- pgfleet: `pgfleet run` with bench/'s setting (2 processes x 16 threads, prefetch 16);
  `pgfleet.enqueue` on an autocommit psycopg connection.
- pgqueuer: PgQueuer on asyncpg (its recommended driver) and uvloop, 2 processes, batch
  size 10; `Queries.enqueue` on asyncpg.
- floor: what any queue on this machine pays at least. One asyncpg + uvloop process LISTENs,
  claims with one durable UPDATE ... FOR UPDATE SKIP LOCKED on a four-column table, and
  runs the "task" inline; the client INSERTs and NOTIFYs in one autocommit statement. Two
  durable commits (the enqueue's and the claim's), one notification, no threads, no
  retries, no leases, no features.

Systems run one after another in each round, the order rotating, so a noisy minute falls on
all of them. Prints per-round p50/p99 and the medians; `--output` writes the JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import psycopg

import pgfleet
from bench.common import Database, log, machine, run_async, supervisor, write_config
from bench.systems import install_pgqueuer

SYSTEMS = ("pgfleet", "pgqueuer", "floor")
# Also measurable (--systems): pgfleet with one worker process instead of two, the same 16
# threads; every process LISTENs and claims on each notification, and on two cores the
# losing claims compete with the winning one.
EXTRA_SYSTEMS = ("pgfleet-1p",)
BACKGROUND_TICK = 0.01

FLOOR_TABLES = """
CREATE TABLE floor_jobs (id bigserial PRIMARY KEY, task text NOT NULL,
                         state text NOT NULL DEFAULT 'queued',
                         created_at timestamptz NOT NULL DEFAULT now(), started_at timestamptz);
CREATE INDEX floor_jobs_queued ON floor_jobs (id) WHERE state = 'queued';
CREATE TABLE floor_started (job_id bigint, created_at timestamptz, started_at timestamptz);
CREATE TABLE pgq_started (job_id bigint, created_at timestamptz, started_at timestamptz);
"""
FLOOR_ENQUEUE = ("WITH i AS (INSERT INTO floor_jobs (task) VALUES ('record') RETURNING id)"
                 " SELECT i.id, pg_notify('floor_jobs', '') FROM i")
FLOOR_ENQUEUE_MANY = ("WITH i AS (INSERT INTO floor_jobs (task) SELECT 'noop'"
                      "  FROM generate_series(1, %s) RETURNING id)"
                      " SELECT count(*), pg_notify('floor_jobs', '') FROM i")


# ---- the processes each system runs (python -m bench.latency_peers worker SYSTEM DSN) ----


async def _floor_worker(dsn: str) -> None:
    import asyncpg

    listen, claim_conn, record_conn = [await asyncpg.connect(dsn) for _ in range(3)]
    claim = await claim_conn.prepare(
        "UPDATE floor_jobs SET state = 'running', started_at = now()"
        " WHERE id IN (SELECT id FROM floor_jobs WHERE state = 'queued' ORDER BY id LIMIT 16"
        "              FOR UPDATE SKIP LOCKED) RETURNING id, task, created_at")
    record = await record_conn.prepare(
        "INSERT INTO floor_started VALUES ($1, $2, clock_timestamp())")
    wake = asyncio.Event()
    await listen.add_listener("floor_jobs", lambda *_: wake.set())
    print("ready", flush=True)
    while True:
        rows = await claim.fetch()
        for job_id, task, created in rows:
            if task == "record":  # the background's no-op jobs record nothing
                await record.fetch(job_id, created)
        if not rows:
            with suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), 0.05)
            wake.clear()


async def _pgq_worker(dsn: str) -> None:
    import asyncpg
    from pgqueuer import AsyncpgDriver, QueueManager
    from pgqueuer.models import Job
    from pgqueuer.queries import Queries

    conn = await asyncpg.connect(dsn)
    record_conn = await asyncpg.connect(dsn)
    record = await record_conn.prepare(
        "INSERT INTO pgq_started VALUES ($1, $2, clock_timestamp())")
    qm = QueueManager(Queries(AsyncpgDriver(conn)))
    # One recording connection per process, as bench.record has: PgQueuer runs a batch's
    # jobs concurrently, and an asyncpg connection takes one statement at a time.
    recording = asyncio.Lock()

    @qm.entrypoint("record")
    async def record_job(job: Job) -> None:
        async with recording:
            await record.fetch(job.id, job.created)

    @qm.entrypoint("noop")
    async def noop(job: Job) -> None:
        return None

    print("ready", flush=True)
    await qm.run(batch_size=10)


def worker_main(system: str, dsn: str) -> None:
    run_async(_floor_worker(dsn) if system == "floor" else _pgq_worker(dsn))


@contextmanager
def _processes(system: str, dsn: str, count: int) -> Iterator[None]:
    procs = [subprocess.Popen([sys.executable, "-m", "bench.latency_peers", "worker", system,
                               dsn], stdout=subprocess.PIPE, text=True) for _ in range(count)]
    try:
        for proc in procs:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError(f"{system} worker did not start")
        yield
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(30)


# ---- the enqueuing side of each system ---------------------------------------------------


class Client:
    """One system's single enqueue, its bulk enqueue and where its tasks record starts."""

    system: str
    table: str

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def enqueue(self) -> None:
        raise NotImplementedError

    def enqueue_many(self, n: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class PgfleetClient(Client):
    system, table = "pgfleet", "bench_started"

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)

    def enqueue(self) -> None:
        pgfleet.enqueue(self.conn, "bench.record", {})

    def enqueue_many(self, n: int) -> None:
        pgfleet.enqueue_many(self.conn, [{"task": "bench.noop"}] * n)

    def close(self) -> None:
        self.conn.close()


class FloorClient(Client):
    system, table = "floor", "floor_started"

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)

    def enqueue(self) -> None:
        self.conn.execute(FLOOR_ENQUEUE).fetchone()

    def enqueue_many(self, n: int) -> None:
        self.conn.execute(FLOOR_ENQUEUE_MANY, (n,)).fetchone()

    def close(self) -> None:
        self.conn.close()


class PgqClient(Client):
    """PgQueuer's asyncpg enqueue, driven from this thread through a private event loop."""

    system, table = "pgqueuer", "pgq_started"

    def __init__(self, dsn: str) -> None:
        import asyncpg
        from pgqueuer import AsyncpgDriver
        from pgqueuer.queries import Queries

        self.loop = asyncio.new_event_loop()
        self.conn = self.loop.run_until_complete(asyncpg.connect(dsn))
        self.queries = Queries(AsyncpgDriver(self.conn))

    def enqueue(self) -> None:
        self.loop.run_until_complete(self.queries.enqueue("record", None))

    def enqueue_many(self, n: int) -> None:
        self.loop.run_until_complete(
            self.queries.enqueue(["noop"] * n, [None] * n, [0] * n))

    def close(self) -> None:
        self.loop.run_until_complete(self.conn.close())
        self.loop.close()


CLIENTS: dict[str, type[Client]] = {
    "pgfleet": PgfleetClient, "pgfleet-1p": PgfleetClient, "floor": FloorClient,
    "pgqueuer": PgqClient}


@contextmanager
def _running(system: str, db: Database) -> Iterator[None]:
    if system.startswith("pgfleet"):
        processes = 1 if system == "pgfleet-1p" else 2
        with supervisor(db, write_config("latency-peers", {"processes": processes}),
                        processes):
            yield
    else:
        with _processes(system, db.dsn, 1 if system == "floor" else 2):
            yield


def _reset(db: Database) -> None:
    with db.connect() as conn:
        conn.execute("TRUNCATE pgfleet.jobs, pgfleet.processes, pgfleet.queues, bench_started,"
                     " floor_jobs, floor_started, pgq_started, pgqueuer, pgqueuer_log")


def _feed(make: Callable[[], Client], rate: int, stop: threading.Event) -> None:
    client = make()
    per_tick = max(1, round(rate * BACKGROUND_TICK))
    next_at = time.monotonic()
    try:
        while not stop.is_set():
            client.enqueue_many(per_tick)
            next_at += BACKGROUND_TICK
            time.sleep(max(0.0, next_at - time.monotonic()))
    finally:
        client.close()


def _latencies(db: Database, table: str) -> list[float]:
    with db.connect() as conn:
        rows = conn.execute(f"SELECT extract(epoch FROM started_at - created_at) * 1000"
                            f"  FROM {table}").fetchall()
    return [float(r[0]) for r in rows]


def _started_with_created(db: Database) -> None:
    """pgfleet's bench.record keeps only the start; copy each job's created_at beside it."""
    with db.connect() as conn:
        conn.execute("ALTER TABLE bench_started ADD COLUMN IF NOT EXISTS created_at timestamptz")
        conn.execute("UPDATE bench_started b SET created_at = j.created_at"
                     "  FROM pgfleet.jobs j WHERE j.id = b.job_id")


def measure(db: Database, system: str, jobs: int, background: int) -> dict[str, Any]:
    _reset(db)
    make = lambda: CLIENTS[system](db.dsn)  # noqa: E731
    with _running(system, db):
        client = make()
        try:
            for _ in range(40):  # warm up: every worker and its recording connection
                client.enqueue()
                time.sleep(0.005)
            time.sleep(0.5)
            _reset_started(db, system)
            stop = threading.Event()
            feeder = None
            if background:
                feeder = threading.Thread(target=_feed, args=(make, background, stop),
                                          daemon=True)
                feeder.start()
                time.sleep(1.0)
            for _ in range(jobs):
                client.enqueue()
                time.sleep(random.uniform(0.005, 0.015))
            stop.set()
            if feeder is not None:
                feeder.join()
            _wait_started(db, CLIENTS[system].table, jobs)
        finally:
            client.close()
    if system.startswith("pgfleet"):
        _started_with_created(db)
    values = sorted(_latencies(db, CLIENTS[system].table))
    return {"p50_ms": _quantile(values, 0.5), "p99_ms": _quantile(values, 0.99),
            "n": len(values)}


def _reset_started(db: Database, system: str) -> None:
    with db.connect() as conn:
        conn.execute(f"TRUNCATE {CLIENTS[system].table}")


def _wait_started(db: Database, table: str, n: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while db.scalar(f"SELECT count(*) FROM {table}") < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{table}: fewer than {n} jobs started in {timeout:.0f} s")
        time.sleep(0.05)


def _quantile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    if sys.argv[1:2] == ["worker"]:
        worker_main(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--background", type=int, default=1000,
                        help="other jobs per second in the loaded mode")
    parser.add_argument("--output", type=Path)
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help=f"comma list of {', '.join(SYSTEMS + EXTRA_SYSTEMS)}; floor and"
                        " pgfleet are always measured (the ratios are taken against them)")
    args = parser.parse_args()
    systems = tuple(dict.fromkeys(["pgfleet", *args.systems.split(","), "floor"]))
    unknown = set(systems) - set(SYSTEMS + EXTRA_SYSTEMS)
    if unknown:
        parser.error(f"unknown system(s): {', '.join(sorted(unknown))}")
    db = Database()
    db.create()
    results: dict[str, Any] = {"machine": machine(), "systems": list(systems), "jobs": args.jobs,
                               "background": args.background, "rounds": []}
    try:
        install_pgqueuer(db)
        with db.connect() as conn:
            conn.execute(FLOOR_TABLES)
        for r in range(args.rounds):
            order = systems[r % len(systems):] + systems[:r % len(systems)]
            for mode, rate in (("idle", 0), ("loaded", args.background)):
                for system in order:
                    got = measure(db, system, args.jobs, rate)
                    log(f"round {r + 1} {mode:6s} {system:8s} p50 {got['p50_ms']:6.2f}"
                        f"  p99 {got['p99_ms']:6.2f} ms  (n={got['n']})")
                    results["rounds"].append({"round": r + 1, "mode": mode, "system": system,
                                              **got})
    finally:
        db.drop()
    _print_medians(results, systems)
    if args.output:
        args.output.write_text(json.dumps(results, indent=2, default=str))


def _print_medians(results: dict[str, Any], systems: tuple[str, ...]) -> None:
    print("\nmedian of rounds (ms)      p50     p99    p50 / floor   p50 / pgfleet")
    for mode in ("idle", "loaded"):
        med = {}
        for system in systems:
            runs = [r for r in results["rounds"] if r["mode"] == mode and r["system"] == system]
            med[system] = (statistics.median(r["p50_ms"] for r in runs),
                           statistics.median(r["p99_ms"] for r in runs))
        for system, (p50, p99) in med.items():
            print(f"{mode:6s} {system:10s} {p50:10.2f} {p99:7.2f} {p50 / med['floor'][0]:11.2f}"
                  f" {p50 / med['pgfleet'][0]:13.2f}")
        results.setdefault("medians", {})[mode] = {
            s: {"p50_ms": v[0], "p99_ms": v[1]} for s, v in med.items()}


if __name__ == "__main__":
    main()
