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

from bench.common import BENCH_DIR, Database, log

URLS = [
    "/", "/jobs", "/jobs?before={middle}", "/jobs?state=dead", "/jobs?state=dead&queue=b",
    "/jobs?state=queued&queue=a", "/jobs?state=running", "/jobs?state=cancelled&queue=b",
    "/jobs?state=dead&task=task_0", "/jobs?queue=c",
    "/jobs?task=task_3", "/jobs?q=%22customer%22%3A+4242", "/jobs?id={middle}",
    "/jobs/{middle}", "/schedules",
]

HISTORY_SQL = """
INSERT INTO pgfleet.jobs (queue, task, args, state, attempt, finished_at, last_error, errors)
SELECT (ARRAY['a','b','c','d'])[1 + i %% 4], 'task_' || (i %% 20),
       jsonb_build_object('customer', i, 'note', 'order ' || i),
       (CASE WHEN i %% 100 = 0 THEN 'dead' WHEN i %% 1000 = 1 THEN 'cancelled'
             ELSE 'succeeded' END)::pgfleet.job_state,
       1, now() - make_interval(secs => %(n)s - i),
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
        conn.execute("VACUUM ANALYZE pgfleet.jobs")


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
        for path in URLS:
            url = base + path.format(middle=args.history // 2)
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
