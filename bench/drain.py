"""The drain comparison of issue 16: pgfleet, PgQueuer (asyncpg and psycopg drivers) and a
bare asyncpg claim + finish loop, on the same database, in interleaved rounds.

    python -m bench.drain --quick    # ~5 min on an idle 2-core machine: sweep of 10k jobs,
                                     # 3 rounds of 50k
    python -m bench.drain            # sweep of 50k jobs twice, 5 rounds of 100k

1. Sweep: every setting of every system (pgfleet claims of 10/50/100/200 and the old bench
   setting; PgQueuer batch_size 10/50/100/200 on both drivers), both modes, interleaved.
2. Rounds: per mode, pgfleet's and PgQueuer's best settings of the sweep and the bare loop,
   100,000 jobs each, one after the other (the order rotates each round), so every ratio
   is taken inside one round, under the same noise; the medians of those ratios are
   reported. Every run's per-second timeline is kept.

Writes bench/results/drain.json (every run, timeline included) and prints the table.
Modes and clocks: see bench/systems.py.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from bench.common import BENCH_DIR, Database, log, machine, summary
from bench.systems import AUTO, MODES, PROCESSES, Setup, drain, install_pgqueuer

QUICK = {"sweep_jobs": 10_000, "sweep_rounds": 1, "jobs": 50_000, "rounds": 3,
         "peer_drivers_in_rounds": False}
FULL = {"sweep_jobs": 50_000, "sweep_rounds": 2, "jobs": 100_000, "rounds": 5,
        "peer_drivers_in_rounds": True}

BATCHES = (10, 50, 100, 200)
PGFLEET_THREADS = 8
BARE = Setup("bare-asyncpg", 100)


def sweep_setups() -> list[Setup]:
    """Interleaved by batch size: pgfleet, PgQueuer/asyncpg, PgQueuer/psycopg per size."""
    out = []
    for batch in BATCHES:
        out += [Setup("pgfleet", batch, PGFLEET_THREADS), Setup("pgqueuer-asyncpg", batch),
                Setup("pgqueuer-psycopg", batch)]
    out.append(Setup("pgfleet", 32, 16))  # the old bench setting: 16 threads, prefetch 16
    out.append(Setup("pgfleet", AUTO, PGFLEET_THREADS))  # the default prefetch: auto
    return out


def run_sweep(db: Database, p: dict[str, Any]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """{mode: {label: [run, ...]}}"""
    out: dict[str, dict[str, list[dict[str, Any]]]] = {m: {} for m in MODES}
    for r in range(p["sweep_rounds"]):
        for setup in sweep_setups():
            for mode in MODES:
                run = drain(db, setup, p["sweep_jobs"], mode)
                out[mode].setdefault(setup.label, []).append(run)
                log(f"sweep {r + 1} {mode:7s} {setup.label}: {run['jobs_per_s']:,.0f} jobs/s")
    return out


def best(sweep: dict[str, list[dict[str, Any]]], system_prefix: str) -> Setup:
    """The setting of a system with the highest median rate in the sweep."""
    candidates = [s for s in sweep_setups() if s.system.startswith(system_prefix)]

    def rate(setup: Setup) -> float:
        return summary([r["jobs_per_s"] for r in sweep[setup.label]])["median"] or 0.0

    return max(candidates, key=rate)


def run_rounds(db: Database, p: dict[str, Any], sweep: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in MODES:
        fleet = best(sweep[mode], "pgfleet")
        peers = ([best(sweep[mode], "pgqueuer-asyncpg"), best(sweep[mode], "pgqueuer-psycopg")]
                 if p["peer_drivers_in_rounds"] else [best(sweep[mode], "pgqueuer")])
        setups = [fleet, *peers, BARE]
        runs: dict[str, list[dict[str, Any]]] = {s.label: [] for s in setups}
        for r in range(p["rounds"]):
            order = setups[r % len(setups):] + setups[:r % len(setups)]
            for setup in order:
                runs[setup.label].append(drain(db, setup, p["jobs"], mode))
            log(f"round {r + 1} {mode}: " + ", ".join(
                f"{s.system} {runs[s.label][-1]['jobs_per_s']:,.0f}" for s in setups))
        out[mode] = {"pgfleet": fleet.label, "pgqueuer": [s.label for s in peers],
                     "bare": BARE.label, "runs": runs, **ratios(runs, fleet, peers)}
    return out


def ratios(runs: dict[str, list[dict[str, Any]]], fleet: Setup, peers: list[Setup]
           ) -> dict[str, Any]:
    """Per-round ratios (pgfleet over PgQueuer's best run of that round, over the bare
    loop) and each system's rate and steadiness across rounds."""
    rounds = len(runs[fleet.label])
    f = [r["jobs_per_s"] for r in runs[fleet.label]]
    q = [max(runs[s.label][i]["jobs_per_s"] for s in peers) for i in range(rounds)]
    b = [r["jobs_per_s"] for r in runs[BARE.label]]
    return {
        "jobs_per_s": {label: summary([r["jobs_per_s"] for r in rs])
                       for label, rs in runs.items()},
        "steadiness": {label: summary([r["steadiness"] for r in rs
                                       if r["steadiness"] is not None])
                       for label, rs in runs.items()},
        "pgfleet_over_pgqueuer": summary([x / y for x, y in zip(f, q, strict=True)]),
        "pgfleet_over_bare": summary([x / y for x, y in zip(f, b, strict=True)]),
        "pgqueuer_over_bare": summary([x / y for x, y in zip(q, b, strict=True)]),
    }


def fmt(s: dict[str, Any], digits: int = 0) -> str:
    if s.get("median") is None:
        return "-"
    f = f"{{:,.{digits}f}}"
    return f"{f.format(s['median'])} ({f.format(s['min'])}-{f.format(s['max'])})"


def table(results: dict[str, Any]) -> list[tuple[str, str, str, bool | None]]:
    """(measurement, median (min-max), target, met) rows."""
    rows: list[tuple[str, str, str, bool | None]] = []
    for mode in MODES:
        r = results["rounds"][mode]
        for label, s in r["jobs_per_s"].items():
            rows.append((f"[{mode}] {label} (jobs/s)", fmt(s), "", None))
        for label, s in r["steadiness"].items():
            ok = (None if not label.startswith("pgfleet") or s["median"] is None
                  else s["median"] >= 0.6)
            rows.append((f"[{mode}] {label}: slowest / median second", fmt(s, 2),
                         ">= 0.60" if label.startswith("pgfleet") else "", ok))
        over_q, over_b = r["pgfleet_over_pgqueuer"], r["pgfleet_over_bare"]
        rows.append((f"[{mode}] pgfleet / PgQueuer best (same round)", fmt(over_q, 2),
                     ">= 1.5", over_q["median"] >= 1.5))
        rows.append((f"[{mode}] pgfleet / bare asyncpg loop (same round)", fmt(over_b, 2),
                     ">= 0.5", over_b["median"] >= 0.5))
        rows.append((f"[{mode}] PgQueuer best / bare loop (same round)",
                     fmt(r["pgqueuer_over_bare"], 2), "", None))
    return rows


def print_table(rows: list[tuple[str, str, str, bool | None]]) -> None:
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    print(f"{'measurement':<{w0}}  {'median (min-max)':<{w1}}  target   met")
    for name, value, target, ok in rows:
        mark = "" if ok is None else ("yes" if ok else "NO")
        print(f"{name:<{w0}}  {value:<{w1}}  {target:<7s}  {mark}")


def print_sweep(sweep: dict[str, dict[str, list[dict[str, Any]]]]) -> None:
    for mode, by_label in sweep.items():
        print(f"sweep, {mode}:")
        for label, runs in by_label.items():
            rates = ", ".join(f"{r['jobs_per_s']:,.0f}" for r in runs)
            print(f"  {label:48s} {rates} jobs/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sweep, 3 rounds")
    parser.add_argument("--rounds", type=int, help="override the number of rounds")
    parser.add_argument("--output", default=str(BENCH_DIR / "results" / "drain.json"))
    args = parser.parse_args()
    params = dict(QUICK if args.quick else FULL)
    if args.rounds:
        params["rounds"] = args.rounds
    results: dict[str, Any] = {"mode": "quick" if args.quick else "full", "params": params,
                               "processes": PROCESSES, "machine": machine(),
                               "started": time.strftime("%FT%T%z")}
    db = Database()
    db.create()
    started = time.monotonic()
    try:
        results["machine"]["server"] = db.scalar("SHOW server_version")
        results["machine"]["load_at_start"] = os.getloadavg()
        install_pgqueuer(db)
        results["sweep"] = run_sweep(db, params)
        print_sweep(results["sweep"])
        results["rounds"] = run_rounds(db, params, results["sweep"])
        results["machine"]["load_at_end"] = os.getloadavg()
    finally:
        db.drop()
        results["seconds"] = round(time.monotonic() - started)
        os.makedirs(os.path.dirname(args.output), exist_ok=True)
        with open(args.output, "w") as fh:
            json.dump(results, fh, indent=1, default=str)
        log(f"wrote {args.output}")
    rows = table(results)
    results["table"] = [{"measurement": m, "value": v, "target": t, "met": ok}
                        for m, v, t, ok in rows]
    with open(args.output, "w") as fh:
        json.dump(results, fh, indent=1, default=str)
    print_table(rows)


if __name__ == "__main__":
    main()
