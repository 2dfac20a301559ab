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
