"""The keeper: one small process per supervised worker that bounds the worker's process
group when neither the worker nor its supervisor can (Linux).

A job's processes stay in its worker's process group (pgfleet.runtime.process_groups).
Two paths clean that group up, and both need a process that runs: the worker itself (its
exit, its lease watchdog) and the supervisor (the reap of a dead worker, the kill of a
frozen one). A supervisor that is frozen (SIGSTOP, a swap storm) does neither, and a
killed or frozen worker cannot help itself, so a job's processes could outlive its lease
and run beside the job's next attempt on another host. The keeper closes that gap:

- the worker is gone (SIGKILL, the OOM killer, any exit): the keeper SIGKILLs what is
  left of the worker's group at once;
- the worker holds jobs on leases it has not renewed for KEEPER_SAFETY of a lease (it is
  frozen, or its watchdog did not act): the keeper SIGKILLs the whole group, the worker
  included, before the lease can expire. SIGKILL ends a stopped process too.

Why a process of its own, and why this way:

- It is forked by the worker before the worker opens a connection, starts a thread or
  imports task code, so it holds no connection, no lock and no task state.
- It leads a group of its own: a signal to the worker's group (a task's
  `os.killpg(0, ...)`, a SIGSTOP of the group) does not reach it.
- It watches the worker through a pidfd, which names that very process and cannot be
  fooled by a reused pid; a parent check backs it up where pidfds are missing.
- The worker tells it nothing through a descriptor: it reads the worker's heartbeat slot
  (jobs held, last good renewal) in the shared page both inherited from the supervisor.
  A descriptor the worker held would be inherited by the processes its tasks fork, and
  an end of a pipe kept open by them would hide the worker's death. The keeper closes
  every descriptor it inherited but the standard ones.
- It never blocks: it waits in poll() with a timeout, reads shared memory, sends signals,
  and logs after it acted (the log lines go through the writer thread of
  pgfleet.runtime.logs, so a stalled reader of stderr cannot hold it).
- It exits once the worker is gone and its group is empty (or after KILL_WAIT for a
  process that survives SIGKILL, in an uninterruptible sleep).

What it cannot do: a kill that takes the keeper and the worker but spares the job's
processes (a `pkill -9 -f pgfleet`) leaves them to the supervisor, or, if that is frozen
too, to nobody until it runs again. A group emptied and reaped can in principle have its
number handed out again before the keeper's last kill; Linux hands pids out in turn, so
that needs the whole pid space to wrap in the moment between the two.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import logging
import os
import select
import signal
import time

from pgfleet.runtime import logs
from pgfleet.runtime.beacon import Beacon
from pgfleet.runtime.child import set_title
from pgfleet.runtime.exit_codes import EXIT_CRASHED, EXIT_OK
from pgfleet.runtime.process_groups import doomed, live_members

log = logging.getLogger("pgfleet.keeper")

# The worker's own loop stops its jobs at 80 % of a lease without a renewal and its
# watchdog thread at 90 %; the keeper is the last line, after both and before expiry.
KEEPER_SAFETY = 0.95
# The longest wait between two looks at the worker's slot; a lease sets a shorter one.
LOOK_EVERY = 0.25
# How long the keeper goes on killing a group whose processes do not die.
KILL_WAIT = 5.0
# The most it waits for its log lines to be written before it exits.
LOG_DRAIN = 1.0
_IGNORED = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP,
            signal.SIGTTIN, signal.SIGTTOU, signal.SIGTSTP)


def start(beacon: Beacon, lease: float) -> int | None:
    """Fork the keeper of this process, a worker that leads its own process group; call
    it before any connection, thread or task code. Returns the keeper's pid, or None
    (logged) if the fork failed: the worker then runs without one."""
    worker = os.getpid()
    try:
        pid = os.fork()
    except OSError as exc:
        log.warning("cannot start the keeper of worker %d: %s; a frozen supervisor then "
                    "leaves its jobs' processes unbounded", worker, exc)
        return None
    if pid == 0:
        code = EXIT_CRASHED
        try:
            code = run(worker, beacon, lease)
        except BaseException:
            log.exception("keeper of worker %d failed", worker)
        finally:
            logs.drain(LOG_DRAIN)
            os._exit(code)
    return pid


def run(worker: int, beacon: Beacon, lease: float) -> int:
    """The keeper's body, in the freshly forked child of `worker`."""
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    for sig in _IGNORED:
        # It lives exactly as long as its worker; stopping the worker stops it.
        signal.signal(sig, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    # Objects inherited from the worker are never collected here: a collected file
    # object would close a descriptor number the keeper may now use for its pidfd.
    gc.disable()
    set_title(f"pgfleet keeper of worker {worker}")
    watch = Watch(worker)
    watch.close_inherited()
    step = min(LOOK_EVERY, lease / 20)
    limit = lease * KEEPER_SAFETY
    while True:
        busy, renewed = beacon.holding()
        wait = step
        if busy > 0 and renewed > 0:
            late = time.monotonic() - renewed
            if late >= limit and watch.alive():
                # The slot is still the worker's: the supervisor reuses it only after
                # the worker's exit. The mark tells it who killed the worker.
                beacon.kept()
                kill_frozen(worker, watch, busy, late, lease)
                return EXIT_OK
            wait = min(step, max(0.0, limit - late))
        if watch.gone(wait):
            clean_up(worker)
            return EXIT_OK


class Watch:
    """Is the worker, this process's parent when it started, still there?"""

    def __init__(self, worker: int) -> None:
        self.worker = worker
        self.pidfd: int | None = None
        try:
            self.pidfd = os.pidfd_open(worker)
        except OSError:
            self.pidfd = None  # gone already, or no pidfds: the parent check decides
        if os.getppid() != worker and self.pidfd is not None:
            # It died before the pidfd was opened: the pid may name another process now.
            os.close(self.pidfd)
            self.pidfd = None
        if self.pidfd is not None and self.pidfd < 3:
            # A standard descriptor was closed, and the pidfd took its number: move it
            # above them, where close_inherited keeps it.
            moved = fcntl.fcntl(self.pidfd, fcntl.F_DUPFD_CLOEXEC, 3)
            os.close(self.pidfd)
            self.pidfd = moved
        self._gone = os.getppid() != worker

    def close_inherited(self) -> None:
        """Close every descriptor but stdin, stdout, stderr and the pidfd."""
        keep = self.pidfd if self.pidfd is not None else 2
        os.closerange(3, keep)
        os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))

    def alive(self) -> bool:
        return not self.gone(0.0)

    def gone(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the worker to end; True once it has."""
        if self._gone:
            return True
        if self.pidfd is not None:
            poller = select.poll()
            poller.register(self.pidfd, select.POLLIN)
            with contextlib.suppress(InterruptedError):
                if poller.poll(int(timeout * 1000)):
                    self._gone = True
        else:
            with contextlib.suppress(InterruptedError):
                select.select([], [], [], timeout)
        # Reparented: the worker has exited (a pidfd reports that first).
        self._gone = self._gone or os.getppid() != self.worker
        return self._gone


def kill_frozen(worker: int, watch: Watch, busy: int, late: float, lease: float) -> None:
    """The worker holds jobs on leases it has not renewed for too long and is still
    there: SIGKILL its whole group while its pid surely names it, then say why."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(worker, signal.SIGKILL)
    log.error("worker %d has not renewed its leases for %.1fs (lease %.0fs) and holds %d "
              "job(s): killed its process group so that none of them runs past its lease",
              worker, late, lease, busy)
    watch.gone(KILL_WAIT)
    clean_up(worker)


def clean_up(worker: int) -> None:
    """The worker is gone: SIGKILL what is left of its group until none of it lives (or
    KILL_WAIT passed), then name what was killed."""
    deadline = time.monotonic() + KILL_WAIT
    killed: set[int] = set()
    first = True
    while True:
        left = live_members(worker)
        if not left:
            break
        if first:
            # What a worker that exited by itself killed on its way out is not news.
            killed.update(pid for pid in left if not doomed(pid))
            first = False
        try:
            os.killpg(worker, signal.SIGKILL)
        except ProcessLookupError:
            break
        if time.monotonic() >= deadline:
            log.warning("processes of worker %d's group survive SIGKILL: %s", worker, left)
            break
        with contextlib.suppress(InterruptedError):
            select.select([], [], [], 0.02)
    if killed:
        log.warning("worker %d is gone; killed %d process(es) its jobs left behind: %s",
                    worker, len(killed), sorted(killed))
