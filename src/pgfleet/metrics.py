"""Every metric pgfleet exports, declared once.

In a supervised run PROMETHEUS_MULTIPROC_DIR is set by the supervisor before any child
imports this module, so prometheus-client writes each process's values to that directory
and the exporter aggregates them. Labels stay bounded: queue, task (registered names only),
outcome, reason, schedule. Never a job id, pid, args or error text.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

# 10 ms to 1 h, roughly 2.5 times per step.
TIME_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
                300.0, 600.0, 1800.0, 3600.0)

UNKNOWN_TASK_LABEL = "unknown"

jobs_enqueued = Counter(
    "pgfleet_jobs_enqueued", "Jobs created, counted from the database.", ["queue"]
)
jobs_started = Counter("pgfleet_jobs_started", "Jobs a worker started.", ["queue", "task"])
jobs_finished = Counter(
    "pgfleet_jobs_finished",
    "Job attempts that ended, by outcome (succeeded, failed, timed_out, crashed, dead).",
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
jobs_rescued = Counter(
    "pgfleet_jobs_rescued", "Jobs given back from a dead worker or an expired lease.", ["queue"]
)
worker_restarts = Counter(
    "pgfleet_worker_restarts",
    "Worker processes replaced, by reason (crashed, killed, timeout, recycled, stale, "
    "start_failed).",
    ["queue", "reason"],
)
queue_failed = Gauge(
    "pgfleet_queue_failed", "1 when a queue stopped restarting after repeated start failures.",
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
# The gauges below come from the database and are the same on every host: dashboards take
# max() over instances, never sum().
queue_jobs = Gauge(
    "pgfleet_queue_jobs", "Jobs per queue and state (queued = due now, scheduled = later).",
    ["queue", "state"], multiprocess_mode="livemostrecent",
)
queue_oldest_age = Gauge(
    "pgfleet_queue_oldest_job_age_seconds", "Age of the oldest due job waiting.", ["queue"],
    multiprocess_mode="livemostrecent",
)
queue_paused = Gauge(
    "pgfleet_queue_paused", "1 when the queue is paused.", ["queue"],
    multiprocess_mode="livemostrecent",
)

QUEUE_STATES = ("queued", "scheduled", "running", "dead")
_TASK_LABEL_LIMIT = 120


def task_label(name: str) -> str:
    """A task name read back from the database, bounded for use as a label."""
    return name if 0 < len(name) <= _TASK_LABEL_LIMIT else UNKNOWN_TASK_LABEL


def set_queue_gauges(
    *,
    counts: list[tuple[str, str, int]],
    oldest: dict[str, float],
    paused: set[str],
    known: set[str],
) -> None:
    """Publish one maintenance pass; queues seen before but now empty read 0, not stale."""
    queues = known | {c[0] for c in counts} | set(oldest) | paused
    by_key = {(queue, state): n for queue, state, n in counts}
    for queue in queues:
        for state in QUEUE_STATES:
            queue_jobs.labels(queue, state).set(by_key.get((queue, state), 0))
        queue_oldest_age.labels(queue).set(oldest.get(queue, 0.0))
        queue_paused.labels(queue).set(1 if queue in paused else 0)
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
