"""How the supervisor stops: graceful on TERM, quick on INT or QUIT, and one step harder
with each stop signal during a stop (a second TERM used to SIGKILL every child, and an INT
after a TERM too, leaving running jobs leased until another host's lease watch charged
them: outside trial T10). Workers stop first; the helpers stop once no worker is left, so
the maintenance process can still give back the jobs of a worker killed on the way."""

from __future__ import annotations

import errno
import logging
import os
import signal
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pgfleet.supervisor.arbiter import Supervisor

log = logging.getLogger("pgfleet.supervisor")

# After this much time beyond the shutdown timeout, the stop turns into SIGKILL.
STOP_MARGIN = 5.0


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


def begin(sup: Supervisor, mode: str, signame: str) -> None:
    """Start the stop `mode` names, or make the one under way harder."""
    sup.stopping = mode
    if mode == "graceful":
        sup.stop_deadline = (time.monotonic() + sup.config.supervisor.shutdown_timeout
                              + STOP_MARGIN)
        log.info("%s: stopping gracefully (running jobs get %.0fs)", signame,
                 sup.config.supervisor.shutdown_timeout)
        signal_kind(sup, "worker", signal.SIGTERM)
    elif mode == "quick":
        sup.stop_deadline = time.monotonic() + STOP_MARGIN
        log.info("%s: quick stop (running jobs are given back)", signame)
        signal_kind(sup, "worker", signal.SIGINT)
    elif mode == "kill":
        log.warning("%s again: killing the workers; the jobs they were running "
                    "are given back as crashes", signame)
        kill_workers(sup, "stop signal repeated")
    else:
        log.warning("%s again: killing every child; their jobs wait for their lease",
                    signame)
        for pid in list(sup.children):
            signal_child(pid, signal.SIGKILL)


def step(sup: Supervisor) -> bool:
    """Workers first; the helpers stop once no worker is left, so the maintenance
    process can still give back the jobs of a worker killed at the deadline."""
    if time.monotonic() > sup.stop_deadline and sup.stopping in ("graceful", "quick"):
        log.warning("children still running at the stop deadline; killing them")
        kill_workers(sup, "shutdown deadline")
    if sup.stopping in ("kill", "kill-all") and time.monotonic() > sup.stop_deadline:
        for pid in list(sup.children):
            signal_child(pid, signal.SIGKILL)
    if any(c.slot.kind == "worker" for c in sup.children.values()):
        return False
    if sup.draining and time.monotonic() <= sup.stop_deadline + STOP_MARGIN:
        return False  # maintenance must stay for their rescue
    sup.draining.give_up()
    for child in sup.children.values():
        if not child.retiring:
            sup.retire(child, "stop")
    return not sup.children


def kill_workers(sup: Supervisor, why: str) -> None:
    """SIGKILL the workers; the maintenance process gets STOP_MARGIN to give back the
    jobs they held (as crashes: their threads may have been anywhere)."""
    sup.stopping = "kill"
    for child in sup.children.values():
        if child.slot.kind == "worker":
            child.killed_for = why
            signal_child(child.pid, signal.SIGKILL)
    sup.stop_deadline = time.monotonic() + STOP_MARGIN


def signal_kind(sup: Supervisor, kind: str, sig: int) -> None:
    """Send `sig` to every child of one kind."""
    for child in sup.children.values():
        if child.slot.kind == kind:
            signal_child(child.pid, sig)
