"""Where one job's enqueue -> start latency goes, stage by stage (issue 16).

    python -m bench.latency_trace                  # 400 jobs, one every 5-15 ms, idle fleet
    python -m bench.latency_trace --background 1000   # with 1,000 other jobs/s beside

A `pgfleet run` fleet of 2 processes x 16 threads, prefetch 16 (bench/'s latency setting),
runs bench/trace_tasks.py, whose hooks stamp each stage on CLOCK_MONOTONIC, the one clock
every process of the machine shares; this process stamps the enqueue call around it. The
database clock gives the figure `bench.run`'s latency section reports (created_at to the
task's first statement). Prints p50/p90/p99 per stage; no file is written.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import threading
import time
from typing import Any

import psycopg
import yaml

import pgfleet
from bench.common import WORK, Database, child_env, log

STAGES = ("enqueue call (client)", "commit -> notification in the worker",
          "notification -> claim sent", "claim round trip", "claim answered -> thread",
          "thread -> task start", "enqueue start -> task start (client clock)",
          "created_at -> task's statement (database clock)")


def _config(db: Database) -> str:
    path = WORK / "latency-trace.yaml"
    path.write_text(yaml.safe_dump({
        "database_url": db.dsn, "tasks": ["bench.trace_tasks"], "poll_interval": "1s",
        "queues": {"default": {"processes": 2, "threads": 16, "prefetch": 16}},
        "metrics": {"enabled": False}}))
    return str(path)


def _feed(dsn: str, rate: int, stop: threading.Event) -> None:
    per_tick = max(1, rate // 100)
    with psycopg.connect(dsn, autocommit=True) as conn:
        next_at = time.monotonic()
        while not stop.is_set():
            pgfleet.enqueue_many(conn, [{"task": "trace.noop"}] * per_tick)
            next_at += 0.01
            time.sleep(max(0.0, next_at - time.monotonic()))


def _stages(row: tuple[Any, ...], sent_at: float, returned_at: float) -> dict[str, float]:
    _, notified, claim_sent, answered, handed, started, db_ms = row
    out = {STAGES[0]: returned_at - sent_at, STAGES[6]: started - sent_at,
           STAGES[7]: db_ms / 1000}
    if claim_sent:  # else the job came with a completion's claim, not a claim of its own
        out.update({STAGES[3]: answered - claim_sent, STAGES[4]: handed - answered})
        if notified > sent_at:
            out.update({STAGES[1]: notified - returned_at,
                        STAGES[2]: claim_sent - notified})
    out[STAGES[5]] = started - handed
    return out


def trace(db: Database, jobs: int, background: int) -> dict[str, list[float]]:
    with db.connect() as conn:
        conn.execute("CREATE TABLE bench_trace (job_id bigint, notified float8,"
                     " claim_sent float8, answered float8, handed float8, started float8,"
                     " at timestamptz)")
    env = dict(child_env(), BENCH_DSN=db.dsn)
    sup = subprocess.Popen(["pgfleet", "run", "-c", _config(db)], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    stop = threading.Event()
    try:
        with db.connect() as conn:
            for _ in range(40):  # warm up: every thread opens its connection
                pgfleet.enqueue(conn, "trace.record", {})
                time.sleep(0.01)
            db.wait_for("SELECT count(*) FROM bench_trace", 40, timeout=60)
            conn.execute("TRUNCATE bench_trace")
            if background:
                threading.Thread(target=_feed, args=(db.dsn, background, stop),
                                 daemon=True).start()
                time.sleep(1.0)
            sent: dict[int, tuple[float, float]] = {}
            for _ in range(jobs):
                before = time.monotonic()
                job_id = pgfleet.enqueue(conn, "trace.record", {})
                sent[job_id] = (before, time.monotonic())
                time.sleep(random.uniform(0.005, 0.015))
            db.wait_for("SELECT count(*) FROM bench_trace", jobs, timeout=60)
            rows = conn.execute(
                "SELECT t.job_id, t.notified, t.claim_sent, t.answered, t.handed, t.started,"
                "       extract(epoch FROM t.at - j.created_at) * 1000"
                "  FROM bench_trace t JOIN pgfleet.jobs j ON j.id = t.job_id").fetchall()
    finally:
        stop.set()
        sup.terminate()
        sup.wait(60)
    found: dict[str, list[float]] = {stage: [] for stage in STAGES}
    for row in rows:
        for stage, seconds in _stages(row, *sent[row[0]]).items():
            found[stage].append(seconds * 1000)
    return found


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--background", type=int, default=0, help="other jobs per second")
    args = parser.parse_args()
    db = Database()
    db.create()
    try:
        found = trace(db, args.jobs, args.background)
    finally:
        db.drop()
    log(f"{args.jobs} jobs, {args.background} other jobs/s; ms")
    for stage, values in found.items():
        if values:
            print(f"{stage:48s} p50 {_quantile(values, 0.5):6.2f}  p90 "
                  f"{_quantile(values, 0.9):6.2f}  p99 {_quantile(values, 0.99):6.2f}"
                  f"  (n={len(values)})")


if __name__ == "__main__":
    main()
