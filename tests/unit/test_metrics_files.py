"""Compaction of dead processes' metric files keeps every total (FAULTS H3); the directory
of those files is pgfleet's own or refused."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from pgfleet.metrics import files as metrics_files
from pgfleet.runtime import metrics_dir as metrics_dirs
from pgfleet.runtime.private_dirs import RefusedDirectory


def totals(directory: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(directory))
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in registry.collect() for s in family.samples}


def kept(directory: Path) -> list[str]:
    """Counter and histogram files (live gauges' files go when the supervisor reaps)."""
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(("counter_", "hist")))


# One interpreter imports pgfleet once and forks `count` children that each count and
# exit (prometheus_client opens a forked process's own files): `count` dead processes'
# files, as many interpreter starts would leave, in a fraction of the time.
FORKS = """
import os, sys
from pgfleet import metrics
for _ in range(int(sys.argv[1])):
    pid = os.fork()
    if pid == 0:
        metrics.jobs_started.labels("q", "t").inc(3)
        metrics.job_duration.labels("q", "t").observe(0.2)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
"""


def run_children(directory: Path, count: int) -> None:
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(directory))
    subprocess.run([sys.executable, "-c", FORKS, str(count)], env=env, check=True)


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


def test_a_given_directory_is_made_private_and_emptied(tmp_path: Path) -> None:
    fresh = tmp_path / "new" / "prom"
    metrics_dirs.fresh_directory(fresh)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o700
    (fresh / "counter_1.db").write_bytes(b"old")
    (fresh / "leftover").mkdir()
    fresh.chmod(0o755)
    metrics_dirs.fresh_directory(fresh)
    assert [p.name for p in fresh.iterdir()] == [metrics_dirs.MARKER]
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o700


def test_an_unmarked_directory_is_refused_and_nothing_in_it_touched(tmp_path: Path) -> None:
    # An application's folder named by mistake: pgfleet did not make it, so it is never
    # emptied, made 0700 nor removed.
    app = tmp_path / "app"
    app.mkdir(mode=0o755)
    (app / "uploads").mkdir()
    (app / "uploads" / "a.txt").write_text("keep")
    (app / "counter_1.db").write_bytes(b"looks like ours")
    before = sorted((str(p), p.stat().st_mode) for p in [app, *app.rglob("*")])
    with pytest.raises(RefusedDirectory, match=f"refusing {app}: it is not empty"):
        metrics_dirs.fresh_directory(app)
    out = run_with_multiproc_dir(tmp_path, app)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        f"pgfleet: error: PROMETHEUS_MULTIPROC_DIR: refusing {app}: it is not empty and has "
        f"no {metrics_dirs.MARKER} of pgfleet's, so it is not a metrics directory pgfleet "
        "made; name a new or empty one"]
    assert sorted((str(p), p.stat().st_mode) for p in [app, *app.rglob("*")]) == before


def test_a_planted_or_foreign_marker_does_not_make_a_directory_ours(tmp_path: Path) -> None:
    app = tmp_path / "app"
    app.mkdir()
    (app / "keep.txt").write_text("keep")
    (app / metrics_dirs.MARKER).write_text("not pgfleet's\n")
    with pytest.raises(RefusedDirectory, match="not empty"):
        metrics_dirs.fresh_directory(app)
    (app / metrics_dirs.MARKER).unlink()
    made = tmp_path / "made"
    metrics_dirs.fresh_directory(made)
    (app / metrics_dirs.MARKER).symlink_to(made / metrics_dirs.MARKER)
    with pytest.raises(RefusedDirectory, match="not empty"):
        metrics_dirs.fresh_directory(app)
    assert (app / "keep.txt").read_text() == "keep"


def test_only_a_directory_this_run_created_is_removed_at_the_end(tmp_path: Path) -> None:
    made = metrics_dirs.fresh_directory(tmp_path / "new")
    assert made.created
    (made.path / "counter_1.db").write_bytes(b"x")
    metrics_dirs.release(made)
    assert not made.path.exists()
    # An empty directory given to pgfleet (a mount point, RuntimeDirectory=) is used and
    # emptied at the end, but stays.
    given = tmp_path / "given"
    given.mkdir()
    used = metrics_dirs.fresh_directory(given)
    assert not used.created
    (given / "counter_1.db").write_bytes(b"x")
    metrics_dirs.release(used)
    assert given.is_dir() and list(given.iterdir()) == []
    # Taken over by a later run (a new token): the first run's end leaves it alone.
    first = metrics_dirs.fresh_directory(tmp_path / "shared")
    second = metrics_dirs.fresh_directory(tmp_path / "shared")
    (second.path / "counter_2.db").write_bytes(b"x")
    metrics_dirs.release(first)
    assert (second.path / "counter_2.db").exists()
    metrics_dirs.release(second)
    # The directory was replaced by a link or someone else's folder: nothing is followed.
    gone = metrics_dirs.fresh_directory(tmp_path / "gone")
    for entry in gone.path.iterdir():
        entry.unlink()
    gone.path.rmdir()
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep.txt").write_text("keep")
    gone.path.symlink_to(target)
    metrics_dirs.release(gone)
    assert (target / "keep.txt").read_text() == "keep" and gone.path.is_symlink()


def test_pgfleet_run_leaves_an_app_directory_in_place(tmp_path: Path) -> None:
    # A run that got as far as the supervisor removed the directory it had emptied; one
    # that is refused must change nothing at all.
    app = tmp_path / "app"
    app.mkdir()
    (app / "settings.py").write_text("keep")
    out = run_with_multiproc_dir(tmp_path, app)
    assert out.returncode == 2, out.stderr
    assert (app / "settings.py").read_text() == "keep"


def run_with_multiproc_dir(tmp_path: Path, folder: Path) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "pgfleet.yaml"
    config.write_text("database_url: postgresql://nobody@127.0.0.1:1/none\n"
                      "queues:\n  default: {}\n")
    return subprocess.run([sys.executable, "-m", "pgfleet", "run", "-c", str(config)],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(folder)})


def test_a_given_directory_that_is_a_link_is_refused_and_its_target_untouched(
        tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    link = tmp_path / "prom"
    link.symlink_to(target)
    with pytest.raises(RefusedDirectory, match="symbolic link"):
        metrics_dirs.fresh_directory(link)
    out = run_with_multiproc_dir(tmp_path, link)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        f"pgfleet: error: PROMETHEUS_MULTIPROC_DIR: refusing {link}: it is a symbolic link"]
    assert (target / "keep.txt").read_text() == "mine"
    assert stat.S_IMODE(target.stat().st_mode) == 0o755 & ~current_umask()


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_given_directory_of_another_account_is_refused(tmp_path: Path) -> None:
    # Giving a directory away needs root, which the suite runs as.
    theirs = tmp_path / "prom"
    theirs.mkdir()
    (theirs / "counter_1.db").write_bytes(b"theirs")
    os.chown(theirs, 65534, 65534)
    with pytest.raises(RefusedDirectory, match="belongs to uid 65534"):
        metrics_dirs.fresh_directory(theirs)
    assert (theirs / "counter_1.db").exists() and theirs.stat().st_uid == 65534


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_an_empty_file_of_a_process_that_died_at_start_breaks_no_scrape(
        tmp_path: Path) -> None:
    # Seen in a real run: a worker killed between creating its counter file and sizing it
    # left 0 bytes; every scrape then failed (struct.error) for the rest of the run.
    run_children(tmp_path, 2)
    before = totals(tmp_path)
    empty = tmp_path / f"counter_{dead_pid()}.db"
    empty.touch()
    assert metrics_files.compact(tmp_path, threshold=100) == 0  # below the threshold
    assert not empty.exists()
    assert totals(tmp_path) == before
    empty.touch()
    assert metrics_files.compact(tmp_path, threshold=1) == 4
    assert not empty.exists() and totals(tmp_path) == before


def test_a_torn_file_is_skipped_by_the_fold(tmp_path: Path) -> None:
    run_children(tmp_path, 2)
    before = totals(tmp_path)
    torn = tmp_path / f"counter_{dead_pid()}.db.merging"  # a compaction interrupted
    torn.write_bytes(b"\x01\x02")  # shorter than the header
    assert metrics_files.compact(tmp_path, threshold=1) == 5
    assert not torn.exists() and totals(tmp_path) == before
