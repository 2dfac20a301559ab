"""Signals that reach the `pgfleet` command before the supervisor runs: while Python
imports pgfleet itself (its driver, pydantic, click: about a second idle, 5-8 s at load
average 8, outside trial T11c) and while `pgfleet run`'s start-up checks import the task
modules (T10, T11b). A TERM or a HUP there ended `pgfleet run` with 143 or 129 and nothing
logged. tests/support/slow_driver and tests/support/slow_import make each phase take
seconds and say when it began, so each signal lands inside it."""

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

SLOW_DRIVER = Path(__file__).parents[1] / "support" / "slow_driver"


@pytest.fixture
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file a `pgfleet` process started from now on writes as it begins importing
    the driver, which then takes seconds."""
    path = tmp_path / "importing-the-driver"
    monkeypatch.setenv("PGFLEET_TEST_SLOW_DRIVER", str(path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(SLOW_DRIVER), *filter(None, [os.environ.get("PYTHONPATH")])]))
    return path


@pytest.fixture(params=["importing pgfleet", "start-up checks"])
def caught_early(request: pytest.FixtureRequest, fleet: Callable[..., Fleet],
                 tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fleet:
    """A `pgfleet run` caught in one phase before its supervisor runs."""
    if request.param == "importing pgfleet":
        path = request.getfixturevalue("marker")
        f = fleet({"default": {"processes": 1}})
    else:
        path = tmp_path / "importing-the-tasks"
        monkeypatch.setenv("PGFLEET_TEST_SLOW_IMPORT", str(path))
        f = fleet({"default": {"processes": 1}},
                  tasks=["tests.support.jobtasks", "tests.support.slow_import"],
                  schedules={"nightly": {"cron": "0 3 * * *", "task": "slow_import.noop"}})
    wait_for(path.exists)
    return f


def test_a_term_before_the_supervisor_runs_stops_it_cleanly(caught_early: Fleet) -> None:
    """It stops as soon as it runs, before starting any child."""
    f = caught_early
    f.signal(signal.SIGTERM)
    assert f.wait(30) == 0, f.log()[-2000:]
    log = f.log()
    assert "SIGTERM: stopping gracefully" in log and "supervisor stopped" in log, log[-2000:]
    assert "spawned" not in log, log[-2000:]


def test_a_hup_before_the_supervisor_runs_is_a_reload(caught_early: Fleet) -> None:
    f = caught_early
    f.signal(signal.SIGHUP)
    f.wait_workers(1)
    wait_for(lambda: "reloading" in f.log())
    assert f.proc is not None and f.proc.poll() is None, f.log()[-2000:]
    f.signal(signal.SIGTERM)
    assert f.wait(30) == 0, f.log()[-2000:]


def test_a_ttin_before_the_supervisor_runs_adds_a_worker_once_it_runs(
        caught_early: Fleet) -> None:
    """Outside trial T12: its default action suspended the process, which then ignored
    TERM until a SIGCONT."""
    f = caught_early
    f.signal(signal.SIGTTIN)
    f.wait_workers(2)
    f.signal(signal.SIGTERM)
    assert f.wait(30) == 0, f.log()[-2000:]


def _command_signalled_while_importing(marker: Path, tmp_path: Path, sig: int,
                                       *args: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "pgfleet.yaml"
    config.write_text(config_text({"default": {"processes": 1}}))
    proc = subprocess.Popen([sys.executable, "-m", "pgfleet", *args, "-c", str(config)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wait_for(marker.exists)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out)


def test_any_other_command_still_ends_on_a_term_that_came_while_it_imported(
        marker: Path, tmp_path: Path) -> None:
    """Only the supervisor acts on a kept signal itself; for the other commands a TERM
    still does what it always did, once pgfleet is imported."""
    done = _command_signalled_while_importing(marker, tmp_path, signal.SIGTERM, "check")
    assert done.returncode == -signal.SIGTERM, done.stdout


def test_a_ctrl_c_while_a_command_imports_aborts_it(marker: Path, tmp_path: Path) -> None:
    done = _command_signalled_while_importing(marker, tmp_path, signal.SIGINT, "check")
    assert done.returncode == 130, done.stdout
    assert done.stdout.strip().endswith("aborted"), done.stdout
