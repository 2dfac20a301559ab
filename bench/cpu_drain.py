"""CPU time per job of a drain: the worker processes (main thread and the others apart)
and their database backends, against the bare loop's.

    python -m bench.cpu_drain [--jobs 30000] [--runs 2] [--claim 100] [--bare]

Arrival mode (bench/systems.py): 2 processes idle on the empty queue, the jobs land in one
transaction, and the CPU counters (/proc, Linux only) are read before the insert and once
the last job is done. Throughput on this shared 2-core machine swings 2-3x with the other
users' load; CPU per job swings far less, and on 2 saturated cores it is what bounds the
drain rate. Run it from a tree with PYTHONPATH=$PWD/src to measure that tree's pgfleet.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from bench import common
from bench.common import Database, supervisor, write_config
from bench.systems import PROCESSES, Setup, _processes, _reset, _wait_done

TICK = os.sysconf("SC_CLK_TCK")


def _cpu(path: str) -> float:
    """User + system seconds of /proc/<path>/stat (a process, or pid/task/tid)."""
    with open(f"/proc/{path}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _by_thread(pids: Sequence[int]) -> dict[str, float]:
    """CPU seconds of the processes' main threads and of all their other threads."""
    out = {"main thread": 0.0, "other threads": 0.0}
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            kind = "main thread" if tid == str(pid) else "other threads"
            out[kind] += _cpu(f"{pid}/task/{tid}")
    return out


def _backends(db: Database) -> list[int]:
    with db.connect() as conn:
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s"
                            " AND pid <> pg_backend_pid()", (db.name,)).fetchall()
    return [pid for (pid,) in rows]


@contextmanager
def _system(db: Database, setup: Setup) -> Iterator[list[int]]:
    """The system's processes, up and idle; yields their pids."""
    if setup.system == "pgfleet":
        config = write_config("cpu", {"processes": PROCESSES, "threads": setup.threads,
                                      "prefetch": setup.batch - setup.threads})
        with supervisor(db, config, PROCESSES) as sup:
            time.sleep(1.0)
            yield sup.workers()
    else:
        argv = ["bench.bare_loop", db.dsn, str(setup.batch)]
        with _processes([argv] * PROCESSES, "bare") as procs:
            time.sleep(1.0)
            yield [p.pid for p in procs]


def measure(db: Database, setup: Setup, jobs: int) -> dict[str, float]:
    """One drain; CPU microseconds per job of each part, and jobs/s."""
    _reset(db, setup)
    with _system(db, setup) as pids:
        backends = _backends(db)
        before = {**_by_thread(pids), "backends": sum(_cpu(str(p)) for p in backends)}
        t0 = db.insert_jobs(jobs)
        _wait_done(db, setup, jobs, [])
        after = {**_by_thread(pids), "backends": sum(_cpu(str(p)) for p in backends)}
    t_end = db.scalar("SELECT max(finished_at) FROM pgfleet.jobs")
    out = {k: 1e6 * (after[k] - before[k]) / jobs for k in before}
    out["jobs/s"] = jobs / (t_end - t0).total_seconds()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--claim", type=int, default=100, help="threads + prefetch")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--bare", action="store_true", help="also the bare loop")
    args = parser.parse_args()
    db = Database()
    db.name = f"pgfleet_cpu_{os.getpid()}"
    db.dsn = common.with_db(common.SERVER, db.name)
    db.create()
    setups = [Setup("pgfleet", args.claim, args.threads)]
    if args.bare:
        setups.append(Setup("bare-asyncpg", args.claim))
    try:
        for run in range(args.runs):
            for setup in setups:
                got = measure(db, setup, args.jobs)
                parts = ", ".join(f"{k} {v:.1f}" for k, v in got.items() if k != "jobs/s")
                print(f"run {run + 1} {setup.system}: {got['jobs/s']:,.0f} jobs/s;"
                      f" CPU us per job: {parts}", flush=True)
    finally:
        db.drop()


if __name__ == "__main__":
    main()
