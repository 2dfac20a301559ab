"""config/systemd/pgfleet.service: a clean stop on `systemctl stop`, restart on failure."""

from __future__ import annotations

import configparser
import re
import subprocess
from pathlib import Path

from pgfleet.config import SupervisorConfig
from pgfleet.core.durations import parse_duration
from tests.support.tools import find_tool

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "config" / "systemd" / "pgfleet.service"


def _unit() -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(UNIT.read_text())
    return parser


def test_unit_stops_cleanly_and_restarts_on_failure() -> None:
    service = _unit()["Service"]
    assert service["Type"] in ("simple", "exec")
    assert service["KillSignal"] == "SIGTERM"
    assert service["KillMode"] == "mixed"  # TERM to the supervisor only; it stops its children
    assert service["Restart"] == "on-failure"
    assert service["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert " run -c " in service["ExecStart"]
    stop = parse_duration(service["TimeoutStopSec"])
    assert stop > SupervisorConfig().shutdown_timeout + 5  # the supervisor's own stop margin
    assert _unit()["Install"]["WantedBy"] == "multi-user.target"


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    # verify insists that ExecStart exists: point it at this environment's pgfleet.
    pgfleet = find_tool("pgfleet")
    assert pgfleet, "no pgfleet script beside the interpreter nor on PATH: pip install -e ."
    unit = tmp_path / "pgfleet.service"
    unit.write_text(UNIT.read_text().replace("/opt/pgfleet/bin/pgfleet", pgfleet))
    result = subprocess.run(["systemd-analyze", "verify", str(unit)],
                            capture_output=True, text=True, timeout=60)
    ours = [line for line in (result.stdout + result.stderr).splitlines()
            if "pgfleet.service" in line]
    assert result.returncode == 0 and not ours, result.stdout + result.stderr


def test_systemd_analyze_security_scores_at_most_two(tmp_path: Path) -> None:
    unit = tmp_path / "pgfleet.service"
    unit.write_text(UNIT.read_text())
    result = subprocess.run(["systemd-analyze", "security", "--offline=true", str(unit)],
                            capture_output=True, text=True, timeout=60)
    found = re.search(r"Overall exposure level for pgfleet\.service: (\d+\.\d+)", result.stdout)
    assert found, result.stdout + result.stderr
    assert float(found[1]) <= 2.0, result.stdout
