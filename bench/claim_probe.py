"""Where a pgfleet backlog drain spends its time, sampled while it runs (issue 16).

    python -m bench.claim_probe                      # 100,000 jobs, threads 8, prefetch 92
    python -m bench.claim_probe --src /tmp/proto/src # the same with another source tree
    python -m bench.claim_probe --analyze            # ANALYZE the backlog before the start

The backlog is inserted into a freshly truncated and vacuumed table (as the drain bench
does), then `pgfleet run` starts. Every --interval seconds it records: jobs finished,
index scans and buffer accesses per index (pg_stat_user_indexes, pg_statio_user_indexes),
dead tuples and autovacuum runs, and EXPLAIN (ANALYZE, BUFFERS) of the claim's locking
SELECT (limit = the workers' claim size, rolled back). py-spy records one worker for
--pyspy seconds from the second sample on. Writes bench/results/claim-probe.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import time
from itertools import pairwise
from typing import Any

from psycopg import sql as sql_text

from bench import common
from bench.common import BENCH_DIR, WORK, Database, log, supervisor, with_db, write_config
from bench.scenarios import _summarise_pyspy

CLAIM_SELECT = """
EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
SELECT id FROM pgfleet.jobs
 WHERE queue = 'default' AND state = 'queued' AND run_at <= now()
 ORDER BY priority, run_at, id
 LIMIT %s
   FOR UPDATE SKIP LOCKED
"""

INDEX_STATS = """
SELECT s.indexrelname, s.idx_scan, s.idx_tup_read, s.idx_tup_fetch, io.idx_blks_hit,
       io.idx_blks_read
  FROM pg_stat_user_indexes s JOIN pg_statio_user_indexes io USING (indexrelid)
 WHERE s.relname = 'jobs'
"""

TABLE_STATS = """
SELECT n_dead_tup, n_tup_upd, n_tup_hot_upd, autovacuum_count, autoanalyze_count
  FROM pg_stat_user_tables WHERE relname = 'jobs'
"""


def _plan_summary(plan: dict[str, Any]) -> dict[str, Any]:
    root = plan["Plan"]
    return {"ms": round(plan["Execution Time"], 3),
            "planning_ms": round(plan["Planning Time"], 3),
            "shared_hit": root.get("Shared Hit Blocks", 0),
            "shared_read": root.get("Shared Read Blocks", 0)}


def _indexes(conn: Any) -> dict[str, dict[str, int]]:
    return {r[0]: {"scans": r[1], "tup_read": r[2], "tup_fetch": r[3], "blks": r[4] + r[5]}
            for r in conn.execute(INDEX_STATS).fetchall()}


def sample(conn: Any, limit: int) -> dict[str, Any]:
    with conn.transaction():
        (plan,) = conn.execute(CLAIM_SELECT, (limit,)).fetchone()[0]
        conn.execute("ROLLBACK")  # the locks the EXPLAIN took go now
    row = conn.execute(TABLE_STATS).fetchone()
    done = conn.execute("SELECT count(*) FROM pgfleet.jobs WHERE state = 'succeeded'"
                        ).fetchone()[0]
    return {"t": time.monotonic(), "done": done, "indexes": _indexes(conn),
            "claim_select": _plan_summary(plan),
            "table": dict(zip(("n_dead_tup", "n_tup_upd", "n_tup_hot_upd", "autovacuum",
                               "autoanalyze"), row, strict=True))}


def explain_complete(db: Database) -> dict[str, Any]:
    """After the drain: complete_succeeded as each worker would send it (its own holder,
    an id that is not running, so nothing changes), custom and generic plan. Every row
    the worker finished left an entry under its holder in jobs_lease_holder_idx."""
    from pgfleet.sql.store import q

    sql = (q("complete_succeeded").decode().replace("%(worker)s", "$1")
           .replace("%(ids)s", "$2").replace("%(fences)s", "$3")
           .replace("%(results)s", "NULL"))
    out: dict[str, Any] = {}
    with db.connect() as conn:
        holder = conn.execute("SELECT id FROM pgfleet.processes WHERE kind = 'worker'"
                              " ORDER BY id LIMIT 1").fetchone()[0]
        conn.execute(f"PREPARE cs(text, bigint[], int[]) AS {sql}")
        for mode in ("force_custom_plan", "force_generic_plan"):
            conn.execute(f"SET plan_cache_mode = {mode}")
            with conn.transaction():
                (plan,) = conn.execute(sql_text.SQL(
                    "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE cs({}, '{{-1}}', '{{1}}')"
                ).format(holder)).fetchone()[0]
                conn.execute("ROLLBACK")
            out[mode] = {**_plan_summary(plan), "indexes": sorted(set(_index_names(plan["Plan"])))}
    return out


def _index_names(node: dict[str, Any]) -> list[str]:
    names = [node["Index Name"]] if "Index Name" in node else []
    for child in node.get("Plans", []):
        names += _index_names(child)
    return names


def per_interval(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Differences between consecutive samples: jobs/s and index work per scan."""
    out = []
    for a, b in pairwise(samples):
        dt = b["t"] - a["t"]
        row: dict[str, Any] = {"done": b["done"], "jobs_per_s": round((b["done"] - a["done"]) / dt),
                               "claim_select": b["claim_select"],
                               "n_dead_tup": b["table"]["n_dead_tup"],
                               "autovacuum": b["table"]["autovacuum"]}
        for name in ("jobs_claim_idx", "jobs_lease_holder_idx", "jobs_pkey"):
            x, y = a["indexes"][name], b["indexes"][name]
            scans = y["scans"] - x["scans"]
            row[name] = {"scans": scans,
                         "blks_per_scan": round((y["blks"] - x["blks"]) / scans, 1) if scans else 0,
                         "tup_read_per_scan":
                             round((y["tup_read"] - x["tup_read"]) / scans, 1) if scans else 0}
        out.append(row)
    return out


def run(n: int, threads: int, prefetch: int, interval: float, pyspy_seconds: float,
        src: str | None, analyze: bool) -> dict[str, Any]:
    db = Database()
    db.name = f"pgfleet_probe_{os.getpid()}"
    db.dsn = with_db(common.SERVER, db.name)
    db.create()
    if src:
        os.environ["PYTHONPATH"] = os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])
    pyspy_out = WORK / "claim-probe-pyspy.txt"
    pyspy: subprocess.Popen[bytes] | None = None
    samples = []
    try:
        db.reset()
        db.insert_jobs(n)
        if analyze:
            with db.connect() as conn:
                conn.execute("ANALYZE pgfleet.jobs")
        config = write_config("probe", {"processes": 2, "threads": threads,
                                        "prefetch": prefetch})
        with supervisor(db, config, 2) as sup, db.connect(autocommit=False) as conn:
            conn.autocommit = True
            while True:
                samples.append(sample(conn, threads + prefetch))
                if len(samples) == 2 and pyspy_seconds and shutil.which("py-spy"):
                    pyspy = subprocess.Popen(
                        ["py-spy", "record", "-p", str(sup.workers()[0]), "-d",
                         str(pyspy_seconds), "-r", "200", "-f", "raw", "-o", str(pyspy_out),
                         "--nonblocking", "--idle", "--threads"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                if samples[-1]["done"] >= n:
                    break
                time.sleep(interval)
            if pyspy is not None:
                pyspy.wait(60)
            complete = explain_complete(db)
    finally:
        db.drop()
    result: dict[str, Any] = {"jobs": n, "threads": threads, "prefetch": prefetch,
                              "src": src or "(PYTHONPATH)", "analyzed_before": analyze,
                              "intervals": per_interval(samples),
                              "complete_succeeded_after_drain": complete}
    if pyspy is not None and pyspy_out.exists():
        shutil.copy(pyspy_out, BENCH_DIR / "results" / "pyspy-drain-worker.txt")
        result["pyspy_main_thread"] = _summarise_pyspy(pyspy_out.read_text())
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--prefetch", type=int, default=92)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--pyspy", type=float, default=4.0, help="seconds; 0 = no profile")
    parser.add_argument("--src", help="run the workers from this source tree")
    parser.add_argument("--analyze", action="store_true")
    parser.add_argument("--output", default=str(BENCH_DIR / "results" / "claim-probe.json"))
    args = parser.parse_args()
    result = run(args.jobs, args.threads, args.prefetch, args.interval, args.pyspy, args.src,
                 args.analyze)
    with open(args.output, "w") as fh:
        json.dump(result, fh, indent=1)
    print(f"{'done':>7} {'jobs/s':>7} {'claim ms':>8} {'hit':>5} | claim_idx blk/scan"
          f" | holder_idx blk/scan tup/scan | pkey scans | dead tup  autovac")
    for r in result["intervals"]:
        c, h, k = r["jobs_claim_idx"], r["jobs_lease_holder_idx"], r["jobs_pkey"]
        print(f"{r['done']:>7} {r['jobs_per_s']:>7} {r['claim_select']['ms']:>8.2f}"
              f" {r['claim_select']['shared_hit']:>5} | {c['blks_per_scan']:>8} "
              f"| {h['blks_per_scan']:>8} {h['tup_read_per_scan']:>8} | {k['scans']:>6}"
              f" | {r['n_dead_tup']:>8} {r['autovacuum']:>3}")
    print("complete_succeeded after the drain:", result["complete_succeeded_after_drain"])
    if "pyspy_main_thread" in result:
        print(json.dumps(result["pyspy_main_thread"], indent=1))
    log(f"wrote {args.output}")


if __name__ == "__main__":
    main()
