"""The fleet's status as one structure: queues, flow-control limits and their use, and the
processes of every host, read from the database; and its text form for a terminal."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import psycopg

from pgfleet.core import payload
from pgfleet.core.flow import Rate
from pgfleet.errors import PgfleetError
from pgfleet.sql import fleet as fleet_store, migrate as migrations, store

PROGRESS_SHOWN = 20

QUEUE_COLUMNS = (
    ("QUEUE", "queue"), ("WAITING", "waiting"), ("SCHEDULED", "scheduled"),
    ("RUNNING", "running"), ("DEAD", "dead"), ("OLDEST WAITING", "oldest_waiting_age"),
    ("DONE/1MIN", "finished_last_minute"), ("PAUSED", "paused"), ("FAILED ON", "failed_on"),
)
# Columns after the counts, left-aligned.
TEXT_COLUMNS = 2
# A holder of the xmin horizon is named once its transaction is this old: claims and
# status reads are milliseconds, so a minute is never pgfleet's own work, and dead rows
# of a busy queue already pile up by then.
HELD_SECONDS = 60.0
# A slot or a standby has no start time: it is named past this xid age (half an hour at
# 500 transactions a second), or at once for a slot no standby uses, which never advances.
HELD_XIDS = 1_000_000
QUERY_SHOWN = 80


def gather(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """The fleet (`_fleet`) and who holds the xmin horizon of its tables, as plain data."""
    data = _fleet(conn)
    data["xmin_horizon"] = _xmin_horizon(conn)
    return data


def _fleet(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """Queues (counts, oldest due job, finished in the last minute, paused) and hosts
    (each supervisor with its children and their heartbeat ages), as plain data."""
    if migrations.current_version(conn) == 0:
        raise PgfleetError("the pgfleet schema is not installed: run `pgfleet migrate`")
    # One transaction: now() is the same instant for every query below.
    with conn.transaction():
        counts = fleet_store.queue_counts(conn)
        oldest = fleet_store.oldest_waiting(conn)
        finished = fleet_store.finished_last_minute(conn)
        paused = fleet_store.paused_queues(conn)
        processes = fleet_store.processes(conn)
        progress = store.running_progress(conn, PROGRESS_SHOWN)
        flows = fleet_store.flow_usage(conn)
    failed = _failed_on(processes)
    names = ({c[0] for c in counts} | set(oldest) | set(finished) | paused | set(failed)
             | {p["queue"] for p in processes if p["queue"]})
    by_key = {(queue, state): n for queue, state, n in counts}
    queues = [
        {
            "queue": name,
            "waiting": by_key.get((name, "queued"), 0),
            "scheduled": by_key.get((name, "scheduled"), 0),
            "running": by_key.get((name, "running"), 0),
            "dead": by_key.get((name, "dead"), 0),
            "oldest_waiting_age": oldest.get(name),
            "finished_last_minute": finished.get(name, 0),
            "paused": name in paused,
            "failed_on": failed.get(name, []),
        }
        for name in sorted(names)
    ]
    reports = [{"id": p.id, "queue": p.queue, "task": p.task,
                "progress": _decoded(p.progress)} for p in progress]
    return {"queues": queues, "limits": [_limits(f) for f in flows],
            "hosts": _hosts(processes), "progress": reports}


def _xmin_horizon(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """The holders of the xmin horizon old enough to name (`held`), oldest first, or the
    read's error: the rest of the status does not depend on seeing other sessions."""
    try:
        with conn.transaction():
            holders = fleet_store.xmin_holders(conn)
    except psycopg.Error as exc:
        if conn.closed or conn.broken:
            raise
        text = str(exc).strip()
        return {"held": [], "error": text.splitlines()[0] if text else type(exc).__name__}
    shown = [dataclasses.asdict(h) for h in holders if held(h)]
    for h in shown:
        # One line however the query was written (the terminal escapes what remains).
        h["query"] = " ".join(h["query"].split()) if h["query"] else h["query"]
    return {"held": shown, "error": None}


def held(h: store.XminHolder) -> bool:
    """Is this holder old enough to name? A backend or a prepared transaction by its age
    (by its xids when another role's start time is hidden), a slot no standby uses at
    once, an active slot or a standby by its xids."""
    if h.holder == "slot" and h.state == "inactive":
        return True
    if h.seconds is not None:
        return h.seconds >= HELD_SECONDS
    return h.xids >= HELD_XIDS


def horizon_lines(horizon: dict[str, Any]) -> list[str]:
    """One line per holder that keeps VACUUM from cleaning pgfleet.jobs, and its query."""
    lines: list[str] = []
    if horizon.get("error"):
        lines.append(f"xmin horizon: cannot read the holders: {horizon['error']}")
    for h in horizon.get("held", []):
        length = age(h["seconds"]) if h["seconds"] is not None else f"{h['xids']:,} xids"
        about = [f'app "{h["name"]}"'] if h["name"] else []
        about += [h["state"]] if h["state"] else []
        if h["holder"] == "prepared":
            who = f'prepared transaction "{h["name"]}"'
        elif h["holder"] == "slot":
            who = f'replication slot "{h["name"]}" ({h["state"]})'
        else:
            kind = "standby " if h["holder"] == "standby" else ""
            who = f"{kind}pid {h['pid']}" + (f" ({', '.join(about)})" if about else "")
        lines.append(f"xmin horizon held {length} by {who} — vacuum cannot clean"
                     " pgfleet.jobs")
        if h["query"]:
            text = h["query"]
            shown = text if len(text) <= QUERY_SHOWN else text[:QUERY_SHOWN - 3] + "..."
            lines.append(f"  query: {shown}")
        elif h["holder"] == "backend" and h["state"] is None:
            lines.append("  (its state and query are hidden: grant pg_read_all_stats to the"
                         " role of pgfleet status)")
    return lines + ([""] if lines else [])


def _decoded(text: str) -> Any:
    """A progress report; its JSON text when decoding it is refused (a row written by
    hand, too deep or too large), so that status always prints."""
    try:
        return payload.load_args(text, len(text.encode("utf-8")), payload.MAX_RESULT_BYTES,
                                 field="progress")
    except PgfleetError:
        return text


def _failed_on(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, str]]]:
    """Queue → the supervisors that gave up on it (crash_limit, start failures), from
    their rows (processes.failed_queues): each with its host and the reason."""
    failed: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        if row["kind"] != "supervisor":
            continue
        for queue, reason in sorted((row.get("failed_queues") or {}).items()):
            failed.setdefault(queue, []).append(
                {"host": row["host"], "supervisor": row["id"], "reason": reason})
    return failed


def _limits(f: store.FlowUsage) -> dict[str, Any]:
    """A queue's published flow control and its use: None where a limit is not set."""
    rate = (None if f.rate_limit is None or f.rate_period is None
            else str(Rate(f.rate_limit, f.rate_period)))
    return {
        "queue": f.queue,
        "global_concurrency": f.global_concurrency, "running": f.running,
        "rate_limit": rate, "starts_in_window": f.starts if rate else None,
        "key_concurrency": f.key_concurrency, "keys_at_limit": f.keys_at_limit,
        "held": {"global_concurrency": f.held_by_global, "rate_limit": f.held_by_rate,
                 "key_concurrency": f.held_by_key},
    }


def render_limits(limits: list[dict[str, Any]]) -> list[str]:
    """LIMITS: each limit as used/limit, and the due jobs it holds back."""
    if not limits:
        return []
    cells = [["LIMITS", "GLOBAL", "RATE", "PER KEY", "HELD (global/rate/key)"]]
    for q in limits:
        held = q["held"]
        cells.append([
            q["queue"],
            "-" if q["global_concurrency"] is None
            else f"{q['running']}/{q['global_concurrency']} running",
            "-" if q["rate_limit"] is None
            else f"{q['starts_in_window']} of {q['rate_limit']}",
            "-" if q["key_concurrency"] is None
            else f"{q['key_concurrency']} ({q['keys_at_limit']} keys full)",
            f"{held['global_concurrency']}/{held['rate_limit']}/{held['key_concurrency']}",
        ])
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in cells] + [""]


def _hosts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def entry(row: dict[str, Any]) -> dict[str, Any]:
        return {"id": row["id"], "kind": row["kind"], "queue": row["queue"], "pid": row["pid"],
                "heartbeat_age": row["heartbeat_age"]}

    hosts: dict[str, dict[str, Any]] = {}
    supervisors: dict[str, dict[str, Any]] = {}
    for row in rows:
        host = hosts.setdefault(row["host"], {"host": row["host"], "supervisors": [],
                                              "unattached": []})
        if row["kind"] == "supervisor":
            sup = {**entry(row), "children": []}
            supervisors[row["id"]] = sup
            host["supervisors"].append(sup)
    for row in rows:
        if row["kind"] == "supervisor":
            continue
        owner = supervisors.get(row["supervisor"] or "")
        if owner is not None:
            owner["children"].append(entry(row))
        else:
            # Its supervisor's row is gone (pruned, or a `pgfleet worker` run by hand).
            hosts[row["host"]]["unattached"].append(entry(row))
    return [hosts[name] for name in sorted(hosts)]


def count(n: int) -> str:
    """A job count as read: "10,000+" past the bound the counts stop at."""
    return f"{fleet_store.COUNT_BOUND:,}+" if n > fleet_store.COUNT_BOUND else str(n)


def age(seconds: float | None) -> str:
    """A short human duration: 850ms, 12.3s, 4m05s, 2h10m, 3d04h."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{max(seconds, 0) * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def render(data: dict[str, Any]) -> str:
    """The status as aligned text tables, for people."""
    lines: list[str] = []
    if data["queues"]:
        cells = [[title for title, _ in QUEUE_COLUMNS]]
        for q in data["queues"]:
            cells.append([
                q["queue"], count(q["waiting"]), count(q["scheduled"]), str(q["running"]),
                count(q["dead"]), age(q["oldest_waiting_age"]), str(q["finished_last_minute"]),
                "yes" if q["paused"] else "no",
                ",".join(sorted({f["host"] for f in q["failed_on"]})) or "-",
            ])
        widths = [max(len(row[i]) for row in cells) for i in range(len(QUEUE_COLUMNS))]
        numbers = slice(1, len(QUEUE_COLUMNS) - TEXT_COLUMNS)
        for row in cells:
            # Queue name left-aligned, numbers right-aligned, PAUSED and FAILED left.
            parts = [row[0].ljust(widths[0])]
            parts += [cell.rjust(width) for cell, width in zip(row[numbers], widths[numbers],
                                                               strict=True)]
            parts += [cell.ljust(width) for cell, width in zip(
                row[-TEXT_COLUMNS:], widths[-TEXT_COLUMNS:], strict=True)]
            lines.append("  ".join(parts).rstrip())
        lines += [f"queue {q['queue']} failed on {f['host']} ({f['supervisor']}): {f['reason']}"
                  for q in data["queues"] for f in q["failed_on"]]
    else:
        lines.append("no queues have jobs or workers")
    lines.append("")
    lines += horizon_lines(data.get("xmin_horizon", {}))
    lines += render_limits(data.get("limits", []))
    if not data["hosts"]:
        lines.append("no pgfleet processes are registered")
    rows: list[tuple[str, dict[str, Any] | None]] = []
    for host in data["hosts"]:
        rows.append((f"HOST {host['host']}", None))
        for sup in host["supervisors"]:
            rows.append(("  ", sup))
            rows += [("    ", child) for child in sup["children"]]
        if host["unattached"]:
            rows.append(("  (no supervisor registered)", None))
            rows += [("    ", p) for p in host["unattached"]]
    lines += _process_lines(rows)
    lines += _progress_lines(data.get("progress", []))
    return "\n".join(lines).rstrip() + "\n"


def _progress_lines(reports: list[dict[str, Any]]) -> list[str]:
    """What running jobs last reported: a number as a percentage, a dict as JSON."""
    if not reports:
        return []
    lines = ["", f"PROGRESS (running jobs, newest {PROGRESS_SHOWN})"]
    for r in reports:
        value = r["progress"]
        shown = (f"{value * 100:.0f}%" if isinstance(value, int | float)
                 else json.dumps(value, ensure_ascii=False)[:200])
        lines.append(f"  job {r['id']}  {r['queue']}  {r['task']}  {shown}")
    return lines


def _process_lines(rows: list[tuple[str, dict[str, Any] | None]]) -> list[str]:
    """Process rows aligned across every host; rows without a process are headings."""
    cells = [
        (indent + p["kind"], p["queue"] or "", f"pid {p['pid']}",
         f"heartbeat {age(p['heartbeat_age'])} ago", p["id"])
        for indent, p in rows if p is not None
    ]
    if not cells:
        return [heading for heading, _ in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(4)]
    out = []
    it = iter(cells)
    for heading, p in rows:
        if p is None:
            out.append(heading)
            continue
        c = next(it)
        out.append(f"{c[0].ljust(widths[0])}  {c[1].ljust(widths[1])}  "
                   f"{c[2].rjust(widths[2])}  {c[3].ljust(widths[3])}  {c[4]}".rstrip())
    return out
