"""Issue 16, jobs scheduled for later (docs/performance.md, "Jobs scheduled for later"):
`python -m bench.probes future-jobs [--baseline-src /path/to/old/src] [--future 1000000]
[--jobs 50000] [--runs 3] [--json FILE]`.

* empty claim: the claim of a queue holding `future` jobs due in an hour and none due,
  timed from the client (planning and round trip included), median of CLAIMS claims, for
  the claim of this tree and of the baseline tree's queries.sql; with the pages the plan
  reads and the server's own planning and execution times (EXPLAIN (ANALYZE, BUFFERS)),
  and a SELECT 1 for the round trip the machine's load gives any statement.
* due claim: a claim of 32 of 100,000 due jobs (no future ones), rolled back, both trees:
  what the longer statement costs when there is work.
* drain: `jobs` due no-op jobs (priority 0) drained by `pgfleet run`
  (bench/pgfleet-bench.yaml, backlog: enqueued before the workers start), alternating: with
  no future jobs; with the future jobs in the same queue at the same priority (behind the
  due ones in claim order); and with them at priority -1 (ahead of the due ones in claim
  order, where the old claim read all of them before every due row). With --baseline-src
  the baseline tree drains too.
* delayed start: with the future jobs present and the workers idle, a job enqueued with a
  3 s delay, DELAYED_RUNS times; how long after its run_at it started (database clocks).
  It sends no notification, so a poll (poll_interval 1 s here, 2 workers) finds it.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

import pgfleet
from bench import common
from bench.common import Database, supervisor, write_config
from pgfleet.sql import queries, store
from pgfleet.worker.prefetch import claim_bytes

CLAIMS = 200
DELAY = 3.0
DELAYED_RUNS = 10
# The drains: where the future jobs are (None: no future jobs), by label.
PLACES: dict[str, int | None] = {"no future jobs": None, "future jobs behind": 0,
                                 "future jobs ahead (priority -1)": -1}

PARAMS: dict[str, Any] = {
    "queue": "default", "worker": "probe", "lease": 60.0, "args_limit": 1024 * 1024,
    "held": 0, "held_solo": False, "after_priority": None, "after_run_at": None,
    "after_id": None, "max_bytes": claim_bytes(8)}  # a worker's with prefetch auto


def claim_sql(src: str | None) -> bytes:
    """The claim statement of this tree (None) or of another tree's src directory."""
    if src is None:
        return store.q("claim")
    text = (Path(src) / "pgfleet" / "sql" / "queries.sql").read_text("utf-8")
    return queries.parse(text)["claim"].sql


def schedule_later(db: Database, n: int, priority: int = 0) -> None:
    """n no-op jobs due an hour from now and later, 1 ms apart, in one statement."""
    with db.connect() as conn:
        conn.execute("INSERT INTO pgfleet.jobs (queue, task, priority, run_at)"
                     " SELECT 'default', 'bench.noop', %s, now() + interval '1 hour'"
                     "        + g * interval '1 ms' FROM generate_series(1, %s) g",
                     (priority, n))


def _time_claims(conn: psycopg.Connection[Any], sql: bytes, limit: int, runs: int) -> float:
    """Median milliseconds of `runs` claims, each rolled back."""
    times = []
    for _ in range(runs):
        with conn.transaction(force_rollback=True):
            start = time.perf_counter()
            conn.execute(sql, {**PARAMS, "limit": limit}).fetchall()
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def _explain(conn: psycopg.Connection[Any], sql: bytes, limit: int) -> dict[str, Any]:
    with conn.transaction(force_rollback=True):
        row = conn.execute(b"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql,
                           {**PARAMS, "limit": limit}).fetchone()
    assert row is not None
    found: dict[str, Any] = (row[0] if isinstance(row[0], list) else json.loads(row[0]))[0]
    return found


def _pages(conn: psycopg.Connection[Any], sql: bytes, limit: int) -> int:
    plan = _explain(conn, sql, limit)["Plan"]
    return int(plan["Shared Hit Blocks"] + plan.get("Shared Read Blocks", 0))


def _server_ms(conn: psycopg.Connection[Any], sql: bytes, limit: int) -> dict[str, float]:
    """Median planning and execution time the server reports (EXPLAIN ANALYZE), without
    the round trip and the client."""
    runs = [_explain(conn, sql, limit) for _ in range(CLAIMS // 4)]
    return {part: round(statistics.median(r[f"{part} Time"] for r in runs), 3)
            for part in ("Planning", "Execution")}


def _round_trip_ms(conn: psycopg.Connection[Any]) -> float:
    """Median of SELECT 1: what the machine's load adds to any statement's time."""
    times = []
    for _ in range(CLAIMS):
        start = time.perf_counter()
        conn.execute("SELECT 1").fetchall()
        times.append(time.perf_counter() - start)
    return round(statistics.median(times) * 1000, 3)


def claims(db: Database, sqls: dict[str, bytes], future: int) -> dict[str, Any]:
    """Empty claims behind `future` jobs, then claims of 32 among 100,000 due jobs."""
    out: dict[str, Any] = {}
    db.reset()
    schedule_later(db, future)
    db.vacuum()
    with db.connect() as conn:
        conn.execute(f"SET plan_cache_mode = {pgfleet.sql.db.PLAN_CACHE_MODE}")
        for name, sql in sqls.items():
            # The first claim after the vacuum, before the timed ones warm the cache.
            out[f"empty claim, {name}: pages read (first claim)"] = _pages(conn, sql, 32)
        out["SELECT 1 round trip: median ms"] = _round_trip_ms(conn)
        for name, sql in sqls.items():
            out[f"empty claim, {name}: median ms"] = round(
                _time_claims(conn, sql, 32, CLAIMS), 3)
            out[f"empty claim, {name}: pages read (warm)"] = _pages(conn, sql, 32)
            out[f"empty claim, {name}: server median ms"] = _server_ms(conn, sql, 32)
    db.reset()
    db.insert_jobs(100_000)
    db.vacuum()
    with db.connect() as conn:
        conn.execute(f"SET plan_cache_mode = {pgfleet.sql.db.PLAN_CACHE_MODE}")
        for name, sql in sqls.items():
            out[f"claim of 32 of 100,000 due, no future jobs, {name}: median ms"] = round(
                _time_claims(conn, sql, 32, CLAIMS), 3)
            out[f"claim of 32 of 100,000 due, no future jobs, {name}: server median ms"] = (
                _server_ms(conn, sql, 32))
    return out


@contextmanager
def source(src: str | None) -> Iterator[None]:
    """Child processes started inside run the baseline tree (src) or this one (None)."""
    own = os.environ.get("PYTHONPATH", "")
    if src is not None:
        os.environ["PYTHONPATH"] = os.pathsep.join([src, own])
    try:
        yield
    finally:
        os.environ["PYTHONPATH"] = own


def drain(db: Database, jobs: int, future: int, priority: int | None) -> float:
    """jobs/s of a backlog of `jobs` due no-op jobs, with `future` later ones at `priority`
    (None: none): from the first start to the last finish."""
    db.reset()
    if priority is not None:
        schedule_later(db, future, priority)
    db.insert_jobs(jobs)
    db.vacuum()
    with supervisor(db, write_config("future"), 2):
        db.wait_for("SELECT count(*) FROM pgfleet.jobs WHERE state = 'succeeded'", jobs,
                    timeout=900, interval=0.2)
    first, last = db.scalar("SELECT ARRAY[min(started_at), max(finished_at)]"
                            "  FROM pgfleet.jobs WHERE state = 'succeeded'")
    return float(jobs / (last - first).total_seconds())


def delayed_starts(db: Database, future: int) -> list[float]:
    """Seconds from run_at to the start of a job enqueued with a DELAY s delay, while the
    workers idle behind `future` later jobs."""
    db.reset()
    schedule_later(db, future)
    db.vacuum()
    late = []
    with supervisor(db, write_config("future-delay"), 2):
        for _ in range(DELAYED_RUNS):
            # At a random phase of the workers' polls: right after the previous job's
            # start, each enqueue would fall at the same point of the poll cycle.
            time.sleep(random.random())
            job = pgfleet.enqueue(db.dsn, "bench.noop", delay=DELAY)
            db.wait_for("SELECT state FROM pgfleet.jobs WHERE id = %s", "succeeded",
                        timeout=60, interval=0.1, params=(job,))
            late.append(float(db.scalar(
                "SELECT extract(epoch FROM started_at - run_at) FROM pgfleet.jobs"
                " WHERE id = %s", (job,))))
    return late


def run(db: Database, runs: int, baseline_src: str | None, future: int, jobs: int,
        json_path: str | None) -> None:
    trees: dict[str, str | None] = {"new": None}
    if baseline_src:
        trees["old"] = baseline_src
    out: dict[str, Any] = {"future_jobs": future, "due_jobs": jobs, "claims": CLAIMS,
                           "machine": common.machine()}
    out.update(claims(db, {name: claim_sql(src) for name, src in trees.items()}, future))
    for key, value in out.items():
        common.log(f"{key}: {value}")
    rates: dict[str, list[float]] = {}
    variants = [(name, place) for name in trees for place in PLACES]
    for index in range(runs):
        for name, place in variants if index % 2 == 0 else variants[::-1]:
            with source(trees[name]):
                rate = drain(db, jobs, future, PLACES[place])
            label = f"drain {name}, {place} (jobs/s)"
            rates.setdefault(label, []).append(round(rate))
            common.log(f"round {index + 1}: {label}: {rate:,.0f}")
    out["drains"] = rates
    for name in trees:
        without = rates[f"drain {name}, no future jobs (jobs/s)"]
        for place in list(PLACES)[1:]:
            with_f = rates[f"drain {name}, {place} (jobs/s)"]
            out[f"drain {name}, {place} / no future jobs, per round"] = [
                round(a / b, 3) for a, b in zip(with_f, without, strict=True)]
            out[f"drain {name}, {place} / no future jobs, medians"] = round(
                statistics.median(with_f) / statistics.median(without), 3)
    for name, src in trees.items():
        with source(src):
            late = delayed_starts(db, future)
        out[f"delayed job ({DELAY:g} s), {name}: seconds late at start"] = [
            round(s, 3) for s in late]
        common.log(f"delayed start, {name}: {late}")
    text = json.dumps(out, indent=2, default=str)
    print(text)
    if json_path:
        Path(json_path).write_text(text + "\n")
