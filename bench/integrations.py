"""Figures for docs/integrations.md's machinery (not assertions):

- the start of an async job: a fresh loop per job (asyncio.run, before) against the
  executor thread's long-lived loop (EventLoops.run, now);
- the cost of one no-op middleware around a job run (Executor.run_inline);
- enqueue_many on a blocking connection against enqueue_many_async, 10,000 jobs.

    python -m bench.integrations     # writes bench/results/integrations.json
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg

import pgfleet
from bench.common import BENCH_DIR, Database, log, machine, summary
from pgfleet import middleware
from pgfleet.sql.rows import ClaimedJob
from pgfleet.tasks import Registry
from pgfleet.worker.executor import EventLoops, Executor

RUNS = 5


async def _nothing() -> None:
    return None


def per_call_us(call: Callable[[], Any], count: int) -> float:
    start = time.perf_counter()
    for _ in range(count):
        call()
    return (time.perf_counter() - start) / count * 1e6


def async_start() -> dict[str, Any]:
    loops = EventLoops()
    fresh = [per_call_us(lambda: asyncio.run(_nothing()), 2000) for _ in range(RUNS)]
    shared = [per_call_us(lambda: loops.run(_nothing()), 2000) for _ in range(RUNS)]
    loops.close()
    return {"asyncio_run_us": summary(fresh), "shared_loop_us": summary(shared)}


@contextlib.contextmanager
def _noop(event: Any) -> Iterator[None]:
    yield


def middleware_cost() -> dict[str, Any]:
    task = pgfleet.task(name="bench.integrations.noop")(lambda: None)
    registry = Registry({task.name: task})
    executor = Executor(queue="q", worker_id="bench", args_limit=1 << 20, wake=lambda: None)
    job = ClaimedJob(id=1, task=task.name, args="{}", attempt=1, max_attempts=1,
                     args_size=2, wait_seconds=0.0)

    def run() -> None:
        executor.run_inline(job, registry, 60.0)

    bare = [per_call_us(run, 5000) for _ in range(RUNS)]
    middleware.register(_noop)
    try:
        wrapped = [per_call_us(run, 5000) for _ in range(RUNS)]
    finally:
        middleware.unregister(_noop)
    return {"job_run_us": summary(bare), "job_run_with_one_middleware_us": summary(wrapped)}


def bulk_enqueue(db: Database) -> dict[str, Any]:
    jobs = [{"task": "bench.noop", "args": {"i": i}} for i in range(10_000)]

    def sync_once() -> float:
        with psycopg.connect(db.dsn) as conn:
            start = time.perf_counter()
            pgfleet.enqueue_many(conn, jobs)
            conn.commit()
            return time.perf_counter() - start

    async def async_once() -> float:
        async with await psycopg.AsyncConnection.connect(db.dsn) as conn:
            start = time.perf_counter()
            await pgfleet.enqueue_many_async(conn, jobs)
            await conn.commit()
            return time.perf_counter() - start

    sync_s, async_s = [], []
    for _ in range(RUNS):
        db.reset()
        sync_s.append(sync_once())
        db.reset()
        async_s.append(asyncio.run(async_once()))
    return {"jobs": len(jobs), "enqueue_many_s": summary(sync_s),
            "enqueue_many_async_s": summary(async_s)}


def main() -> None:
    results: dict[str, Any] = {"machine": machine()}
    log("async job start")
    results["async_start"] = async_start()
    log("middleware cost")
    results["middleware"] = middleware_cost()
    db = Database()
    db.create()
    try:
        log("bulk enqueue")
        results["bulk_enqueue"] = bulk_enqueue(db)
    finally:
        db.drop()
    out = BENCH_DIR / "results" / "integrations.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps({k: v for k, v in results.items() if k != "machine"}, indent=2))


if __name__ == "__main__":
    main()
