"""The arithmetic of `python -m bench.xmin`: start records, windows, cell summaries and the
markdown table. No database and no processes here, so tests/unit can check all of it.

A start record is one line a task writes when it starts: its wall-clock start time and
its enqueue -> start latency in milliseconds, `"<start epoch s> <latency ms>"`.
A sample is a dict the sampler takes every window: `at` (wall clock), cumulative
counters (`produced`, `statements`: label -> calls/time/buffers/rows, CPU seconds) and
gauges (dead tuples, sizes, load average).
"""

from __future__ import annotations

import bisect
import itertools
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

Start = tuple[float, float]  # (start epoch seconds, enqueue -> start ms)

STATEMENT_FIELDS = ("calls", "ms", "buffers", "read", "rows")
GAUGES = ("dead_tuples", "live_tuples", "table_bytes", "index_bytes", "claim_index_bytes",
          "autovacuums", "load1", "holder_xmin_age", "oldest_xmin_age")


def parse_starts(text: str, where: str = "start records") -> list[Start]:
    """The start records in `text`, in file order; a line that is not two numbers is
    refused with its line number."""
    starts: list[Start] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split()
        try:
            if len(fields) != 2:
                raise ValueError
            starts.append((float(fields[0]), float(fields[1])))
        except ValueError:
            raise ValueError(f"{where}:{number}: expected '<start s> <latency ms>',"
                             f" got {line!r}") from None
    return starts


def complete_lines(buffer: str) -> tuple[str, str]:
    """Split text read from a file being appended to into its whole lines and the partial
    last line, kept for the next read."""
    cut = buffer.rfind("\n") + 1
    return buffer[:cut], buffer[cut:]


def merge_starts(starts: list[Start], new: list[Start]) -> None:
    """Add `new` to the sorted `starts`, keeping them sorted. New records are mostly later
    than the ones held (files are flushed at slightly different moments), so only the
    tail from the earliest new record is sorted again, not the whole cell."""
    if not new:
        return
    new.sort()
    cut = bisect.bisect_left(starts, new[0])
    starts[cut:] = sorted(starts[cut:] + new)


def starts_after(starts: list[Start], at: float) -> list[Start]:
    """The sorted starts later than `at`."""
    return starts[bisect.bisect_right(starts, (at, float("inf"))):]


def quantile(sorted_values: Sequence[float], q: float) -> float | None:
    """Nearest rank, as bench/latency_peers.py takes it; None for no values."""
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def statement_delta(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]
                    ) -> dict[str, dict[str, float]]:
    """Per statement label, the counters' growth between two samples (a label first seen
    in `after` grows from zero)."""
    out: dict[str, dict[str, float]] = {}
    for label, now in after.items():
        then = before.get(label, {})
        out[label] = {f: now.get(f, 0.0) - then.get(f, 0.0) for f in STATEMENT_FIELDS}
    return out


def combine(statements: dict[str, dict[str, float]]) -> dict[str, float]:
    """All labels' counters added up (pgfleet claims through two statements)."""
    return {f: sum(s.get(f, 0.0) for s in statements.values()) for f in STATEMENT_FIELDS}


def per_call(counters: dict[str, float]) -> dict[str, float | None]:
    """Mean time and buffers of one call, and rows (jobs) per call."""
    calls = counters.get("calls", 0.0)
    if not calls:
        return {"calls": 0, "ms": None, "buffers": None, "rows": None}
    return {"calls": int(calls), "ms": counters["ms"] / calls,
            "buffers": counters["buffers"] / calls, "rows": counters["rows"] / calls}


def _beside(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Statements watched beside the claim (pgfleet's move_heads), per call; never part
    of the claim's figures."""
    delta = statement_delta(before.get("beside", {}), after.get("beside", {}))
    return {label: per_call(c) for label, c in delta.items()}


def _latency(values: list[float]) -> dict[str, float | None]:
    values.sort()
    return {"p50_ms": quantile(values, 0.5), "p99_ms": quantile(values, 0.99)}


def windows(samples: Sequence[dict[str, Any]], starts: Sequence[Start],
            t0: float | None = None, earlier: int = 0) -> list[dict[str, Any]]:
    """One row per pair of consecutive samples: rates, latency and claim cost of that
    window, the gauges as the later sample saw them. `starts` must be sorted by time; the
    first sample is the baseline taken when the producer starts. Each row's `t` counts
    from t0 (default: the first sample). earlier: how many starts of the cell were left
    out of `starts` before its first (the backlog counts them as started)."""
    times = [s for s, _ in starts]
    if t0 is None:
        t0 = samples[0]["at"] if samples else 0.0
    rows: list[dict[str, Any]] = []
    for before, after in itertools.pairwise(samples):
        seconds = after["at"] - before["at"]
        lo = bisect.bisect_right(times, before["at"])
        hi = bisect.bisect_right(times, after["at"])
        claims = statement_delta(before["statements"], after["statements"])
        row: dict[str, Any] = {
            "t": round(after["at"] - t0, 1),
            "offered_per_s": (after["produced"] - before["produced"]) / seconds,
            "dequeued_per_s": (hi - lo) / seconds,
            "backlog": after["produced"] - earlier - hi,
            **_latency([lat for _, lat in starts[lo:hi]]),
            "claim": per_call(combine(claims)),
            "statements": {label: per_call(c) for label, c in claims.items()},
            "beside": _beside(before, after),
            "server_cpu": (after["server_cpu_s"] - before["server_cpu_s"]) / seconds,
            "workers_cpu": (after["workers_cpu_s"] - before["workers_cpu_s"]) / seconds,
        }
        row.update({g: after.get(g) for g in GAUGES})
        rows.append(row)
    return rows


def cell_summary(samples: Sequence[dict[str, Any]], starts: Sequence[Start]
                 ) -> dict[str, Any]:
    """The whole cell, first to last sample: what the table shows."""
    if len(samples) < 2:
        raise ValueError("a cell needs at least two samples")
    first, last = samples[0], samples[-1]
    seconds = last["at"] - first["at"]
    inside = [lat for s, lat in starts if first["at"] < s <= last["at"]]
    claims = statement_delta(first["statements"], last["statements"])
    loads = [s["load1"] for s in samples[1:] if s.get("load1") is not None]
    dead = [s["dead_tuples"] for s in samples if s.get("dead_tuples") is not None]
    return {
        "seconds": round(seconds, 1),
        "offered_per_s": (last["produced"] - first["produced"]) / seconds,
        "dequeued_per_s": len(inside) / seconds,
        "backlog_end": last["produced"] - sum(1 for s, _ in starts if s <= last["at"]),
        "jobs_started": len(inside),
        **_latency(inside),
        "claim": per_call(combine(claims)),
        "statements": {label: per_call(c) for label, c in claims.items()},
        "beside": _beside(first, last),
        "dead_tuples_end": last.get("dead_tuples"),
        "dead_tuples_max": max(dead) if dead else None,
        "table_bytes_end": last.get("table_bytes"),
        "claim_index_bytes_end": last.get("claim_index_bytes"),
        # The counter lives as long as the table (TRUNCATE keeps it): this cell's share.
        "autovacuums": (None if last.get("autovacuums") is None
                        else last["autovacuums"] - (first.get("autovacuums") or 0)),
        "load1_mean": statistics.fmean(loads) if loads else None,
        "load1_max": max(loads) if loads else None,
        "server_cpu": (last["server_cpu_s"] - first["server_cpu_s"]) / seconds,
        "workers_cpu": (last["workers_cpu_s"] - first["workers_cpu_s"]) / seconds,
    }


# ---- the table -------------------------------------------------------------------------


def num(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def _median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


COLUMNS = ("rate", "holder", "system", "offered/s", "dequeued/s", "p50 ms", "p99 ms",
           "claim ms", "buffers/claim", "jobs/claim", "claim ms, last window",
           "buffers, last window", "dead tuples (end)", "backlog (end)", "load avg")


def table_rows(cells: Sequence[dict[str, Any]]) -> list[list[str]]:
    """One row per (rate, holder, system), in first-run order; with several rounds each
    figure is the median over them (the round count is in the system column)."""
    groups: dict[tuple[int, str, str], list[dict[str, Any]]] = {}
    for cell in cells:
        groups.setdefault((cell["rate"], cell["holder"], cell["system"]), []).append(cell)
    rows = []
    for (rate, holder, system), runs in groups.items():
        s = [r["summary"] for r in runs]

        def med(key: str, sub: str | None = None, _s: list[dict[str, Any]] = s) -> float | None:
            return _median(x[key][sub] if sub else x[key] for x in _s)

        last = [r["windows"][-1]["claim"] if r.get("windows") else {} for r in runs]

        def med_last(key: str, _last: list[dict[str, Any]] = last) -> float | None:
            return _median(c.get(key) for c in _last)

        name = system if len(runs) == 1 else f"{system} (median of {len(runs)})"
        rows.append([f"{rate:,}", holder, name, num(med("offered_per_s")),
                     num(med("dequeued_per_s")), num(med("p50_ms"), 1),
                     num(med("p99_ms"), 1), num(med("claim", "ms"), 2),
                     num(med("claim", "buffers")), num(med("claim", "rows"), 1),
                     num(med_last("ms"), 2), num(med_last("buffers")),
                     num(med("dead_tuples_end")), num(med("backlog_end")),
                     num(med("load1_mean"), 1)])
    return rows


def markdown(cells: Sequence[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(cells)]
    return "\n".join(lines) + "\n"
