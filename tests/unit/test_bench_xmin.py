"""The arithmetic and the arguments of `python -m bench.xmin` (no database, no timing)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import xmin, xmin_stats as stats
from bench.xmin_systems import system_name


def sample(at: float, produced: int, calls: float = 0, ms: float = 0, buffers: float = 0,
           rows: float = 0, dead: int = 0, label: str = "claim", **extra: Any
           ) -> dict[str, Any]:
    return {"at": at, "produced": produced,
            "statements": {label: {"calls": calls, "ms": ms, "buffers": buffers, "read": 0,
                                   "rows": rows}},
            "dead_tuples": dead, "live_tuples": 0, "table_bytes": 8192, "index_bytes": 0,
            "claim_index_bytes": 16384, "autovacuums": extra.get("autovacuums", 0),
            "load1": extra.get("load1", 1.0),
            "holder_xmin_age": None, "oldest_xmin_age": None,
            "server_cpu_s": extra.get("server_cpu_s", 0.0),
            "workers_cpu_s": extra.get("workers_cpu_s", 0.0)}


def test_parse_starts_reads_pairs_and_skips_blank_lines() -> None:
    assert stats.parse_starts("10.5 3.25\n\n11.0 7\n") == [(10.5, 3.25), (11.0, 7.0)]


@pytest.mark.parametrize("line", ["10.5", "10.5 3 4", "x 3"])
def test_parse_starts_names_the_bad_line(line: str) -> None:
    with pytest.raises(ValueError, match=r"^w\.rec:2: expected '<start s> <latency ms>'"):
        stats.parse_starts(f"1 1\n{line}\n", "w.rec")


def test_complete_lines_keeps_the_partial_last_line() -> None:
    assert stats.complete_lines("1 2\n3 4\n5 ") == ("1 2\n3 4\n", "5 ")
    assert stats.complete_lines("5 6") == ("", "5 6")


def test_merge_starts_keeps_a_cell_sorted_and_starts_after_cuts_it() -> None:
    starts: list[stats.Start] = [(1.0, 1.0), (3.0, 1.0), (5.0, 1.0)]
    stats.merge_starts(starts, [(6.0, 2.0), (4.0, 2.0)])  # a file flushed a moment late
    stats.merge_starts(starts, [])
    assert starts == [(1.0, 1.0), (3.0, 1.0), (4.0, 2.0), (5.0, 1.0), (6.0, 2.0)]
    assert stats.starts_after(starts, 4.0) == [(5.0, 1.0), (6.0, 2.0)]
    assert stats.starts_after(starts, 9.0) == []


def test_start_reader_reads_whole_lines_of_every_file_as_they_grow(tmp_path: Path) -> None:
    a, b = tmp_path / "1.rec", tmp_path / "2.rec"
    a.write_text("10.0 1.5\n12.0 2.5\n13.")
    b.write_text("11.0 4.0\n")
    reader = xmin.StartReader(tmp_path)
    assert reader.read() == [(10.0, 1.5), (11.0, 4.0), (12.0, 2.5)]
    with open(a, "a") as fh:
        fh.write("5 3.0\n")
    with open(b, "a") as fh:
        fh.write("12.5 1.0\n")
    assert reader.read() == [(10.0, 1.5), (11.0, 4.0), (12.0, 2.5), (12.5, 1.0),
                             (13.5, 3.0)]


def test_quantile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert stats.quantile(values, 0.5) == 51.0
    assert stats.quantile(values, 0.99) == 100.0
    assert stats.quantile([], 0.5) is None


def test_windows_count_rates_backlog_latency_and_claim_cost() -> None:
    samples = [sample(100.0, 0),
               sample(105.0, 50, calls=10, ms=5.0, buffers=1000, rows=40, dead=7,
                      server_cpu_s=2.5, workers_cpu_s=1.0),
               sample(110.0, 100, calls=30, ms=45.0, buffers=3000, rows=90, dead=9)]
    # 40 starts in the first window (latency 1..40 ms), 10 in the second (100 ms).
    starts = sorted([(100.0 + i * 0.1, float(i)) for i in range(1, 41)]
                    + [(106.0 + i * 0.1, 100.0) for i in range(10)])
    first, second = stats.windows(samples, starts)
    assert first["t"] == 5.0 and second["t"] == 10.0
    assert first["offered_per_s"] == 10.0 and first["dequeued_per_s"] == 8.0
    assert first["backlog"] == 10 and second["backlog"] == 50
    assert first["p50_ms"] == 21.0 and first["p99_ms"] == 40.0
    assert second["p50_ms"] == 100.0
    assert first["claim"] == {"calls": 10, "ms": 0.5, "buffers": 100.0, "rows": 4.0}
    assert second["claim"] == {"calls": 20, "ms": 2.0, "buffers": 100.0, "rows": 2.5}
    assert first["dead_tuples"] == 7 and second["dead_tuples"] == 9
    assert first["server_cpu"] == 0.5 and first["workers_cpu"] == 0.2


def test_a_window_of_the_last_samples_counts_from_the_cell_start() -> None:
    samples = [sample(100.0, 0), sample(105.0, 5), sample(110.0, 10)]
    starts = [(101.0, 1.0), (102.0, 1.0), (103.0, 1.0), (107.0, 1.0)]
    (w,) = stats.windows(samples[1:], stats.starts_after(starts, 105.0), t0=100.0, earlier=3)
    assert w["t"] == 10.0 and w["dequeued_per_s"] == 0.2 and w["backlog"] == 6


def test_statements_beside_the_claim_are_reported_apart() -> None:
    before, after = sample(0.0, 0, calls=1, ms=1), sample(5.0, 10, calls=3, ms=5)
    before["beside"] = {"move_heads": {"calls": 2, "ms": 2, "buffers": 2, "read": 0,
                                       "rows": 2}}
    after["beside"] = {"move_heads": {"calls": 4, "ms": 12, "buffers": 42, "read": 0,
                                      "rows": 4}}
    (w,) = stats.windows([before, after], [])
    assert w["claim"]["calls"] == 2 and w["claim"]["ms"] == 2.0
    assert w["beside"] == {"move_heads": {"calls": 2, "ms": 5.0, "buffers": 20.0,
                                          "rows": 1.0}}
    assert stats.cell_summary([before, after], [])["beside"]["move_heads"]["calls"] == 2


def test_a_window_without_claims_or_starts_has_no_means() -> None:
    (w,) = stats.windows([sample(0.0, 0), sample(5.0, 10)], [])
    assert w["claim"] == {"calls": 0, "ms": None, "buffers": None, "rows": None}
    assert w["p50_ms"] is None and w["backlog"] == 10


def test_statements_of_several_labels_add_up_and_a_late_label_grows_from_zero() -> None:
    before = {"claim_jobs": {"calls": 5, "ms": 5, "buffers": 50, "read": 0, "rows": 5}}
    after = {"claim_jobs": {"calls": 6, "ms": 6, "buffers": 60, "read": 0, "rows": 6},
             "complete_and_claim_jobs": {"calls": 3, "ms": 9, "buffers": 30, "read": 1,
                                         "rows": 12}}
    delta = stats.statement_delta(before, after)
    assert delta["claim_jobs"]["calls"] == 1
    assert delta["complete_and_claim_jobs"]["calls"] == 3
    assert stats.per_call(stats.combine(delta)) == {"calls": 4, "ms": 2.5, "buffers": 10.0,
                                                    "rows": 3.25}


def test_cell_summary_covers_first_to_last_sample() -> None:
    samples = [sample(0.0, 0, autovacuums=40),
               sample(5.0, 100, calls=10, ms=10, buffers=500, dead=3, load1=2.0),
               sample(10.0, 200, calls=20, ms=30, buffers=1500, dead=1, load1=4.0,
                      autovacuums=43)]
    # Starts before the first sample belong to no cell; the last 20 jobs never started.
    starts = [(-1.0, 1.0)] + [(0.05 * i, float(i)) for i in range(1, 181)]
    s = stats.cell_summary(samples, starts)
    assert s["seconds"] == 10.0 and s["offered_per_s"] == 20.0
    assert s["jobs_started"] == 180 and s["dequeued_per_s"] == 18.0
    assert s["backlog_end"] == 200 - 181
    assert s["claim"] == {"calls": 20, "ms": 1.5, "buffers": 75.0, "rows": 0.0}
    assert s["dead_tuples_end"] == 1 and s["dead_tuples_max"] == 3
    assert s["load1_mean"] == 3.0 and s["load1_max"] == 4.0
    assert s["autovacuums"] == 3  # the table's counter outlives TRUNCATE: this cell's share
    with pytest.raises(ValueError, match="two samples"):
        stats.cell_summary(samples[:1], starts)


def _cell(system: str, holder: str, p50: float | None, claim_ms: float | None,
          last_ms: float | None = None) -> dict[str, Any]:
    return {"system": system, "rate": 800, "holder": holder,
            "windows": [{"claim": {"ms": 0.1, "buffers": 1.0}},
                        {"claim": {"ms": last_ms, "buffers": 2000.0}}],
            "summary": {"offered_per_s": 800.0, "dequeued_per_s": 790.0, "p50_ms": p50,
                        "p99_ms": None, "claim": {"ms": claim_ms, "buffers": 100.0,
                                                  "rows": 2.0},
                        "dead_tuples_end": 1234, "backlog_end": 5, "load1_mean": 2.25}}


def test_table_has_one_row_per_cell_and_medians_over_rounds() -> None:
    cells = [_cell("pgfleet", "none", 3.0, 0.5, 20.0), _cell("skiplocked", "none", 9.0, None),
             _cell("pgfleet", "none", 5.0, 0.7, 10.0), _cell("pgfleet", "none", 4.0, 0.6, 30.0)]
    rows = stats.table_rows(cells)
    assert len(rows) == 2
    assert rows[0][:3] == ["800", "none", "pgfleet (median of 3)"]
    assert rows[0][5] == "4.0" and rows[0][7] == "0.60"
    assert rows[1][2] == "skiplocked" and rows[1][6] == "-" and rows[1][7] == "-"
    assert rows[0][10] == "20.00" and rows[0][11] == "2,000"  # the last window's claim
    assert rows[1][10] == "-" and rows[1][12] == "1,234"
    page = stats.markdown(cells)
    assert page.splitlines()[0].startswith("| rate | holder | system |")
    assert len(page.splitlines()) == 4


def test_arguments_are_checked_with_one_clear_line(capsys: pytest.CaptureFixture[str]
                                                    ) -> None:
    args = xmin.parse_args(["--rates", "800,2000", "--systems", "pgfleet,pgqueuer-b100",
                            "--cell-seconds", "60"])
    assert args.rates == [800, 2000] and args.systems == ["pgfleet", "pgqueuer-b100"]
    for argv, message in ((["--rates", "800,fast"], "--rates: '800,fast' is not a comma"),
                          (["--rates", "0"], "every rate must be above 0"),
                          (["--systems", "pgfleet,celery"], "--systems: celery;"),
                          (["--holders", "sometimes"], "--holders: sometimes;"),
                          (["--cell-seconds", "5"], "shorter than two windows")):
        with pytest.raises(SystemExit):
            xmin.parse_args(argv)
        assert message in capsys.readouterr().err


def test_table_reprints_an_earlier_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"cells": [_cell("pgfleet", "held", 30.0, 9.0, 22.0)]}))
    xmin.main(["--table", str(run)])
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and out[2].startswith("| 800 | held | pgfleet | 800 | 790 | 30.0 |")
    run.write_text("[1, 2]")
    with pytest.raises(SystemExit, match=r"^--table .*run\.json: not a bench\.xmin result"):
        xmin.main(["--table", str(run)])


def test_system_names() -> None:
    assert system_name("pgqueuer-b100") and system_name("skiplocked")
    assert not system_name("pgqueuer-b") and not system_name("pgqueuer-b0")
    assert not system_name("pgfleet-b10")
