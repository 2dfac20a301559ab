"""Bad configuration: one line per problem, exit status 2, nothing forked or connected."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.workers import scalar

CASES = {
    "malformed": ("queues: [unclosed\n", "malformed.yaml:2:1:"),
    "tabs": ("queues:\n\tdefault: {}\n", "indent with spaces"),
    "empty": ("", "malformed.yaml:1: the file is empty"),
    "misspelt": ("queues:\n  default: {procesess: 2}\n",
                 "malformed.yaml:2: queues.default.procesess: unknown key `procesess`; "
                 "did you mean `processes`?"),
    "zero": ("queues:\n  default: {processes: 0}\n",
             "malformed.yaml:2: queues.default.processes: expected a value of at least 1"),
    "negative": ("queues:\n  default:\n    processes: -1\n",
                 "malformed.yaml:3: queues.default.processes"),
    "module": ("tasks: [no_such_module_anywhere]\nqueues:\n  default: {}\n",
               "malformed.yaml:1: tasks[0]: no module named 'no_such_module_anywhere'"),
    "unset": ("database_url: ${PGFLEET_TEST_UNSET_VARIABLE}\nqueues:\n  default: {}\n",
              "environment variable `PGFLEET_TEST_UNSET_VARIABLE` is not set"),
    "tag": ('queues:\n  default: {}\nx: !!python/object/apply:os.system ["touch {pwned}"]\n',
            "tag `!!python/object/apply:os.system` is not allowed"),
}


@pytest.mark.parametrize("command", ["run", "check"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_config_is_refused(dsn: str, tmp_path: Path, case: str, command: str) -> None:
    text, expected = CASES[case]
    pwned = tmp_path / "pwned"
    path = tmp_path / "malformed.yaml"
    path.write_text(text.replace("{pwned}", str(pwned)))
    env = {k: v for k, v in os.environ.items() if k != "PGFLEET_TEST_UNSET_VARIABLE"}
    out = subprocess.run([sys.executable, "-m", "pgfleet", command, "-c", str(path)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert expected in lines[0]
    assert str(tmp_path) in lines[0] or lines[0].startswith("malformed.yaml")
    assert not pwned.exists()
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.processes") == 0


def test_every_error_is_reported_at_once(tmp_path: Path) -> None:
    path = tmp_path / "many.yaml"
    path.write_text("queues:\n  a: {processes: 0}\n  b: {threads: many}\n"
                    "metrics: {listen: nowhere}\n")
    out = subprocess.run([sys.executable, "-m", "pgfleet", "check", "-c", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert [line.split(": ")[1] for line in lines] == [
        "queues.a.processes", "queues.b.threads", "metrics.listen"]
    assert [int(line.split(":")[1]) for line in lines] == [2, 3, 4]


def test_check_accepts_a_good_file_and_warns_about_connections(
    dsn: str, tmp_path: Path
) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(f"database_url: {dsn}\ntasks: [tests.support.jobtasks]\n"
                    "queues:\n" + "".join(f"  q{i}: {{processes: 64}}\n" for i in range(2)))
    out = subprocess.run([sys.executable, "-m", "pgfleet", "check", "-c", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "259 database connection(s) per host" in out.stdout
    assert "warning: this host alone needs 259 connections" in out.stderr


def test_config_schema_is_json_schema() -> None:
    out = subprocess.run([sys.executable, "-m", "pgfleet", "config-schema"],
                         capture_output=True, text=True, check=True)
    schema = json.loads(out.stdout)
    assert "queues" in schema["properties"] and "queues" in schema["required"]


@pytest.mark.parametrize(("source", "error"), [
    ("import pgfleet_dependency_that_is_not_installed\n",
     "ModuleNotFoundError: No module named 'pgfleet_dependency_that_is_not_installed'"),
    ("def broken(:\n", "SyntaxError: "),
])
def test_check_refuses_a_task_module_that_fails_to_import(
    tmp_path: Path, source: str, error: str
) -> None:
    (tmp_path / "badtasks.py").write_text(source)
    path = tmp_path / "tasks.yaml"
    path.write_text("queues:\n  default:\n    tasks: [badtasks]\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path]))
    out = subprocess.run([sys.executable, "-m", "pgfleet", "check", "-c", str(path)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{path}:3: queues.default.tasks[0]: task module 'badtasks' "
                               f"fails to import: {error}"), lines[0]
    assert "ok" not in out.stdout
