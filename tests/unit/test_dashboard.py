"""Static checks of the Grafana dashboard shipped in grafana/dashboards/pgfleet.json."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from pgfleet import metrics
from tests.support import metric_names

REPO_ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = REPO_ROOT / "grafana" / "dashboards" / "pgfleet.json"
PROVISIONING = REPO_ROOT / "grafana" / "provisioning"

KNOWN_METRICS = metric_names.KNOWN_METRICS

# Read from the database and exported identically by every host: summing them across
# instances multiplies the value by the number of hosts.
DATABASE_GAUGES = {
    "pgfleet_jobs_enqueued_total",
    "pgfleet_queue_jobs",
    "pgfleet_queue_oldest_job_age_seconds",
    "pgfleet_schedule_last_run_timestamp_seconds",
    "pgfleet_schedule_next_run_timestamp_seconds",
    "pgfleet_queue_paused",
    "pgfleet_process_heartbeat_age_seconds",
    "pgfleet_flow_limit",
    "pgfleet_flow_in_use",
    "pgfleet_flow_held_jobs",
    "pgfleet_xmin_horizon_age_seconds",
    "pgfleet_xmin_horizon_age_xids",
    "pgfleet_jobs_dead_tuples",
    "pgfleet_claim_index_bytes",
}

# Metrics without a queue label; all others must honour the $queue variable.
QUEUELESS_METRICS = {
    "pgfleet_schedule_runs_total",
    "pgfleet_schedule_last_run_timestamp_seconds",
    "pgfleet_schedule_next_run_timestamp_seconds",
    "pgfleet_supervisor_up",
    "pgfleet_build_info",
    "pgfleet_database_up",
    "pgfleet_database_read_failed",
    "pgfleet_process_heartbeat_age_seconds",
    "pgfleet_xmin_horizon_age_seconds",
    "pgfleet_xmin_horizon_age_xids",
    "pgfleet_jobs_dead_tuples",
    "pgfleet_claim_index_bytes",
}

AGGREGATIONS = {
    "sum", "avg", "max", "min", "count", "group", "stddev", "stdvar",
    "topk", "bottomk", "quantile", "count_values",
}  # fmt: skip

DATASOURCE_REF = {"type": "prometheus", "uid": "${datasource}"}

_TOKEN = re.compile(
    r'"(?:\\.|[^"\\])*"'  # string literal
    r"|\{[^}]*\}"  # label matchers
    r"|\[[^\]]*\]"  # range / subquery
    r"|[A-Za-z_:][A-Za-z0-9_:]*"  # identifier
    r"|[()]"
)


def base_metric(name: str) -> str:
    return re.sub(r"_(bucket|count|sum)$", "", name)


def metric_names(expr: str) -> set[str]:
    return {base_metric(name) for name in re.findall(r"pgfleet_[a-z_]+", expr)}


def innermost_aggregations(expr: str) -> list[tuple[str, str | None]]:
    """Return (metric, innermost enclosing aggregation operator or None) for each selector."""
    stack: list[str] = []
    result: list[tuple[str, str | None]] = []
    prev: str | None = None
    grouping_owner: str | None = None  # aggregation owning the `by (...)` just closed
    owner_of_by: str | None = None  # aggregation written just before `by` / `without`
    for token in _TOKEN.findall(expr):
        if token == "(":
            if prev in AGGREGATIONS:
                kind = prev
            elif prev in {"by", "without"}:
                kind = "grouping"
            elif prev == ")" and grouping_owner:
                kind = grouping_owner
            else:
                kind = "paren"
            stack.append(kind)
            grouping_owner = None
        elif token == ")":
            closed = stack.pop() if stack else "paren"
            grouping_owner = owner_of_by if closed == "grouping" else None
        elif token in {"by", "without"}:
            owner_of_by = prev if prev in AGGREGATIONS else None
        elif token.startswith("pgfleet_"):
            enclosing = [kind for kind in stack if kind in AGGREGATIONS]
            result.append((token, enclosing[-1] if enclosing else None))
        if not token.startswith(("{", "[", '"')):
            prev = token
    return result


def test_innermost_aggregation_parser() -> None:
    assert innermost_aggregations("sum(max by (queue) (pgfleet_queue_jobs))") == [
        ("pgfleet_queue_jobs", "max")
    ]
    assert innermost_aggregations('sum by (queue) (pgfleet_queue_jobs{state="x"})') == [
        ("pgfleet_queue_jobs", "sum")
    ]
    assert innermost_aggregations("sum(pgfleet_queue_jobs) by (queue)") == [
        ("pgfleet_queue_jobs", "sum")
    ]
    assert innermost_aggregations("max(sum by (queue) (pgfleet_queue_paused))") == [
        ("pgfleet_queue_paused", "sum")
    ]
    assert innermost_aggregations("time() - pgfleet_schedule_last_run_timestamp_seconds") == [
        ("pgfleet_schedule_last_run_timestamp_seconds", None)
    ]


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def all_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    panels: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))  # collapsed rows nest their panels
    return panels


def data_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [panel for panel in all_panels(dashboard) if panel["type"] != "row"]


def all_exprs(dashboard: dict[str, Any]) -> list[str]:
    return [target["expr"] for panel in data_panels(dashboard) for target in panel["targets"]]


def test_dashboard_identity(dashboard: dict[str, Any]) -> None:
    assert "__inputs" not in dashboard
    assert "__requires" not in dashboard
    assert dashboard["uid"] == "pgfleet-overview"
    assert dashboard["title"] == "pgfleet"
    assert 36 <= dashboard["schemaVersion"] <= 41
    assert "${DS_" not in DASHBOARD.read_text()


def test_template_variables(dashboard: dict[str, Any]) -> None:
    variables = {var["name"]: var for var in dashboard["templating"]["list"]}
    datasource = variables["datasource"]
    assert datasource["type"] == "datasource"
    assert datasource["query"] == "prometheus"
    queue = variables["queue"]
    assert queue["type"] == "query"
    assert queue["datasource"] == DATASOURCE_REF
    query = queue["query"]
    query_text = query["query"] if isinstance(query, dict) else query
    # A database gauge: lists every configured queue, also one that never started a job
    # (paused, or its workers cannot start).
    assert query_text == "label_values(pgfleet_queue_jobs, queue)"
    assert queue["includeAll"] is True
    assert queue["multi"] is True
    assert queue["allValue"] == ".*"


def test_panels_have_datasource_and_targets(dashboard: dict[str, Any]) -> None:
    panels = data_panels(dashboard)
    assert len(panels) >= 15
    for panel in panels:
        title = panel["title"]
        assert panel["type"] in {"timeseries", "stat"}, title
        assert panel["datasource"] == DATASOURCE_REF, title
        targets = panel["targets"]
        assert targets, title
        ref_ids = [target["refId"] for target in targets]
        assert len(ref_ids) == len(set(ref_ids)), title
        for target in targets:
            assert target.get("expr", "").strip(), title
            assert target.get("datasource", DATASOURCE_REF) == DATASOURCE_REF, title


def test_panel_ids_and_layout(dashboard: dict[str, Any]) -> None:
    panels = all_panels(dashboard)
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps another panel"
                cells.add((x, y))


def test_required_panels_present(dashboard: dict[str, Any]) -> None:
    exprs = "\n".join(all_exprs(dashboard))
    for needle in (
        "sum by (outcome) (rate(pgfleet_jobs_finished_total",
        "rate(pgfleet_jobs_enqueued_total",
        "rate(pgfleet_job_retries_total",
        "max by (queue, state) (pgfleet_queue_jobs",
        "max by (queue) (pgfleet_queue_oldest_job_age_seconds",
        "sum by (le, queue) (rate(pgfleet_job_wait_seconds_bucket",
        "rate(pgfleet_job_duration_seconds_bucket",
        "pgfleet_workers{",
        "pgfleet_workers_busy{",
        "sum by (queue, reason) (rate(pgfleet_worker_restarts_total",
        "rate(pgfleet_jobs_rescued_total",
        "rate(pgfleet_schedule_runs_total",
        "time() - max by (schedule) (pgfleet_schedule_last_run_timestamp_seconds)",
        "pgfleet_supervisor_up",
        "pgfleet_queue_failed",
        # dead jobs: how many there are and how fast they come
        'max by (queue) (pgfleet_queue_jobs{queue=~"$queue", state="dead"})',
        'sum by (queue) (rate(pgfleet_jobs_finished_total{queue=~"$queue", outcome="dead"}',
        # hosts: supervisors (0 while not scraped), workers, heartbeat age
        "max by (instance) (pgfleet_supervisor_up) or max by (instance) (up{",
        'sum by (instance, queue) (pgfleet_workers{queue=~"$queue"})',
        "max by (host, kind) (pgfleet_process_heartbeat_age_seconds)",
        # database reachability, lost leases
        "min by (instance) (pgfleet_database_up)",
        "min(pgfleet_database_up)",
        'sum by (queue) (rate(pgfleet_jobs_lease_lost_total{queue=~"$queue"}',
        # flow control: each limit beside its use, and what each holds back
        'max by (queue) (pgfleet_flow_in_use{queue=~"$queue", limit="global_concurrency"})',
        'max by (queue) (pgfleet_flow_limit{queue=~"$queue", limit="global_concurrency"})',
        'max by (queue) (pgfleet_flow_in_use{queue=~"$queue", limit="rate_limit"})',
        'max by (queue) (pgfleet_flow_limit{queue=~"$queue", limit="rate_limit"})',
        'max by (queue) (pgfleet_flow_in_use{queue=~"$queue", limit="key_concurrency"})',
        'max by (queue, limit) (pgfleet_flow_held_jobs{queue=~"$queue"})',
        # vacuum: who holds the xmin horizon, for how long, and what it costs the claim
        "max by (holder) (pgfleet_xmin_horizon_age_seconds)",
        "max by (holder) (pgfleet_xmin_horizon_age_xids)",
        "max(pgfleet_jobs_dead_tuples)",
        "max(pgfleet_claim_index_bytes)",
    ):
        assert needle in exprs, needle
    for quantile in ("0.5", "0.95", "0.99"):
        assert exprs.count(f"histogram_quantile({quantile},") == 2, quantile


def test_only_known_metrics(dashboard: dict[str, Any]) -> None:
    for expr in all_exprs(dashboard):
        unknown = metric_names(expr) - KNOWN_METRICS
        assert not unknown, f"{expr}: unknown metrics {unknown}"


def test_rates_use_rate_interval(dashboard: dict[str, Any]) -> None:
    for expr in all_exprs(dashboard):
        for window in re.findall(r"\b(?:rate|increase|irate)\([^\[]*\[([^\]]+)\]", expr):
            assert window == "$__rate_interval", expr


def test_queue_variable_applied(dashboard: dict[str, Any]) -> None:
    for expr in all_exprs(dashboard):
        for name, matchers in re.findall(r"(pgfleet_[a-z_]+)(\{[^}]*\})?", expr):
            if base_metric(name) in QUEUELESS_METRICS:
                continue
            assert 'queue=~"$queue"' in matchers, f"{name} in {expr}"


OUTCOMES = ("succeeded", "failed", "timed_out", "crashed", "dead")


def outcomes_selected(matchers: str) -> set[str]:
    """The outcomes a pgfleet_jobs_finished_total selector's label matchers let through."""
    selected = set(OUTCOMES)
    for op, value in re.findall(r'outcome\s*(=~|!~|!=|=)\s*"([^"]*)"', matchers):
        match = {o for o in OUTCOMES if re.fullmatch(value, o)}
        selected &= {"=": {value}, "!=": set(OUTCOMES) - {value}, "=~": match,
                     "!~": set(OUTCOMES) - match}[op]
    return selected


def test_dead_is_never_added_to_attempt_outcomes(dashboard: dict[str, Any]) -> None:
    # A dead job's last attempt is counted as failed, timed_out or crashed *and* as dead:
    # a selector mixing dead with the others counts that attempt twice.
    assert outcomes_selected('{outcome!="dead"}') == set(OUTCOMES) - {"dead"}
    assert outcomes_selected('{queue=~"x", outcome=~"failed|dead"}') == {"failed", "dead"}
    for expr in all_exprs(dashboard):
        for matchers in re.findall(r"pgfleet_jobs_finished_total(\{[^}]*\})?", expr):
            selected = outcomes_selected(matchers)
            assert selected == {"dead"} or "dead" not in selected, expr


def test_database_gauges_never_summed_across_hosts(dashboard: dict[str, Any]) -> None:
    for expr in all_exprs(dashboard):
        for metric, aggregation in innermost_aggregations(expr):
            if metric in DATABASE_GAUGES:
                assert aggregation == "max", f"{metric} must be wrapped in max by: {expr}"


def test_exprs_are_valid_promql(dashboard: dict[str, Any], tmp_path: Path) -> None:
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    rules = [
        {
            "record": f"pgfleet_dashboard:check_{index}",
            "expr": expr.replace("$__rate_interval", "1m").replace("$queue", ".*"),
        }
        for index, expr in enumerate(all_exprs(dashboard))
    ]
    rules_file = tmp_path / "dashboard_exprs.yml"
    rules_file.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run(
        [promtool, "check", "rules", str(rules_file)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_provisioning_files() -> None:
    datasources = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yaml").read_text())
    (source,) = datasources["datasources"]
    assert source["name"] == "Prometheus"
    assert source["type"] == "prometheus"
    assert source["uid"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"
    providers = yaml.safe_load((PROVISIONING / "dashboards" / "pgfleet.yaml").read_text())
    (provider,) = providers["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"


def panel_by_title(dashboard: dict[str, Any], title: str) -> dict[str, Any]:
    [panel] = [p for p in data_panels(dashboard) if p["title"] == title]
    return panel


def promtool_eval(tmp_path: Path, series: dict[str, str],
                  cases: list[tuple[str, list[tuple[str, float]]]]) -> None:
    """Evaluate dashboard expressions in promtool against `series` (one value each, the
    same for 10 minutes) and compare the samples at 5m with the expected (labels, value)."""
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    (tmp_path / "none.yml").write_text("groups: []\n")
    tests = {
        "rule_files": ["none.yml"],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [{"series": name, "values": f"{value}+0x10"}
                             for name, value in series.items()],
            "promql_expr_test": [
                {"expr": expr.replace("$__rate_interval", "1m").replace("$queue", ".*"),
                 "eval_time": "5m",
                 "exp_samples": [{"labels": labels, "value": value}
                                 for labels, value in expected]}
                for expr, expected in cases
            ],
        }],
    }
    test_file = tmp_path / "dashboard_test.yml"
    test_file.write_text(yaml.safe_dump(tests))
    result = subprocess.run([promtool, "test", "rules", str(test_file)], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_queue_paused_on_purpose_does_not_turn_oldest_waiting_red(
    dashboard: dict[str, Any], tmp_path: Path
) -> None:
    stat = panel_by_title(dashboard, "Oldest waiting job (not paused)")
    steps = stat["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert steps[-1] == {"color": "red", "value": 300}  # PgfleetBacklogTooOld's threshold
    chart = panel_by_title(dashboard, "Oldest waiting job age")
    working, paused = chart["targets"]
    assert paused["legendFormat"].endswith("(paused)")
    [override] = chart["fieldConfig"]["overrides"]
    assert override["matcher"] == {"id": "byFrameRefID", "options": paused["refId"]}
    assert {"id": "color", "value": {"mode": "fixed", "fixedColor": "#8e8e8e"}} in override[
        "properties"]
    series = {}
    for host in ("a:9464", "b:9464"):
        for queue, age, flag in (("emails", "30", "0"), ("held", "5000", "1")):
            labels = f'instance="{host}",job="pgfleet",queue="{queue}"'
            series[f"pgfleet_queue_oldest_job_age_seconds{{{labels}}}"] = age
            series[f"pgfleet_queue_paused{{{labels}}}"] = flag
    promtool_eval(tmp_path, series, [
        (stat["targets"][0]["expr"], [("{}", 30)]),
        (working["expr"], [('{queue="emails"}', 30)]),
        (paused["expr"], [('{queue="held"}', 5000)]),
    ])


def test_a_host_that_is_not_scraped_shows_0_supervisors(
    dashboard: dict[str, Any], tmp_path: Path
) -> None:
    [target] = panel_by_title(dashboard, "Supervisors up per host")["targets"]
    promtool_eval(tmp_path, {
        'up{instance="a:9464",job="pgfleet"}': "1",
        'pgfleet_supervisor_up{instance="a:9464",job="pgfleet"}': "1",
        'up{instance="b:9464",job="pgfleet"}': "0",
    }, [(target["expr"], [('{instance="a:9464"}', 1), ('{instance="b:9464"}', 0)])])


def test_every_database_gauge_is_on_the_dashboard_and_never_summed(
    dashboard: dict[str, Any]
) -> None:
    """A gauge the exporter reads from the database (pgfleet.metrics.DATABASE_GAUGES, the
    flow-control ones among them) is shown, and counted as one per database, not per host."""
    exprs = "\n".join(all_exprs(dashboard))
    for gauge in metrics.DATABASE_GAUGES:
        assert gauge.name in exprs, gauge.name
        # Each host's own check and reads.
        if gauge.name not in {"pgfleet_database_up", "pgfleet_database_read_failed"}:
            assert gauge.name in DATABASE_GAUGES, gauge.name


def test_flow_panels_show_one_value_per_queue_whatever_the_hosts(
    dashboard: dict[str, Any], tmp_path: Path
) -> None:
    """Two hosts export the same flow gauges: each panel shows them once per queue and
    limit (max over hosts, not their sum), and only the limit it is about."""
    series = {}
    for host in ("a:9464", "b:9464"):
        for limit, value, used, held in (("global_concurrency", 4, 4, 118),
                                         ("rate_limit", 100, 37, 0),
                                         ("key_concurrency", 1, 3, 9)):
            labels = f'instance="{host}",job="pgfleet",queue="api",limit="{limit}"'
            series[f"pgfleet_flow_limit{{{labels}}}"] = str(value)
            series[f"pgfleet_flow_in_use{{{labels}}}"] = str(used)
            series[f"pgfleet_flow_held_jobs{{{labels}}}"] = str(held)
    cases: list[tuple[str, list[tuple[str, float]]]] = []
    for title, used, limit in (("Running vs global concurrency", 4, 4),
                               ("Starts in the rate window vs rate limit", 37, 100),
                               ("Keys at their limit", 3, 1)):
        in_use, of_limit = panel_by_title(dashboard, title)["targets"]
        cases += [(in_use["expr"], [('{queue="api"}', used)]),
                  (of_limit["expr"], [('{queue="api"}', limit)])]
    [held] = panel_by_title(dashboard, "Jobs held back by each limit")["targets"]
    cases.append((held["expr"], [('{queue="api",limit="global_concurrency"}', 118),
                                 ('{queue="api",limit="rate_limit"}', 0),
                                 ('{queue="api",limit="key_concurrency"}', 9)]))
    promtool_eval(tmp_path, series, cases)
