"""Run the benchmark suite of issue 6 against a fresh database it creates and drops.

    python -m bench.run --quick      # ~5 min: 3 runs, scale/restart scenarios scaled down
    python -m bench.run              # full: 5 runs, 1M waiting, 5M history, 1000 restarts
    python -m bench.run --only drain,latency

Prints a table and writes bench/results/latest.json. Server: BENCH_SERVER_DSN
(default postgresql://postgres@127.0.0.1:5432/postgres).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from bench import drain as comparison, scenarios as sc
from bench.common import BENCH_DIR, Database, log, machine, summary
from bench.sqlloop import sqlloop
from bench.systems import install_pgqueuer

SECTIONS = ("drain", "enqueue", "latency", "recovery", "scale", "memory", "profile")

FULL = {"runs": 5, "drain_jobs": 50_000, "latency_jobs": 1000, "recovery_runs": 5,
        "window": 10_000, "baseline": 10_000, "backlog": 1_000_000, "history": 5_000_000,
        "restarts": 1000, "bulk_jobs": 100_000, "single_seconds": 5.0}
QUICK = {"runs": 3, "drain_jobs": 50_000, "latency_jobs": 500, "recovery_runs": 3,
         "window": 10_000, "baseline": 10_000, "backlog": 200_000, "history": 1_000_000,
         "restarts": 200, "bulk_jobs": 50_000, "single_seconds": 3.0}

PGBENCH_BATCH = 32            # = threads + prefetch of the bench config: one worker claim


def run_drain(db: Database, p: dict[str, Any], results: dict[str, Any]) -> None:
    """The comparison of bench/drain.py (its quick or full parameters), the pgbench
    ceiling for the record, and a drain of 1-ms sleeping jobs."""
    params = dict(comparison.QUICK if p["runs"] <= 3 else comparison.FULL)
    install_pgqueuer(db)
    sweep = comparison.run_sweep(db, params)
    out: dict[str, Any] = {"params": params, "sweep": sweep,
                           "rounds": comparison.run_rounds(db, params, sweep)}
    out["pgbench_ceiling_jobs_per_s"] = sc.pgbench_ceiling(db, p["drain_jobs"], PGBENCH_BATCH,
                                                          2)["jobs_per_s"]
    n = p["drain_jobs"] // 5
    sleepy = [sc.drain_pgfleet(db, n, "bench.sleep_1ms", {"threads": 64, "prefetch": 16}
                               )["jobs_per_s"] for _ in range(p["runs"])]
    log(f"drain sleep_1ms x64 threads: {sleepy}")
    out["sleep_1ms"] = {"jobs": n, "threads_per_process": 64, "processes": 2,
                        "jobs_per_s": summary(sleepy)}
    results["drain"] = out


def run_enqueue(db: Database, p: dict[str, Any], results: dict[str, Any]) -> None:
    db.reset()
    single: dict[str, list[float]] = {"autocommit": [], "sync_off": [], "one_txn": []}
    for _ in range(p["runs"]):  # interleaved, so the three see the same noise
        for mode, rates in single.items():
            rates.append(sc.enqueue_single(db, p["single_seconds"], mode))
    bulk = [sc.enqueue_bulk(db, p["bulk_jobs"]) for _ in range(p["runs"])]
    log(f"enqueue single {single}, bulk {bulk}")
    results["enqueue"] = {"single_jobs_per_s": summary(single["autocommit"]),
                          "single_sync_off_jobs_per_s": summary(single["sync_off"]),
                          "single_one_transaction_jobs_per_s": summary(single["one_txn"]),
                          "bulk_jobs_per_s": summary(bulk), "bulk_jobs": p["bulk_jobs"]}


def run_latency(db: Database, p: dict[str, Any], results: dict[str, Any]) -> None:
    out: dict[str, Any] = {}
    for name, rate in (("idle", 0), ("loaded_1000_per_s", 1000)):
        runs = [sc.latency(db, p["latency_jobs"], rate) for _ in range(p["runs"])]
        out[name] = {key: summary([r[key] for r in runs]) for key in runs[0]}
        log(f"latency {name}: p50 {out[name]['p50_ms']['median']:.2f} "
            f"p99 {out[name]['p99_ms']['median']:.2f} ms")
    results["latency"] = out


def run_recovery(db: Database, p: dict[str, Any], results: dict[str, Any]) -> None:
    raw = sc.recovery(db, p["recovery_runs"])
    log(f"recovery {raw}")
    results["recovery"] = {key: summary(values) for key, values in raw.items()}


def run_scale(db: Database, p: dict[str, Any], results: dict[str, Any]) -> None:
    raw = sc.scale(db, p["window"], p["baseline"], p["backlog"], p["history"], p["runs"])
    out = {k: v for k, v in raw.items() if not k.endswith("_jobs_per_s")}
    for key in ("baseline_jobs_per_s", "backlog_jobs_per_s", "history_jobs_per_s"):
        out[key] = summary(raw[key])
    base = out["baseline_jobs_per_s"]["median"]
    out["backlog_ratio"] = out["backlog_jobs_per_s"]["median"] / base
    out["history_ratio"] = out["history_jobs_per_s"]["median"] / base
    log(f"scale {out}")
    results["scale"] = out


def run_memory(db: Database, p: dict[str, Any], results: dict[str, Any]) -> None:
    results["memory"] = sc.memory(db, p["restarts"])
    log(f"memory {results['memory']}")


def run_profile(db: Database, p: dict[str, Any], results: dict[str, Any]) -> None:
    results["profile"] = sc.profile_drain(db, p["drain_jobs"], 5)
    loop = sqlloop(db, p["drain_jobs"], PGBENCH_BATCH, p["runs"])
    results["profile"]["protocol_only"] = {
        "batch": PGBENCH_BATCH,
        **{k: summary(v) for k, v in loop.items()},
        "pipelined_over_sequential": summary(
            [b / a for a, b in zip(loop["sequential_jobs_per_s"],
                                   loop["pipelined_jobs_per_s"], strict=True)])}
    log(f"profile {results['profile']}")


RUNNERS = {"drain": run_drain, "enqueue": run_enqueue, "latency": run_latency,
           "recovery": run_recovery, "scale": run_scale, "memory": run_memory,
           "profile": run_profile}


def fmt(s: dict[str, Any] | None, unit: str = "", digits: int = 0) -> str:
    if not s or s.get("median") is None:
        return "-"
    f = f"{{:,.{digits}f}}"
    return (f"{f.format(s['median'])}{unit} ({f.format(s['min'])}-{f.format(s['max'])})")


def targets(res: dict[str, Any]) -> list[tuple[str, str, str, bool | None]]:
    """(metric, measured, target, met)."""
    rows: list[tuple[str, str, str, bool | None]] = []

    def add(metric: str, s: dict[str, Any] | None, target: str, ok: Any, unit: str = "",
            digits: int = 0) -> None:
        med = None if not s else s.get("median")
        rows.append((metric, fmt(s, unit, digits), target,
                     None if med is None else bool(ok(med))))

    d, e, lat = res.get("drain", {}), res.get("enqueue", {}), res.get("latency", {})
    if "rounds" in d:
        rows += comparison.table(d)
        rows.append(("drain ceiling, pgbench claim 32 + finish (jobs/s)",
                     f"{d['pgbench_ceiling_jobs_per_s']:,.0f}", "", None))
        add("drain 1-ms sleep, 2x64 threads (jobs/s)", d["sleep_1ms"]["jobs_per_s"], "",
            lambda v: True)
    add("enqueue single, 1 client (jobs/s)", e.get("single_jobs_per_s"), ">= 4,000",
        lambda v: v >= 4000)
    add("enqueue single, synchronous_commit=off opt-in (jobs/s)",
        e.get("single_sync_off_jobs_per_s"), "", lambda v: True)
    add("enqueue single, all in one transaction (jobs/s)",
        e.get("single_one_transaction_jobs_per_s"), "", lambda v: True)
    add("enqueue_many bulk (jobs/s)", e.get("bulk_jobs_per_s"), ">= 100,000",
        lambda v: v >= 100_000)
    idle, loaded = lat.get("idle", {}), lat.get("loaded_1000_per_s", {})
    add("latency idle p50 (ms)", idle.get("p50_ms"), "<= 2", lambda v: v <= 2, "", 2)
    add("latency idle p95 (ms)", idle.get("p95_ms"), "", lambda v: True, "", 2)
    add("latency idle p99 (ms)", idle.get("p99_ms"), "<= 10", lambda v: v <= 10, "", 2)
    add("latency loaded p50 (ms)", loaded.get("p50_ms"), "", lambda v: True, "", 2)
    add("latency loaded p95 (ms)", loaded.get("p95_ms"), "", lambda v: True, "", 2)
    add("latency loaded p99 (ms)", loaded.get("p99_ms"), "", lambda v: True, "", 2)
    rec = res.get("recovery", {})
    add("SIGKILL -> replacement claims (ms)", rec.get("replacement_claim_ms"), "<= 500",
        lambda v: v <= 500)
    add("SIGKILL mid-job -> job runs again (ms)", rec.get("killed_job_rerun_ms"), "<= 2,000",
        lambda v: v <= 2000)
    s = res.get("scale", {})
    if s:
        add(f"drain, {s['baseline_waiting']:,} waiting (jobs/s)", s["baseline_jobs_per_s"], "",
            lambda v: True)
        add(f"drain, {s['backlog_waiting']:,} waiting (jobs/s)", s["backlog_jobs_per_s"],
            ">= 80% of above", lambda v: s["backlog_ratio"] >= 0.8)
        add(f"drain, {s['history_finished']:,} in history (jobs/s)", s["history_jobs_per_s"],
            ">= 80% of above", lambda v: s["history_ratio"] >= 0.8)
    m = res.get("memory", {})
    if m:
        idle_mb = max(m["idle_worker_rss_kib"]) / 1024
        rows.append(("idle worker RSS (MiB)", f"{idle_mb:.1f}", "<= 40", idle_mb <= 40))
        rows.append(("supervisor RSS (MiB)", f"{m['supervisor_rss_kib'] / 1024:.1f}", "", None))
        rows.append((f"supervisor RSS change over {m['restarts']} restarts",
                     f"{m['rss_change_pct']:+.1f}%", "within ±5%",
                     abs(m["rss_change_pct"]) <= 5))
    return rows


def print_table(rows: list[tuple[str, str, str, bool | None]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    print(f"{'metric':<{widths[0]}}  {'median (min-max)':<{widths[1]}}  "
          f"{'target':<{widths[2]}}  met")
    for metric, value, target, ok in rows:
        mark = "" if ok is None or not target else ("yes" if ok else "NO")
        print(f"{metric:<{widths[0]}}  {value:<{widths[1]}}  {target:<{widths[2]}}  {mark}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs, smaller scale tests")
    parser.add_argument("--only", help=f"comma-separated subset of {','.join(SECTIONS)}")
    parser.add_argument("--output", default=str(BENCH_DIR / "results" / "latest.json"))
    args = parser.parse_args()
    params = dict(QUICK if args.quick else FULL)
    sections = args.only.split(",") if args.only else list(SECTIONS)
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown section(s) {sorted(unknown)}")
    results: dict[str, Any] = {"mode": "quick" if args.quick else "full", "params": params,
                               "machine": machine(), "started": time.strftime("%FT%T%z")}
    db = Database()
    log(f"database {db.name}")
    db.create()
    results["machine"]["server"] = db.scalar("SHOW server_version")
    started = time.monotonic()
    try:
        for name in sections:
            log(f"== {name}")
            RUNNERS[name](db, params, results)
    finally:
        db.drop()
        results["seconds"] = round(time.monotonic() - started)
        rows = targets(results)
        results["table"] = [{"metric": m, "value": v, "target": t, "met": ok}
                            for m, v, t, ok in rows]
        os.makedirs(os.path.dirname(args.output), exist_ok=True)
        with open(args.output, "w") as fh:
            json.dump(results, fh, indent=2, default=str)
        print_table(rows)
        log(f"wrote {args.output}")


if __name__ == "__main__":
    main()
