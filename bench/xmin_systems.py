"""The three systems of `python -m bench.xmin`: their schema, how a cell resets them, their
producer, their workers, their claim statements and the table their claims read.

- pgfleet: `pgfleet run` with 2 worker processes and the threads given (4 by default, as
  the outside trial ran it); everything else pgfleet's defaults (prefetch auto, the
  metrics exporter on, on a free port). The task is bench.xmin_tasks.xmin_noop.
- pgqueuer and skiplocked: 2 processes of bench/xmin_workers.py each; pgqueuer-bN is
  PgQueuer with batch_size N.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
import yaml

import pgfleet
from bench.common import WORK, Database, Supervisor, child_env
from bench.systems import free_port
from bench.xmin_workers import SKIPLOCKED_ENQUEUE, SKIPLOCKED_SCHEMA

SYSTEMS = ("pgfleet", "pgqueuer", "skiplocked")
PROCESSES = 2


class ClusterDatabase(Database):
    """A database on the bench's own cluster (common.Database with another DSN), for
    common.Supervisor."""

    def __init__(self, dsn: str, name: str) -> None:
        self.name = name
        self.dsn = dsn


# ---- producers: one per system, used from the producer thread only ----------------------


class Producer:
    """Enqueues n jobs stamped `t` (the wall clock) in one statement."""

    def send(self, n: int, t: float) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class PgfleetProducer(Producer):
    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)

    def send(self, n: int, t: float) -> None:
        pgfleet.enqueue_many(self.conn, [{"task": "bench.xmin_noop", "args": {"t": t}}] * n)

    def close(self) -> None:
        self.conn.close()


class SkiplockedProducer(Producer):
    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)

    def send(self, n: int, t: float) -> None:
        self.conn.execute(SKIPLOCKED_ENQUEUE, (json.dumps({"t": t}), n))

    def close(self) -> None:
        self.conn.close()


class PgqueuerProducer(Producer):
    """PgQueuer's own enqueue on asyncpg, through a private event loop of this thread."""

    def __init__(self, dsn: str) -> None:
        import asyncpg
        from pgqueuer import AsyncpgDriver
        from pgqueuer.queries import Queries

        self.loop = asyncio.new_event_loop()
        self.conn = self.loop.run_until_complete(asyncpg.connect(dsn))
        self.queries = Queries(AsyncpgDriver(self.conn))

    def send(self, n: int, t: float) -> None:
        payload = repr(t).encode()
        self.loop.run_until_complete(self.queries.enqueue(["xmin"] * n, [payload] * n, [0] * n))

    def close(self) -> None:
        self.loop.run_until_complete(self.conn.close())
        self.loop.close()


# ---- systems ------------------------------------------------------------------------------


@dataclass
class System:
    name: str
    table: str
    claim_index: str
    # label -> LIKE pattern finding the statement in pg_stat_statements by its text.
    statements: dict[str, str]
    truncate: list[str] = field(default_factory=list)
    # Other statements worth watching, label -> LIKE pattern; not part of the claim.
    beside: dict[str, str] = field(default_factory=dict)

    def setup(self, dsn: str) -> None:
        raise NotImplementedError

    def producer(self, dsn: str) -> Producer:
        raise NotImplementedError

    @contextmanager
    def workers(self, db: ClusterDatabase, threads: int) -> Iterator[list[int]]:
        """Start the workers, wait until they can take jobs, yield their root pids."""
        raise NotImplementedError
        yield []

    def reset(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute(f"TRUNCATE {', '.join(self.truncate)}")
        conn.execute(f"VACUUM ANALYZE {self.table}")


class Pgfleet(System):
    def setup(self, dsn: str) -> None:
        subprocess.run(["pgfleet", "--database-url", dsn, "migrate"], check=True,
                       env=child_env(), stdout=subprocess.DEVNULL)
        with psycopg.connect(dsn, autocommit=True) as conn:
            heads = conn.execute("SELECT to_regclass('pgfleet.queue_heads')").fetchone()
        if heads is not None and heads[0] is not None:  # emptied with the jobs they point into
            self.truncate.append("pgfleet.queue_heads")

    def producer(self, dsn: str) -> Producer:
        return PgfleetProducer(dsn)

    @contextmanager
    def workers(self, db: ClusterDatabase, threads: int) -> Iterator[list[int]]:
        config = {"database_url": "${PGFLEET_DATABASE_URL}", "tasks": ["bench.xmin_tasks"],
                  "queues": {"default": {"processes": PROCESSES, "threads": threads}},
                  "metrics": {"enabled": True, "listen": f"127.0.0.1:{free_port()}"}}
        path = WORK / "xmin-pgfleet.yaml"
        path.write_text(yaml.safe_dump(config))
        sup = Supervisor(db, path, PROCESSES)
        try:
            sup.start()
            yield [sup.pid]
        finally:
            sup.stop()


class Pgqueuer(System):
    batch = 10  # PgQueuer's default batch_size (its CLI's and QueueManager.run's)

    def setup(self, dsn: str) -> None:
        from bench.systems import _pgq_install

        with psycopg.connect(dsn, autocommit=True) as conn:
            installed = conn.execute("SELECT to_regclass('pgqueuer')").fetchone()
        if installed is None or installed[0] is None:  # pgqueuer-bN shares the tables
            asyncio.run(_pgq_install(dsn))
        with psycopg.connect(dsn, autocommit=True) as conn:
            rows = conn.execute("SELECT indexname, indexdef FROM pg_indexes"
                                " WHERE tablename = 'pgqueuer'").fetchall()
            self.truncate = [r[0] for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE tablename LIKE 'pgqueuer%'"
                " AND schemaname = current_schema()").fetchall()]
        # The claim walks the (entrypoint, priority, id) index of queued rows.
        for name, definition in rows:
            if "entrypoint" in definition and "priority" in definition:
                self.claim_index = name
                break
        else:
            raise RuntimeError(f"pgqueuer: no (entrypoint, priority) index among {rows}")

    def producer(self, dsn: str) -> Producer:
        return PgqueuerProducer(dsn)

    @contextmanager
    def workers(self, db: ClusterDatabase, threads: int) -> Iterator[list[int]]:
        with _processes("pgqueuer", db.dsn, str(self.batch)) as pids:
            yield pids


class Skiplocked(System):
    def setup(self, dsn: str) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(SKIPLOCKED_SCHEMA)

    def producer(self, dsn: str) -> Producer:
        return SkiplockedProducer(dsn)

    @contextmanager
    def workers(self, db: ClusterDatabase, threads: int) -> Iterator[list[int]]:
        with _processes("skiplocked", db.dsn) as pids:
            yield pids


@contextmanager
def _processes(system: str, dsn: str, *extra: str) -> Iterator[list[int]]:
    procs: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        for i in range(PROCESSES):
            out = open(WORK / f"xmin-{system}-{i}.log", "ab")  # noqa: SIM115 - closed below
            logs.append(out)
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "bench.xmin_workers", system, dsn, *extra], env=child_env(),
                stdout=subprocess.PIPE, stderr=out))
        for p in procs:
            assert p.stdout is not None
            if p.stdout.readline().strip() != b"ready":
                raise RuntimeError(f"{system} worker did not start; see {WORK}")
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for out in logs:
            out.close()


def system_name(name: str) -> bool:
    """Whether `name` is a system this bench knows: one of SYSTEMS or pgqueuer-bN."""
    if name in SYSTEMS:
        return True
    head, _, batch = name.partition("-b")
    return head == "pgqueuer" and batch.isdigit() and int(batch) > 0


def make(name: str) -> System:
    if name == "pgfleet":
        # The claim alone, and fused with the previous batch's completion (named
        # succeed_and_claim_jobs since migration 0027, complete_and_claim_jobs before).
        system = Pgfleet("pgfleet", "pgfleet.jobs", "pgfleet.jobs_claim_idx",
                         {"claim_jobs": "%pgfleet.claim_jobs(%",
                          "succeed_and_claim_jobs": "%pgfleet.succeed_and_claim_jobs(%",
                          "complete_and_claim_jobs": "%pgfleet.complete_and_claim_jobs(%"},
                         ["pgfleet.jobs", "pgfleet.processes"])
        # Where the claims start, moved by maintenance (migration 0028): reported beside
        # the claims, never added to them.
        system.beside = {"move_heads": "%pgfleet.move_heads(%"}
        return system
    if name == "pgqueuer" or (name.startswith("pgqueuer-b") and system_name(name)):
        # Its dequeue is one statement built around the CTE next_queued.
        system = Pgqueuer(name, "pgqueuer", "", {"dequeue": "%next_queued%"})
        if name != "pgqueuer":
            system.batch = int(name.removeprefix("pgqueuer-b"))
        return system
    if name == "skiplocked":
        return Skiplocked("skiplocked", "skiplocked.jobs", "skiplocked.jobs_pending_idx",
                          {"claim": "%skiplocked.jobs%SKIP LOCKED%"},
                          ["skiplocked.jobs"])
    raise ValueError(f"unknown system {name!r} (one of {', '.join(SYSTEMS)})")
