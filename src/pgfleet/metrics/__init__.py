"""Every metric pgfleet exports, declared once.

In a supervised run PROMETHEUS_MULTIPROC_DIR is set by the supervisor before any child
imports this module, so prometheus-client writes each process's values to that directory
and the exporter aggregates them. Labels stay bounded: queue, task (registered names only),
outcome, reason, schedule, host and kind of the registered processes, and the four kinds of
xmin horizon holder. Never a job id, pid, args or error text.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from pgfleet.metrics import storage as metrics_storage

# Before the first metric below touches a file: a full or read-only metrics directory
# must turn metrics off, not kill the process (SIGBUS) or raise from a metric call.
metrics_storage.install()

# 10 ms to 1 h, roughly 2.5 times per step.
TIME_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
                300.0, 600.0, 1800.0, 3600.0)

UNKNOWN_TASK_LABEL = "unknown"

# Counted from the database by every host's maintenance process, so like the queue gauges
# it is the same on every host: take max() over instances, not sum().
jobs_enqueued = Counter(
    "pgfleet_jobs_enqueued", "Jobs created (by anyone), counted from the database.", ["queue"]
)
jobs_started = Counter("pgfleet_jobs_started",
                       "Jobs a worker took to run, counted when claimed (prefetched ones too).",
                       ["queue", "task"])
jobs_finished = Counter(
    "pgfleet_jobs_finished",
    "Job attempts that ended, by outcome (succeeded, failed, timed_out, crashed, dead,"
    " cancelled, snoozed).",
    ["queue", "task", "outcome"],
)
job_retries = Counter(
    "pgfleet_job_retries", "Failed attempts that were scheduled to run again.", ["queue", "task"]
)
job_duration = Histogram(
    "pgfleet_job_duration_seconds", "Run time of a job attempt.", ["queue", "task"],
    buckets=TIME_BUCKETS,
)
job_wait = Histogram(
    "pgfleet_job_wait_seconds", "Start time minus due time.", ["queue"], buckets=TIME_BUCKETS
)
lease_lost = Counter(
    "pgfleet_jobs_lease_lost",
    "Completions refused because the job was no longer held by this worker.", ["queue"],
)
workers = Gauge(
    "pgfleet_workers", "Worker processes alive.", ["queue"], multiprocess_mode="livesum"
)
workers_busy = Gauge(
    "pgfleet_workers_busy", "Jobs running now.", ["queue"], multiprocess_mode="livesum"
)
claim_lock_timeouts = Counter(
    "pgfleet_claim_lock_timeouts",
    "Claims that gave up waiting for their queue's flow-control lock, held by a session"
    " that stopped talking.", ["queue"],
)
claims_held = Gauge(
    "pgfleet_claims_held_seconds",
    "Seconds until claims resume after the database changed under the fleet (a failover"
    " or a restore: a new WAL timeline or system identifier); 0 when they are not held.",
    multiprocess_mode="livemax",
)
jobs_rescued = Counter(
    "pgfleet_jobs_rescued", "Jobs given back from a dead worker or an expired lease.", ["queue"]
)
worker_restarts = Counter(
    "pgfleet_worker_restarts",
    "Worker processes replaced, by reason (crashed, killed, timeout, recycled, stale, "
    "start_failed, lease_lost, exited).",
    ["queue", "reason"],
)
queue_failed = Gauge(
    "pgfleet_queue_failed",
    "1 when a queue stopped restarting after repeated start failures or crashes.",
    ["queue"], multiprocess_mode="livemax",
)
supervisor_up = Gauge(
    "pgfleet_supervisor_up", "1 while this host's supervisor runs.",
    multiprocess_mode="livemax",
)
build_info = Gauge(
    "pgfleet_build_info", "The running pgfleet version.", ["version"],
    multiprocess_mode="livemax",
)


@dataclass(frozen=True)
class DatabaseGauge:
    """A gauge read from the database at scrape time by the exporter (exporter/database.py),
    never written by a process: multiprocess files cannot drop a label set, and these must
    vanish when the database cannot be read or a queue no longer exists."""

    name: str
    documentation: str
    labels: tuple[str, ...] = ()


# 1 when this host's exporter reached the database on its last check, 0 when it failed.
# A slow or failed read is not a database down: pgfleet_database_read_failed tells it.
database_up = DatabaseGauge(
    "pgfleet_database_up",
    "1 when this host's last database check connected and answered, 0 when it could not"
    " connect or lost the connection."
)
# Per host, like database_up: present while database_up is 1.
database_read_failed = DatabaseGauge(
    "pgfleet_database_read_failed",
    "1 when this host's last read of these gauges failed on its statement (timed out,"
    " waited for a lock, refused) while the database was up; its gauges are then absent.",
    ("read",),
)
# The gauges below come from the database and are the same on every host: dashboards take
# max() over instances, never sum(). They are absent while the database cannot be read.
queue_jobs = DatabaseGauge(
    "pgfleet_queue_jobs", "Jobs per queue and state (queued = due now, scheduled = later).",
    ("queue", "state"),
)
queue_oldest_age = DatabaseGauge(
    "pgfleet_queue_oldest_job_age_seconds", "Age of the oldest due job waiting.", ("queue",)
)
queue_paused = DatabaseGauge("pgfleet_queue_paused", "1 when the queue is paused.", ("queue",))
# From the processes table, so every host exports every host's row: max() over instances.
# `host` is the name the processes register with (socket.gethostname()), not Prometheus's
# `instance`; a host that stops beating shows a growing age until its rows are pruned.
process_heartbeat_age = DatabaseGauge(
    "pgfleet_process_heartbeat_age_seconds",
    "Seconds since the stalest heartbeat of a host's processes of one kind (supervisor, "
    "maintenance, worker), from the database.",
    ("host", "kind"),
)
# Flow control (docs/flow-control.md), for queues with published limits. `limit` is
# global_concurrency, rate_limit or key_concurrency.
flow_limit = DatabaseGauge(
    "pgfleet_flow_limit",
    "A queue's published limit: running jobs (global_concurrency), starts per window "
    "(rate_limit) or running jobs per key (key_concurrency).",
    ("queue", "limit"),
)
flow_in_use = DatabaseGauge(
    "pgfleet_flow_in_use",
    "Current use of each limit: running jobs, starts in the current window, keys at their "
    "limit.",
    ("queue", "limit"),
)
flow_held_jobs = DatabaseGauge(
    "pgfleet_flow_held_jobs",
    "Due jobs that a limit alone holds back now.",
    ("queue", "limit"),
)

# The xmin horizon (docs/monitoring.md): while an old snapshot or transaction holds it,
# VACUUM keeps every row the fleet deleted or updated since, and each claim steps over
# them. One series per holder kind, 0 while none holds it: seconds for the kinds that have
# a start time, xids for every kind (a slot or a standby has no time).
XMIN_HOLDERS = ("backend", "prepared", "slot", "standby")
XMIN_TIMED_HOLDERS = ("backend", "prepared")
xmin_horizon_age = DatabaseGauge(
    "pgfleet_xmin_horizon_age_seconds",
    "How long the oldest transaction of each holder kind (backend, prepared) that holds"
    " back the xmin horizon of pgfleet's tables has been open; 0 when none.",
    ("holder",),
)
xmin_horizon_xids = DatabaseGauge(
    "pgfleet_xmin_horizon_age_xids",
    "Age in transaction ids of the oldest xmin each holder kind (backend, prepared, slot,"
    " standby) holds back for pgfleet's tables; 0 when none.",
    ("holder",),
)
jobs_dead_tuples = DatabaseGauge(
    "pgfleet_jobs_dead_tuples",
    "Dead rows of pgfleet.jobs not yet removed by VACUUM (pg_stat_user_tables.n_dead_tup).",
)
claim_index_bytes = DatabaseGauge(
    "pgfleet_claim_index_bytes", "Size on disk of the claim's index, jobs_claim_idx.",
)

DATABASE_GAUGES = (database_up, database_read_failed, queue_jobs, queue_oldest_age,
                   queue_paused, process_heartbeat_age, flow_limit, flow_in_use,
                   flow_held_jobs, xmin_horizon_age, xmin_horizon_xids, jobs_dead_tuples,
                   claim_index_bytes)

QUEUE_STATES = ("queued", "scheduled", "running", "dead")
# Queue names read from the database are data anyone with INSERT can choose: past this many
# distinct names a process folds the rest into one label so a scrape stays bounded.
QUEUE_LABEL_LIMIT = 200
OTHER_QUEUES_LABEL = "_other"
_queue_labels: set[str] = set()


def queue_label(name: str) -> str:
    if name in _queue_labels:
        return name
    if len(_queue_labels) >= QUEUE_LABEL_LIMIT or len(name) > 128:
        return OTHER_QUEUES_LABEL
    _queue_labels.add(name)
    return name


# Task names on the rescue path come from the database, where the maintenance process
# cannot tell registered from chosen ones (it does not import task code): like queue names
# they are bounded, past this many distinct names one label takes the rest.
TASK_LABEL_LIMIT = 100
_task_labels: set[str] = set()


def task_label(name: str) -> str:
    """A task name read back from the database, bounded for use as a label."""
    if name in _task_labels:
        return name
    if (len(_task_labels) >= TASK_LABEL_LIMIT or not 0 < len(name) <= 120
            or not name.isprintable()):
        return UNKNOWN_TASK_LABEL
    _task_labels.add(name)
    return name


schedule_runs = Counter(
    "pgfleet_schedule_runs", "Jobs enqueued by a schedule (by this host's scheduler).",
    ["schedule"],
)
schedule_last_run = Gauge(
    "pgfleet_schedule_last_run_timestamp_seconds",
    "Unix time of the schedule's last fire, from the database (same on every host).",
    ["schedule"], multiprocess_mode="livemostrecent",
)
schedule_next_run = Gauge(
    "pgfleet_schedule_next_run_timestamp_seconds",
    "Unix time of the schedule's next fire.", ["schedule"], multiprocess_mode="livemostrecent",
)


# Every label value a counter of a configured queue can take, so each series exists at 0 from
# the start: increase() cannot see the first event of a series born at 1.
WORKER_OUTCOMES = ("succeeded", "failed", "timed_out", "crashed", "dead", "cancelled",
                   "snoozed")
RESTART_REASONS = ("crashed", "killed", "timeout", "recycled", "stale", "start_failed",
                   "lease_lost", "exited")


def zero_worker_counters(queue: str, tasks: list[str]) -> None:
    """A worker's counters of its queue, per registered task and the unknown-task label.
    In multiprocess mode `.labels()` alone writes the 0 sample."""
    lease_lost.labels(queue)
    for task in [*tasks, UNKNOWN_TASK_LABEL]:
        label = task_label(task)
        jobs_started.labels(queue, label)
        job_retries.labels(queue, label)
        for outcome in WORKER_OUTCOMES:
            jobs_finished.labels(queue, label, outcome)


def zero_supervisor_counters(queues: list[str]) -> None:
    for queue in queues:
        for reason in RESTART_REASONS:
            worker_restarts.labels(queue, reason)


def zero_maintenance_counters(queues: list[str]) -> None:
    for queue in queues:
        label = queue_label(queue)
        jobs_enqueued.labels(label)
        jobs_rescued.labels(label)


def observe_many(child: Any, amounts: Sequence[float]) -> None:
    """Histogram.observe of each amount, written once per bucket touched instead of twice
    per amount. A worker observes two histograms for every job, and each write of a
    multiprocess value takes a lock, checks the pid and writes the file: in a drain of
    no-op jobs that is about a third of the worker's main thread (py-spy). Relies on
    prometheus-client's histogram children holding non-cumulative `_buckets` beside
    `_upper_bounds` and a `_sum` (0.20-0.26); tests/unit/test_metrics_batch.py compares
    the result with observe()."""
    bounds = child._upper_bounds
    counts = [0] * len(bounds)
    total = 0.0
    for amount in amounts:
        if amount != amount:  # NaN: no bucket would count it, and the sum would be lost
            continue
        # observe() counts an amount in the first bucket whose bound is >= it.
        counts[bisect_left(bounds, amount)] += 1
        total += amount
    if not any(counts):
        return
    child._sum.inc(total)
    for index, count in enumerate(counts):
        if count:
            child._buckets[index].inc(count)
