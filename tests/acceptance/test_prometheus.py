"""A real Prometheus scraping a real `pgfleet run` under mixed traffic (issue 5, "Must show"):
every panel query of the Grafana dashboard returns data, the alert rules load and evaluate
in that server, and `promtool check metrics` accepts a raw scrape."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

import pgfleet
from pgfleet import metrics
from tests.support.cluster import started_cluster
from tests.support.fleet import Fleet, config_text, settle
from tests.support.prometheus import (
    PrometheusServer,
    check_metrics,
    free_port,
    has_value,
    http_get,
    reachable,
)
from tests.support.workers import wait_for

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "grafana" / "dashboards" / "pgfleet.json"
ALERTS = ROOT / "config" / "prometheus" / "alerts.yml"

# Scrape every second; $__rate_interval is at least four scrape intervals in Grafana.
RATE_INTERVAL = "15s"
SCRAPE_SECONDS = 20.0

QUEUES: dict[str, Any] = {
    "default": {"processes": 1, "threads": 4},  # succeeds, fails, retries; the schedule
    "crashy": {"processes": 1},  # segfaults: crashed, rescued, dead, restarts
    "slow": {"processes": 1, "timeout": "1s", "kill_grace": "1s"},  # timed out, replaced
    "held": {"processes": 1},  # paused: a backlog and an oldest waiting age
    "broken": {"tasks": ["tests.support.broken_tasks"]},  # cannot start: a failed queue
    # flow control: every limit published, jobs of one key held back by its key's limit
    "limited": {"processes": 1, "threads": 2, "global_concurrency": 2, "rate_limit": "100/s",
                "key_concurrency": 1},
}
SCHEDULES = {"tick": {"cron": "* * * * * *", "task": "noop", "queue": "default"}}

# Zeroed by every worker (metrics.zero_worker_counters), so present without traffic too:
# the traffic below makes the first five happen; cancelled and snoozed stay at zero.
OUTCOMES = {"succeeded", "failed", "timed_out", "crashed", "dead", "cancelled", "snoozed"}
ALERT_NAMES = {
    "PgfleetBacklogTooOld", "PgfleetDeadJobsIncreasing", "PgfleetWorkerCrashed",
    "PgfleetQueueCrashLooping", "PgfleetHostDown", "PgfleetNoSupervisor",
    "PgfleetDatabaseDown", "PgfleetScheduleMissed", "PgfleetXminHorizonHeld",
    "PgfleetXminHorizonHeldLong", "PgfleetXminHeldByReplication",
    "PgfleetJobsDeadTuplesGrowing", "PgfleetDatabaseReadFailed",
}  # fmt: skip

# Series the traffic must move, so the panels show real values and not only zeros.
LIVE_VALUES = [
    'max_over_time(sum by (queue) (pgfleet_workers_busy{queue="slow"})[1m:1s]) > 0',
    'sum by (queue) (pgfleet_workers{queue="default"}) > 0',
    'sum by (queue) (pgfleet_jobs_enqueued_total{queue="default"}) > 0',
    'sum by (queue) (pgfleet_job_retries_total{queue="default"}) > 0',
    'sum by (queue) (pgfleet_jobs_rescued_total{queue="crashy"}) > 0',
    'sum by (schedule) (pgfleet_schedule_runs_total{schedule="tick"}) > 0',
    'max by (queue) (pgfleet_queue_jobs{queue="held", state="queued"}) > 0',
    "max(pgfleet_claim_index_bytes) > 0",
    'max by (queue) (pgfleet_queue_oldest_job_age_seconds{queue="held"}) > 0',
    'max by (queue) (pgfleet_flow_limit{queue="limited", limit="global_concurrency"}) > 0',
    'max_over_time(max by (queue) (pgfleet_flow_in_use{queue="limited",'
    ' limit="key_concurrency"})[1m:1s]) > 0',
]


def panel_targets() -> list[tuple[str, str]]:
    """(panel title, expr) of every target of every panel, rows' nested panels included."""
    dashboard = json.loads(DASHBOARD.read_text())
    panels: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))
    found = [
        (str(panel.get("title", "")), str(target["expr"]))
        for panel in panels if panel.get("type") != "row"
        for target in panel.get("targets", []) if target.get("expr")
    ]
    assert len(found) >= 15, "the dashboard lost its panels"
    return found


def queue_variable_query() -> tuple[str, str]:
    """(metric, label) of the queue variable's `label_values(METRIC, LABEL)`."""
    dashboard = json.loads(DASHBOARD.read_text())
    [variable] = [v for v in dashboard["templating"]["list"] if v["name"] == "queue"]
    query = variable["query"]
    text = query["query"] if isinstance(query, dict) else query
    found = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", text)
    assert found, f"unexpected queue variable query {text!r}"
    return found[1], found[2]


def substitute(expr: str) -> str:
    """What Grafana sends for the default variable values (queue = All)."""
    for name, value in {"__rate_interval": RATE_INTERVAL, "__interval": "1s",
                        "__range": "5m", "queue": ".*", "datasource": "prometheus"}.items():
        expr = re.sub(rf"\$\{{{name}(:[a-z]+)?\}}|\[\[{name}\]\]|\${name}\b", value, expr)
    assert "$" not in expr, f"unknown template variable in {expr}"
    return expr


def metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\bpgfleet_[a-z_]+", expr))


def tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def pgfleet_cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pgfleet", *args], check=True, capture_output=True,
                   timeout=60)


class Traffic:
    """Enqueues a steady mix until stopped, so rates and quantiles have recent samples."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.stopping = threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, name="traffic", daemon=True)

    def _run(self) -> None:
        tick = 0
        try:
            while not self.stopping.is_set():
                pgfleet.enqueue(self.dsn, "noop", queue="default")
                if tick % 8 == 0:
                    pgfleet.enqueue(self.dsn, "sleep", {"seconds": 0.3}, queue="default")
                    pgfleet.enqueue(self.dsn, "fail", queue="default", max_attempts=2)
                    pgfleet.enqueue(self.dsn, "fail_once", queue="default")
                    pgfleet.enqueue(self.dsn, "noop", queue="held")
                    pgfleet.enqueue(self.dsn, "sleep", {"seconds": 0.5}, queue="limited",
                                    concurrency_key="k")
                if tick % 16 == 0:
                    pgfleet.enqueue(self.dsn, "crash", queue="crashy", max_attempts=2)
                    pgfleet.enqueue(self.dsn, "sleep", {"seconds": 30}, queue="slow",
                                    max_attempts=1)
                tick += 1
                self.stopping.wait(0.25)
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.errors.append(exc)

    def __enter__(self) -> Traffic:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopping.set()
        self.thread.join(30)


@pytest.fixture
def running(
    dsn: str, fleet: Callable[..., Fleet], tmp_path: Path
) -> Iterator[tuple[Fleet, PrometheusServer, str]]:
    """A supervisor with its exporter on a free port, and a Prometheus scraping it."""
    port = free_port()
    target = f"127.0.0.1:{port}"
    pgfleet_cli("queues", "pause", "held")
    folder = tmp_path / "prometheus"
    folder.mkdir()
    with PrometheusServer(folder, [target], [ALERTS]) as prometheus:
        # crashy is a crash loop on purpose, kept running to feed the crash panels: its
        # crashes must not mark it failed (supervisor.crash_limit has tests of its own).
        f = fleet(QUEUES, schedules=SCHEDULES,
                  metrics={"enabled": True, "listen": target},
                  supervisor={"crash_limit": {"count": 1000, "window": "1m"}})
        for queue in ("default", "crashy", "slow", "held", "limited"):
            f.wait_workers(1, queue, timeout=60)
        wait_for(lambda: reachable(f"http://{target}/metrics"), timeout=30)
        wait_for(prometheus.targets_up, timeout=30)
        yield f, prometheus, target


def test_every_dashboard_panel_has_data_in_a_real_prometheus(
    running: tuple[Fleet, PrometheusServer, str]
) -> None:
    f, prometheus, target = running
    targets = panel_targets()
    with Traffic(f.dsn) as traffic:
        settle(SCRAPE_SECONDS)

        def empty_panels() -> list[str]:
            return [f"{title}: {substitute(expr)}" for title, expr in targets
                    if not has_value(prometheus.query(substitute(expr)))]

        # A generous bound for the last samples to arrive, not a timing assertion.
        try:
            wait_for(lambda: not empty_panels(), timeout=20, interval=1.0)
        except AssertionError:
            empty = "\n  ".join(empty_panels())
            raise AssertionError(
                f"dashboard queries without data:\n  {empty}\n"
                f"scrapes: {prometheus.query('max_over_time(scrape_duration_seconds[1m])')} "
                f"{prometheus.query('count_over_time(up[1m])')}\n"
                f"supervisor log (end):\n{tail(f.log())}"
            ) from None

        # The traffic did what it is meant to: every outcome, crash and timeout restarts,
        # a paused and a failed queue — so no panel is non-empty only by `or vector(0)`.
        outcomes = prometheus.query("count by (outcome) (pgfleet_jobs_finished_total)")
        assert {s["metric"]["outcome"] for s in outcomes} == OUTCOMES
        reasons = prometheus.query("count by (reason) (pgfleet_worker_restarts_total)")
        assert {"crashed", "timeout"} <= {s["metric"]["reason"] for s in reasons}
        paused = prometheus.query("max by (queue) (pgfleet_queue_paused) == 1")
        assert [s["metric"]["queue"] for s in paused] == ["held"]
        failed = prometheus.query("max by (queue) (pgfleet_queue_failed) == 1")
        assert [s["metric"]["queue"] for s in failed] == ["broken"]
        zero = [expr for expr in LIVE_VALUES if not prometheus.query(expr)]
        assert not zero, f"only zeros where the traffic must show: {zero}\n" + "\n".join(
            f"{name}[1m]: {prometheus.query(name + '[1m]')}"
            for name in sorted(set().union(*map(metric_names, zero))))
        present = {s["metric"]["__name__"] for s in prometheus.query(
            'count by (__name__) ({__name__=~"pgfleet_.+"})')}
        referenced = set().union(*(metric_names(expr) for _, expr in targets))
        assert referenced <= present, f"never exported: {sorted(referenced - present)}"

        # The $queue variable's own query offers every configured queue.
        metric, label = queue_variable_query()
        values = prometheus.api(f"label/{label}/values", **{"match[]": metric})
        assert set(QUEUES) <= set(values), values

        # The alert rules load in this server and evaluate without errors.
        def alert_rules() -> dict[str, dict[str, Any]]:
            groups = {g["name"]: g for g in prometheus.rule_groups()}
            assert "pgfleet" in groups, f"alert group not loaded: {list(groups)}"
            return {r["name"]: r for r in groups["pgfleet"]["rules"] if r["type"] == "alerting"}

        assert set(alert_rules()) == ALERT_NAMES

        def unhealthy() -> dict[str, str]:
            return {name: f"{rule['health']} {rule.get('lastError', '')}".strip()
                    for name, rule in alert_rules().items() if rule["health"] != "ok"}

        try:
            wait_for(lambda: not unhealthy(), timeout=20, interval=0.5)
        except AssertionError:
            raise AssertionError(f"alert rules not healthy: {unhealthy()}") from None

        # promtool lints a raw scrape of the running exporter.
        status, body = http_get(f"http://{target}/metrics")
        assert status == 200
        lint = check_metrics(body)
        assert lint.returncode == 0, lint.stdout + lint.stderr
    assert not traffic.errors, traffic.errors


# ---- issue 14, "Must show": the first event fires its alert; an outage is visible -------

COUNTED_QUEUES: dict[str, Any] = {"default": {"processes": 1}, "crashy": {"processes": 1}}


def scrape_samples(target: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, body = http_get(f"http://{target}/metrics")
    assert status == 200, body
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body.decode())
            for s in family.samples}


def expected_zeros(queues: list[str], tasks: list[str]) -> set[tuple[str, tuple[Any, ...]]]:
    """Every counter series of the configured queues, each of which must exist at 0."""
    def key(name: str, **labels: str) -> tuple[str, tuple[Any, ...]]:
        return name, tuple(sorted(labels.items()))

    found = set()
    for queue in queues:
        found |= {key("pgfleet_jobs_enqueued_total", queue=queue),
                  key("pgfleet_jobs_rescued_total", queue=queue),
                  key("pgfleet_jobs_lease_lost_total", queue=queue)}
        found |= {key("pgfleet_worker_restarts_total", queue=queue, reason=reason)
                  for reason in metrics.RESTART_REASONS}
        for task in [*tasks, metrics.UNKNOWN_TASK_LABEL]:
            found |= {key("pgfleet_jobs_started_total", queue=queue, task=task),
                      key("pgfleet_job_retries_total", queue=queue, task=task)}
            found |= {key("pgfleet_jobs_finished_total", queue=queue, task=task, outcome=o)
                      for o in metrics.WORKER_OUTCOMES}
    return found


def firing(prometheus: PrometheusServer, alert: str) -> list[dict[str, str]]:
    return [a["labels"] for a in prometheus.api("alerts")["alerts"]
            if a["labels"]["alertname"] == alert and a["state"] == "firing"]


def test_counters_start_at_zero_and_the_first_dead_job_and_crash_fire_their_alerts(
    dsn: str, fleet: Callable[..., Fleet], tmp_path: Path
) -> None:
    target = f"127.0.0.1:{free_port()}"
    with PrometheusServer(tmp_path, [target], [ALERTS]) as prometheus:
        f = fleet(COUNTED_QUEUES, metrics={"enabled": True, "listen": target})
        for queue in COUNTED_QUEUES:
            f.wait_workers(1, queue, timeout=60)
        wait_for(lambda: reachable(f"http://{target}/metrics"), timeout=30)
        # Before any job: every counter of every configured queue, at 0.
        wanted = expected_zeros(list(COUNTED_QUEUES), ["noop", "fail", "crash"])

        def missing() -> list[Any]:
            samples = scrape_samples(target)
            return sorted(k for k in wanted if samples.get(k) != 0.0)

        try:
            wait_for(lambda: not missing(), timeout=30, interval=0.5)
        except AssertionError:
            raise AssertionError(f"counters not at 0 before any job: {missing()}") from None
        # Prometheus holds the zeros before the first event, as it would in production.
        for expr in ('pgfleet_jobs_finished_total{queue="default",outcome="dead",task="fail"}',
                     'pgfleet_worker_restarts_total{queue="crashy",reason="crashed"}'):
            wait_for(lambda expr=expr: prometheus.query(f"count_over_time({expr}[1m]) > 2"),
                     timeout=30, interval=0.5)
        assert not firing(prometheus, "PgfleetDeadJobsIncreasing")
        assert not firing(prometheus, "PgfleetWorkerCrashed")
        pgfleet.enqueue(f.dsn, "fail", queue="default", max_attempts=1)
        pgfleet.enqueue(f.dsn, "crash", queue="crashy", max_attempts=1)
        try:
            wait_for(lambda: firing(prometheus, "PgfleetDeadJobsIncreasing")
                     and firing(prometheus, "PgfleetWorkerCrashed"), timeout=60, interval=0.5)
        except AssertionError:
            raise AssertionError(
                f"alerts: {prometheus.api('alerts')}\nlog:\n{tail(f.log())}") from None
        assert {a["queue"] for a in firing(prometheus, "PgfleetDeadJobsIncreasing")} >= {
            "default"}
        assert {a["queue"] for a in firing(prometheus, "PgfleetWorkerCrashed")} == {"crashy"}


def shortened_for(alert: str, shipped: str, short: str, folder: Path) -> Path:
    """The shipped rules with `alert`'s `for:` cut from `shipped` to `short`: the real
    expression, labels and annotations fire end to end without waiting out the hold,
    whose length promtool tests (config/prometheus/alerts_test.yml, test_alert_rules.py)."""
    rules = yaml.safe_load(ALERTS.read_text())
    found = [rule for group in rules["groups"] for rule in group["rules"]
             if rule.get("alert") == alert]
    assert [rule["for"] for rule in found] == [shipped], found
    found[0]["for"] = short
    path = folder / "alerts-short-for.yml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False))
    return path


def test_an_unreachable_database_reads_0_and_fires_its_alert(tmp_path: Path) -> None:
    cluster = started_cluster()
    f: Fleet | None = None
    try:
        name = cluster.create_database(cluster.make_template())
        target = f"127.0.0.1:{free_port()}"
        rules = shortened_for("PgfleetDatabaseDown", "1m", "5s", tmp_path)
        with PrometheusServer(tmp_path, [target], [rules]) as prometheus:
            f = Fleet(cluster.url(name), tmp_path, config_text(
                {"default": {"processes": 1}}, metrics={"enabled": True, "listen": target}))
            f.start()
            f.wait_workers(1, "default", timeout=60)
            wait_for(lambda: prometheus.query("pgfleet_database_up == 1"), timeout=30)
            assert prometheus.query('pgfleet_queue_jobs{queue="default",state="queued"}')
            cluster.stop("fast")
            wait_for(lambda: prometheus.query("pgfleet_database_up == 0"), timeout=30)
            # Absent, not frozen: the database gauges left the scrape.
            wait_for(lambda: not prometheus.query("pgfleet_queue_jobs"), timeout=30)
            assert not prometheus.query("pgfleet_process_heartbeat_age_seconds")
            # `for: 1m` in the shipped rules, 5 s here: pending first, firing after it.
            wait_for(lambda: firing(prometheus, "PgfleetDatabaseDown"), timeout=60,
                     interval=0.5)
            assert prometheus.query("pgfleet_database_up == 0")
    finally:
        if f is not None:
            f.stop()
        cluster.destroy()


def test_a_held_xmin_horizon_fires_its_alert_and_clears_when_the_holder_ends(
        tmp_path: Path) -> None:
    # Holding the horizon bloats every table of the server: a cluster of this test's own.
    cluster = started_cluster()
    f: Fleet | None = None
    try:
        name = cluster.create_database(cluster.make_template())
        target = f"127.0.0.1:{free_port()}"
        # The shipped rule with its 300 s cut to 3 s: the real expression, labels and
        # annotations, without waiting five minutes (alerts_test.yml pins the 300 s).
        rules = yaml.safe_load(ALERTS.read_text())
        [rule] = [r for group in rules["groups"] for r in group["rules"]
                  if r.get("alert") == "PgfleetXminHorizonHeld"]
        assert rule["expr"].strip().endswith("> 300")
        rule["expr"] = rule["expr"].strip()[:-len("300")] + "3"
        short = tmp_path / "alerts-short-threshold.yml"
        short.write_text(yaml.safe_dump(rules, sort_keys=False))
        with PrometheusServer(tmp_path, [target], [short]) as prometheus:
            f = Fleet(cluster.url(name), tmp_path, config_text(
                {"default": {"processes": 1}}, metrics={"enabled": True, "listen": target}))
            f.start()
            f.wait_workers(1, "default", timeout=60)
            wait_for(lambda: prometheus.query(
                'pgfleet_xmin_horizon_age_seconds{holder="backend"}'), timeout=30)
            assert not firing(prometheus, "PgfleetXminHorizonHeld")
            report = psycopg.connect(cluster.dsn(name), application_name="report")
            try:
                report.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
                report.execute("SELECT count(*) FROM pgfleet.jobs")
                wait_for(lambda: firing(prometheus, "PgfleetXminHorizonHeld"), timeout=60,
                         interval=0.5)
                assert [a["holder"] for a in firing(prometheus, "PgfleetXminHorizonHeld")] == [
                    "backend"]
            finally:
                report.close()
            wait_for(lambda: not firing(prometheus, "PgfleetXminHorizonHeld"), timeout=60,
                     interval=0.5)
            assert prometheus.query('pgfleet_xmin_horizon_age_seconds{holder="backend"} < 3')
    finally:
        if f is not None:
            f.stop()
        cluster.destroy()
