"""Compaction of dead processes' metric files keeps every total (FAULTS H3)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from pgfleet import metrics_files

COUNT = """
from pgfleet import metrics
metrics.jobs_started.labels("q", "t").inc(3)
metrics.job_duration.labels("q", "t").observe(0.2)
"""


def totals(directory: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(directory))
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in registry.collect() for s in family.samples}


def kept(directory: Path) -> list[str]:
    """Counter and histogram files (live gauges' files go when the supervisor reaps)."""
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(("counter_", "hist")))


def run_children(directory: Path, count: int) -> None:
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(directory))
    for _ in range(count):
        subprocess.run([sys.executable, "-c", COUNT], env=env, check=True)


def test_dead_files_fold_into_an_archive_with_the_same_totals(tmp_path: Path) -> None:
    run_children(tmp_path, 25)
    before = totals(tmp_path)
    assert before[("pgfleet_jobs_started_total", (("queue", "q"), ("task", "t")))] == 75
    assert len(kept(tmp_path)) == 50
    assert metrics_files.compact(tmp_path) == 50
    assert kept(tmp_path) == ["counter_archive.db", "histogram_archive.db"]
    assert totals(tmp_path) == before
    run_children(tmp_path, 25)
    assert metrics_files.compact(tmp_path) == 50
    after = totals(tmp_path)
    assert after[("pgfleet_jobs_started_total", (("queue", "q"), ("task", "t")))] == 150
    assert after[("pgfleet_job_duration_seconds_count", (("queue", "q"), ("task", "t")))] == 50


def test_live_files_and_small_numbers_are_left_alone(tmp_path: Path) -> None:
    run_children(tmp_path, 3)
    assert metrics_files.compact(tmp_path) == 0  # below the threshold
    live = tmp_path / f"counter_{os.getpid()}.db"
    live.write_bytes((tmp_path / next(tmp_path.glob("counter_*.db")).name).read_bytes())
    assert metrics_files.compact(tmp_path, threshold=1) == 6
    assert live.exists()


def test_an_interrupted_compaction_is_finished_by_the_next(tmp_path: Path) -> None:
    run_children(tmp_path, 2)
    before = totals(tmp_path)
    for path in list(tmp_path.glob("[ch]*_*.db")):
        path.rename(path.with_name(path.name + ".merging"))  # crashed right after renaming
    assert metrics_files.compact(tmp_path, threshold=1) == 4
    assert totals(tmp_path) == before
    assert not list(tmp_path.glob("*.merging"))
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(tmp_path))
    assert b"pgfleet_jobs_started_total" in generate_latest(registry)
