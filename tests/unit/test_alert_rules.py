"""Validate the Prometheus alert rules, their unit tests and the example config with promtool."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support import metric_names

REPO_ROOT = Path(__file__).resolve().parents[2]
PROM_DIR = REPO_ROOT / "config" / "prometheus"
ALERTS = PROM_DIR / "alerts.yml"
ALERTS_TEST = PROM_DIR / "alerts_test.yml"
PROM_CONFIG = PROM_DIR / "prometheus.yml"

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"

EXPECTED_ALERTS = {
    "PgfleetBacklogTooOld",
    "PgfleetDeadJobsIncreasing",
    "PgfleetWorkerCrashed",
    "PgfleetQueueCrashLooping",
    "PgfleetHostDown",
    "PgfleetNoSupervisor",
    "PgfleetDatabaseDown",
    "PgfleetScheduleMissed",
    "PgfleetXminHorizonHeld",
    "PgfleetXminHorizonHeldLong",
    "PgfleetXminHeldByReplication",
    "PgfleetJobsDeadTuplesGrowing",
    "PgfleetDatabaseReadFailed",
}

# Exported identically by every host (read from the database): aggregate with max.
DATABASE_GAUGES = (
    "pgfleet_queue_oldest_job_age_seconds",
    "pgfleet_queue_paused",
    "pgfleet_queue_jobs",
    "pgfleet_schedule_next_run_timestamp_seconds",
    "pgfleet_schedule_last_run_timestamp_seconds",
    "pgfleet_process_heartbeat_age_seconds",
    "pgfleet_xmin_horizon_age_seconds",
    "pgfleet_xmin_horizon_age_xids",
    "pgfleet_jobs_dead_tuples",
    "pgfleet_claim_index_bytes",
)

KNOWN_METRICS = metric_names.KNOWN_METRICS


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    # Run from the config directory as well: rule_files are relative to the config file,
    # and this proves that promtool does not depend on the working directory.
    return subprocess.run(
        [PROMTOOL, *args],
        cwd=PROM_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _assert_ok(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"


def _alert_rules() -> list[dict[str, object]]:
    data = yaml.safe_load(ALERTS.read_text())
    groups = {group["name"]: group for group in data["groups"]}
    assert "pgfleet" in groups
    return [rule for rule in groups["pgfleet"]["rules"] if "alert" in rule]


def test_promtool_is_installed() -> None:
    assert Path(PROMTOOL).exists(), "promtool is required (Debian package prometheus)"


def test_check_rules() -> None:
    _assert_ok(_promtool("check", "rules", str(ALERTS)))


def test_rule_unit_tests() -> None:
    result = _promtool("test", "rules", str(ALERTS_TEST))
    _assert_ok(result)
    assert "SUCCESS" in result.stdout + result.stderr


def test_check_config() -> None:
    result = _promtool("check", "config", str(PROM_CONFIG))
    _assert_ok(result)
    # The config references alerts.yml by a relative path; promtool must have found it.
    assert "1 rule files found" in result.stdout + result.stderr


def test_expected_alerts_are_defined() -> None:
    names = [str(rule["alert"]) for rule in _alert_rules()]
    assert len(names) == len(set(names))
    assert set(names) == EXPECTED_ALERTS


@pytest.mark.parametrize("name", sorted(EXPECTED_ALERTS))
def test_every_alert_has_a_unit_test_that_fires_and_one_that_does_not(name: str) -> None:
    data = yaml.safe_load(ALERTS_TEST.read_text())
    cases = [
        case
        for test in data["tests"]
        for case in test.get("alert_rule_test", [])
        if case["alertname"] == name
    ]
    assert any(case.get("exp_alerts") for case in cases), f"{name} never expected to fire"
    assert any(not case.get("exp_alerts") for case in cases), f"{name} never expected silent"


@pytest.mark.parametrize("rule", _alert_rules(), ids=lambda rule: str(rule["alert"]))
def test_alert_has_severity_annotations_and_known_metrics(rule: dict[str, object]) -> None:
    labels = rule.get("labels")
    annotations = rule.get("annotations")
    assert isinstance(labels, dict)
    assert isinstance(annotations, dict)
    assert labels.get("severity") in {"warning", "critical"}
    assert annotations.get("summary")
    assert annotations.get("description")
    expr = str(rule["expr"])
    for name in re.findall(r"pgfleet_[a-z_]+", expr):
        assert re.sub(r"_(bucket|count|sum)$", "", name) in KNOWN_METRICS, name
    # Database-backed gauges are identical on every host: aggregate with max, never sum.
    for gauge in DATABASE_GAUGES:
        if gauge in expr:
            assert re.search(rf"max by \([a-z_, ]+\) \({gauge}\b", expr), expr


def _documented_alerts() -> dict[str, list[str]]:
    """alert name -> test names, from the alerts table of docs/monitoring.md."""
    text = (REPO_ROOT / "docs" / "monitoring.md").read_text()
    rows = re.findall(r"^\| `(Pgfleet\w+)` \|(.*)\|$", text, re.M)
    return {name: [t.strip() for t in cells.split("|")[-1].split(";")] for name, cells in rows}


def test_monitoring_page_names_a_test_for_every_alert() -> None:
    documented = _documented_alerts()
    assert set(documented) == EXPECTED_ALERTS
    tests = yaml.safe_load(ALERTS_TEST.read_text())["tests"]
    alerts_of = {
        test["name"]: {case["alertname"] for case in test.get("alert_rule_test", [])}
        for test in tests
    }
    for alert, names in documented.items():
        for name in names:
            assert name in alerts_of, f"monitoring.md: {alert}: no test named {name!r}"
            assert alert in alerts_of[name], f"test {name!r} never evaluates {alert}"
