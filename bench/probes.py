"""Component measurements behind bench/results/HISTORY.md ("Changes and their measured effect").

    python -m bench.probes bulk      # enqueue_many: validation and INSERT variants
    python -m bench.probes single    # single enqueue: autocommit, sync off, one transaction
    python -m bench.probes loop      # claim + complete protocol: autocommit vs one transaction
    python -m bench.probes idle-arrival [--idle 15]  # arrival after the workers idled
    python -m bench.probes complete-plans    # complete_succeeded's generic plan, 2 variants
    python -m bench.probes flow [--jobs 10000] [--variant plain ...]  # drain rate per limit
    python -m bench.probes flow-backlog      # limited claim behind a blocked key's backlog
    python -m bench.probes future-jobs [--baseline-src /path/to/old/src] [--future 1000000]
                                       [--jobs 50000] [--json FILE]  # see bench/future_jobs.py
    python -m bench.probes ab-drain --baseline-src /path/to/old/src [--mode backlog]
                                     [--claim 100 --threads 8 --jobs 100000]

`ab-drain` alternates `pgfleet run` from the working tree (PYTHONPATH) and from another
source tree (e.g. `git worktree add /tmp/old HEAD~1` then `--baseline-src /tmp/old/src`),
so both see the same machine noise; it prints the per-round ratio new/old. Each probe uses
a database of its own, created and dropped.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

import pgfleet
from bench import common, future_jobs, scenarios as sc
from bench.common import Database, supervisor, write_config
from bench.systems import MODES, Setup, drain
from pgfleet.client import enqueue as client
from pgfleet.core.flow import FlowLimits
from pgfleet.sql import fleet, store

try:  # absent from code before issue 16's binary arrays (an A/B baseline)
    from pgfleet.sql import arrays as bulk_arrays
except ImportError:  # pragma: no cover
    bulk_arrays = None  # type: ignore[assignment]

N_BULK = 50_000


def claim_limited(conn: psycopg.Connection[Any], *, queue: str, limit: int, worker: str,
                  lease: float, limits: FlowLimits) -> list[store.ClaimedJob]:
    """The claim of a worker with limits of its own (published unless a supervisor did)."""
    fleet.publish_fallback_limits(conn, queue=queue, published_by=worker, limits=limits)
    return store.claim(conn, queue=queue, limit=limit, worker=worker, lease=lease)


def _report(results: dict[str, list[float]], unit: str) -> None:
    for name, values in results.items():
        runs = ", ".join(f"{v:,.0f}" for v in values)
        print(f"{name:34s} {statistics.median(values):>12,.0f} {unit}   [{runs}]")


def _timed_insert(db: Database, sql: bytes, params: Callable[[list[Any]], dict[str, Any]],
                  rows: list[Any], chunk: int = client.BULK_CHUNK) -> float:
    """The INSERTs of `rows`, one chunk after the other's result, and the commit (ms)."""
    db.reset()
    with db.connect(autocommit=False) as conn:
        start = time.perf_counter()
        for first in range(0, len(rows), chunk):
            with conn.cursor() as cur:
                if bulk_arrays is not None:
                    bulk_arrays.register(cur.adapters)
                cur.execute(sql, params(rows[first : first + chunk])).fetchall()
        conn.commit()
        return (time.perf_counter() - start) * 1000


def _list_columns(rows: list[Any]) -> dict[str, Any]:
    """The statement's parameters as Python lists, dumped element by element by psycopg
    (what enqueue_many sent before its hand-built binary arrays)."""
    names = ("tasks", "args", "queues", "priorities", "delays", "run_ats", "max_attempts",
             "unique_keys", "metas", "concurrency_keys")
    return {n: list(c) for n, c in zip(names, zip(*rows, strict=True), strict=True)}


def _cpu_ms(pid: int) -> float:
    """User + system CPU of a local process (the connection's backend), in ms: steadier
    than wall time on a shared machine."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def _end_to_end(db: Database, jobs: list[dict[str, Any]], out: dict[str, list[float]]) -> None:
    db.reset()
    with db.connect(autocommit=False) as conn:
        backend = conn.info.backend_pid
        server, mine, start = _cpu_ms(backend), time.process_time(), time.perf_counter()
        pgfleet.enqueue_many(conn, jobs)
        conn.commit()
        elapsed = time.perf_counter() - start
        out.setdefault("enqueue_many: client CPU (ms)", []).append(
            (time.process_time() - mine) * 1000)
        out.setdefault("enqueue_many: server CPU (ms)", []).append(_cpu_ms(backend) - server)
        out.setdefault("enqueue_many end to end (rows/s)", []).append(N_BULK / elapsed)


def bulk(db: Database, runs: int) -> None:
    jobs = [{"task": "bench.noop", "args": {"i": i}, "queue": "enqueue"} for i in range(N_BULK)]
    sql = store.q("enqueue_many")
    out: dict[str, list[float]] = {}
    for _ in range(runs):
        start = time.perf_counter()
        rows = client._rows(jobs)
        out.setdefault("validation (ms)", []).append((time.perf_counter() - start) * 1000)
        out.setdefault("INSERT, arrays as sent (ms)", []).append(
            _timed_insert(db, sql, store.enqueue_many_params, rows))
        out.setdefault("INSERT, psycopg list arrays (ms)", []).append(
            _timed_insert(db, sql, _list_columns, rows))
        db.reset()
        with db.connect(autocommit=False) as conn:
            start = time.perf_counter()
            with conn.cursor().copy("COPY pgfleet.jobs (task, args, queue, priority,"
                                    " max_attempts) FROM STDIN") as copy:
                for r in rows:
                    copy.write_row((r[0], r[1], r[2], r[3], r[6] or 20))
            conn.commit()
            out.setdefault("COPY without ids (ms)", []).append(
                (time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            conn.execute("SELECT nextval(pg_get_serial_sequence('pgfleet.jobs', 'id'))"
                         " FROM generate_series(1, %s)", (N_BULK,)).fetchall()
            out.setdefault("preallocating ids with nextval (ms)", []).append(
                (time.perf_counter() - start) * 1000)
        _end_to_end(db, jobs, out)
    _report(out, "")


def single(db: Database, runs: int) -> None:
    out: dict[str, list[float]] = {}
    for _ in range(runs):
        for mode in ("autocommit", "sync_off", "one_txn"):
            out.setdefault(f"enqueue {mode} (jobs/s)", []).append(
                sc.enqueue_single(db, 2.0, mode))
        with db.connect() as conn:
            start, count = time.perf_counter(), 0
            while time.perf_counter() - start < 1.0:
                conn.execute("SELECT 1").fetchone()
                count += 1
            out.setdefault("SELECT 1 round trips (/s)", []).append(
                count / (time.perf_counter() - start))
    _report(out, "")


def _loop(db: Database, n: int, batch: int, mode: str) -> float:
    db.reset()
    db.insert_jobs(n + batch)
    db.vacuum()
    claim, complete = store.q("claim"), store.q("complete_succeeded")
    params: dict[str, Any] = {"queue": "default", "limit": batch, "worker": "probe",
                              "lease": 60.0}
    done, held = 0, []
    with db.connect() as conn:
        if mode == "sync_off":
            conn.execute("SET synchronous_commit = off")
        start = time.perf_counter()
        while done < n:
            finish = {"worker": "probe", "ids": [h[0] for h in held],
                      "fences": [h[1] for h in held], "results": None}
            if mode == "one_txn":
                with conn.transaction():
                    if held:
                        done += len(conn.execute(complete, finish).fetchall())
                    rows = conn.execute(claim, params).fetchall()
            else:
                if held:
                    done += len(conn.execute(complete, finish).fetchall())
                rows = conn.execute(claim, params).fetchall()
            held = [(r[0], r[-1]) for r in rows]
        return done / (time.perf_counter() - start)


def loop(db: Database, runs: int) -> None:
    out: dict[str, list[float]] = {}
    for _ in range(runs):
        for mode in ("autocommit", "one_txn", "sync_off"):
            out.setdefault(f"claim 16 + complete, {mode} (jobs/s)", []).append(
                _loop(db, 30_000, 16, mode))
    _report(out, "")


def ab_drain(db: Database, runs: int, baseline_src: str, mode: str, claim: int,
             threads: int, jobs: int) -> None:
    """pgfleet from this tree (PYTHONPATH) against pgfleet from baseline_src, alternating
    (old new, new old, ...), each a drain of bench/systems.py in the given mode."""
    setup = Setup("pgfleet", claim, threads)
    own = os.environ.get("PYTHONPATH", "")
    trees = {"old": os.pathsep.join([baseline_src, own]), "new": own}
    out: dict[str, list[float]] = {"old (jobs/s)": [], "new (jobs/s)": [],
                                   "old slowest/median second": [],
                                   "new slowest/median second": []}
    ratios = []
    try:
        for index in range(runs):
            rates = {}
            for name in ("old", "new") if index % 2 == 0 else ("new", "old"):
                os.environ["PYTHONPATH"] = trees[name]
                run = drain(db, setup, jobs, mode)
                rates[name] = run["jobs_per_s"]
                out[f"{name} (jobs/s)"].append(run["jobs_per_s"])
                if run["steadiness"] is not None:
                    out[f"{name} slowest/median second"].append(run["steadiness"] * 1000)
            ratios.append(rates["new"] / rates["old"])
            common.log(f"round {index + 1}: old {rates['old']:,.0f}, new {rates['new']:,.0f}"
                       f" jobs/s")
    finally:
        os.environ["PYTHONPATH"] = own
    print(f"{setup.label}, {mode}, {jobs:,} jobs")
    print("new/old per round:", [round(r, 3) for r in ratios],
          "median", round(statistics.median(ratios), 3))
    _report({k: v for k, v in out.items() if "jobs/s" in k}, "")
    _report({k: v for k, v in out.items() if "jobs/s" not in k and v}, "(x1000)")


def idle_arrival(db: Database, runs: int, jobs: int, idle: float) -> None:
    """Arrival drains after the workers polled the empty queue 0.5 s and `idle` s,
    alternating: after ~11 polls psycopg has prepared the claim and PostgreSQL may cache a
    generic plan made for an empty table."""
    setup = Setup("pgfleet", 100, 8)
    out: dict[str, list[float]] = {"idle 0.5 s (jobs/s)": [], f"idle {idle:g} s (jobs/s)": []}
    for index in range(runs):
        for wait in (0.5, idle) if index % 2 == 0 else (idle, 0.5):
            rate = drain(db, setup, jobs, "arrival", idle=wait)["jobs_per_s"]
            out[f"idle {wait:g} s (jobs/s)"].append(rate)
            common.log(f"round {index + 1}: idle {wait:g} s: {rate:,.0f} jobs/s")
    _report(out, "")


COMPLETE_VARIANTS = {
    # today's statement: the holder fence is indexable, and the generic plan that psycopg's
    # prepared statement gets walks jobs_lease_holder_idx and re-scans the id list per row
    "holder = (today)": "j.lease_holder = $1",
    # the same fence written so that only the primary key can find the rows
    "holder IS NOT DISTINCT FROM": "j.lease_holder IS NOT DISTINCT FROM $1",
}


def complete_plans(db: Database, runs: int) -> None:
    """complete_succeeded's generic plan (what a prepared statement runs) against the
    variant that only the primary key can serve: best-of-`runs` execution time of a
    completion of 10/50/100/200 running jobs (EXPLAIN ANALYZE, rolled back)."""
    sql = (store.q("complete_succeeded").decode().replace("%(worker)s", "$1")
           .replace("%(ids)s", "$2").replace("%(fences)s", "$3")
           .replace("%(results)s", "'{}'"))
    db.reset()
    db.insert_jobs(100_000)
    db.vacuum()
    with db.connect() as conn:
        conn.execute("UPDATE pgfleet.jobs SET state = 'running', lease_holder = 'w', attempt = 1,"
                     " lease_expires_at = now() + interval '1 hour'"
                     " WHERE id IN (SELECT id FROM pgfleet.jobs ORDER BY id LIMIT 200)")
        ids = [r[0] for r in conn.execute(
            "SELECT id FROM pgfleet.jobs WHERE lease_holder = 'w' ORDER BY id").fetchall()]
        conn.execute("SET plan_cache_mode = force_generic_plan")
        for n, (label, fence) in enumerate(COMPLETE_VARIANTS.items()):
            conn.execute(f"PREPARE c{n}(text, bigint[], text) AS "
                         + sql.replace("j.lease_holder = $1", fence))
            for batch in (10, 50, 100, 200):
                total = find = float("inf")
                for _ in range(runs):
                    with conn.transaction():
                        cur = psycopg.ClientCursor(conn).execute(
                            f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE c{n}('w',"
                            " %s::bigint[], %s)",
                            (ids[:batch], store.done_params([(i, 1) for i in ids[:batch]],
                                                            None)["fences"]))
                        (plan,) = cur.fetchone()[0]
                        conn.execute("ROLLBACK")
                    total = min(total, plan["Execution Time"])
                    # the rows' lookup alone: the node under the UPDATE
                    join = next(n for n in plan["Plan"]["Plans"] if "Subplan Name" not in n)
                    find = min(find, join["Actual Total Time"])
                # Times swing with the machine's load; the pairs the join compared do not.
                compared = join.get("Rows Removed by Join Filter", 0) + join["Actual Rows"]
                print(f"complete {batch:>3} jobs, {label:28s} {join['Node Type']}:"
                      f" {compared:>6} pairs compared; finding the rows {find:7.3f} ms,"
                      f" statement {total:7.3f} ms")


# Queue settings of the flow probe: 2 processes x 16 threads, no prefetch (flow control
# forbids it, so the plain claim is measured without it too), then each limit alone.
FLOW_VARIANTS: dict[str, dict[str, Any]] = {
    "plain, prefetch 16": {"prefetch": 16},
    "plain": {},
    "global 1000, unreached": {"global_concurrency": 1000},
    "global 8": {"global_concurrency": 8},
    "rate 1000000/s, unreached": {"rate_limit": "1000000/s"},
    "rate 2000/s": {"rate_limit": "2000/s"},
    "key 1, no keys": {"key_concurrency": 1},
    "key 1, 1000 keys": {"key_concurrency": 1, "keys": 1000},
}


def _flow_drain(db: Database, jobs: int, queue: dict[str, Any]) -> float:
    """Workers up and idle, `jobs` no-op jobs land in one transaction (with `keys`
    concurrency keys, dealt round robin); jobs/s from that commit to the last finish."""
    settings = dict(queue)
    keys = int(settings.pop("keys", 0))
    db.reset()
    with db.connect() as conn:
        conn.execute("TRUNCATE pgfleet.queue_limits, pgfleet.queue_starts")
    config = write_config("flow", {"processes": 2, "threads": 16, "prefetch": 0, **settings})
    with supervisor(db, config, 2):
        time.sleep(0.3)  # let the listeners LISTEN and the first polls pass
        with db.connect() as conn:
            conn.execute(
                "INSERT INTO pgfleet.jobs (queue, task, concurrency_key)"
                " SELECT 'default', 'bench.noop',"
                "        CASE WHEN %(keys)s > 0 THEN 'k' || (i %% %(keys)s) END"
                "   FROM generate_series(1, %(jobs)s) AS i", {"keys": keys, "jobs": jobs})
            t0 = conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
        db.wait_for(sc.UNFINISHED, 0, timeout=600, interval=0.05)
        t_end = db.scalar("SELECT max(finished_at) FROM pgfleet.jobs")
    return float(jobs / (t_end - t0).total_seconds())


def flow(db: Database, runs: int, jobs: int, only: list[str] | None = None) -> None:
    """The drain rate under each limit of docs/flow-control.md (or the variants named in
    `only`), rounds alternating the order of the variants so each sees the same noise."""
    variants = [name for name in FLOW_VARIANTS if not only or name in only]
    out: dict[str, list[float]] = {f"{name} (jobs/s)": [] for name in variants}
    for index in range(runs):
        names = variants if index % 2 == 0 else variants[::-1]
        for name in names:
            rate = _flow_drain(db, jobs, FLOW_VARIANTS[name])
            out[f"{name} (jobs/s)"].append(rate)
            common.log(f"round {index + 1}: {name}: {rate:,.0f} jobs/s")
    print(f"2 processes x 16 threads, {jobs:,} no-op jobs, arrival")
    _report(out, "")


def flow_backlog(db: Database, runs: int) -> None:
    """The limited claim of 4 jobs of free keys queued behind N jobs of one key that is at
    its limit (key_concurrency 1): best-of-`runs` time of the claim, rolled back."""
    for backlog in (1_000, 10_000, 50_000):
        db.reset()
        with db.connect() as conn:
            conn.execute("TRUNCATE pgfleet.queue_limits, pgfleet.queue_starts")
            conn.execute("INSERT INTO pgfleet.jobs (queue, task, concurrency_key)"
                         " SELECT 'default', 'bench.noop', 'busy' FROM generate_series(1, %s)",
                         (backlog,))
            conn.execute("INSERT INTO pgfleet.jobs (queue, task, concurrency_key)"
                         " SELECT 'default', 'bench.noop', 'free-' || i"
                         "   FROM generate_series(1, 20) AS i")
        db.vacuum()
        limits = FlowLimits()
        with db.connect() as conn:
            claim_limited(conn, queue="default", limit=1, worker="holder", lease=60,
                                limits=limits)  # the busy key's first job: now at its limit
            best = float("inf")
            for _ in range(runs):
                with conn.transaction():
                    start = time.perf_counter()
                    got = claim_limited(conn, queue="default", limit=4, worker="probe",
                                              lease=60, limits=limits)
                    best = min(best, time.perf_counter() - start)
                    assert len(got) == 4
                    raise psycopg.Rollback()
        print(f"{backlog:>6,} jobs of a key at its limit ahead: claim of 4 others"
              f" {best * 1000:8.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("probe", choices=("bulk", "single", "loop", "ab-drain", "idle-arrival",
                                          "complete-plans", "flow", "flow-backlog",
                                          "future-jobs"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--baseline-src",
                        help="for ab-drain and future-jobs: the old code's src directory")
    parser.add_argument("--mode", choices=MODES, default="arrival", help="for ab-drain")
    parser.add_argument("--claim", type=int, default=100,
                        help="for ab-drain: threads + prefetch (the largest claim)")
    parser.add_argument("--threads", type=int, default=8, help="for ab-drain")
    parser.add_argument("--jobs", type=int, default=None,
                        help="for ab-drain, idle-arrival, future-jobs (50,000) and flow"
                             " (10,000)")
    parser.add_argument("--future", type=int, default=1_000_000,
                        help="for future-jobs: jobs scheduled an hour ahead")
    parser.add_argument("--json", help="for future-jobs: write the figures there too")
    parser.add_argument("--variant", action="append",
                        help="for flow, repeatable: measure only these of: "
                        + "; ".join(FLOW_VARIANTS))
    parser.add_argument("--idle", type=float, default=15.0, help="for idle-arrival (seconds)")
    args = parser.parse_args()
    if args.probe == "ab-drain" and not args.baseline_src:
        parser.error("ab-drain needs --baseline-src")
    unknown = set(args.variant or ()) - set(FLOW_VARIANTS)
    if unknown:
        parser.error(f"unknown flow variants: {', '.join(sorted(unknown))}")
    db = Database()
    db.name = f"pgfleet_probe_{os.getpid()}"
    db.dsn = common.with_db(common.SERVER, db.name)
    db.create()
    try:
        if args.probe == "bulk":
            bulk(db, args.runs)
        elif args.probe == "single":
            single(db, args.runs)
        elif args.probe == "loop":
            loop(db, args.runs)
        elif args.probe == "complete-plans":
            complete_plans(db, args.runs)
        elif args.probe == "flow-backlog":
            flow_backlog(db, args.runs)
        elif args.probe == "flow":
            flow(db, args.runs, args.jobs or 10_000, args.variant)
        elif args.probe == "future-jobs":
            future_jobs.run(db, args.runs, args.baseline_src, args.future,
                            args.jobs or 50_000, args.json)
        elif args.probe == "idle-arrival":
            idle_arrival(db, args.runs, args.jobs or 50_000, args.idle)
        else:
            ab_drain(db, args.runs, args.baseline_src, args.mode, args.claim, args.threads,
                     args.jobs or 50_000)
    except psycopg.Error as exc:
        raise SystemExit(f"probe failed: {exc}") from None
    finally:
        db.drop()


if __name__ == "__main__":
    main()
