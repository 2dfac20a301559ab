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
    }
    return words.get(code, (f"exit code {code}", "crashed"))
