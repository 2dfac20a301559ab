"""The books: after a scenario, prove from the job rows and the audit table that nothing
was lost and nothing ran twice at once.

Every test task writes audit rows (job id, attempt, pid, event, server clock) on a
connection of its own, so executions are counted independently of the job rows. A "run"
is the set of audit rows of one (job, attempt, pid).

Rules checked:

1. No job is missing (and none appeared from nowhere): the ids are exactly those enqueued.
2. Every job ended `succeeded`, `dead` or `cancelled` (`queued` too if the scenario allows
   waiting jobs); none is left `running`.
3. `attempt <= max_attempts + refunds` (a refunded give-back does not count).
4. A succeeded job of an audited task has a `finished` row from its final attempt.
5. Runs of one job never overlap: each run's first row comes after the last row of the
   run before it. The only exception is a run of a process the scenario froze on purpose
   (`presumed_dead_pids`): its late rows may come later, but only if its attempt was
   superseded by a later one (fencing by attempt).
6. One attempt number is never handed to two processes, unless the job's errors show it
   was given back uncharged after a crash: beside other jobs, or not running its task.
7. Every superseded run (attempt below the job's final attempt) has its end recorded in
   the job's error list: failed, crashed or lease expired. No run vanishes unaccounted.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

import psycopg

TERMINAL = {"succeeded", "dead", "cancelled"}
# Tasks that write a `finished` row when they succeed.
AUDITED = {"noop", "sleep", "fail_once", "async_noop", "hog", "stubborn", "spin",
           "faults.sleep_fail_first", "faults.gil_sort", "faults.interrupt_main",
           "faults.marker_child", "faults.event_wait", "faults.exit_first", "faults.spin_first",
           "faults.sleep_first"}
# How the rescue paths record an attempt whose process or lease died.
FAULT_ERRORS = ("worker died", "lease expired")
# How the rescue marks an attempt given back because its process held other jobs too.
# Given back after a crash without being charged: beside other jobs, or not running its task.
NOT_CHARGED = "not charged)"


@dataclass
class Run:
    job_id: int
    attempt: int
    pid: int
    first: datetime
    last: datetime
    finished: bool


@dataclass
class Job:
    id: int
    task: str
    state: str
    attempt: int
    max_attempts: int
    refunds: int
    error_attempts: list[int]
    errors: list[str]
    runs: list[Run] = field(default_factory=list)


@dataclass
class Books:
    jobs: dict[int, Job]
    problems: list[str]

    @property
    def states(self) -> dict[str, int]:
        return dict(Counter(j.state for j in self.jobs.values()))

    @property
    def runs(self) -> int:
        return sum(len(j.runs) for j in self.jobs.values())

    @property
    def second_runs(self) -> int:
        """Executions beyond the first of each job (at-least-once at work)."""
        return sum(max(0, len(j.runs) - 1) for j in self.jobs.values())

    @property
    def fault_reruns(self) -> int:
        """Attempts that ended because their process or lease died (not because the task
        raised), and so were run again or dead-lettered."""
        return sum(1 for j in self.jobs.values() for e in j.errors
                   if e.startswith(FAULT_ERRORS))

    @property
    def duplicate_finishes(self) -> int:
        """Jobs whose task body ran to its end more than once."""
        return sum(1 for j in self.jobs.values() if sum(r.finished for r in j.runs) > 1)

    def summary(self) -> str:
        return (f"{len(self.jobs)} jobs {self.states}; {self.runs} runs, "
                f"{self.second_runs} second runs ({self.fault_reruns} attempts ended by a "
                f"fault), {self.duplicate_finishes} jobs finished more than once")


def read(dsn: str, audit_dsn: str | None = None) -> dict[int, Job]:
    """The jobs at `dsn` with their runs from the audit table at `audit_dsn` (by default
    the same database: a scenario that keeps the tasks from reaching it keeps theirs on
    another server)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT id, task, state::text, attempt, max_attempts, refunds,"
            " ARRAY(SELECT (e->>'attempt')::int FROM jsonb_array_elements(errors) e),"
            " ARRAY(SELECT e->>'error' FROM jsonb_array_elements(errors) e)"
            " FROM pgfleet.jobs"
        ).fetchall()
        jobs = {r[0]: Job(r[0], r[1], r[2], r[3], r[4], r[5], list(r[6]), list(r[7]))
                for r in rows}
    with psycopg.connect(audit_dsn or dsn, autocommit=True) as conn:
        audit = conn.execute(
            "SELECT job_id, attempt, pid, min(at), max(at), bool_or(event = 'finished')"
            " FROM audit GROUP BY job_id, attempt, pid ORDER BY job_id, min(at)"
        ).fetchall()
    for job_id, attempt, pid, first, last, finished in audit:
        if job_id in jobs:
            jobs[job_id].runs.append(Run(job_id, attempt, pid, first, last, finished))
    return jobs


def check(dsn: str, ids: Iterable[int] | None = None, *, waiting_ok: bool = False,
          presumed_dead_pids: Iterable[int] = (), retried: Iterable[int] = (),
          audit_dsn: str | None = None) -> Books:
    """Balance the books of the database at `dsn`; raise AssertionError listing every
    problem (the first 20), else return the books for figures. Jobs in `retried` were
    requeued by an operator (attempts start again at 1), so their runs are not matched
    by attempt (rules 5 to 7)."""
    manual = set(retried)
    jobs = read(dsn, audit_dsn)
    frozen = set(presumed_dead_pids)
    problems: list[str] = []
    if ids is not None:
        wanted = set(ids)
        missing, extra = wanted - set(jobs), set(jobs) - wanted
        if missing:
            problems.append(f"{len(missing)} job(s) missing: {sorted(missing)[:10]}")
        if extra:
            problems.append(f"{len(extra)} unexpected job(s): {sorted(extra)[:10]}")
    allowed = TERMINAL | ({"queued"} if waiting_ok else set())
    for job in jobs.values():
        problems += _check_job(job, allowed, frozen, by_attempt=job.id not in manual)
    books = Books(jobs, problems)
    if problems:
        shown = "\n  ".join(problems[:20])
        raise AssertionError(f"the books do not balance ({len(problems)} problem(s); "
                             f"{books.summary()}):\n  {shown}")
    return books


def _check_job(job: Job, allowed: set[str], frozen: set[int], by_attempt: bool) -> list[str]:
    out: list[str] = []
    tag = f"job {job.id} ({job.task}, {job.state}, attempt {job.attempt}/{job.max_attempts})"
    if job.state not in allowed:
        out.append(f"{tag}: ended in state {job.state}")
    if job.attempt > job.max_attempts + job.refunds:
        out.append(f"{tag}: attempts exceed the maximum")
    if job.state == "succeeded" and job.task in AUDITED and not any(
            r.finished and r.attempt == job.attempt for r in job.runs):
        out.append(f"{tag}: succeeded without a finished run of its final attempt")
    if not by_attempt:
        return out
    owners: dict[int, set[int]] = defaultdict(set)
    for run in job.runs:
        owners[run.attempt].add(run.pid)
        if run.attempt > job.attempt:
            out.append(f"{tag}: a run of attempt {run.attempt} (pid {run.pid}) beyond the "
                       "job's attempt")
        if run.attempt < job.attempt and run.attempt not in job.error_attempts:
            out.append(f"{tag}: the end of attempt {run.attempt} (pid {run.pid}) was never "
                       "recorded")
    uncharged = Counter(a for a, error in zip(job.error_attempts, job.errors, strict=True)
                        if error.endswith(NOT_CHARGED))
    for attempt, pids in owners.items():
        if len(pids) > 1 + uncharged[attempt]:
            out.append(f"{tag}: attempt {attempt} ran in several processes {sorted(pids)}")
    for i, later in enumerate(job.runs):
        for earlier in job.runs[:i]:
            if later.first >= earlier.last:
                continue
            if earlier.pid in frozen and earlier.attempt < later.attempt:
                continue  # a frozen process woke up late; its attempt was fenced off
            out.append(f"{tag}: attempt {later.attempt} (pid {later.pid}) started at "
                       f"{later.first:%T.%f} while attempt {earlier.attempt} (pid "
                       f"{earlier.pid}) was still running until {earlier.last:%T.%f}")
    return out
