"""Values of `${VAR}` interpolations never appear in configuration errors, on the terminal
or in the supervisor's log after a HUP: a variable may hold a password."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.fleet import Fleet, config_text
from tests.support.workers import wait_for

SECRET = "hunter2-Sekrit!"
INVALID = """queues:
  default:
    tasks: ['${APP_SECRET}']
schedules:
  nightly:
    cron: '${APP_CRON}'
    task: noop
"""


def test_config_errors_show_the_variable_not_its_value(tmp_path: Path) -> None:
    config = tmp_path / "pgfleet.yaml"
    config.write_text(INVALID)
    out = subprocess.run([sys.executable, "-m", "pgfleet", "check", "-c", str(config)],
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "APP_SECRET": SECRET,
                              "APP_CRON": f"{SECRET} * * *"})
    assert out.returncode == 2, out.stderr
    assert SECRET not in out.stderr and SECRET not in out.stdout
    assert "got '${APP_SECRET}'" in out.stderr
    assert 'invalid cron expression "${APP_CRON}"' in out.stderr


def test_a_refused_reload_logs_the_variable_not_its_value(
        fleet: Callable[..., Fleet], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APP_SECRET", SECRET)
    monkeypatch.setenv("APP_CRON", f"{SECRET} * * *")
    f = fleet({"default": {"processes": 1}})
    f.wait_workers(1)
    f.config.write_text(config_text({"default": {"processes": 1, "tasks": ["${APP_SECRET}"]}}))
    f.signal(signal.SIGHUP)
    wait_for(lambda: "reload refused" in f.log())
    assert SECRET not in f.log()
    assert "${APP_SECRET}" in f.log()
