"""How a child tells the supervisor why it left, and how a wait status reads in words.

Every process of pgfleet takes its exit codes from here, so the arbiter's reading of a
status and the child's choice of a code cannot drift apart."""

from __future__ import annotations

import os
import signal

EXIT_OK = 0
EXIT_RECYCLE = 64
EXIT_TIMEOUT = 65
EXIT_START_FAILED = 66
EXIT_LEASE_LOST = 67
# The supervisor went away and the child did not stop by itself within its grace.
EXIT_PARENT_GONE = 68
# Maintenance could not give back the jobs of stopped workers before it had to stop (the
# database away): they wait for their lease. The supervisor then exits with it too.
EXIT_RESCUE_FAILED = 69
# An unexpected exception reached a process's top-level guard (EX_SOFTWARE).
EXIT_CRASHED = 70


def signal_name(number: int) -> str:
    """SIGKILL, SIGRTMIN+1, or `signal 99`: any number a wait status can hold."""
    try:
        return signal.Signals(number).name
    except ValueError:
        pass
    low, high = getattr(signal, "SIGRTMIN", 0), getattr(signal, "SIGRTMAX", -1)
    if low <= number <= high:
        return f"SIGRTMIN+{number - low}"
    return f"signal {number}"


def exit_reason(status: int, killed_for: str | None) -> tuple[str, str]:
    """(text for the log and the job's error, reason label for the restart metric)."""
    if os.WIFSIGNALED(status):
        name = signal_name(os.WTERMSIG(status))
        if killed_for:
            return f"{name} ({killed_for})", "stale" if "stale" in killed_for else "killed"
        return name, "crashed"
    code = os.WEXITSTATUS(status)
    words = {
        EXIT_OK: ("exit code 0", "exited"),
        EXIT_RECYCLE: ("recycled", "recycled"),
        EXIT_TIMEOUT: ("job timeout", "timeout"),
        EXIT_START_FAILED: ("start-up failed", "start_failed"),
        EXIT_LEASE_LOST: ("could not renew its leases", "lease_lost"),
        EXIT_RESCUE_FAILED: ("could not give back the jobs of stopped workers", "exited"),
    }
    return words.get(code, (f"exit code {code}", "crashed"))


def child_exit_reason(status: int, killed_for: str | None,
                      gave_up_mark: bool) -> tuple[str, str, bool]:
    """exit_reason, and whether the child gave up its leases: exit code 67 means that only
    with the worker's own mark on the beacon board. A task may call os._exit(67) too, and
    that is a crash like any other exit the worker did not choose. Exit code 0 with the
    mark: a stop ended with jobs it could not give back (their threads still in task code
    at the deadline, or the database away); they go back refunded, not as a crash, so a
    stop never costs a job an attempt."""
    reason, label = exit_reason(status, killed_for)
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    if code == EXIT_OK and gave_up_mark:
        return "stopped with jobs it could not give back", label, True
    if code != EXIT_LEASE_LOST:
        return reason, label, False
    if gave_up_mark:
        return reason, label, True
    return f"exit code {EXIT_LEASE_LOST}", "crashed", False
