"""Server time of the web UI's pages on a long job history (issue: a jobs page of a 5M-row
history under 200 ms of server time).

    python -m bench.web_pages                    # 5,000,000 finished jobs, 7 requests a URL
    python -m bench.web_pages --history 1000000 --requests 5
    python -m bench.web_pages --database-url URL # a database it filled before, kept as is

Fills a throw-away database with finished jobs (1 in 100 dead with an error, 1 in 1,000
cancelled, four queues, twenty tasks) and 500 waiting ones, starts `pgfleet web`, requests
each URL several times and reports the median and the maximum of its Server-Timing
header (the time the app spent, database included). Writes bench/results/web.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from typing import Any

import psycopg

from bench.common import BENCH_DIR, Database, log

URLS = [
    "/", "/jobs", "/jobs?before={middle}", "/jobs?state=dead", "/jobs?state=dead&queue=b",
    "/jobs?state=queued&queue=a", "/jobs?state=running", "/jobs?state=cancelled&queue=b",
    "/jobs?state=dead&task=task_0", "/jobs?queue=c",
    "/jobs?task=task_3", "/jobs?q=%22customer%22%3A+4242", "/jobs?id={middle}",
    "/jobs/{middle}", "/schedules",
    "/queues/a", "/hosts", "/jobs?state=scheduled", "/jobs?state=scheduled&queue=a",
    "/jobs/{result}",
]

HISTORY_SQL = """
INSERT INTO pgfleet.jobs (queue, task, args, state, attempt, run_at, started_at,
                          finished_at, last_error, errors)
SELECT (ARRAY['a','b','c','d'])[1 + i %% 4], 'task_' || (i %% 20),
       jsonb_build_object('customer', i, 'note', 'order ' || i),
       (CASE WHEN i %% 100 = 0 THEN 'dead' WHEN i %% 1000 = 1 THEN 'cancelled'
             ELSE 'succeeded' END)::pgfleet.job_state,
       1,
       -- Twenty finish a second: the last hour holds 72,000, more than a chart reads.
       now() - make_interval(secs => (%(n)s - i) / 20.0 + 0.3 + (i %% 7) / 10.0),
       now() - make_interval(secs => (%(n)s - i) / 20.0 + 0.2 + (i %% 5) / 50.0),
       now() - make_interval(secs => (%(n)s - i) / 20.0),
       CASE WHEN i %% 100 = 0 THEN 'ValueError: boom ' || i END,
       CASE WHEN i %% 100 = 0 THEN jsonb_build_array(jsonb_build_object(
           'attempt', 1, 'at', now(), 'error', 'ValueError: boom ' || i)) ELSE '[]' END
  FROM generate_series(%(lo)s, %(hi)s) i
"""


def fill(db: Database, history: int) -> None:
    batch = 500_000
    with db.connect() as conn:
        for lo in range(1, history + 1, batch):
            hi = min(lo + batch - 1, history)
            conn.execute(HISTORY_SQL, {"n": history, "lo": lo, "hi": hi})
            log(f"web bench: {hi:,} of {history:,} finished jobs")
        conn.execute("INSERT INTO pgfleet.jobs (queue, task) SELECT 'a', 'fresh'"
                     " FROM generate_series(1, 500)")
        conn.execute("INSERT INTO pgfleet.jobs (queue, task, run_at)"
                     " SELECT 'a', 'later', now() + make_interval(mins => i)"
                     "   FROM generate_series(1, 200) i")
        add_fleet(conn)
        conn.execute("VACUUM ANALYZE pgfleet.jobs")


def add_fleet(conn: Any) -> None:
    """Two hosts of a supervisor, four workers, maintenance, each worker running jobs, and
    one job with a result and meta (its id is the largest)."""
    for host in ("app-1", "app-2"):
        sup = f"{host}:100:sup"
        conn.execute("INSERT INTO pgfleet.processes (id, host, pid, kind, queue, supervisor)"
                     " VALUES (%s, %s, 100, 'supervisor', NULL, NULL),"
                     " (%s, %s, 101, 'maintenance', NULL, %s)",
                     (sup, host, f"{host}:101:m", host, sup))
        for n, queue in enumerate(("a", "b"), start=102):
            worker = f"{host}:{n}:w"
            conn.execute("INSERT INTO pgfleet.processes (id, host, pid, kind, queue,"
                         " supervisor) VALUES (%s, %s, %s, 'worker', %s, %s)",
                         (worker, host, n, queue, sup))
            conn.execute(
                "INSERT INTO pgfleet.jobs (queue, task, args, state, attempt, lease_holder,"
                " lease_expires_at, started_at, progress)"
                " SELECT %s, 'task_' || i, jsonb_build_object('customer', i), 'running', 1,"
                " %s, now() + interval '1 min', now() - make_interval(secs => i * 7),"
                " to_jsonb(round(i / 5.0, 2)) FROM generate_series(1, 4) i", (queue, worker))
    conn.execute(
        "INSERT INTO pgfleet.jobs (queue, task, args, state, attempt, run_at, started_at,"
        " finished_at, result, meta, concurrency_key, errors)"
        " VALUES ('a', 'billing.charge', '{\"customer\": 42, \"cents\": 1999}', 'succeeded',"
        " 2, now() - interval '40 s', now() - interval '30 s', now() - interval '28.8 s',"
        " '{\"receipt\": \"r-77\", \"charged\": 1999, \"lines\": [1, 2, 3]}',"
        " '{\"tenant\": \"acme\", \"trace_id\": \"4bf92f35\"}', 'customer-42',"
        " jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now() - interval '1 min',"
        " 'error', E'CardDeclined: gateway timeout\\n  File \"/app/billing.py\", line 12,"
        " in charge\\n    reply = gateway.charge(customer, cents)\\n  File \"/app/gateway.py\","
        " line 40, in charge\\n    raise CardDeclined(reply)')))")


def server_ms(url: str) -> float:
    with urllib.request.urlopen(url) as response:
        response.read()
        timing = response.headers["Server-Timing"]
    return float(timing.split("dur=")[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--history", type=int, default=5_000_000)
    parser.add_argument("--requests", type=int, default=7)
    parser.add_argument("--database-url", help="measure this database (filled by an "
                        "earlier run with the same --history) instead of a new one")
    args = parser.parse_args()
    db = Database()
    if args.database_url is None:
        db.create()
    web = None
    try:
        if args.database_url is None:
            fill(db, args.history)
        web = subprocess.Popen(
            [sys.executable, "-m", "pgfleet", "--database-url", args.database_url or db.dsn,
             "web", "--listen",
             "127.0.0.1:0"], stdout=subprocess.PIPE, text=True)
        assert web.stdout is not None
        base = web.stdout.readline().split("serving on ")[1].split()[0].rstrip("/")
        results = {}
        with psycopg.connect(args.database_url or db.dsn) as conn:
            row = conn.execute("SELECT max(id) FROM pgfleet.jobs WHERE result IS NOT NULL"
                               ).fetchone()
        result_id = row[0] if row else 1
        for path in URLS:
            url = base + path.format(middle=args.history // 2, result=result_id)
            server_ms(url)  # the first request of a URL warms the plan and template caches
            times = [server_ms(url) for _ in range(args.requests)]
            results[path] = {"median_ms": statistics.median(times), "max_ms": max(times)}
            log(f"web bench: {path}: median {statistics.median(times):.1f} ms, "
                f"max {max(times):.1f} ms")
        # Server time on a shared machine follows its load: keep the load beside the figures.
        out = {"history": args.history, "requests": args.requests,
               "load_average_1m": os.getloadavg()[0], "cpus": os.cpu_count(),
               "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "pages": results}
        (BENCH_DIR / "results" / "web.json").write_text(json.dumps(out, indent=2) + "\n")
        print(json.dumps(out, indent=2))
    finally:
        if web is not None:
            web.terminate()
            web.wait()
        if args.database_url is None:
            db.drop()


if __name__ == "__main__":
    main()
