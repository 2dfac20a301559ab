"""The held-xmin benchmark: pgfleet, PgQueuer and a generic SKIP LOCKED queue, at a fixed
offered rate, with and without a REPEATABLE READ transaction holding the xmin horizon.

    python -m bench.xmin                                   # 600 s cells, 800 and 2,000 jobs/s
    python -m bench.xmin --cell-seconds 60 --rates 800,2000
    python -m bench.xmin --systems pgfleet --rates 800 --holders held --cell-seconds 120

It starts one throwaway PostgreSQL 15 cluster of its own (initdb in a temp dir, a free
port, pg_stat_statements preloaded, the aggressive autovacuum of AUTOVACUUM) and puts all
three systems in one database of it. A cell is one system at one rate with one holder
setting (`none`, or `held`: a REPEATABLE READ transaction that wrote a row and took its
snapshot, open for the whole cell). Each cell starts from empty tables.
Cells run interleaved: for each round, rate and holder, every system in turn (the order
rotating by round).

In a cell an open-loop producer enqueues `rate` jobs a second through the system's own
API, in ticks of 10 ms, each job stamped with the wall clock. Tasks do nothing but write
that stamp and their start time (bench/xmin_record.py). Every `--window` seconds the
sampler reads pg_stat_statements (the claim statements found by their text), the queue
table's dead tuples and sizes, the load average and CPU time. At the end:
bench/results/xmin-<date>.json (every window of every cell) and a markdown table beside
it (.md), also printed.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext, suppress
from pathlib import Path
from typing import Any

import psycopg

from bench import xmin_stats as stats
from bench.common import BENCH_DIR, log, machine
from bench.systems import free_port
from bench.xmin_record import DIR_ENV, FLUSH_SECONDS
from bench.xmin_systems import SYSTEMS, ClusterDatabase, System, make, system_name

BIN = Path(os.environ.get("PGFLEET_PG_BIN", "/usr/lib/postgresql/15/bin"))
HOLDERS = ("none", "held")
TICK = 0.01
DATABASE = "xmin"

# The server's settings beyond initdb's: what every figure of this bench was taken with.
AUTOVACUUM = {
    "autovacuum_naptime": "1s",
    "autovacuum_vacuum_cost_delay": "0",
    "autovacuum_vacuum_cost_limit": "10000",
    "autovacuum_vacuum_scale_factor": "0.01",
    "autovacuum_vacuum_threshold": "50",
    "autovacuum_vacuum_insert_scale_factor": "0.01",
    "autovacuum_analyze_scale_factor": "0.01",
}
SERVER = {
    "max_connections": "100",
    "shared_buffers": "256MB",
    "shared_preload_libraries": "'pg_stat_statements'",
    "pg_stat_statements.track": "top",
    "pg_stat_statements.max": "2000",
    "log_connections": "off",
    **AUTOVACUUM,
}


# ---- the cluster ---------------------------------------------------------------------------


class Cluster:
    """initdb in a temp dir, on 127.0.0.1 and a free port; as the `postgres` OS user when
    the bench runs as root (PostgreSQL refuses root)."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="pgfleet-xmin-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.as_root = os.geteuid() == 0

    def _run(self, *argv: str) -> None:
        cmd = [str(BIN / argv[0]), *argv[1:]]
        if self.as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=self.root)
        if done.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {done.stdout}{done.stderr}")

    def start(self) -> None:
        if self.as_root:
            entry = pwd.getpwnam("postgres")
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E",
                  "UTF8", "--locale", "C", "--no-sync")
        settings = {"listen_addresses": "'127.0.0.1'", "port": str(self.port),
                    "unix_socket_directories": f"'{self.root}'", **SERVER}
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write("\n# bench.xmin\n")
            conf.writelines(f"{k} = {v}\n" for k, v in settings.items())
        self._run("pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data), "-l",
                  str(self.root / "server.log"))

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def postmaster_pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def destroy(self) -> None:
        with suppress(Exception):
            self._run("pg_ctl", "stop", "-w", "-m", "fast", "-D", str(self.data))
        shutil.rmtree(self.root, ignore_errors=True)


# ---- what the sampler reads ----------------------------------------------------------------

_CLK = os.sysconf("SC_CLK_TCK")


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        with suppress(OSError):
            todo += [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
    return out


def cpu_seconds(roots: list[int]) -> float:
    """User + system CPU of these processes and all their descendants now alive."""
    total = 0
    for root in roots:
        for pid in _descendants(root):
            with suppress(OSError, IndexError, ValueError):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])
    return total / _CLK


STATEMENTS_SQL = """
SELECT calls, total_exec_time, shared_blks_hit + shared_blks_read, shared_blks_read, rows
  FROM pg_stat_statements
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND query LIKE %s
"""
TABLE_SQL = """
SELECT n_dead_tup, n_live_tup, pg_relation_size(relid), pg_indexes_size(relid),
       pg_relation_size(%s::regclass), autovacuum_count
  FROM pg_stat_user_tables WHERE relid = %s::regclass
"""
XMIN_SQL = """
SELECT max(age(backend_xmin)) FILTER (WHERE application_name = 'bench-xmin-holder'),
       max(age(backend_xmin))
  FROM pg_stat_activity
"""


class Sampler:
    def __init__(self, conn: psycopg.Connection[Any], system: System, server_pid: int,
                 worker_pids: list[int], producer: ProducerThread) -> None:
        self.conn, self.system = conn, system
        self.server_pid, self.worker_pids, self.producer = server_pid, worker_pids, producer

    def take(self) -> dict[str, Any]:
        sample: dict[str, Any] = {"at": time.time(), "produced": self.producer.sent,
                                  "statements": {}, "beside": {}}
        for key, patterns in (("statements", self.system.statements),
                              ("beside", self.system.beside)):
            for label, pattern in patterns.items():
                rows = self.conn.execute(STATEMENTS_SQL, (pattern,)).fetchall()
                sample[key][label] = {f: float(sum(r[i] for r in rows))
                                      for i, f in enumerate(stats.STATEMENT_FIELDS)}
        row = self.conn.execute(TABLE_SQL, (self.system.claim_index,
                                            self.system.table)).fetchone()
        assert row is not None
        keys = ("dead_tuples", "live_tuples", "table_bytes", "index_bytes",
                "claim_index_bytes", "autovacuums")
        sample.update(zip(keys, row, strict=True))
        xrow = self.conn.execute(XMIN_SQL).fetchone()
        assert xrow is not None
        sample["holder_xmin_age"], sample["oldest_xmin_age"] = xrow
        sample["load1"] = os.getloadavg()[0]
        sample["server_cpu_s"] = cpu_seconds([self.server_pid])
        sample["workers_cpu_s"] = cpu_seconds(self.worker_pids)
        return sample


class StartReader:
    """Reads the start records the workers append, incrementally (whole lines only)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.offsets: dict[Path, int] = {}
        self.partial: dict[Path, str] = {}
        self.starts: list[stats.Start] = []

    def read(self) -> list[stats.Start]:
        for path in sorted(self.folder.glob("*.rec")):
            with open(path) as fh:
                fh.seek(self.offsets.get(path, 0))
                chunk = fh.read()
                self.offsets[path] = fh.tell()
            whole, self.partial[path] = stats.complete_lines(self.partial.get(path, "") + chunk)
            stats.merge_starts(self.starts, stats.parse_starts(whole, str(path)))
        return self.starts


# ---- the producer and the holder -----------------------------------------------------------


class ProducerThread(threading.Thread):
    """Open loop: at every tick, enqueue what the rate owes since the start, whatever the
    queue does; a slow enqueue makes the next batch bigger, never the rate lower."""

    def __init__(self, system: System, dsn: str, rate: int) -> None:
        super().__init__(name="xmin-producer", daemon=True)
        self.system, self.dsn, self.rate = system, dsn, rate
        self.sent = 0
        self.started_at = 0.0
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            producer = self.system.producer(self.dsn)
        except BaseException as exc:
            self.error = exc
            self.ready.set()
            raise
        try:
            self.started_at = time.monotonic()
            self.ready.set()
            next_at = self.started_at
            while not self.stop.is_set():
                owed = int(self.rate * (time.monotonic() - self.started_at)) - self.sent
                if owed > 0:
                    producer.send(owed, time.time())
                    self.sent += owed
                next_at += TICK
                self.stop.wait(max(0.0, next_at - time.monotonic()))
        except BaseException as exc:
            self.error = exc
            raise
        finally:
            producer.close()


@contextmanager
def xmin_holder(dsn: str) -> Iterator[dict[str, Any]]:
    """A REPEATABLE READ transaction that has written a row (so it has an xid) and taken
    its snapshot (so it holds backend_xmin), open until the block ends."""
    with psycopg.connect(dsn, autocommit=True, application_name="bench-xmin-holder") as conn:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        conn.execute("INSERT INTO xmin_holder (at) VALUES (now())")
        conn.execute("SELECT count(*) FROM xmin_holder").fetchone()
        with psycopg.connect(dsn, autocommit=True) as probe:
            row = probe.execute("SELECT backend_xid::text, backend_xmin::text"
                                "  FROM pg_stat_activity WHERE pid = %s",
                                (conn.info.backend_pid,)).fetchone()
        if row is None or row[0] is None or row[1] is None:
            raise RuntimeError(f"the xmin holder holds no xid/xmin: {row}")
        try:
            yield {"xid": row[0], "xmin": row[1]}
        finally:
            conn.execute("ROLLBACK")


# ---- one cell ------------------------------------------------------------------------------


def reset(conn: psycopg.Connection[Any], system: System) -> None:
    system.reset(conn)
    conn.execute("SELECT pg_stat_statements_reset()")
    conn.execute("CHECKPOINT")


def _line(system: str, rate: int, holder: str, w: dict[str, Any]) -> str:
    claim = w["claim"]
    return (f"{system:10s} {rate:>5}/s {holder:4s} t={w['t']:>5.0f}s"
            f" offered {w['offered_per_s']:6.0f}/s dequeued {w['dequeued_per_s']:6.0f}/s"
            f" backlog {w['backlog']:>7}"
            f" p50 {stats.num(w['p50_ms'], 1):>6} p99 {stats.num(w['p99_ms'], 1):>7} ms"
            f" claim {stats.num(claim['ms'], 2):>7} ms {stats.num(claim['buffers']):>7} buf"
            f" dead {stats.num(w['dead_tuples']):>9}"
            f" index {w['claim_index_bytes'] / 2**20:.1f} MiB load {w['load1']:.1f}"
            f" cpu db {w['server_cpu']:.2f} workers {w['workers_cpu']:.2f}"
            + "".join(f" {label} {stats.num(c['ms'], 2)} ms x{c['calls']}"
                      for label, c in w.get("beside", {}).items()))


def run_cell(cluster: Cluster, db: ClusterDatabase, system: System, rate: int, holder: str,
             seconds: float, window: float, threads: int) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix=f"xmin-{system.name}-", dir=cluster.root))
    os.environ[DIR_ENV] = str(folder)  # inherited by the workers started below
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        reset(conn, system)
        with system.workers(db, threads) as worker_pids, \
                (xmin_holder(db.dsn) if holder == "held" else nullcontext()) as held:
            producer = ProducerThread(system, db.dsn, rate)
            sampler = Sampler(conn, system, cluster.postmaster_pid(), worker_pids, producer)
            reader = StartReader(folder)
            samples = [sampler.take()]
            producer.start()
            producer.ready.wait(30)
            if producer.error is not None:
                raise RuntimeError(f"{system.name} producer failed: {producer.error!r}")
            started = time.monotonic()
            try:
                for k in range(1, int(seconds / window) + 1):
                    time.sleep(max(0.0, started + k * window - time.monotonic()))
                    if producer.error is not None:
                        raise RuntimeError(f"{system.name} producer failed: {producer.error!r}")
                    samples.append(sampler.take())
                    reader.read()
                    recent = stats.starts_after(reader.starts, samples[-2]["at"])
                    log(_line(system.name, rate, holder, stats.windows(
                        samples[-2:], recent, samples[0]["at"],
                        len(reader.starts) - len(recent))[0]))
            finally:
                producer.stop.set()
                producer.join(30)
            time.sleep(3 * FLUSH_SECONDS)  # the last records reach their files
            starts = reader.read()
    shutil.rmtree(folder, ignore_errors=True)
    return {"system": system.name, "rate": rate, "holder": holder, "held": held,
            "samples": samples, "windows": stats.windows(samples, starts),
            "summary": stats.cell_summary(samples, starts)}


# ---- main ----------------------------------------------------------------------------------


def _list(text: str, allowed: tuple[str, ...] | None, what: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in items if allowed is not None and x not in allowed]
    if not items or bad:
        raise argparse.ArgumentTypeError(
            f"--{what}: {', '.join(bad) or 'nothing given'}; expected a comma list of"
            f" {', '.join(allowed or ())}")
    return items


def _systems(text: str) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in names if not system_name(x)]
    if not names or bad:
        raise argparse.ArgumentTypeError(
            f"--systems: {', '.join(bad) or 'nothing given'}; expected a comma list of"
            f" {', '.join(SYSTEMS)} or pgqueuer-bN (N: PgQueuer's batch_size)")
    return names


def _rates(text: str) -> list[int]:
    try:
        rates = [int(x) for x in _list(text, None, "rates")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--rates: {text!r} is not a comma list of"
                                         " whole jobs per second") from None
    if any(r <= 0 for r in rates):
        raise argparse.ArgumentTypeError(f"--rates: {text!r}: every rate must be above 0")
    return rates


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.xmin",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--cell-seconds", type=float, default=600.0)
    parser.add_argument("--window", type=float, default=5.0, help="seconds per sample")
    parser.add_argument("--systems", type=_systems, default=list(SYSTEMS),
                        help=f"comma list of {', '.join(SYSTEMS)}; pgqueuer-bN is PgQueuer"
                        " with batch_size N (pgqueuer: its default, 10)")
    parser.add_argument("--rates", type=_rates, default=[800, 2000])
    parser.add_argument("--holders", type=lambda t: _list(t, HOLDERS, "holders"),
                        default=list(HOLDERS))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--pgfleet-threads", type=int, default=4)
    parser.add_argument("--output", type=Path, help="the JSON file (default"
                        " bench/results/xmin-<UTC date and time>.json); .md beside it")
    parser.add_argument("--table", type=Path, metavar="JSON",
                        help="run nothing: print the markdown table of an earlier run's JSON")
    args = parser.parse_args(argv)
    if args.cell_seconds < 2 * args.window:
        parser.error(f"--cell-seconds {args.cell_seconds:g} is shorter than two windows"
                     f" of {args.window:g} s")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.table:
        try:
            cells = json.loads(args.table.read_text())["cells"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SystemExit(f"--table {args.table}: not a bench.xmin result ({exc})") from None
        print(stats.markdown(cells), end="")
        return
    output = args.output or (BENCH_DIR / "results"
                             / f"xmin-{time.strftime('%Y-%m-%dT%H%M', time.gmtime())}.json")
    cluster = Cluster()
    cluster.start()
    log(f"cluster on port {cluster.port} in {cluster.root}")
    results: dict[str, Any] = {
        "started": time.strftime("%FT%TZ", time.gmtime()), "machine": machine(),
        "server_settings": SERVER, "pgfleet_table_options": "", "args": {
            "cell_seconds": args.cell_seconds, "window": args.window,
            "systems": args.systems, "rates": args.rates, "holders": args.holders,
            "rounds": args.rounds, "pgfleet_threads": args.pgfleet_threads},
        "cells": []}
    try:
        with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {DATABASE}")
            results["machine"]["server"] = admin.execute("SHOW server_version").fetchone()
        dsn = cluster.dsn(DATABASE)
        db = ClusterDatabase(dsn, DATABASE)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pg_stat_statements")
            conn.execute("CREATE TABLE xmin_holder (at timestamptz)")
        systems = [make(name) for name in args.systems]
        for system in systems:
            system.setup(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute("SELECT reloptions::text FROM pg_class"
                               " WHERE oid = to_regclass('pgfleet.jobs')").fetchone()
        results["pgfleet_table_options"] = row[0] if row else None
        log(f"settings: {SERVER}")
        for r in range(args.rounds):
            order = systems[r % len(systems):] + systems[:r % len(systems)]
            for rate in args.rates:
                for holder in args.holders:
                    for system in order:
                        cell = run_cell(cluster, db, system, rate, holder, args.cell_seconds,
                                        args.window, args.pgfleet_threads)
                        cell["round"] = r + 1
                        results["cells"].append(cell)
                        s = cell["summary"]
                        log(f"== {system.name} {rate}/s holder {holder}: dequeued"
                            f" {s['dequeued_per_s']:.0f}/s p50 {stats.num(s['p50_ms'], 1)}"
                            f" p99 {stats.num(s['p99_ms'], 1)} ms claim"
                            f" {stats.num(s['claim']['ms'], 2)} ms")
    finally:
        results["finished"] = time.strftime("%FT%TZ", time.gmtime())
        cluster.destroy()
        if results["cells"]:
            table = stats.markdown(results["cells"])
            output.parent.mkdir(parents=True, exist_ok=True)
            output.write_text(json.dumps(results, indent=1, default=str))
            output.with_suffix(".md").write_text(_markdown_page(results, table))
            print(table)
            log(f"wrote {output} and {output.with_suffix('.md')}")


def _markdown_page(results: dict[str, Any], table: str) -> str:
    a = results["args"]
    settings = ", ".join(f"{k}={v}" for k, v in AUTOVACUUM.items())
    return (f"# bench.xmin {results['started']} to {results['finished']}\n\n"
            f"Cells of {a['cell_seconds']:g} s, windows of {a['window']:g} s, rounds"
            f" {a['rounds']}; pgfleet 2 processes x {a['pgfleet_threads']} threads;"
            " PgQueuer 2 processes, batch_size 10 (pgqueuer-bN: N); skiplocked 2"
            " processes x 4 threads.\n"
            f"Server: PostgreSQL {results['machine'].get('server')}, {settings};"
            f" pgfleet.jobs reloptions {results['pgfleet_table_options']}.\n"
            f"Machine: {results['machine']['nproc']} CPUs, shared with other work;"
            " the load average column is the mean of the cell's samples.\n\n"
            "claim ms and buffers/claim are per call of the claim statement(s) from"
            " pg_stat_statements; pgfleet's include `complete_and_claim_jobs`, which also"
            " completes the previous batch.\n\n" + table)


if __name__ == "__main__":
    main()
