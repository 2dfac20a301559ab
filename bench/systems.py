"""One drain of n no-op jobs by one system at one setting, for the comparison of issue 16.

Systems: pgfleet (`pgfleet run`, 2 worker processes), PgQueuer (2 `QueueManager`
processes, asyncpg or psycopg driver) and the bare asyncpg loop (2 processes). Modes:

- backlog: the n jobs are inserted (one statement) before any worker starts; the clock
  runs from the first claim to the last completion.
- arrival: the workers are up and idle; the n jobs are inserted in one transaction; the
  clock runs from that commit to the last completion.

Every time comes from the database clock. Each run also returns its timeline: jobs
finished in each second from the start of the clock, so the slowest and the median second
of a drain can be compared.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bench.common import WORK, Database, child_env, supervisor, write_config

MODES = ("backlog", "arrival")
PROCESSES = 2
SYSTEMS = ("pgfleet", "pgqueuer-asyncpg", "pgqueuer-psycopg", "bare-asyncpg")


# Setup.batch of pgfleet with prefetch auto (claims sized by the worker, at most 1,000).
AUTO = 0


@dataclass(frozen=True)
class Setup:
    """A system at one setting. batch: the most jobs one claim can take (pgfleet:
    threads + prefetch; PgQueuer: batch_size; the bare loop: its LIMIT)."""

    system: str
    batch: int
    threads: int = 0

    @property
    def label(self) -> str:
        if self.system == "pgfleet" and self.batch == AUTO:
            return f"pgfleet threads={self.threads} prefetch=auto (the default)"
        if self.system == "pgfleet":
            return (f"pgfleet threads={self.threads} prefetch={self.batch - self.threads}"
                    f" (claims <= {self.batch})")
        return f"{self.system} batch={self.batch}"

    @property
    def is_pgqueuer(self) -> bool:
        return self.system.startswith("pgqueuer")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# ---- per-system plumbing --------------------------------------------------------------


def _reset(db: Database, setup: Setup) -> None:
    if setup.is_pgqueuer:
        with db.connect() as conn:
            conn.execute("TRUNCATE pgqueuer, pgqueuer_log")
            conn.execute("VACUUM ANALYZE pgqueuer")
            conn.execute("VACUUM ANALYZE pgqueuer_log")
    else:
        db.reset()


def _enqueue(db: Database, setup: Setup, n: int) -> datetime:
    """Insert n no-op jobs in one transaction; the database clock after the commit."""
    if setup.is_pgqueuer:
        return asyncio.run(_pgq_enqueue(db.dsn, n))
    return db.insert_jobs(n)


async def _pgq_enqueue(dsn: str, n: int) -> datetime:
    import asyncpg
    from pgqueuer import AsyncpgDriver
    from pgqueuer.queries import Queries

    conn = await asyncpg.connect(dsn)
    try:
        await Queries(AsyncpgDriver(conn)).enqueue(["noop"] * n, [None] * n, [0] * n)
        t0: datetime = await conn.fetchval("SELECT clock_timestamp()")
    finally:
        await conn.close()
    return t0


def install_pgqueuer(db: Database) -> None:
    asyncio.run(_pgq_install(db.dsn))


async def _pgq_install(dsn: str) -> None:
    import asyncpg
    from pgqueuer import AsyncpgDriver
    from pgqueuer.queries import Queries

    conn = await asyncpg.connect(dsn)
    try:
        await Queries(AsyncpgDriver(conn)).install()
    finally:
        await conn.close()


@contextmanager
def _processes(argvs: list[list[str]], name: str) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Child processes that print "ready" once they can work; SIGTERM on exit."""
    procs: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        for i, argv in enumerate(argvs):
            out = open(WORK / f"{name}-{i}.log", "wb")  # noqa: SIM115 - closed below
            logs.append(out)
            procs.append(subprocess.Popen([sys.executable, "-m", *argv], env=child_env(),
                                          stdout=subprocess.PIPE, stderr=out))
        for p in procs:
            assert p.stdout is not None
            if p.stdout.readline().strip() != b"ready":
                raise RuntimeError(f"{name} worker did not start; see {WORK}")
        yield procs
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for out in logs:
            out.close()


@contextmanager
def _workers(db: Database, setup: Setup) -> Iterator[list[subprocess.Popen[bytes]]]:
    if setup.system == "pgfleet":
        prefetch = "auto" if setup.batch == AUTO else setup.batch - setup.threads
        # The exporter on, as pgfleet deploys by default (bench/pgfleet-bench.yaml has it off).
        metrics = {"enabled": True, "listen": f"127.0.0.1:{free_port()}"}
        config = write_config("drain", {"processes": PROCESSES, "threads": setup.threads,
                                        "prefetch": prefetch}, {"metrics": metrics})
        with supervisor(db, config, PROCESSES):
            yield []
    elif setup.is_pgqueuer:
        driver = setup.system.split("-", 1)[1]
        argv = ["bench.pgq_worker", db.dsn, str(setup.batch), driver]
        with _processes([argv] * PROCESSES, "pgq") as procs:
            yield procs
    elif setup.system == "bare-asyncpg":
        argv = ["bench.bare_loop", db.dsn, str(setup.batch)]
        with _processes([argv] * PROCESSES, "bare") as procs:
            yield procs
    else:
        raise ValueError(f"unknown system {setup.system!r}")


# What is left, the first claim, and the completions, per system (database clocks).
_LEFT = {"pgfleet": "SELECT EXISTS (SELECT 1 FROM pgfleet.jobs"
                    " WHERE state IN ('queued', 'running'))",
         "pgqueuer": "SELECT EXISTS (SELECT 1 FROM pgqueuer)"}
_FIRST_CLAIM = {"pgfleet": "SELECT min(started_at) FROM pgfleet.jobs",
                "pgqueuer": "SELECT min(created) FROM pgqueuer_log WHERE status = 'picked'"}
_FINISHED = {"pgfleet": "SELECT finished_at FROM pgfleet.jobs WHERE state = 'succeeded'",
             "pgqueuer": "SELECT created FROM pgqueuer_log WHERE status = 'successful'"}


def _family(setup: Setup) -> str:
    return "pgqueuer" if setup.is_pgqueuer else "pgfleet"


def _wait_done(db: Database, setup: Setup, n: int, procs: list[subprocess.Popen[bytes]]
               ) -> None:
    family = _family(setup)

    def check(left: bool) -> bool:
        if any(p.poll() is not None for p in procs):
            raise RuntimeError(f"a {setup.system} worker exited; see {WORK}")
        return not left

    db.wait_for(_LEFT[family], check, timeout=900, interval=0.1)
    # PgQueuer writes its completion log in batches: wait until every job has its row.
    db.wait_for(f"SELECT count(*) FROM ({_FINISHED[family]}) f", n, timeout=60, interval=0.1)


def timeline(db: Database, setup: Setup, t0: datetime) -> list[int]:
    """Jobs finished in each whole second since t0 (the last entry is a partial second)."""
    with db.connect() as conn:
        rows = conn.execute(
            f"SELECT floor(extract(epoch FROM f.t - %s))::int AS s, count(*)"
            f"  FROM ({_FINISHED[_family(setup)]}) AS f(t) GROUP BY 1 ORDER BY 1",
            (t0,)).fetchall()
    counts = [0] * (max(0, rows[-1][0]) + 1) if rows else []
    for second, count in rows:
        counts[max(0, second)] += count
    return counts


def steadiness(counts: list[int]) -> float | None:
    """Slowest whole second / median whole second (the last, partial second left out)."""
    whole = counts[:-1]
    if len(whole) < 2:
        return None
    middle = statistics.median(whole)
    # Half the seconds or more without a completion (a stalled run): as unsteady as it gets.
    return min(whole) / middle if middle else 0.0


def drain(db: Database, setup: Setup, n: int, mode: str, idle: float = 0.5) -> dict[str, Any]:
    """One drain of n no-op jobs; returns jobs/s, seconds, the timeline and its steadiness.
    idle: in arrival mode, how long the workers poll the empty queue before the jobs land."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}")
    _reset(db, setup)
    t0: datetime | None = None
    if mode == "backlog":
        _enqueue(db, setup, n)
    with _workers(db, setup) as procs:
        if mode == "arrival":
            time.sleep(idle)  # workers past their first (empty) claims, listening
            t0 = _enqueue(db, setup, n)
        _wait_done(db, setup, n, procs)
    family = _family(setup)
    if t0 is None:
        t0 = db.scalar(_FIRST_CLAIM[family])
    t_end = db.scalar(f"SELECT max(t) FROM ({_FINISHED[family]}) AS f(t)")
    assert t0 is not None and t_end is not None
    seconds = (t_end - t0).total_seconds()
    counts = timeline(db, setup, t0)
    return {"jobs_per_s": n / seconds, "seconds": round(seconds, 3), "timeline": counts,
            "steadiness": steadiness(counts)}
