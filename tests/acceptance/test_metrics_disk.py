"""Issue 13 item 8, metrics part: a metrics directory that cannot hold the multiprocess
files (full or read-only) turns metrics off in each process with one line; the supervisor
starts, and jobs run, in recycled workers too."""

from __future__ import annotations

import re
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import pgfleet
from tests.support.fleet import Fleet
from tests.support.workers import scalar, wait_for


@pytest.fixture(params=["size=4k", "ro,size=64k"], ids=["full", "read-only"])
def metrics_mount(request: pytest.FixtureRequest, tmp_path: Path,
                  monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A tmpfs of one page (full after the first page is written) or a read-only one, as
    the supervisor's PROMETHEUS_MULTIPROC_DIR."""
    folder = tmp_path / "metrics"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", request.param, "tmpfs", str(folder)],
                   check=True)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(folder))
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


def test_an_unwritable_metrics_directory_turns_metrics_off_not_the_jobs(
    dsn: str, fleet: Callable[..., Fleet], metrics_mount: Path
) -> None:
    f = fleet({"default": {"processes": 2, "threads": 2, "max_jobs": 5}})
    f.wait_workers(2)
    ids = pgfleet.enqueue_many(dsn, [{"task": "noop"}] * 40)
    wait_for(lambda: scalar(dsn, "SELECT count(*) FROM pgfleet.jobs WHERE id = ANY(%s)"
                                 " AND state = 'succeeded'", (ids,)) == 40, timeout=60)
    f.signal(signal.SIGTERM)
    assert f.wait(60) == 0
    log = f.log()
    assert "Traceback" not in log and "SIGBUS" not in log, log
    assert "recycled" in log  # workers were replaced, and the new ones ran jobs too
    lines = re.findall(r"metrics disabled in process (\d+): .*", log)
    assert lines, log
    assert len(lines) == len(set(lines))  # one line per process
