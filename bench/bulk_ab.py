"""enqueue_many from this tree against enqueue_many from another source tree, alternating.

    git worktree add /tmp/old <commit>          # or: git archive <commit> src | tar -x -C /tmp/old
    python -m bench.bulk_ab --baseline-src /tmp/old/src [--runs 11] [--jobs 50000]

Each side gets a database migrated by its own code (the schemas may differ), and each
measurement runs in a fresh process importing that side's pgfleet: the database is
truncated and vacuumed, then `pgfleet.enqueue_many(conn, jobs)` of `jobs` no-op jobs
`{"task", "args": {"i": i}, "queue"}` and the commit are timed, as `bench.probes bulk`
times its end-to-end figure, with the client's CPU and the backend's (/proc/PID/stat).
Old and new alternate (old new, new old, ...) so both see the same machine noise; the
ratio new/old is taken inside each round before the median.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import psycopg

from bench import common


def measure(dsn: str, n: int) -> dict[str, float]:
    """One enqueue_many of n jobs on an emptied table (run in the side's own process)."""
    import pgfleet
    from bench.probes import _cpu_ms

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE pgfleet.jobs")
        conn.execute("VACUUM ANALYZE pgfleet.jobs")
    jobs = [{"task": "bench.noop", "args": {"i": i}, "queue": "enqueue"} for i in range(n)]
    with psycopg.connect(dsn) as conn:
        backend = conn.info.backend_pid
        conn.execute("SELECT 1")
        server, mine, start = _cpu_ms(backend), time.process_time(), time.perf_counter()
        pgfleet.enqueue_many(conn, jobs)
        conn.commit()
        elapsed = time.perf_counter() - start
        return {"rows_per_s": n / elapsed, "client_ms": (time.process_time() - mine) * 1000,
                "server_ms": _cpu_ms(backend) - server}


def _side_env(src: str | None) -> dict[str, str]:
    own = os.environ.get("PYTHONPATH", "")
    path = own if src is None else os.pathsep.join([src, os.getcwd(), own])
    return {**os.environ, "PYTHONPATH": path}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline-src", help="the old code's src directory")
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.jobs)))
        return
    if not args.baseline_src:
        parser.error("--baseline-src is required")
    envs = {"old": _side_env(args.baseline_src), "new": _side_env(None)}
    dsns = {side: common.with_db(common.SERVER, f"pgfleet_bulk_ab_{side}_{os.getpid()}")
            for side in envs}
    with psycopg.connect(common.SERVER, autocommit=True) as admin:
        for side, dsn in dsns.items():
            name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
            admin.execute(f'CREATE DATABASE "{name}"')
            subprocess.run([sys.executable, "-m", "pgfleet", "--database-url", dsn, "migrate"],
                           check=True, env=envs[side], stdout=subprocess.DEVNULL)
    out: dict[str, dict[str, list[float]]] = {side: {} for side in envs}
    ratios: list[float] = []
    try:
        for index in range(args.runs):
            rates = {}
            for side in ("old", "new") if index % 2 == 0 else ("new", "old"):
                done = subprocess.run(
                    [sys.executable, "-m", "bench.bulk_ab", "--child", dsns[side],
                     "--jobs", str(args.jobs)],
                    check=True, env=envs[side], capture_output=True, text=True)
                got: dict[str, Any] = json.loads(done.stdout)
                for key, value in got.items():
                    out[side].setdefault(key, []).append(value)
                rates[side] = got["rows_per_s"]
            ratios.append(rates["new"] / rates["old"])
            common.log(f"round {index + 1}: old {rates['old']:,.0f}, new {rates['new']:,.0f}"
                       " jobs/s")
    finally:
        with psycopg.connect(common.SERVER, autocommit=True) as admin:
            for dsn in dsns.values():
                name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    print(f"enqueue_many of {args.jobs:,} jobs and the commit, {args.runs} alternating rounds")
    print("new/old rows/s per round:", [round(r, 3) for r in ratios],
          "median", round(statistics.median(ratios), 3))
    for side, figures in out.items():
        for key, values in figures.items():
            runs = ", ".join(f"{v:,.0f}" for v in values)
            print(f"{side} {key:12s} median {statistics.median(values):>10,.0f}"
                  f"  (min {min(values):,.0f}, max {max(values):,.0f})   [{runs}]")


if __name__ == "__main__":
    main()
