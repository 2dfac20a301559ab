"""The global options --database-url and -c/--config count the same before and after the
command name, for every command that uses them (the real CLI against a real database)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from pgfleet.cli import cli
from pgfleet.client import enqueue as client
from tests.support.workers import TASKS, scalar, wait_for

# Where the environment would send a command that ignored the option: nothing listens.
NOWHERE = "postgresql://nobody@127.0.0.1:1/none"
POSITIONS = ["before", "after"]


def place(position: str, options: list[str], command: list[str]) -> list[str]:
    return [*options, *command] if position == "before" else [*command, *options]


def invoke(args: list[str]) -> Result:
    env = {"PGFLEET_DATABASE_URL": NOWHERE, "DATABASE_URL": None}
    return CliRunner().invoke(cli, args, env=env)


def config_file(tmp_path: Path, dsn: str | None, extra: str = "") -> str:
    path = tmp_path / "pgfleet.yaml"
    url = f"database_url: '{dsn}'\n" if dsn else ""
    path.write_text(f"{url}tasks: [{TASKS}]\nqueues:\n  default: {{}}\n{extra}")
    return str(path)


SCHEDULE = ("schedules:\n  tick:\n    cron: '*/5 * * * *'\n    task: noop\n"
            "    queue: default\n")


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize(("command", "expected"), [
    (["migrate"], "schema version"),
    (["enqueue", "noop", "--queue", "mail"], ""),
    (["jobs", "list", "--state", "dead"], "ID"),
    (["jobs", "show", "{job}"], "task: noop"),
    (["jobs", "retry", "--queue", "mail"], "0 dead job(s)"),
    (["jobs", "cancel", "{job}"], "cancelled"),
    (["queues", "pause", "mail"], "paused"),
    (["queues", "resume", "mail"], "resumed"),
    (["status"], "QUEUE"),
])
def test_database_url_before_or_after_the_command(
        dsn: str, position: str, command: list[str], expected: str) -> None:
    job = client.enqueue(dsn, "noop", {}, queue="mail")
    argv = [part.replace("{job}", str(job)) for part in command]
    result = invoke(place(position, ["--database-url", dsn], argv))
    assert result.exit_code == 0, result.output
    assert expected in result.stdout


@pytest.mark.parametrize("position", POSITIONS)
def test_config_file_url_before_or_after_the_command(
        dsn: str, tmp_path: Path, position: str) -> None:
    """-c names a file whose database_url the command then uses."""
    client.enqueue(dsn, "noop", {}, queue="mail")
    path = config_file(tmp_path, dsn)
    result = invoke(place(position, ["-c", path], ["jobs", "list", "--queue", "mail"]))
    assert result.exit_code == 0, result.output
    assert "noop" in result.stdout


@pytest.mark.parametrize("position", POSITIONS)
def test_cron_list_takes_both_options_on_either_side(
        dsn: str, tmp_path: Path, position: str) -> None:
    path = config_file(tmp_path, None, SCHEDULE)
    result = invoke(place(position, ["-c", path, "--database-url", dsn], ["cron", "list"]))
    assert result.exit_code == 0, result.output
    assert "last run: never" in result.stdout


@pytest.mark.parametrize("position", POSITIONS)
def test_check_takes_both_options_on_either_side(
        dsn: str, tmp_path: Path, position: str) -> None:
    path = config_file(tmp_path, None)
    result = invoke(place(position, ["-c", path, "--database-url", dsn], ["check"]))
    assert result.exit_code == 0, result.output
    assert f"{path}: ok" in result.stdout


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("command", ["run", "dev", "check", "cron"])
def test_config_option_reaches_the_command(tmp_path: Path, position: str, command: str) -> None:
    """The file given on either side is the one read: its error is reported."""
    path = tmp_path / "broken.yaml"
    path.write_text("queues:\n  default:\n    threads: many\n")
    argv = ["cron", "list"] if command == "cron" else [command]
    result = invoke(place(position, ["-c", str(path)], argv))
    assert result.exit_code == 2, result.output
    assert f"{path}:3" in result.stderr


# `cron list` reads the database and needs no file (docs/commands.md).
@pytest.mark.parametrize("command", [["run"], ["check"]])
def test_a_missing_config_option_is_one_line(command: list[str]) -> None:
    result = invoke(command)
    assert result.exit_code == 2
    assert result.stderr == "pgfleet: error: missing option -c/--config (the pgfleet.yaml file)\n"


@pytest.mark.parametrize("position", POSITIONS)
def test_worker_takes_the_database_url_on_either_side(dsn: str, position: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["PGFLEET_DATABASE_URL"] = NOWHERE
    command = ["worker", "--queue", "opts", "--tasks", TASKS, "--poll-interval", "0.2"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgfleet", *place(position, ["--database-url", dsn], command)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        # Stops waiting as soon as the worker has either registered or exited.
        wait_for(lambda: proc.poll() is not None or scalar(
            dsn, "SELECT count(*) FROM pgfleet.processes WHERE queue = 'opts' AND pid = %s",
            (proc.pid,)), timeout=60)
        assert proc.poll() is None, "the worker exited"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
