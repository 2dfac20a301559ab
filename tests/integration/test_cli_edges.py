"""The command line's edges (issue 14): one clear line for bad input, `pgfleet dev --stop`
stops everything, the other commands find a running `pgfleet dev`, mistyped queue names
are warned about, and every connection carries an application_name."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result
from psycopg.conninfo import make_conninfo

from pgfleet.cli import cli
from pgfleet.cli.common import database
from pgfleet.client import enqueue as client
from pgfleet.sql.db import connect, redact_dsn
from tests.support.fleet import config_text
from tests.support.workers import TASKS, scalar, wait_for

UNKNOWN = "warning: queue {!r} is unknown: no job or worker in the database has it"


def invoke(args: list[str]) -> Result:
    return CliRunner().invoke(cli, args)


def pgfleet(*args: str, env: dict[str, str] | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pgfleet", *args], capture_output=True,
                          text=True, timeout=120, env=env, cwd=cwd)


# ---- one line for bad input ------------------------------------------------------------

@pytest.mark.parametrize(("module", "error"), [
    ("no_such_task_module", "ModuleNotFoundError: No module named 'no_such_task_module'"),
    ("tests.support.broken_tasks", "ModuleNotFoundError: No module named "
                                   "'pgfleet_dependency_that_is_not_installed'"),
])
def test_worker_with_a_bad_tasks_module_says_one_line(dsn: str, module: str, error: str) -> None:
    proc = pgfleet("worker", "--queue", "default", "--tasks", module)
    assert proc.returncode == 2
    assert proc.stderr == f"pgfleet: error: --tasks {module}: cannot import it: {error}\n"


def test_jobs_retry_without_an_argument_says_what_is_missing(dsn: str) -> None:
    result = invoke(["jobs", "retry"])
    assert result.exit_code == 2
    assert result.stderr == ("pgfleet: error: missing what to retry: give a JOB_ID or "
                             "--queue QUEUE\n")


def test_jobs_retry_with_both_says_not_both(dsn: str) -> None:
    result = invoke(["jobs", "retry", "7", "--queue", "mail"])
    assert result.exit_code == 2
    assert result.stderr == "pgfleet: error: give a JOB_ID or --queue QUEUE, not both\n"


# ---- mistyped queue names --------------------------------------------------------------

@pytest.mark.parametrize("action", ["pause", "resume"])
def test_pausing_an_unknown_queue_warns_and_still_does_it(dsn: str, action: str) -> None:
    client.enqueue(dsn, "noop", {}, queue="emails")
    result = invoke(["queues", action, "emialz"])
    assert result.exit_code == 0, result.output
    assert result.stderr == (UNKNOWN.format("emialz") + "; is the name mistyped?\n")
    assert scalar(dsn, "SELECT paused FROM pgfleet.queues WHERE name = 'emialz'") is (
        action == "pause")


@pytest.mark.parametrize("known_by", ["a waiting job", "a finished job", "a worker",
                                      "the file"])
def test_a_known_queue_gives_no_warning(dsn: str, tmp_path: Path, known_by: str) -> None:
    args = ["queues", "pause", "emails"]
    if known_by == "a waiting job":
        client.enqueue(dsn, "noop", {}, queue="emails")
    elif known_by == "a finished job":
        job = client.enqueue(dsn, "noop", {}, queue="emails")
        scalar(dsn, "UPDATE pgfleet.jobs SET state = 'succeeded', finished_at = now() "
                    "WHERE id = %s RETURNING id", (job,))
    elif known_by == "a worker":
        scalar(dsn, "INSERT INTO pgfleet.processes (id, host, pid, kind, queue) "
                    "VALUES ('w-test', 'here', 1, 'worker', 'emails') RETURNING id")
    else:
        path = tmp_path / "pgfleet.yaml"
        path.write_text(config_text({"emails": {}}))
        args = ["-c", str(path), *args]
    result = invoke(args)
    assert result.exit_code == 0, result.output
    assert result.stderr == ""


def test_the_file_named_in_the_warning(dsn: str, tmp_path: Path) -> None:
    path = tmp_path / "pgfleet.yaml"
    path.write_text(config_text({"emails": {}}))
    result = invoke(["queues", "pause", "emialz", "-c", str(path)])
    assert result.stderr == (UNKNOWN.format("emialz") + f", and {path} does not configure "
                             "it; is the name mistyped?\n")


def test_enqueue_to_an_unknown_queue_warns_and_adds_the_job(dsn: str) -> None:
    result = invoke(["enqueue", "noop", "--queue", "emialz"])
    assert result.exit_code == 0, result.output
    assert result.stderr == UNKNOWN.format("emialz") + "; is the name mistyped?\n"
    job = int(result.stdout)
    assert scalar(dsn, "SELECT queue FROM pgfleet.jobs WHERE id = %s", (job,)) == "emialz"


def test_enqueue_to_the_default_queue_does_not_warn(dsn: str) -> None:
    result = invoke(["enqueue", "noop"])
    assert result.exit_code == 0, result.output
    assert result.stderr == ""


# ---- application_name ------------------------------------------------------------------

def test_the_cli_connection_is_named_pgfleet_cli(dsn: str) -> None:
    with cli.make_context("pgfleet", ["status"]), database() as conn:
        assert conn.execute("SHOW application_name").fetchone() == ("pgfleet cli",)


def test_a_name_in_the_dsn_wins(dsn: str) -> None:
    with connect(make_conninfo(dsn, application_name="mine")) as conn:
        assert conn.execute("SHOW application_name").fetchone() == ("mine",)
    with connect(dsn, application_name="pgfleet test") as conn:
        assert conn.execute("SHOW application_name").fetchone() == ("pgfleet test",)


def test_a_hand_run_worker_names_its_connections(dsn: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgfleet", "worker", "--queue", "named", "--tasks", TASKS],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        # Its claiming connection and its LISTEN connection.
        wait_for(lambda: proc.poll() is not None or _names(dsn).count("pgfleet worker named")
                 == 2, timeout=60)
        assert proc.poll() is None, "the worker exited"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)


def _names(dsn: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT application_name FROM pg_stat_activity "
                            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                            ).fetchall()
    return sorted(r[0] for r in rows)


# ---- pgfleet dev: --stop, and the other commands finding it ----------------------------

def _env_without_url(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PGFLEET_DATABASE_URL", "DATABASE_URL")}
    env["PGFLEET_EMBEDDED_DIR"] = str(data_dir)
    return env


def _live(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_dev_is_found_by_the_other_commands_and_stop_ends_every_process(
        dsn: str, tmp_path: Path) -> None:
    data_dir = tmp_path / "devdata"
    config = tmp_path / "pgfleet.yaml"
    config.write_text(config_text({"default": {"processes": 2}}, database_url=dsn))
    env = _env_without_url(data_dir)
    log = (tmp_path / "dev.log").open("wb")
    dev = subprocess.Popen([sys.executable, "-m", "pgfleet", "dev", "-c", str(config)],
                           env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: dev.poll() is not None or scalar(
            dsn, "SELECT count(*) FROM pgfleet.processes WHERE kind = 'worker'") == 2,
            timeout=90)
        assert dev.poll() is None, (tmp_path / "dev.log").read_text()
        state_file = data_dir / "dev.json"
        assert stat.S_IMODE(state_file.stat().st_mode) == 0o600
        assert json.loads(state_file.read_text())["pid"] == dev.pid
        # Claiming and LISTEN: the listener connects beside the worker's own connection.
        wait_for(lambda: _names(dsn).count("pgfleet worker default 1/2") == 2, timeout=60)
        # Maintenance connects on its own schedule, maybe after the workers.
        wait_for(lambda: "pgfleet maintenance" in _names(dsn), timeout=60)

        # Another terminal, in another folder, with no URL anywhere: it finds dev's.
        client.enqueue(dsn, "noop", {}, queue="nowhere")
        scalar(dsn, "UPDATE pgfleet.jobs SET state = 'dead', finished_at = now() "
                    "WHERE queue = 'nowhere' RETURNING id")
        for command in (["jobs", "list", "--state", "dead"], ["status"]):
            found = pgfleet(*command, env=env, cwd=Path("/"))
            assert found.returncode == 0, found.stderr
            assert found.stderr == ("pgfleet: no database URL given; using that of the "
                                    f"running `pgfleet dev` (pid {dev.pid}): "
                                    f"{redact_dsn(dsn)}\n")
        assert "nowhere" in pgfleet("jobs", "list", "--state", "dead", env=env).stdout
        # `run` never takes dev's database; a second `dev` in the same folder is refused.
        no_url = tmp_path / "no-url.yaml"
        no_url.write_text(config_text({"default": {}}))
        run = pgfleet("run", "-c", str(no_url), env=env, cwd=tmp_path)
        assert run.returncode == 2 and run.stderr.startswith("pgfleet: error: no database URL")
        second = pgfleet("dev", "-c", str(config), env=env, cwd=tmp_path)
        assert second.returncode == 1
        assert second.stderr == (f"pgfleet: error: `pgfleet dev` is already running in "
                                 f"{data_dir} (pid {dev.pid}); `pgfleet dev --stop` stops it\n")

        children = [row[0] for row in _rows(dsn, "SELECT pid FROM pgfleet.processes "
                                                 "WHERE kind <> 'supervisor'")]
        assert len(children) >= 3  # two workers and maintenance
        stopped = pgfleet("dev", "--stop", env=env, cwd=tmp_path)
        assert stopped.returncode == 0, stopped.stderr
        assert dev.poll() is not None, "--stop returned before the supervisor had exited"
        assert stopped.stdout == (f"stopped the `pgfleet dev` supervisor (pid {dev.pid}) "
                                  "and its children\n")
        assert dev.wait(timeout=60) == 0
        assert [pid for pid in children if _live(pid)] == []
        assert not state_file.exists()
    finally:
        if dev.poll() is None:
            dev.kill()
            dev.wait()
        log.close()


def test_dev_stop_with_nothing_running_is_one_line(tmp_path: Path) -> None:
    env = _env_without_url(tmp_path / "nothing")
    proc = pgfleet("dev", "--stop", env=env, cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr == f"pgfleet: error: no `pgfleet dev` is running in {tmp_path / 'nothing'}\n"


def test_without_dev_and_without_a_url_the_error_stays(tmp_path: Path) -> None:
    proc = pgfleet("jobs", "list", env=_env_without_url(tmp_path / "nothing"), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == ("pgfleet: error: no database URL: pass --database-url or set "
                           "PGFLEET_DATABASE_URL\n")


def _rows(dsn: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql).fetchall()


def _dead(dsn: str, **job: Any) -> int:
    job_id = client.enqueue(dsn, "noop", queue="q", **job)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE pgfleet.jobs SET state = 'dead', attempt = 1, finished_at = now()"
                      " WHERE id = %s", (job_id,))
    return job_id


def _retry_queue(dsn: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pgfleet", "jobs", "retry", "--queue", "q"],
                          capture_output=True, text=True,
                          env={**os.environ, "PGFLEET_DATABASE_URL": dsn})


def test_retry_queue_retries_what_it_can_and_names_the_rest(dsn: str) -> None:
    """A dead job whose unique key is held again stays dead and is named; the other dead
    jobs of the queue are retried. Exit 1 only when none could be."""
    blocked = _dead(dsn, unique_key="k")
    holder = client.enqueue(dsn, "noop", queue="q", unique_key="k", delay=3600)
    plain = [_dead(dsn), _dead(dsn)]
    out = _retry_queue(dsn)
    assert out.returncode == 0, out.stderr
    assert "2 dead job(s) of queue 'q' queued again" in out.stdout
    assert (f"job {blocked} not retried: unique key 'k' of task 'noop' is held by job "
            f"{holder}") in out.stderr
    states = dict(psycopg.connect(dsn, autocommit=True).execute(
        "SELECT id, state::text FROM pgfleet.jobs").fetchall())
    assert states == {blocked: "dead", holder: "queued", plain[0]: "queued",
                      plain[1]: "queued"}

    again = _retry_queue(dsn)
    assert again.returncode == 1 and f"job {blocked} not retried" in again.stderr
    assert "no dead job of queue 'q' could be retried" in again.stderr
