"""Processes a job starts die with it (Linux).

Every supervised worker leads a process group of its own, which the processes its tasks
start inherit (subprocess, multiprocessing, a shell's background jobs, a daemon's double
fork all keep the group unless they call setsid/setpgid). That group is the unit of
cleanup:

- a job that ends while its worker lives: the processes its own thread started (Linux
  lists children per thread) and their descendants are killed;
- a worker that ends by itself kills the rest of its group on the way out;
- a worker that dies (SIGKILL, OOM) cannot: the supervisor, a child subreaper (so the
  group's orphans become its children and are reaped), kills the group and hands the
  dead worker's jobs to rescue only once no process of the group is left.

A process the task moved to a group or session of its own (`start_new_session=True`,
`process_group=0`) has opted out: nothing here touches it. PR_SET_PDEATHSIG is no
substitute: it is per process, is not inherited across fork, and fires on the death of
the forking thread rather than of the job.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import signal
import time
from pathlib import Path

log = logging.getLogger("pgfleet.supervisor")

_PR_SET_CHILD_SUBREAPER = 36
# How long a job's thread waits to reap the processes it killed (a process in an
# uninterruptible sleep dies when that ends; it is left to the worker's exit then).
REAP_WAIT = 1.0
# Set in a process that made its own group (a supervised worker): only such a process
# may clean its group up. A `pgfleet worker` started by a shell may lead a group that
# its pipeline's other commands share.
_leading = False


def become_subreaper() -> bool:
    """Orphans of this process's descendants re-parent to it instead of to init, so it
    can reap them and wait for a group to empty. False where the kernel refuses."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0:
            return True
    except (OSError, AttributeError):
        pass
    log.warning("cannot become a child subreaper: processes that jobs started may outlive "
                "a killed worker")
    return False


def lead_own_group() -> None:
    """Make this process the leader of a new process group, before it runs task code
    (a worker that dies before this leaves no group, and nothing to wait for)."""
    global _leading
    with contextlib.suppress(OSError):  # already a group or session leader
        os.setpgid(0, 0)
    _leading = os.getpgrp() == os.getpid()


def leads_own_group() -> bool:
    """Did lead_own_group() make this process the leader of its group?"""
    return _leading and os.getpgrp() == os.getpid()


def kill_group(pgid: int) -> bool:
    """SIGKILL every process of group `pgid`; False once the group has no process left
    (zombies count until they are reaped)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError as exc:
        if exc.errno == errno.ESRCH:
            return False
        raise
    return True


def _group(pid: int) -> int | None:
    """The process group of `pid`, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # After the command name, in parentheses: state, parent, process group, ...
    return int(text.rsplit(")", 1)[1].split()[2])


def live_members(pgid: int) -> list[int]:
    """The processes of group `pgid` that are not zombies."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            found.append(int(entry))
    return found


def doomed(pid: int) -> bool:
    """Is a SIGKILL already on its way to `pid` (sent, not yet acted on)?"""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True  # gone already
    for line in text.splitlines():
        if line.startswith("ShdPnd:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGKILL - 1)))
    return False


def children(pid: int, tid: int | None = None) -> list[int]:
    """Children of process `pid`: of its thread `tid` only, or of all its threads."""
    tasks = [str(tid)] if tid is not None else _tasks(pid)
    found: list[int] = []
    for task in tasks:
        with contextlib.suppress(OSError, ValueError):
            found += [int(c) for c in
                      Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
    return found


def _tasks(pid: int) -> list[str]:
    try:
        return os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []


def kill_job_processes() -> list[int]:
    """kill_thread_processes() for every thread of this process, without waiting to reap
    them: a process on its way out, whose stuck jobs' processes must not outlive it
    (whoever inherits the dead, the supervisor or init, reaps them)."""
    killed: list[int] = []
    for task in _tasks(os.getpid()):
        killed += kill_thread_processes(int(task), reap=False)
    return killed


def kill_thread_processes(tid: int, reap: bool = True) -> list[int]:
    """Kill the processes that thread `tid` of this process started, with their
    descendants, if they are still in this process's group; reap the direct ones.
    Returns the pids killed."""
    group = os.getpgrp()
    direct = [pid for pid in children(os.getpid(), tid) if _in_group(pid, group)]
    killed: list[int] = []
    todo = list(direct)
    while todo:
        pid = todo.pop()
        if not _in_group(pid, group):
            continue
        # Stop it first so it cannot fork while its children are listed.
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGSTOP)
        todo += children(pid)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        killed.append(pid)
    if reap:
        _reap(direct)
    return killed


def _in_group(pid: int, group: int) -> bool:
    return _group(pid) == group


def _reap(pids: list[int]) -> None:
    deadline = time.monotonic() + REAP_WAIT
    left = list(pids)
    while left and time.monotonic() < deadline:
        for pid in list(left):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid  # reaped elsewhere (the task's own Popen.wait)
            if done:
                left.remove(pid)
        if left:
            time.sleep(0.01)


def kill_rest_of_group() -> int:
    """A group leader on its way out: SIGKILL every other process of its group (what its
    jobs started and left behind). Does nothing for a process that leads no group (a
    `pgfleet worker` in a shell's pipeline shares its group with the pipeline)."""
    me = os.getpid()
    if not _leading or os.getpgrp() != me:
        return 0
    count = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        if _group(int(entry)) == me:
            with contextlib.suppress(OSError):
                os.kill(int(entry), signal.SIGKILL)
                count += 1
    return count
