"""Failover of the jobs' database under a running fleet: Patroni promotes the replica
while two supervisors (two hosts) run jobs and a producer enqueues.

The task `ha.step` writes start, ticks and end to a ledger on another server (the shared
test server), with the job's id, attempt, fence token, process and run. The ledger and
what the producer was told (each acknowledged job's id and args) are then held against
the promises of docs/high-availability.md:

- no two runs of one job id overlap in time;
- a fence token is never seen in two processes, nor in two runs of one job;
- a job id never names two jobs: the producer never gets one id twice, and what runs
  under an id is what the producer enqueued under it;
- every acknowledged job the new primary kept ends succeeded, with a run that ended;
- with synchronous replication, no acknowledged job is lost.

With asynchronous replication the acknowledged jobs lost and the jobs that ran to their
end twice are counted and printed (`pytest -s`, or appended to $PGFLEET_HA_FIGURES):
docs/high-availability.md quotes them.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pgfleet
from tests.ha.hatasks import LEDGER_TABLE, TICK
from tests.support import pg
from tests.support.fleet import Fleet, alive, config_text
from tests.support.patroni import FailoverReport, HaStack, wait_until
from tests.support.proxy import Proxy

# Three failovers and a cluster's start take two minutes alone; more on a loaded machine.
pytestmark = [pytest.mark.faults, pytest.mark.timeout(600)]

SUPERVISOR = {"heartbeat_interval": "0.3s", "stale_after": "4s", "lease": "6s",
              "shutdown_timeout": "2s"}
QUEUE = {"processes": 2, "threads": 3, "timeout": "20s", "kill_grace": "1s"}
RATE = 6.0  # jobs enqueued per second
LAG_SECONDS = 4.0  # how far behind the replica is at the failover
CUT_SECONDS = 8.0  # how long the slow host cannot reach any node after the failover
ASYNC_ROUNDS = 3
SILENT = 10 * TICK  # a run without a ledger row this long has stopped
# A backlog of BURST jobs of BURST_SECONDS falls due between these seconds after the lag
# begins: they still run when the primary dies.
BURST = 6
BURST_SECONDS = 6.0
BURST_DUE = (LAG_SECONDS - 1.5, LAG_SECONDS - 0.3)


# Counts read from the whole ledger (the others are of one round's acknowledgements).
LEDGER_COUNTS = ("overlaps", "finished_twice", "attempt_in_two_pids", "ids_reused")


class Partition(Proxy):
    """A proxy whose blackhole also keeps the far side's close to itself: while it
    holds, the client sees nothing at all, as behind a network that drops packets."""

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if not self.holding:
                    dst.sendall(data)
        if not self.holding:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_RDWR)


@dataclass
class Ack:
    n: int
    job_id: int
    seconds: float


class Producer(threading.Thread):
    """Enqueues `ha.step` jobs at RATE through the multi-host DSN, one transaction each.
    A job is acknowledged when its commit returned; a failed commit is not counted
    (whether it committed is unknown)."""

    def __init__(self, dsn: str, first: int, seed: int) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.n = first
        self.random = random.Random(seed)
        self.acks: list[Ack] = []
        self.unknown = 0
        self.stopping = threading.Event()
        self.lock = threading.Lock()  # the numbering and the acknowledgements

    def take(self) -> int:
        with self.lock:
            n, self.n = self.n, self.n + 1
        return n

    def burst(self, delays: list[float], seconds: float) -> None:
        """From the caller's thread, in one transaction: one job per delay, due that many
        seconds later (a backlog that falls due while the replica lags)."""
        jobs = [(self.take(), delay) for delay in delays]
        with psycopg.connect(self.dsn) as conn:
            done = [pgfleet.enqueue_job(conn, "ha.step", {"n": n, "seconds": seconds},
                                        delay=delay) for n, delay in jobs]
            conn.commit()
        with self.lock:
            self.acks += [Ack(n, d.job_id, seconds) for (n, _), d in zip(jobs, done,
                                                                         strict=True)]

    def run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        while not self.stopping.is_set():
            seconds = round(self.random.uniform(0.5, 2.0), 2)
            n = self.take()
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.dsn)
                done = pgfleet.enqueue_job(conn, "ha.step", {"n": n, "seconds": seconds})
                conn.commit()
                with self.lock:
                    self.acks.append(Ack(n, done.job_id, seconds))
            except psycopg.Error:
                self.unknown += 1
                if conn is not None:
                    conn.close()
                conn = None
                self.stopping.wait(0.2)
                continue
            self.stopping.wait(1 / RATE)
        if conn is not None:
            conn.close()

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)


@dataclass
class Run:
    job_id: int
    run: str
    attempt: int
    token: str
    pid: int
    n: int
    first: datetime
    last: datetime
    ended: bool


def read_ledger(dsn: str) -> list[Run]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT job_id, run::text, attempt, token, pid, (args->>'n')::int, min(at),"
            " max(at), bool_or(event = 'end') FROM ledger"
            " GROUP BY job_id, run, attempt, token, pid, args->>'n'").fetchall()
    return [Run(*row) for row in rows]


@dataclass
class Figures:
    """What one scenario measured, and every broken promise it found."""

    name: str
    rounds: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def line(self) -> str:
        keys = ("acked", "lost", "kept", "lag_kb", "failover_s", "finished_twice",
                "attempt_in_two_pids", "overlaps", "ids_reused", "unknown")
        totals = {k: sum(r[k] for r in self.rounds) for k in keys if k != "failover_s"}
        return f"{self.name}: {len(self.rounds)} failovers, totals {totals}; per round " + \
            "; ".join(str({k: r[k] for k in keys}) for r in self.rounds)


def check_books(ledger_dsn: str, jobs_dsn: str, acks: list[Ack],
                every_ack: list[Ack]) -> tuple[dict[str, int], list[str]]:
    """Hold the ledger and the producer's acknowledgements (`acks` of this round,
    `every_ack` of the scenario so far) against the new primary's rows. Returns the
    counts and the problems."""
    runs = read_ledger(ledger_dsn)
    problems: list[str] = []
    by_job: dict[int, list[Run]] = defaultdict(list)
    for r in runs:
        by_job[r.job_id].append(r)

    # No two runs of one job at once.
    overlaps = 0
    for job_id, job_runs in by_job.items():
        job_runs.sort(key=lambda r: r.first)
        for i, later in enumerate(job_runs):
            for earlier in job_runs[:i]:
                if later.first < earlier.last:
                    overlaps += 1
                    problems.append(
                        f"job {job_id}: run of attempt {later.attempt} (pid {later.pid}, token "
                        f"{later.token}) started {later.first:%T.%f} while attempt "
                        f"{earlier.attempt} (pid {earlier.pid}, token {earlier.token}) ran "
                        f"until {earlier.last:%T.%f}")

    # A fence token is never reused: one process, one run of one job.
    pids: dict[str, set[int]] = defaultdict(set)
    token_runs: dict[tuple[str, int], set[str]] = defaultdict(set)
    for r in runs:
        pids[r.token].add(r.pid)
        token_runs[(r.token, r.job_id)].add(r.run)
    for token, seen in pids.items():
        if len(seen) > 1:
            problems.append(f"token {token} seen in processes {sorted(seen)}")
    for (token, job_id), seen in token_runs.items():
        if len(seen) > 1:
            problems.append(f"token {token} of job {job_id} used by {len(seen)} runs")

    # A job id names one job.
    acked: dict[int, Ack] = {}
    ids_reused = 0
    for ack in every_ack:
        if ack.job_id in acked:
            ids_reused += 1
            problems.append(f"job id {ack.job_id} given to the producer twice: for n="
                            f"{acked[ack.job_id].n} and for n={ack.n}")
        acked[ack.job_id] = ack
    for job_id, job_runs in by_job.items():
        names = {r.n for r in job_runs}
        if len(names) > 1:
            problems.append(f"job id {job_id} ran as {len(names)} jobs: n={sorted(names)}")
        if job_id in acked and names != {acked[job_id].n}:
            problems.append(f"job id {job_id} was acknowledged for n={acked[job_id].n} but ran"
                            f" n={sorted(names)}")

    # What the new primary kept ends succeeded.
    with psycopg.connect(jobs_dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT id, (args->>'n')::int, state::text FROM pgfleet.jobs"
                            " WHERE id = ANY(%s)", (list(acked),)).fetchall()
    on_primary = {row[0]: (row[1], row[2]) for row in rows}
    kept = lost = 0
    for ack in acks:
        found = on_primary.get(ack.job_id)
        if found is None or found[0] != ack.n:
            lost += 1
            continue
        kept += 1
        if found[1] != "succeeded":
            problems.append(f"job {ack.job_id} (n={ack.n}) acknowledged and kept ended "
                            f"{found[1]}")
        elif not any(r.ended and r.n == ack.n for r in by_job.get(ack.job_id, [])):
            problems.append(f"job {ack.job_id} (n={ack.n}) succeeded with no run that ended")

    attempts: dict[tuple[int, int], set[int]] = defaultdict(set)
    for r in runs:
        attempts[(r.job_id, r.attempt)].add(r.pid)
    counts = {
        "acked": len(acks), "kept": kept, "lost": lost, "overlaps": overlaps,
        "ids_reused": ids_reused,
        # One job run to its end more than once (the same id and the same args).
        "finished_twice": sum(1 for ends in Counter(
            (r.job_id, r.n) for r in runs if r.ended).values() if ends > 1),
        "attempt_in_two_pids": sum(1 for seen in attempts.values() if len(seen) > 1),
    }
    return counts, problems


def resume(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def unfinished(jobs_dsn: str) -> int:
    with psycopg.connect(jobs_dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pgfleet.jobs"
                           " WHERE state IN ('queued', 'running')").fetchone()
    return int(row[0]) if row else -1


@pytest.fixture(scope="module")
def stack() -> Iterator[HaStack]:
    ha = HaStack()
    try:
        ha.start()
        yield ha
    finally:
        ha.destroy()


@dataclass
class Scenario:
    stack: HaStack
    name: str  # the jobs' database on the HA cluster
    jobs_dsn: str
    ledger_dsn: str
    folder: Path
    fleets: list[Fleet] = field(default_factory=list)
    next_n: int = 0
    acks: list[Ack] = field(default_factory=list)  # every round's
    seen: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LEDGER_COUNTS, 0))

    def logs(self) -> str:
        # The supervisors' logs last: a failure shows the tail.
        return self.stack.logs()[-3000:] + "".join(
            f"--- {f.log_path.name}\n{f.log()[-2000:]}\n" for f in self.fleets)

    def fleet(self, name: str, dsn: str) -> Fleet:
        text = config_text({"default": QUEUE}, tasks=["tests.ha.hatasks"],
                           supervisor=SUPERVISOR)
        f = Fleet(dsn, self.folder, text, name=name).start()
        self.fleets.append(f)
        f.wait_workers(QUEUE["processes"], timeout=60)
        return f

    def round(self, figures: Figures, *, lag: bool, slow: list[Partition] | None = None,
              hold: Fleet | None = None) -> FailoverReport:
        """Jobs flowing; the replica falls behind (`lag`); the primary dies with jobs
        running; the slow host's path is cut (`slow`) for CUT_SECONDS; every job left
        ends; the old primary comes back as a replica. Books checked, figures added.
        `hold`: a host whose workers are stopped (SIGSTOP, less than stale_after) from
        just before the backlog falls due until the failover, so the other host runs it."""
        stack = self.stack
        held: list[int] = []
        producer = Producer(self.jobs_dsn, self.next_n, seed=self.next_n)
        producer.start()
        try:
            # Jobs are running and some have ended before anything goes wrong.
            wait_until(lambda: len(producer.acks) >= 10 and self.ended() >= 3, 60,
                       "jobs flowing", log=self.logs)
            if lag:
                # Jobs enqueued before the lag (so the replica has them) fall due and are
                # claimed while it lags, and still run at the failover: on the new
                # primary they wait again, unclaimed.
                step = (BURST_DUE[1] - BURST_DUE[0]) / (BURST - 1)
                producer.burst([BURST_DUE[0] + i * step for i in range(BURST)], BURST_SECONDS)
                stack.wait_replayed()
            lag_began = time.monotonic()
            if lag:
                stack.start_lag()
                acks_before = len(producer.acks)
                if hold:
                    wait_until(lambda: time.monotonic() - lag_began >= BURST_DUE[0] - 0.3,
                               30, "the backlog about to fall due")
                    held = list(hold.workers())
                    for pid in held:
                        os.kill(pid, signal.SIGSTOP)
                wait_until(lambda: time.monotonic() - lag_began >= LAG_SECONDS
                           and len(producer.acks) - acks_before >= 10, 60,
                           "jobs committed while the replica lags", log=self.logs)
            if slow:
                for proxy in slow:
                    proxy.blackhole()
            report = stack.fail_over()
            cut_began = time.monotonic()
            resume(held)
            old = stack.node_named(report.old)
            stack.rejoin(old, wait=False)  # rewound while the jobs settle
            acks_before = len(producer.acks)
            wait_until(lambda: len(producer.acks) - acks_before >= 10
                       and (not slow or time.monotonic() - cut_began >= CUT_SECONDS), 90,
                       "enqueues on the new primary", log=self.logs)
            if slow:
                for proxy in slow:
                    proxy.cut()  # the connections stuck in the partition are reset
                    proxy.restore()
        finally:
            resume(held)
            producer.stop()
        self.next_n = producer.n
        wait_until(lambda: unfinished(self.jobs_dsn) == 0, 120, "every job to end",
                   interval=0.3, log=self.logs)
        # A run the database has forgotten may still go on: the books wait for its end
        # (or its process's), so an overlap at its tail is seen.
        wait_until(lambda: not self.open_runs(), 60, "every run in the ledger to end",
                   interval=0.3, log=self.logs)
        stack.wait_streaming(old)
        self.acks += producer.acks
        counts, problems = check_books(self.ledger_dsn, self.jobs_dsn, producer.acks,
                                       self.acks)
        # The ledger holds every round so far: its counts become this round's.
        for key in LEDGER_COUNTS:
            counts[key], self.seen[key] = counts[key] - self.seen[key], counts[key]
        counts.update(lag_kb=report.lag_bytes // 1024, failover_s=round(report.seconds, 2),
                      unknown=producer.unknown)
        figures.rounds.append(counts)
        figures.problems += [p for p in problems if p not in figures.problems]
        return report

    def open_runs(self) -> list[tuple[int, int]]:
        """(job id, pid) of the runs that may still go on: no end row, a live process and
        a row within the last SILENT seconds (a run ticks every TICK). A run that was
        interrupted, or whose process was killed, falls silent."""
        with psycopg.connect(self.ledger_dsn, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT job_id, pid FROM ledger GROUP BY job_id, pid, run"
                " HAVING NOT bool_or(event = 'end')"
                " AND max(at) > clock_timestamp() - make_interval(secs => %s)",
                (SILENT,)).fetchall()
        return [(job_id, pid) for job_id, pid in rows if alive(pid)]

    def ended(self) -> int:
        with psycopg.connect(self.ledger_dsn, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM ledger WHERE event = 'end'").fetchone()
        return int(row[0]) if row else 0


@pytest.fixture
def scenario(stack: HaStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
             ) -> Iterator[Scenario]:
    """A fresh jobs database on the HA cluster, migrated by `pgfleet migrate` through the
    multi-host DSN; a fresh ledger on the shared server."""
    name = f"pgfleet_ha_{uuid.uuid4().hex[:8]}"
    stack.create_database(name)
    jobs_dsn = stack.dsn(name)
    migrated = subprocess.run([sys.executable, "-m", "pgfleet", "migrate", "--database-url",
                               jobs_dsn], capture_output=True, text=True, timeout=120)
    assert migrated.returncode == 0, migrated.stderr
    ledger_db = pg.create_database()
    ledger_dsn = pg.dsn_for(ledger_db)
    with psycopg.connect(ledger_dsn, autocommit=True) as conn:
        conn.execute(LEDGER_TABLE)
    monkeypatch.setenv("PGFLEET_LEDGER_DSN", ledger_dsn)
    monkeypatch.setenv("PGFLEET_LOG_LEVEL", os.environ.get("PGFLEET_LOG_LEVEL", "INFO"))
    s = Scenario(stack, name, jobs_dsn, ledger_dsn, tmp_path)
    try:
        yield s
    finally:
        for f in s.fleets:
            f.stop()
        with contextlib.suppress(psycopg.Error):
            pg.drop_database(ledger_db)


def report(figures: Figures) -> None:
    """Print the figures (pytest -s), append them to $PGFLEET_HA_FIGURES if set (under
    xdist nothing is printed), then fail on any broken promise."""
    print(f"\n[ha] {figures.line()}")
    if path := os.environ.get("PGFLEET_HA_FIGURES"):
        with open(path, "a") as out:
            out.write(f"[ha] {figures.line()}\n")
    assert not figures.problems, (f"{len(figures.problems)} broken promise(s); "
                                  f"{figures.line()}:\n  " + "\n  ".join(figures.problems[:25]))


def test_failover_to_a_lagging_asynchronous_replica(scenario: Scenario) -> None:
    stack = scenario.stack
    if stack.synchronous:
        stack.set_synchronous(False)
    scenario.fleet("host1", scenario.jobs_dsn)
    scenario.fleet("host2", scenario.jobs_dsn)
    figures = Figures("async")
    timelines = []
    for _ in range(ASYNC_ROUNDS):
        timelines.append(scenario.round(figures, lag=True).timeline)
    assert timelines == sorted(set(timelines)), timelines  # each round a real promotion
    assert all(r["lag_kb"] > 0 for r in figures.rounds), figures.line()
    # What an operator sees (docs/high-availability.md): each host's maintenance says once
    # per failover that the claims wait, and that they resumed.
    logs = [f.log() for f in scenario.fleets]
    for said in ("the database changed under the fleet", "claims resumed after the database"):
        assert all(log.count(said) >= ASYNC_ROUNDS for log in logs), (said, logs[0][-3000:])
    report(figures)


def test_failover_with_one_host_slow_to_reach_the_new_primary(scenario: Scenario) -> None:
    stack = scenario.stack
    if stack.synchronous:
        stack.set_synchronous(False)
    proxies = [Partition(("127.0.0.1", node.port)) for node in stack.nodes]
    try:
        fast = scenario.fleet("host1", scenario.jobs_dsn)
        ports = (proxies[0].port, proxies[1].port)
        scenario.fleet("host2", stack.dsn(scenario.name, ports=ports))
        figures = Figures("async, one host cut off 8 s")
        # The slow host runs the backlog that falls due in the lag; at the failover the
        # fast host finds it waiting on the new primary.
        scenario.round(figures, lag=True, slow=proxies, hold=fast)
        assert figures.rounds[0]["lag_kb"] > 0, figures.line()
        report(figures)
    finally:
        for proxy in proxies:
            proxy.close()


def test_failover_with_synchronous_replication_loses_no_acknowledged_job(
        scenario: Scenario) -> None:
    stack = scenario.stack
    stack.set_synchronous(True)
    try:
        scenario.fleet("host1", scenario.jobs_dsn)
        scenario.fleet("host2", scenario.jobs_dsn)
        figures = Figures("sync")
        scenario.round(figures, lag=False)
        assert figures.rounds[0]["lost"] == 0, figures.line()
        report(figures)
    finally:
        for f in scenario.fleets:
            f.stop()
        stack.set_synchronous(False)


def status_of(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_patronis_health_checks_name_the_primary(stack: HaStack) -> None:
    """What a load balancer in front of PgBouncer or PostgreSQL asks (high-availability.md):
    GET /primary answers 200 on the primary alone, GET /replica 200 on the replica."""
    primary, replica = stack.primary(), stack.replica()
    assert status_of(primary.rest, "/primary") == 200
    assert status_of(replica.rest, "/primary") == 503
    assert status_of(replica.rest, "/replica") == 200
    assert status_of(primary.rest, "/replica") == 503
