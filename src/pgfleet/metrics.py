"""Every metric pgfleet exports, declared once.

In a supervised run PROMETHEUS_MULTIPROC_DIR is set by the supervisor before any child
imports this module, so prometheus-client writes each process's values to that directory
and the exporter aggregates them. Labels stay bounded: queue, task (registered names only),
outcome, reason, schedule, and host and kind of the registered processes. Never a job id,
pid, args or error text.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

# 10 ms to 1 h, roughly 2.5 times per step.
TIME_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
                300.0, 600.0, 1800.0, 3600.0)

UNKNOWN_TASK_LABEL = "unknown"

# Counted from the database by every host's maintenance process, so like the queue gauges
# it is the same on every host: take max() over instances, not sum().
jobs_enqueued = Counter(
    "pgfleet_jobs_enqueued", "Jobs created (by anyone), counted from the database.", ["queue"]
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
    "start_failed, lease_lost, exited).",
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
# Whether this host reaches the database (1) or not (0). livemostrecent: the series is
# absent until a process has measured it and again once that process is gone, so a host
# that never checked shows nothing rather than a false 0; if more than one process measures
# it, the latest measurement wins.
database_up = Gauge(
    "pgfleet_database_up", "1 when this host's last database check answered, 0 when it failed.",
    multiprocess_mode="livemostrecent",
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
# From the processes table, so every host exports every host's row: max() over instances.
# `host` is the name the processes register with (socket.gethostname()), not Prometheus's
# `instance`; a host that stops beating shows a growing age until its rows are pruned.
process_heartbeat_age = Gauge(
    "pgfleet_process_heartbeat_age_seconds",
    "Seconds since the stalest heartbeat of a host's processes of one kind (supervisor, "
    "maintenance, worker), from the database.",
    ["host", "kind"], multiprocess_mode="livemostrecent",
)

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


def set_queue_gauges(
    *,
    counts: list[tuple[str, str, int]],
    oldest: dict[str, float],
    paused: set[str],
    known: set[str],
) -> None:
    """Publish one maintenance pass; queues seen before but now empty read 0, not stale."""
    for name in sorted(known):
        queue_label(name)  # configured queues always get their own label
    jobs: dict[tuple[str, str], int] = {}
    for queue, state, n in counts:
        key = (queue_label(queue), state)
        jobs[key] = jobs.get(key, 0) + n
    ages: dict[str, float] = {}
    for queue, age in oldest.items():
        ages[queue_label(queue)] = max(age, ages.get(queue_label(queue), 0.0))
    flags = {queue_label(q) for q in paused}
    for queue in {*map(queue_label, known), *(k[0] for k in jobs), *ages, *flags}:
        for state in QUEUE_STATES:
            queue_jobs.labels(queue, state).set(jobs.get((queue, state), 0))
        queue_oldest_age.labels(queue).set(ages.get(queue, 0.0))
        queue_paused.labels(queue).set(1 if queue in flags else 0)
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
