"""Signals that reach the `pgfleet` command while Python imports pgfleet itself (its
driver, pydantic, click): about a second idle, 5-8 s at load average 8 (outside trial
T11c). A TERM or a HUP there ended `pgfleet run` with 143 or 129 and nothing logged.
tests/support/slow_driver makes the driver's import take seconds and says when it began,
so each signal here lands inside pgfleet's own imports."""

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


def test_a_term_while_pgfleet_run_imports_pgfleet_stops_it_cleanly(
        fleet: Callable[..., Fleet], marker: Path) -> None:
    f = fleet({"default": {"processes": 1}})
    wait_for(marker.exists)
    f.signal(signal.SIGTERM)
    assert f.wait(30) == 0, f.log()[-2000:]
    log = f.log()
    assert "SIGTERM: stopping gracefully" in log and "supervisor stopped" in log, log[-2000:]
    assert "spawned" not in log, log[-2000:]


def test_a_hup_while_pgfleet_run_imports_pgfleet_is_a_reload(
        fleet: Callable[..., Fleet], marker: Path) -> None:
    f = fleet({"default": {"processes": 1}})
    wait_for(marker.exists)
    f.signal(signal.SIGHUP)
    f.wait_workers(1)
    wait_for(lambda: "reloading" in f.log())
    assert f.proc is not None and f.proc.poll() is None, f.log()[-2000:]
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
