"""The per-job part of "a job's processes die with it", on real processes: what a thread
started is killed with its descendants; a process the task moved to a session of its own
has opted out and is left alone."""

from __future__ import annotations

import subprocess
import threading

from pgfleet.runtime.process_groups import kill_thread_processes
from tests.support.fleet import alive
from tests.support.workers import wait_for


def test_a_threads_processes_die_unless_they_left_the_group() -> None:
    started: dict[str, subprocess.Popen[bytes]] = {}
    killed: list[int] = []

    def job() -> None:
        # A shell with a background child: the child is the job's grandchild.
        started["shell"] = subprocess.Popen(["sh", "-c", "sleep 60 & wait"])
        started["own"] = subprocess.Popen(["sleep", "60"], start_new_session=True)
        wait_for(lambda: _children(started["shell"].pid))
        killed.extend(kill_thread_processes(threading.get_native_id()))

    bystander = subprocess.Popen(["sleep", "60"])  # started by another thread
    thread = threading.Thread(target=job)
    thread.start()
    thread.join(30)
    try:
        shell = started["shell"]
        assert shell.pid in killed and len(killed) == 2, killed  # the shell and its sleep
        # SIGKILL takes effect when the process is next scheduled: on a busy machine that
        # is not always before the next line (a bound against a hang, not a timing).
        wait_for(lambda: not any(alive(pid) for pid in killed), timeout=10)
        assert alive(started["own"].pid)
        assert alive(bystander.pid)
    finally:
        for proc in (started["own"], bystander):
            proc.kill()
            proc.wait()


def _children(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return handle.read().split()
    except OSError:
        return []
