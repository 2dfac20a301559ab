"""How the supervisor stops: graceful on TERM, quick on INT or QUIT, and one step harder
with each stop signal during a stop, so a repeated TERM hurries the running jobs (given
back refunded) before anything is killed, and only the last step leaves jobs to their
lease. Workers stop first; the helpers stop once no worker is left, so the maintenance
process can still give back the jobs of a worker killed on the way."""

from __future__ import annotations

import errno
import os
import signal

# After this much time beyond the shutdown timeout, the stop turns into SIGKILL.
STOP_MARGIN = 5.0
# Maintenance processes a stop starts for its final rescue, at most.
FINAL_RESCUES = 2


def signal_child(pid: int, sig: int) -> None:
    """Signal a child; one that has just exited (not reaped yet) is not an error."""
    try:
        os.kill(pid, sig)
    except OSError as exc:
        if exc.errno != errno.ESRCH:
            raise


def next_stop(current: str | None, sig: int) -> str:
    """The stop a TERM, INT or QUIT asks for, given the stop under way (None: none). Each
    signal during a stop goes one step harder: graceful, quick (running jobs given back
    refunded), the workers killed (their jobs given back as crashes), every child killed."""
    if current is None:
        return "graceful" if sig == signal.SIGTERM else "quick"
    return {"graceful": "quick", "quick": "kill"}.get(current, "kill-all")
