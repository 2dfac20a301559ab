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

from pgfleet.supervisor.children import Slot
from pgfleet.supervisor.exit_codes import EXIT_OK, EXIT_RESCUE_FAILED

if TYPE_CHECKING:
    from pgfleet.supervisor.arbiter import Supervisor

log = logging.getLogger("pgfleet.supervisor")

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


def begin(sup: Supervisor, mode: str, signame: str) -> None:
    """Start the stop `mode` names, or make the one under way harder."""
    sup.stopping = mode
    if mode == "graceful":
        sup.stop_deadline = (time.monotonic() + sup.config.supervisor.shutdown_timeout
                              + STOP_MARGIN)
        log.info("%s: stopping gracefully (running jobs get %.0fs)", signame,
                 sup.config.supervisor.shutdown_timeout)
        # Not the workers a reload retires: they are stopping gracefully already, and a
        # second TERM would hurry them (Supervisor.retire).
        for child in sup.children.values():
            if child.slot.kind == "worker" and not child.retiring:
                signal_child(child.pid, signal.SIGTERM)
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
    start_final_rescue(sup)
    for child in sup.children.values():
        if not child.retiring:
            sup.retire(child, "stop")
    return not sup.children


def start_final_rescue(sup: Supervisor) -> None:
    """Once no worker is left: if stopped workers' jobs were handed to maintenance and no
    maintenance process is there to give them back (a reload's retiring one exited just
    before, or it was killed during the stop), start one; it is stopped at once and does
    the final rescue (outside trial T11b: a HUP then a TERM 50 ms later, or maintenance
    killed after the TERM, exited 0 and the jobs ended dead by lease expiry). Twice at
    most: a stop must end."""
    if (not sup.rescue_asked or sup.final_rescues >= FINAL_RESCUES
            or any(c.slot.kind == "maintenance" for c in sup.children.values())):
        return
    if sup.stopping in ("kill", "kill-all") and time.monotonic() > sup.stop_deadline:
        # The stop is killing what is left: a new one would be killed at once (outside
        # trial T12 saw three spawned and SIGKILLed in a few ms, logged as outside kills).
        return
    sup.final_rescues += 1
    log.info("starting a maintenance process to give back the stopped workers' jobs")
    sup.spawn(Slot("maintenance"))


def maintenance_exited(sup: Supervisor, status: int) -> None:
    """A maintenance process exited. Cleanly during a stop with no worker left: its final
    rescue gave back all that was asked (no request can come after it). Otherwise, if
    it did not exit cleanly, it may have taken requests it read with it (killed while a
    client's lock held its statement: outside trial T11): they are asked again of the
    next maintenance process, a successor or start_final_rescue's; but not of another
    final rescue once one waited for the database in vain (exit 69): the stop ends."""
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    if code == EXIT_OK:
        if sup.stopping and not any(c.slot.kind == "worker" for c in sup.children.values()):
            sup.rescue_asked = False
        return
    if code == EXIT_RESCUE_FAILED:
        sup.final_rescues = FINAL_RESCUES
    asked = sup.rescue.resend()
    if asked:
        log.warning("maintenance exited before it confirmed its give-backs; asking the next"
                    " one again for the jobs of %d dead worker(s)", asked)


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
