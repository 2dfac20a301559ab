"""Shared plumbing: the throw-away database, supervisors, processes, clocks and statistics."""

from __future__ import annotations

import asyncio
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Coroutine, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import psycopg
import yaml

BENCH_DIR = Path(__file__).resolve().parent
BASE_CONFIG = BENCH_DIR / "pgfleet-bench.yaml"
SERVER = os.environ.get("BENCH_SERVER_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
WORK = Path(tempfile.mkdtemp(prefix="pgfleet-bench-"))


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run_async(main: Coroutine[Any, Any, None]) -> None:
    """Run a benchmark worker's coroutine, on uvloop when it is installed (as PgQueuer's own
    CLI does)."""
    try:
        from uvloop import new_event_loop as loop_factory
    except ImportError:
        loop_factory = None  # type: ignore[assignment]
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(main)


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def machine() -> dict[str, Any]:
    mem_kib = 0
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    pg = subprocess.run(["psql", "--version"], capture_output=True, text=True).stdout.strip()
    return {"nproc": os.cpu_count(), "mem_gib": round(mem_kib / 2**20, 1),
            "python": platform.python_version(), "kernel": platform.release(), "psql": pg,
            **{name: _version(name) for name in ("pgfleet", "pgqueuer", "asyncpg", "psycopg")}}


def summary(values: Sequence[float]) -> dict[str, Any]:
    """Median with min and max of several runs (and the runs themselves)."""
    vals = [float(v) for v in values]
    if not vals:
        return {"median": None, "min": None, "max": None, "runs": []}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
            "runs": [round(v, 3) for v in vals]}


def with_db(dsn: str, dbname: str) -> str:
    head, _, _ = dsn.rpartition("/")
    return f"{head}/{dbname}"


class Database:
    """A fresh database for this run, dropped at the end."""

    def __init__(self) -> None:
        self.name = f"pgfleet_bench_{os.getpid()}"
        self.dsn = with_db(SERVER, self.name)

    def create(self) -> None:
        with psycopg.connect(SERVER, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.name}"')
            admin.execute(f'CREATE DATABASE "{self.name}"')
        subprocess.run(["pgfleet", "--database-url", self.dsn, "migrate"], check=True,
                       stdout=subprocess.DEVNULL)
        with self.connect() as conn:
            conn.execute("CREATE TABLE bench_started (job_id bigint, attempt int, pid int,"
                         " started_at timestamptz NOT NULL)")

    def drop(self) -> None:
        with psycopg.connect(SERVER, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')

    def connect(self, autocommit: bool = True) -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn, autocommit=autocommit)

    def reset(self) -> None:
        with self.connect() as conn:
            conn.execute("TRUNCATE pgfleet.jobs, pgfleet.processes, pgfleet.queues, bench_started")
        self.vacuum()

    def vacuum(self) -> None:
        with self.connect() as conn:
            conn.execute("VACUUM ANALYZE pgfleet.jobs")

    def scalar(self, sql: str, params: Any = None) -> Any:
        with self.connect() as conn:
            row = conn.execute(sql, params).fetchone()
        return None if row is None else row[0]

    def now(self) -> datetime:
        value: datetime = self.scalar("SELECT clock_timestamp()")
        return value

    def insert_jobs(self, n: int, task: str = "bench.noop", queue: str = "default",
                    state: str = "queued") -> datetime:
        """n jobs in one statement (one NOTIFY); returns the database clock after commit."""
        # History finished a day ago: inside the default 7-day retention, outside the
        # "done in the last minute" gauge.
        finished = "now() - interval '1 day'" if state != "queued" else "NULL"
        with self.connect() as conn:
            conn.execute(
                "INSERT INTO pgfleet.jobs (queue, task, state, attempt, started_at, finished_at)"
                f" SELECT %s, %s, %s::pgfleet.job_state, %s, {finished}, {finished}"
                " FROM generate_series(1, %s)",
                (queue, task, state, 0 if state == "queued" else 1, n))
            row = conn.execute("SELECT clock_timestamp()").fetchone()
        assert row is not None
        t0: datetime = row[0]
        return t0

    def set_paused(self, paused: bool, queue: str = "default") -> datetime:
        with self.connect() as conn:
            conn.execute("INSERT INTO pgfleet.queues (name, paused) VALUES (%s, %s)"
                         " ON CONFLICT (name) DO UPDATE SET paused = excluded.paused",
                         (queue, paused))
            if not paused:
                conn.execute("SELECT pg_notify('pgfleet_jobs', %s)", (queue,))
            row = conn.execute("SELECT clock_timestamp()").fetchone()
        assert row is not None
        t: datetime = row[0]
        return t

    def commits(self) -> int:
        return int(self.scalar("SELECT xact_commit FROM pg_stat_database WHERE datname = %s",
                               (self.name,)))

    def wait_for(self, sql: str, done: Any, timeout: float, interval: float = 0.02,
                 params: Any = None) -> Any:
        """Poll `sql` until it returns `done` (or a callable says so); returns the value."""
        deadline = time.monotonic() + timeout
        with self.connect() as conn:
            while True:
                row = conn.execute(sql, params).fetchone()
                value = None if row is None else row[0]
                if (done(value) if callable(done) else value == done):
                    return value
                if time.monotonic() > deadline:
                    raise TimeoutError(f"timed out waiting on {sql!r} (last value {value!r})")
                time.sleep(interval)


# ---- processes ----------------------------------------------------------------------


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def pss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as fh:
        for line in fh:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    return 0


def children_of(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def title(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def child_env() -> dict[str, str]:
    """The environment for benchmark child processes: `bench` importable, and the caller's
    PYTHONPATH kept first, so `PYTHONPATH=$PWD/src` measures this tree's pgfleet."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return dict(os.environ, PYTHONPATH=os.pathsep.join([*paths, str(BENCH_DIR.parent)]))


def write_config(name: str, queue_overrides: dict[str, Any] | None = None,
                 top: dict[str, Any] | None = None) -> Path:
    config = yaml.safe_load(BASE_CONFIG.read_text())
    config["queues"]["default"].update(queue_overrides or {})
    config.update(top or {})
    path = WORK / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


class Supervisor:
    """`pgfleet run -c CONFIG` as a subprocess, with helpers to find its workers."""

    def __init__(self, db: Database, config: Path, processes: int) -> None:
        self.db = db
        self.config = config
        self.processes = processes
        self.log_path = WORK / f"{config.stem}-{time.monotonic_ns()}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 60.0) -> None:
        env = dict(child_env(), PGFLEET_DATABASE_URL=self.db.dsn, BENCH_DSN=self.db.dsn)
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(["pgfleet", "run", "-c", str(self.config)], env=env,
                                         stdout=out, stderr=subprocess.STDOUT)
        self.wait_workers(timeout)

    def workers(self) -> list[int]:
        """Live worker pids that have registered in the database."""
        live = [p for p in children_of(self.pid) if "pgfleet worker" in title(p)]
        if not live:
            return []
        with self.db.connect() as conn:
            rows = conn.execute("SELECT pid FROM pgfleet.processes WHERE kind = 'worker'"
                                " AND pid = ANY(%s)", (live,)).fetchall()
        return sorted(r[0] for r in rows)

    def wait_workers(self, timeout: float = 60.0, exclude: Sequence[int] = ()) -> list[int]:
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"supervisor exited; see {self.log_path}")
            pids = [p for p in self.workers() if p not in exclude]
            if len(pids) >= self.processes:
                return pids
            if time.monotonic() > deadline:
                raise TimeoutError(f"workers did not start; see {self.log_path}")
            time.sleep(0.02)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> Supervisor:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


@contextmanager
def supervisor(db: Database, config: Path, processes: int) -> Iterator[Supervisor]:
    sup = Supervisor(db, config, processes)
    try:
        sup.start()
        yield sup
    finally:
        sup.stop()


def ms(delta: Any) -> float:
    return float(delta.total_seconds() * 1000.0)
