"""The keeper of a worker (pgfleet.runtime.keeper) on real processes and real signals,
with no supervisor: a stand-in worker (tests.support.kept_worker) leads its group, starts
its keeper and a shell whose background child sleeps."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.fleet import alive
from tests.support.workers import wait_for

LEASE = 2.0
Kept = tuple[subprocess.Popen[bytes], int, int, int]  # the worker; its keeper, shell, grandchild
Start = Callable[..., Kept]  # (mode, sink=None): sink, a descriptor for stdout and stderr


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    started: list[tuple[subprocess.Popen[bytes], list[int]]] = []

    def run(mode: str, sink: int | None = None) -> Kept:
        folder = tmp_path / mode
        folder.mkdir()
        log = open(folder / "log", "wb")  # noqa: SIM115 - closed with the file's owner
        worker = subprocess.Popen(
            [sys.executable, "-m", "tests.support.kept_worker", str(LEASE), str(folder), mode],
            stdout=log if sink is None else sink, stderr=subprocess.STDOUT)
        log.close()
        pids_file = folder / "pids"
        wait_for(pids_file.exists, timeout=30)
        kept, shell, grandchild = (int(p) for p in pids_file.read_text().split())
        started.append((worker, [kept, shell, grandchild]))
        return worker, kept, shell, grandchild

    yield run
    for worker, pids in started:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.pid, signal.SIGCONT)
        worker.kill()
        worker.wait(10)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def log_of(worker: subprocess.Popen[bytes]) -> str:
    args = worker.args
    assert isinstance(args, list)
    return (Path(str(args[4])) / "log").read_text()


def killed_after(worker: subprocess.Popen[bytes]) -> float:
    """How long after the last renewal the keeper killed the group, by its own clock (the
    line comes after the kill: it is waited for)."""
    line = wait_for(lambda: re.search(r"has not renewed its leases for ([0-9.]+)s",
                                      log_of(worker)), timeout=10)
    return float(line.group(1))


def test_the_keeper_kills_a_dead_workers_group(start: Start) -> None:
    worker, kept, shell, grandchild = start("renewing")
    assert os.getpgid(kept) == kept != worker.pid  # a group of its own
    assert os.getpgid(grandchild) == worker.pid
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait(10)
    wait_for(lambda: not alive(grandchild) and not alive(shell), timeout=10)
    wait_for(lambda: not alive(kept), timeout=10)  # its job done, it exits
    assert f"worker {worker.pid} is gone; killed 2 process(es)" in log_of(worker)  # drained


def test_a_kill_of_the_workers_group_does_not_take_the_keeper_first(start: Start) -> None:
    """A SIGSTOP of the worker's whole group (a task's killpg, job control) leaves the
    keeper running: it still bounds the frozen group by the lease."""
    worker, _, _, grandchild = start("stale")
    os.killpg(worker.pid, signal.SIGSTOP)
    assert worker.wait(10) == -signal.SIGKILL
    wait_for(lambda: not alive(grandchild), timeout=10)
    assert killed_after(worker) < LEASE


def test_the_keeper_kills_a_frozen_worker_before_its_lease_expires(start: Start) -> None:
    worker, kept, shell, grandchild = start("renewing")
    os.kill(worker.pid, signal.SIGSTOP)
    assert worker.wait(10) == -signal.SIGKILL
    wait_for(lambda: not alive(grandchild) and not alive(shell), timeout=10)
    wait_for(lambda: not alive(kept), timeout=10)
    assert killed_after(worker) < LEASE
    assert "(lease 2s) and holds 1 job(s): killed its process group" in log_of(worker)


def test_the_keeper_leaves_a_renewing_or_idle_worker_alone(start: Start) -> None:
    """Past a whole lease: a worker that renews, and one that holds no job (it may wait
    for the database as long as it likes), both keep their processes."""
    renewing = start("renewing")
    idle = start("idle")
    deadline = time.monotonic() + 2 * LEASE
    while time.monotonic() < deadline:
        for worker, kept, _, grandchild in (renewing, idle):
            assert worker.poll() is None and alive(kept) and alive(grandchild), log_of(worker)
        time.sleep(0.1)


def test_the_keeper_holds_no_inherited_descriptor(start: Start) -> None:
    _, kept, _, _ = start("idle")
    fds = sorted(int(fd) for fd in os.listdir(f"/proc/{kept}/fd"))
    assert fds[:3] == [0, 1, 2] and len(fds) == 4, fds
    assert os.readlink(f"/proc/{kept}/fd/{fds[3]}") == "anon_inode:[pidfd]"


def test_a_stalled_stderr_does_not_hold_the_keeper(start: Start) -> None:
    """Its stderr is a pipe that is full and that nobody reads: the keeper still kills
    the frozen worker's group, then exits although its line cannot be written."""
    read_end, write_end = os.pipe()
    try:
        os.set_blocking(write_end, False)
        with contextlib.suppress(BlockingIOError):
            while True:
                os.write(write_end, b"x" * 65536)
        os.set_blocking(write_end, True)  # as a real stderr: a write would wait
        worker, kept, shell, grandchild = start("stale", sink=write_end)
        os.kill(worker.pid, signal.SIGSTOP)
        assert worker.wait(10) == -signal.SIGKILL
        wait_for(lambda: not alive(grandchild) and not alive(shell), timeout=10)
        wait_for(lambda: not alive(kept), timeout=10)  # LOG_DRAIN (1 s), then it exits
    finally:
        os.close(read_end)
        os.close(write_end)
