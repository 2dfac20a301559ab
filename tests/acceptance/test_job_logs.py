"""Failures are visible in the supervisor's log (issue 14): every failed attempt with its
job id, task, queue, attempt/max, error and next run, the dead job at ERROR, and a task
name no module registers, loudly and once — in plain text and as JSON fields."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pgfleet
from tests.support.fleet import Fleet
from tests.support.workers import scalar, wait_for

QUEUE = {"default": {"processes": 1, "backoff": {"initial": "0.2s", "max": "0.5s",
                                                 "jitter": 0}}}


def json_entries(f: Fleet) -> list[dict[str, Any]]:
    return [json.loads(line) for line in f.log().splitlines() if line.startswith("{")]


def state(dsn: str, job_id: int) -> str:
    return str(scalar(dsn, "SELECT state::text FROM pgfleet.jobs WHERE id = %s", (job_id,)))


def run_failures(dsn: str, f: Fleet) -> tuple[int, int]:
    f.wait_workers(1)
    failing = pgfleet.enqueue(dsn, "fail", {"message": "boom\nsecond line"}, max_attempts=2)
    unknown = pgfleet.enqueue(dsn, "no_such_task_anywhere", max_attempts=2)
    for job_id in (failing, unknown):
        wait_for(lambda job_id=job_id: state(dsn, job_id) == "dead", timeout=60)
    return failing, unknown


def test_plain_log_shows_each_failed_attempt_and_the_dead_job(
    dsn: str, fleet: Callable[..., Fleet]
) -> None:
    f = fleet(QUEUE)
    failing, unknown = run_failures(dsn, f)
    wait_for(lambda: f"job {failing} " in f.log() and "the job is dead" in f.log())
    lines = [line for line in f.log().splitlines() if f"job {failing} " in line]
    retry = [line for line in lines if "attempt 1/2 failed" in line]
    dead = [line for line in lines if "attempt 2/2 failed" in line]
    assert len(retry) == 1 and len(dead) == 1, lines
    assert " WARNING " in retry[0]
    assert (f"job {failing} (task 'fail', queue 'default') attempt 1/2 failed: "
            "RuntimeError: boom; runs again at ") in retry[0]
    assert re.search(r"runs again at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(in \d+s\)", retry[0])
    assert " ERROR " in dead[0] and dead[0].endswith("RuntimeError: boom; the job is dead")
    assert "second line" not in f.log()
    # The unknown task: loud (ERROR), once for its two attempts in this worker.
    loud = [line for line in f.log().splitlines()
            if "unknown task 'no_such_task_anywhere': no task module" in line]
    assert len(loud) == 1, loud
    assert " ERROR " in loud[0] and f"job {unknown} " in loud[0]


def test_json_log_carries_the_fields(dsn: str, fleet: Callable[..., Fleet]) -> None:
    f = fleet(QUEUE, args=("--log-format", "json"))
    failing, unknown = run_failures(dsn, f)
    wait_for(lambda: any(e.get("event") == "job_dead" and e.get("job_id") == failing
                         for e in json_entries(f)))
    mine = [e for e in json_entries(f) if e.get("job_id") == failing]
    [retry] = [e for e in mine if e.get("event") == "job_retry"]
    [dead] = [e for e in mine if e.get("event") == "job_dead"]
    assert {k: retry[k] for k in ("level", "task", "queue", "attempt", "max_attempts",
                                  "error", "state")} == {
        "level": "warning", "task": "fail", "queue": "default", "attempt": 1,
        "max_attempts": 2, "error": "RuntimeError: boom", "state": "queued"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", retry["run_at"])
    assert (dead["level"], dead["attempt"], dead["state"]) == ("error", 2, "dead")
    [loud] = [e for e in json_entries(f) if e.get("event") == "unknown_task"]
    assert (loud["level"], loud["job_id"], loud["task"]) == (
        "error", unknown, "no_such_task_anywhere")
