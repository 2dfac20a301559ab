"""`pgfleet status`: gather() against a real database, the table, and the command."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from typing import Any

import psycopg
import pytest

from pgfleet.errors import PgfleetError
from pgfleet.sql import fleet as fleet_store, store
from pgfleet.status.fleet import age, gather, render

JOBS = """
INSERT INTO pgfleet.jobs (queue, task, state, run_at, finished_at, lease_holder,
                          lease_expires_at)
SELECT q, 'noop', s::pgfleet.job_state, now() + make_interval(secs => r),
       CASE WHEN f IS NULL THEN NULL ELSE now() - make_interval(secs => f) END,
       CASE WHEN s = 'running' THEN 'w1' END,
       CASE WHEN s = 'running' THEN now() + interval '1 minute' END
  FROM (VALUES
    ('mail', 'queued', -30, NULL), ('mail', 'queued', -5, NULL), ('mail', 'queued', 0, NULL),
    ('mail', 'queued', 3600, NULL),
    ('mail', 'running', -10, NULL),
    ('mail', 'dead', -100, 10), ('mail', 'dead', -100, 600),
    ('mail', 'succeeded', -100, 5), ('mail', 'succeeded', -100, 20),
    ('mail', 'succeeded', -100, 3600), ('mail', 'cancelled', -100, 5),
    ('reports', 'queued', 600, NULL), ('reports', 'succeeded', -100, 1)
  ) AS v(q, s, r, f)
"""


def seed(conn: psycopg.Connection[Any]) -> None:
    conn.execute(JOBS)
    store.set_paused(conn, "reports", True)
    for row in (
        dict(id="sup-a", host="alpha", pid=100, kind="supervisor", queue=None, supervisor=None),
        dict(id="w-a1", host="alpha", pid=101, kind="worker", queue="mail", supervisor="sup-a"),
        dict(id="w-a2", host="alpha", pid=102, kind="worker", queue="idle",
             supervisor="sup-a"),
        dict(id="m-a", host="alpha", pid=103, kind="maintenance", queue=None,
             supervisor="sup-a"),
        dict(id="sup-b", host="beta", pid=200, kind="supervisor", queue=None, supervisor=None),
        dict(id="w-b1", host="beta", pid=201, kind="worker", queue="mail", supervisor="sup-b"),
        dict(id="w-lost", host="beta", pid=202, kind="worker", queue="mail",
             supervisor="sup-gone"),
    ):
        fleet_store.register_process(conn, **row)
    # beta's supervisor gave up on a queue no process or job names (migration 0010).
    fleet_store.report_failed_queues(conn, id="sup-b", failed={"gone": "workers crashed 10 times"})
    conn.execute("UPDATE pgfleet.processes SET heartbeat_at = now() - interval '42 seconds'"
                 " WHERE id = 'w-b1'")


def check(data: dict[str, Any]) -> None:
    queues = {q["queue"]: q for q in data["queues"]}
    assert list(queues) == ["gone", "idle", "mail", "reports"]
    assert queues["gone"]["failed_on"] == [
        {"host": "beta", "supervisor": "sup-b", "reason": "workers crashed 10 times"}]
    assert queues["gone"]["waiting"] == 0
    mail = queues["mail"]
    assert (mail["waiting"], mail["scheduled"], mail["running"], mail["dead"]) == (3, 1, 1, 2)
    assert mail["finished_last_minute"] == 3  # two succeeded and one dead within 60 s
    assert 29 <= mail["oldest_waiting_age"] < 120
    assert mail["paused"] is False
    reports = queues["reports"]
    assert (reports["waiting"], reports["scheduled"], reports["paused"]) == (0, 1, True)
    assert reports["oldest_waiting_age"] is None
    assert reports["finished_last_minute"] == 1
    assert queues["idle"] == {"queue": "idle", "waiting": 0, "scheduled": 0, "running": 0,
                              "dead": 0, "oldest_waiting_age": None,
                              "finished_last_minute": 0, "paused": False, "failed_on": []}

    hosts = {h["host"]: h for h in data["hosts"]}
    assert list(hosts) == ["alpha", "beta"]
    (sup_a,) = hosts["alpha"]["supervisors"]
    assert (sup_a["id"], sup_a["pid"]) == ("sup-a", 100)
    assert sorted(c["id"] for c in sup_a["children"]) == ["m-a", "w-a1", "w-a2"]
    (sup_b,) = hosts["beta"]["supervisors"]
    (w_b1,) = sup_b["children"]
    assert w_b1["queue"] == "mail"
    assert 41 <= w_b1["heartbeat_age"] < 120
    assert [p["id"] for p in hosts["beta"]["unattached"]] == ["w-lost"]


def test_gather_counts_every_state_and_groups_processes_by_host(
    conn: psycopg.Connection[Any],
) -> None:
    seed(conn)
    check(gather(conn))


def test_gather_on_an_empty_database(conn: psycopg.Connection[Any]) -> None:
    data = gather(conn)
    # The shared server's other sessions may hold the horizon (tests/faults hold it).
    horizon = data.pop("xmin_horizon")
    assert horizon["error"] is None and isinstance(horizon["held"], list)
    assert data == {"queues": [], "limits": [], "hosts": [], "progress": []}
    text = render(gather(conn))
    assert "no queues" in text
    assert "no pgfleet processes" in text


def test_gather_without_the_schema_says_migrate(empty_dsn: str) -> None:
    with psycopg.connect(empty_dsn, autocommit=True) as conn, \
            pytest.raises(PgfleetError, match="pgfleet migrate"):
        gather(conn)


def test_render_is_an_aligned_table(conn: psycopg.Connection[Any]) -> None:
    seed(conn)
    text = render(gather(conn))
    lines = text.splitlines()
    header = lines[0]
    assert header.split() == ["QUEUE", "WAITING", "SCHEDULED", "RUNNING", "DEAD", "OLDEST",
                              "WAITING", "DONE/1MIN", "PAUSED", "FAILED", "ON"]
    mail = next(line for line in lines if line.startswith("mail "))
    assert mail.split()[1:5] == ["3", "1", "1", "2"]
    assert mail.split()[-2:] == ["no", "-"]
    gone = next(line for line in lines if line.startswith("gone "))
    assert gone.split()[-2:] == ["no", "beta"]
    assert gone.index("beta") == header.index("FAILED ON")
    assert "queue gone failed on beta (sup-b): workers crashed 10 times" in lines
    # Numbers end under their headings.
    assert mail.index(" 3 ") + 2 == header.index("WAITING") + len("WAITING")
    assert next(line for line in lines if line.startswith("reports ")).split()[-2] == "yes"
    assert "HOST alpha" in lines and "HOST beta" in lines
    assert any(line.startswith("  supervisor") and "sup-a" in line for line in lines)
    assert any(line.startswith("    worker") and "w-b1" in line and "heartbeat 4" in line
               for line in lines)


def test_age_is_short() -> None:
    assert [age(x) for x in (None, 0.25, 12.34, 245, 7800, 3 * 86400 + 4 * 3600)] == [
        "-", "250ms", "12.3s", "4m05s", "2h10m", "3d04h"]


def pgfleet(*args: str, dsn: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PGFLEET_DATABASE_URL", "DATABASE_URL")}
    if dsn is not None:
        env["PGFLEET_DATABASE_URL"] = dsn
    return subprocess.run([sys.executable, "-m", "pgfleet", *args], env=env,
                          capture_output=True, text=True, timeout=60)


def test_status_json_command(dsn: str, conn: psycopg.Connection[Any]) -> None:
    seed(conn)
    proc = pgfleet("status", "--json", dsn=dsn)
    assert proc.returncode == 0, proc.stderr
    check(json.loads(proc.stdout))


def test_status_table_command(dsn: str, conn: psycopg.Connection[Any]) -> None:
    seed(conn)
    proc = pgfleet("status", dsn=dsn)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("QUEUE")
    assert "HOST beta" in proc.stdout


def test_status_with_the_database_down_is_one_line_without_password() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = pgfleet("status", dsn=f"postgresql://u:hunter2secret@127.0.0.1:{port}/x")
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "hunter2secret" not in proc.stderr
