"""The example app: its supervisor against a fresh database processes a burst, with the
flaky provider's retries visible in the database, and the commands the docs show work."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.workers import wait_for

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def pgfleet(*args: str, env: dict[str, str], check: bool = True) -> str:
    result = subprocess.run([sys.executable, "-m", "pgfleet", *args], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.fixture
def example_env(dsn: str, tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, PGFLEET_DATABASE_URL=dsn, EXAMPLE_DATA_DIR=str(tmp_path / "data"),
                PGFLEET_METRICS_LISTEN=f"127.0.0.1:{free_port()}")


@pytest.fixture
def supervisor(example_env: dict[str, str], tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    log = open(tmp_path / "supervisor.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgfleet", "run", "-c", "examples/pgfleet.yaml"],
        cwd=ROOT, env=example_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        log.close()


def test_burst_finishes_with_retries(dsn: str, example_env: dict[str, str],
                                     supervisor: subprocess.Popen[bytes],
                                     tmp_path: Path) -> None:
    assert "ok (4 queue(s), 2 schedule(s)" in pgfleet(
        "check", "-c", "examples/pgfleet.yaml", env=example_env)
    burst = subprocess.run(
        [sys.executable, "-m", "examples.burst", "--count", "60", "--timeout", "120"],
        cwd=ROOT, env=example_env, capture_output=True, text=True, timeout=180)
    log = (tmp_path / "supervisor.log").read_text(errors="replace")
    assert burst.returncode == 0, burst.stdout + burst.stderr + log
    assert "done in" in burst.stdout

    with psycopg.connect(dsn) as conn:
        states = dict(conn.execute(
            "SELECT state::text, count(*) FROM pgfleet.jobs GROUP BY 1").fetchall())
        retried = conn.execute(
            "SELECT count(*) FROM pgfleet.jobs WHERE task = 'examples.app.tasks.capture_payment'"
            " AND state = 'succeeded' AND attempt > 1 AND jsonb_array_length(errors) > 0"
        ).fetchone()
        dead = conn.execute("SELECT id, last_error FROM pgfleet.jobs WHERE state = 'dead'"
                            ).fetchall()
    assert states == {"succeeded": 30 + 30 + 2, "dead": 1}
    assert retried is not None and retried[0] > 0  # the flaky provider's retries
    assert len(dead) == 1 and "order 0 does not exist" in dead[0][1]

    data = tmp_path / "data"
    assert len(list((data / "outbox").glob("welcome-*.eml"))) == 30
    reports = list((data / "reports").glob("sales-*.csv"))
    assert len(reports) == 2
    assert reports[0].read_text().startswith("order_id,customer,amount_eur,paid_at")

    listen = example_env["PGFLEET_METRICS_LISTEN"]
    with urllib.request.urlopen(f"http://{listen}/livez", timeout=5) as answer:
        assert answer.status == 200
    with urllib.request.urlopen(f"http://{listen}/metrics", timeout=5) as answer:
        metrics = answer.read().decode()
    assert 'pgfleet_job_retries_total{queue="payments"' in metrics

    # The commands docs/ and the burst's summary point to.
    dead_id = str(dead[0][0])
    listed = json.loads(pgfleet("jobs", "list", "--state", "dead", "--json", env=example_env))
    assert [str(job["id"]) for job in listed] == [dead_id]
    assert "order 0 does not exist" in pgfleet("jobs", "show", dead_id, env=example_env)
    status = json.loads(pgfleet("status", "--json", env=example_env))
    assert status
    pgfleet("queues", "pause", "payments", env=example_env)
    pgfleet("queues", "resume", "payments", env=example_env)
    pgfleet("jobs", "retry", dead_id, env=example_env)
    job_id = pgfleet("enqueue", "examples.app.tasks.send_welcome_email",
                     "--args", '{"user_id": 7}', "--queue", "emails", env=example_env).strip()
    def both_final() -> bool:
        with psycopg.connect(dsn) as conn:
            rows: list[Any] = conn.execute(
                "SELECT id::text, state::text FROM pgfleet.jobs WHERE id IN (%s, %s)",
                (int(job_id), int(dead_id))).fetchall()
        return dict(rows) == {job_id: "succeeded", dead_id: "dead"}

    wait_for(both_final, timeout=60, interval=0.1)
    assert "nightly-cleanup" in pgfleet("cron", "list", "-c", "examples/pgfleet.yaml",
                                        env=example_env)

    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(60) == 0
