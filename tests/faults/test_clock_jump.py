"""FAULTS.md X4, C1, C2: the database server's clock, or a host's, jumps while jobs run.

The throwaway cluster here runs under libfaketime (its monotonic clock left alone), whose
offset file the test rewrites mid-run: every backend's now() jumps at once, as on a server
whose clock was set. Rescue must not take a live job because of that: it watches lease
beats on its own monotonic clock. A job delayed by an hour becomes due with the jump (run_at
is server time): the documented behaviour."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import pgfleet
from tests.faults import books
from tests.faults.conftest import Db, faults_config
from tests.faults.helpers import job_row, wait_settled
from tests.support.cluster import SERVER_USER, Cluster
from tests.support.fleet import Fleet
from tests.support.workers import scalar, wait_for

pytestmark = pytest.mark.faults

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
# Leases of 8 s renewed every 2 s: judged by lease_expires_at < now(), a maintenance pass
# (every 0.2 s) in the up to 2 s between the jump and the next renewals would rescue the
# four running jobs.
SUPERVISOR = {"heartbeat_interval": "2s", "stale_after": "5s", "lease": "8s"}


class FakedClock:
    """The offset file libfaketime reads at every clock call (its cache is off)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.set("+0")

    def set(self, offset: str) -> None:
        self.path.write_text(f"{offset}\n")
        self.path.chmod(0o644)


def faked_environment(clock: FakedClock) -> dict[str, str]:
    """A process started with this sees `clock`'s offset on its wall clock only."""
    return {"LD_PRELOAD": str(LIBFAKETIME), "FAKETIME_TIMESTAMP_FILE": str(clock.path),
            "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


@pytest.fixture(scope="module")
def faked() -> Iterator[tuple[Cluster, FakedClock]]:
    assert LIBFAKETIME.exists(), "libfaketime is needed: apt-get install faketime"
    root = Path(tempfile.mkdtemp(prefix="pgfleet-faked-"))
    clock = FakedClock(root / "faketime.rc")
    cluster = Cluster(root, env=faked_environment(clock))
    if cluster.as_root:
        entry = pwd.getpwnam(SERVER_USER)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    cluster.init().start()
    cluster.make_template()
    try:
        yield cluster, clock
    finally:
        cluster.destroy()


def server_ahead(dsn: str) -> float:
    """How far the server's clock is ahead of this host's, in seconds."""
    server = scalar(dsn, "SELECT extract(epoch FROM clock_timestamp())::float8")
    return float(server) - time.time()


def test_a_forward_jump_of_the_server_clock_reruns_no_live_job(
        faked: tuple[Cluster, FakedClock], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, clock = faked
    with cluster.fresh_database() as name:
        dsn = cluster.url(name)
        monkeypatch.setenv("PGFLEET_AUDIT_DSN", dsn)
        fleet = Fleet(dsn, tmp_path, faults_config(
            {"default": {"processes": 1, "threads": 4, "kill_grace": "1s"}},
            supervisor=SUPERVISOR))
        fleet.start()
        try:
            fleet.wait_workers(1)
            ids = [pgfleet.enqueue(dsn, "sleep", {"seconds": 12.0}) for _ in range(4)]
            delayed = pgfleet.enqueue(dsn, "noop", delay=3600)
            wait_for(lambda: scalar(dsn, "SELECT count(*) FROM audit"
                                         " WHERE event = 'started'") == 4, timeout=60)
            assert abs(server_ahead(dsn)) < 60
            clock.set("+2h")
            wait_for(lambda: server_ahead(dsn) > 7000, timeout=10)
            wait_settled(dsn, timeout=120, log=fleet.log)
        finally:
            fleet.stop()
            clock.set("+0")
        for job_id in ids:
            row = job_row(dsn, job_id)
            assert (row["state"], row["attempt"], row["errors"]) == ("succeeded", 1, []), \
                (row, fleet.log()[-3000:])
        # The delayed job was due an hour later by the server's clock: the jump made it due.
        assert job_row(dsn, delayed)["state"] == "succeeded"
        assert "rescued" not in fleet.log()
        books.check(dsn, [*ids, delayed])


@pytest.mark.parametrize("jump", ["+2h", "-2h"])
def test_a_jump_of_a_hosts_clock_reruns_no_live_job(
        db: Db, cfleet: Callable[..., Fleet], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, jump: str) -> None:
    """FAULTS.md C1/C2: the wall clock of the host that runs the jobs jumps (its
    monotonic clock does not), while another host's maintenance watches their leases."""
    dsn = db.dsn
    clock = FakedClock(tmp_path / "faketime.rc")
    with monkeypatch.context() as faked_env:
        for key, value in faked_environment(clock).items():
            faked_env.setenv(key, value)
        host = cfleet({"default": {"processes": 1, "threads": 4, "kill_grace": "1s"}},
                      name="host", supervisor=SUPERVISOR)
    other = cfleet({"other": {"processes": 1, "kill_grace": "1s"}}, name="other",
                   supervisor=SUPERVISOR)
    [worker] = host.wait_workers(1)
    other.wait_workers(1)
    ids = [pgfleet.enqueue(dsn, "faults.event_wait", {"seconds": 12.0}) for _ in range(4)]
    wait_for(lambda: scalar(dsn, "SELECT count(*) FROM audit WHERE event = 'started'"
                                 " AND pid = %s", (worker,)) == 4, timeout=60)
    clock.set(jump)
    seen = float(subprocess.run(
        [sys.executable, "-c", "import time; print(time.time())"], capture_output=True,
        text=True, check=True, env=dict(os.environ, **faked_environment(clock))).stdout)
    assert abs(abs(seen - time.time()) - 7200) < 60  # what the host's processes now see
    wait_settled(dsn, timeout=120, log=lambda: host.log() + other.log())
    for job_id in ids:
        row = job_row(dsn, job_id)
        assert (row["state"], row["attempt"], row["errors"]) == ("succeeded", 1, []), row
    assert "rescued" not in host.log() + other.log()
    books.check(dsn, ids)
