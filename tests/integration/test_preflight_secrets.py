"""Issue 15: the checks made after validation (task modules, schedule tasks, the web
section) quote values from the file; a value taken from the environment by `${VAR}` is
shown as the variable, never as its value, in `pgfleet check` and `pgfleet run`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# Valid as a module and task name, so the file passes validation and only the later
# checks can refuse it.
SECRET = "hunter2sekrit"
CONFIG = """tasks: ['tests.support.jobtasks']
queues:
  default:
    tasks: ['${APP_SECRET}']
schedules:
  nightly:
    cron: '0 3 * * *'
    task: '${APP_TASK}'
metrics: {enabled: false}
"""


def pgfleet(tmp_path: Path, text: str, *argv: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "pgfleet.yaml"
    config.write_text(text)
    return subprocess.run([sys.executable, "-m", "pgfleet", *argv, "-c", str(config)],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "APP_SECRET": SECRET,
                               "APP_TASK": f"{SECRET}_task"})


def test_check_names_the_variable_of_a_missing_module(tmp_path: Path) -> None:
    out = pgfleet(tmp_path, CONFIG, "check")
    assert out.returncode == 2, out.stderr
    assert SECRET not in out.stderr + out.stdout
    assert "queues.default.tasks[0]: no module named '${APP_SECRET}'" in out.stderr


def test_run_names_the_variable_of_an_unregistered_schedule_task(tmp_path: Path,
                                                                 dsn: str) -> None:
    out = pgfleet(tmp_path, CONFIG.replace("'${APP_SECRET}'", "'tests.support.jobtasks'"),
                  "run")
    assert out.returncode == 2, out.stderr
    assert SECRET not in out.stderr + out.stdout
    assert "task '${APP_TASK}' is not registered" in out.stderr
    assert dsn  # the run got as far as its checks: it had a database to start on
