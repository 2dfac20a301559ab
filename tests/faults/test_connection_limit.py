"""Workers that cannot reconnect because another role holds every connection slot keep
their lease promises: their running jobs stop before their leases can expire, the log
says why, and once the slots are free again every job ends succeeded.

pgfleet runs as a role that is not a superuser: a superuser reaches the slots that
`superuser_reserved_connections` keeps, so only an ordinary role meets a full server. The
server is a throwaway cluster with a small `max_connections`; the tasks write their
ledger (the audit table) on the shared server, which stays reachable."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pgfleet
from tests.faults import books
from tests.faults.conftest import faults_config
from tests.faults.helpers import create_runtime_role, wait_settled
from tests.support import pg
from tests.support.cluster import Cluster
from tests.support.fleet import Fleet, alive
from tests.support.workers import wait_for

pytestmark = pytest.mark.faults

MAX_CONNECTIONS = 20  # 3 of them kept for superusers (the default)
RUNTIME = "pgfleet_runtime"
HOG = "pgfleet_hog"
LEASE = 6.0
SUPERVISOR = {"heartbeat_interval": "0.3s", "stale_after": "2s", "lease": f"{LEASE:.0f}s",
              "shutdown_timeout": "1s"}
JOBS = 4  # two workers of two threads each: every job runs at once


@pytest.fixture
def small_cluster() -> Iterator[Cluster]:
    cluster = Cluster().init()
    with open(cluster.data / "postgresql.conf", "a") as conf:
        conf.write(f"max_connections = {MAX_CONNECTIONS}\n")
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture
def ledger(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An audit table on the shared server, where the tasks write their runs."""
    name = pg.create_database()
    dsn = pg.dsn_for(name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(pg.AUDIT_TABLE)
    monkeypatch.setenv("PGFLEET_AUDIT_DSN", dsn)
    try:
        yield dsn
    finally:
        pg.drop_database(name)


class Hog:
    """Another role that opens connections while `grab` is on, until the server refuses,
    and keeps them until `release`."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.conns: list[psycopg.Connection[Any]] = []
        self.refused = 0  # attempts the server refused since the last success
        self.grabbing = threading.Event()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.is_set():
            if self.grabbing.is_set():
                try:
                    self.conns.append(psycopg.connect(self.dsn, autocommit=True,
                                                      connect_timeout=5))
                    self.refused = 0
                    continue
                except psycopg.OperationalError:
                    self.refused += 1
            self.done.wait(0.02)

    def release(self) -> None:
        self.done.set()
        self.thread.join(10)
        for conn in self.conns:
            with contextlib.suppress(psycopg.Error):
                conn.close()
        self.conns.clear()


def sessions(cluster: Cluster, role: str) -> list[int]:
    with cluster.admin() as conn:
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE usename = %s",
                            (role,)).fetchall()
    return [r[0] for r in rows]


def evict(cluster: Cluster, role: str, quiet: float = 2.0, timeout: float = 60) -> None:
    """Terminate every session of `role` until none came back for `quiet` seconds (a
    reconnect that won a freed slot before the hog is ended again)."""
    deadline = time.monotonic() + timeout
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < quiet:
        assert time.monotonic() < deadline, f"{role} keeps getting connection slots"
        pids = sessions(cluster, role)
        if pids:
            with cluster.admin() as conn:
                conn.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) pid",
                             (pids,))
            quiet_since = time.monotonic()
        time.sleep(0.05)


def runs(ledger: str, ids: list[int]) -> dict[int, int]:
    """job id → pid of the process that started its first attempt."""
    with psycopg.connect(ledger, autocommit=True) as conn:
        rows = conn.execute("SELECT job_id, pid FROM audit WHERE event = 'started'"
                            " AND attempt = 1 AND job_id = ANY(%s)", (ids,)).fetchall()
    return {r[0]: r[1] for r in rows}


def expiries(cluster: Cluster, dbname: str, ids: list[int]) -> dict[int, datetime]:
    with cluster.admin(dbname) as conn:
        rows = conn.execute("SELECT id, lease_expires_at FROM pgfleet.jobs"
                            " WHERE id = ANY(%s) AND state = 'running'", (ids,)).fetchall()
    return {r[0]: r[1] for r in rows}


def test_workers_that_cannot_reconnect_stop_their_jobs_before_the_leases_expire(
        small_cluster: Cluster, ledger: str, tmp_path: Path) -> None:
    cluster = small_cluster
    cluster.make_template()
    dbname = cluster.create_database(cluster.template)
    create_runtime_role(cluster, dbname, RUNTIME)
    with cluster.admin() as conn:
        pg.ensure_role(conn, HOG)
    owner = cluster.url(dbname)
    fleet = Fleet(cluster.url(dbname, user=RUNTIME), tmp_path, faults_config(
        {"default": {"processes": 2, "threads": 2, "kill_grace": "1s"}},
        supervisor=SUPERVISOR))
    hog = Hog(cluster.dsn("postgres", user=HOG))
    try:
        fleet.start()
        fleet.wait_workers(2)
        ids = pgfleet.enqueue_many(owner, [{"task": "faults.sleep_first",
                                            "args": {"seconds": 60}, "max_attempts": 1}] * JOBS)
        runners = wait_for(lambda: (found := runs(ledger, ids)) and len(found) == JOBS
                           and found, timeout=60)
        hog.grabbing.set()
        wait_for(lambda: hog.refused >= 3, timeout=30)  # every ordinary slot is taken
        evict(cluster, RUNTIME)
        # No session of the runtime role is left to renew anything: these are final.
        expires = expiries(cluster, dbname, ids)
        assert set(expires) == set(ids), expires
        ended: dict[int, float] = {}

        def all_ended() -> bool:
            for job_id, pid in runners.items():
                if job_id not in ended and not alive(pid):
                    ended[job_id] = time.time()
            return len(ended) == JOBS

        wait_for(all_ended, timeout=3 * LEASE, interval=0.02)
        for job_id, at in ended.items():
            assert at < expires[job_id].timestamp(), \
                (job_id, f"{at - expires[job_id].timestamp():.3f}s past its lease")
        log = fleet.log()
        assert "could not renew its leases" in log, log[-4000:]
        # The give-up says why, in the line after its own.
        assert "last database error: cannot connect to the database" in log
        assert "(too many connections: no connection slot is left for this role" in log
        with cluster.admin(dbname) as conn:
            started = conn.execute("SELECT count(*) FROM pgfleet.jobs WHERE attempt > 1"
                                   ).fetchone()
        assert started == (0,)  # nobody could take them over meanwhile
    finally:
        hog.release()
    try:
        wait_settled(owner, timeout=120, log=fleet.log)
        with cluster.admin(dbname) as conn:
            states = conn.execute("SELECT state::text, attempt, refunds FROM pgfleet.jobs"
                                  " WHERE id = ANY(%s)", (ids,)).fetchall()
        # Given back by their supervisor, refunded: max_attempts 1 and still succeeded.
        assert states == [("succeeded", 2, 1)] * JOBS, (states, fleet.log()[-4000:])
        books.check(owner, ids, audit_dsn=ledger)
    finally:
        fleet.stop()
