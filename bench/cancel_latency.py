"""How long a cancel of a running job takes to end it, through a real `pgfleet worker`:
from the cancel's commit (cancel_requested_at) to the job's `finished_at`, both on the
database clock. Three cases: a task that checks current_job().cancelled, one that never
does (interrupted after CANCEL_GRACE), and the first again with notifications off (the
lease renewal delivers the cancel).

    PYTHONPATH=$PWD/src python -m bench.cancel_latency [--runs 10]

Writes bench/results/cancel-latency.json."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pgfleet
from bench.common import BENCH_DIR, Database, child_env, log, machine, summary

CASES = {
    "cooperative (checks current_job().cancelled)": ("bench.control.until_cancelled", []),
    "ignores the flag (interrupted)": ("bench.control.ignores_cancel", []),
    "cooperative, notifications off": ("bench.control.until_cancelled", ["--no-notify"]),
}


def one_case(db: Database, task: str, extra: list[str], runs: int) -> list[float]:
    worker = subprocess.Popen(
        [sys.executable, "-m", "pgfleet", "--database-url", db.dsn, "worker", "--queue",
         "default", "--tasks", "bench.control", "--poll-interval", "0.1", *extra],
        env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seconds = []
    try:
        for _ in range(runs):
            job_id = pgfleet.enqueue(db.dsn, task)
            db.wait_for("SELECT state::text FROM pgfleet.jobs WHERE id = %s", "running",
                        timeout=60, params=(job_id,))
            pgfleet.cancel(db.dsn, job_id)
            db.wait_for("SELECT state::text FROM pgfleet.jobs WHERE id = %s", "cancelled",
                        timeout=60, params=(job_id,))
            seconds.append(float(db.scalar(
                "SELECT extract(epoch FROM finished_at - cancel_requested_at)"
                " FROM pgfleet.jobs WHERE id = %s", (job_id,))))
    finally:
        worker.terminate()
        worker.wait(60)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    db = Database()
    db.create()
    out: dict[str, object] = {"machine": machine(), "runs": args.runs}
    try:
        for label, (task, extra) in CASES.items():
            log(f"cancel latency: {label}")
            out[label] = summary(one_case(db, task, extra, args.runs))
    finally:
        db.drop()
    (BENCH_DIR / "results" / "cancel-latency.json").write_text(json.dumps(out, indent=2))
    for label in CASES:
        print(f"{label:48s} {json.dumps(out[label])}")


if __name__ == "__main__":
    main()
