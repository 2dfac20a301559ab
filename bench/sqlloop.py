"""The worker's database protocol alone, in one process with no task code: what a worker
could reach if only its round trips counted. Compares today's protocol (claim, then
complete: two round trips per batch) with both statements sent in one pipeline."""

from __future__ import annotations

import time
from typing import Any

from bench.common import Database
from pgfleet.sql import store


def _loop(db: Database, n: int, batch: int, pipelined: bool) -> float:
    db.reset()
    db.insert_jobs(n + batch)
    db.vacuum()
    claim, complete = store.q("claim"), store.q("complete_succeeded")
    worker = "sqlloop"
    params: dict[str, Any] = {"queue": "default", "limit": batch, "worker": worker,
                              "lease": 60.0}
    done = 0
    held: list[tuple[int, int]] = []
    with db.connect() as conn:
        start = time.perf_counter()
        while done < n:
            if pipelined and held:
                with conn.pipeline():
                    c1 = conn.execute(complete, {"worker": worker,
                                                 "ids": [h[0] for h in held],
                                                 "fences": [h[1] for h in held],
                                                 "results": None})
                    c2 = conn.execute(claim, params)
                done += len(c1.fetchall())
                rows = c2.fetchall()
            else:
                if held:
                    done += len(conn.execute(complete, {
                        "worker": worker, "ids": [h[0] for h in held],
                        "fences": [h[1] for h in held], "results": None}).fetchall())
                rows = conn.execute(claim, params).fetchall()
            held = [(r[0], r[-1]) for r in rows]
        return done / (time.perf_counter() - start)


def sqlloop(db: Database, n: int, batch: int, runs: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"sequential_jobs_per_s": [], "pipelined_jobs_per_s": []}
    for _ in range(runs):
        out["sequential_jobs_per_s"].append(_loop(db, n, batch, False))
        out["pipelined_jobs_per_s"].append(_loop(db, n, batch, True))
    return out


def explain_named(db: Database, names: list[str]) -> dict[str, float]:
    """Best-of-3 execution time (ms) of named read-only queries from queries.sql."""
    out = {}
    with db.connect() as conn:
        for name in names:
            best = float("inf")
            for _ in range(3):
                row = conn.execute(b"EXPLAIN (ANALYZE, FORMAT JSON) " + store.q(name)).fetchone()
                assert row is not None
                best = min(best, row[0][0]["Execution Time"])
            out[name] = best
    return out
