"""The base every child process runs on: the worker, scheduler, maintenance and exporter.

Signal handlers here only set a flag and write one byte to a self-pipe. They never take a
lock: a handler runs on the main thread between two bytecodes, possibly while that thread
already holds the lock it would wait for (threading.Event.set() inside Event.wait() can
deadlock). The main loop waits on the pipe with select(), so a signal, a finished job or
a notification from another thread ends its wait at once.

The base also owns what every child needs, so it exists once: the heartbeat (which keeps
beating while the child waits for the database), the reconnect backoff with jitter, the
watch on the parent, and the top-level guard.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import random
import select
import signal
import threading
import time
from collections.abc import Callable, Iterator

from setproctitle import setproctitle

from pgfleet.runtime import logs
from pgfleet.runtime.beacon import Beacon
from pgfleet.runtime.exit_codes import EXIT_CRASHED, EXIT_PARENT_GONE
from pgfleet.runtime.process_groups import kill_job_processes, kill_rest_of_group

log = logging.getLogger("pgfleet.runtime.child")

# The arbiter counts a child stale when its beacon stops; no wait is longer than this.
BEAT_EVERY = 0.5
# How long a child whose parent died may take to stop by itself before it is ended.
PARENT_GONE_GRACE = 10.0
RECONNECT_FIRST = 0.1
RECONNECT_MAX = 10.0
# Distinct errors of one run of failures that Reconnect.report logs at WARNING.
MAX_REPORTED_ERRORS = 3

_PR_SET_PDEATHSIG = 1


class Wakeup:
    """A self-pipe. Writing never blocks and takes no lock, so signal handlers and other
    threads may poke it; the main loop waits on the read end."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        os.set_blocking(self.write_fd, False)
        # A byte is already waiting: pokers skip the write (a plain flag, no lock).
        self.pending = False

    def poke(self) -> None:
        if self.pending:
            return
        self.pending = True
        with contextlib.suppress(OSError):  # full (a byte waits anyway) or closed
            os.write(self.write_fd, b"\0")

    def wait(self, timeout: float, *others: int) -> list[int]:
        """Wait until poked, one of `others` is readable, or `timeout`; returns the ready
        descriptors among `others`. A poke made before this returns is seen by the
        caller's next look at its state; one made after makes the next wait return."""
        try:
            ready, _, _ = select.select([self.read_fd, *others], [], [], max(0.0, timeout))
        except InterruptedError:
            ready = []
        # Drain first, then clear: a poke between the two skips its write, but it came
        # before this returns, so the caller sees its state. The other order loses
        # wake-ups: a poke after the clear writes a byte the drain then swallows, and
        # `pending` stays set with an empty pipe, so every later poke skips its write and
        # each wait sleeps its whole timeout.
        self._drain()
        self.pending = False
        return [fd for fd in ready if fd != self.read_fd]

    def _drain(self) -> None:
        with contextlib.suppress(OSError):
            while os.read(self.read_fd, 4096):
                pass

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


class Reconnect:
    """Delays between attempts to reach the database: doubling up to RECONNECT_MAX, each
    drawn from the upper half of its range, so a fleet that lost the server together
    does not knock on it together."""

    def __init__(self) -> None:
        self.failures = 0
        self.not_before = 0.0
        self.reported: set[str] = set()  # the errors of this run logged at WARNING
        self.last_error: str | None = None  # the latest error of this run of failures

    def failed(self) -> float:
        """Record a failure; returns the delay before the next attempt."""
        self.failures += 1
        ceiling = min(RECONNECT_MAX, RECONNECT_FIRST * 2 ** min(self.failures - 1, 10))
        delay = random.uniform(ceiling / 2, ceiling)
        self.not_before = time.monotonic() + delay
        return delay

    def succeeded(self) -> bool:
        """Record a success; True if it ended a run of failures."""
        recovered = self.failures > 0
        self.failures = 0
        self.not_before = 0.0
        self.reported.clear()
        self.last_error = None
        return recovered

    def due(self, now: float) -> bool:
        return now >= self.not_before

    def report(self, logger: logging.Logger, what: str, error: str, delay: float) -> None:
        """A failed attempt, once `failed()` counted it: each error the run has not seen
        yet at WARNING (a few at most), repeats at DEBUG, so an outage is a line or two per
        process, not one per retry, and a change of cause still shows (a lost connection,
        then a rotated password). `error`: one line, secrets scrubbed."""
        self.last_error = error
        new = error not in self.reported and len(self.reported) < MAX_REPORTED_ERRORS
        if new:
            self.reported.add(error)
        level = logging.WARNING if new else logging.DEBUG
        logger.log(level, "%s (retrying in %.1fs): %s", what, delay, error)


class ChildProcess:
    """Lifecycle shared by every child. Subclasses run their own loop, calling `beat()`
    each pass and `pause()` or `wakeup.wait()` to wait."""

    def __init__(self, beacon: Beacon | None = None) -> None:
        self.beacon = beacon
        self.wakeup = Wakeup()
        self.reconnect = Reconnect()
        self.stop_mode: str | None = None  # None, "graceful" or "quick"
        self.stop_requested_at = 0.0
        self.parent = os.getppid()
        self.busy = 0  # what the beacon reports: jobs running

    # ---- stop requests ---------------------------------------------------------------

    def request_stop(self, mode: str = "graceful") -> None:
        """Record the wish to stop and wake the loop. Safe in a signal handler: it only
        assigns attributes and writes one byte."""
        if self.stop_mode == "graceful" and mode == "graceful":
            mode = "quick"  # a second TERM escalates
        if self.stop_mode != "quick":
            self.stop_mode = mode
            self.stop_requested_at = time.monotonic()
        self.wakeup.poke()

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.request_stop("graceful" if signum == signal.SIGTERM else "quick")

    def install_signal_handlers(self) -> None:
        """TERM stops gracefully (twice: quickly), INT and QUIT quickly; and the parent's
        death is followed whatever the handlers do. Call from the main thread. A stop
        that came while the child was starting (run_child kept it) is acted on now."""
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._on_signal)
        while EARLY_STOPS:
            self._on_signal(EARLY_STOPS.pop(0), None)
        watch_parent(self.parent, self.wakeup)

    @property
    def stopping(self) -> bool:
        return self.stop_mode is not None

    def parent_gone(self) -> bool:
        return os.getppid() != self.parent

    # ---- heartbeat -------------------------------------------------------------------

    def beat(self) -> None:
        if self.beacon is not None:
            self.beacon.beat(self.busy)

    def pause(self, seconds: float) -> bool:
        """Wait up to `seconds`, beating, until stopped or the parent is gone; True if the
        wait ran its course."""
        deadline = time.monotonic() + seconds
        while not self.stopping and not self.parent_gone():
            self.beat()
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            self.wakeup.wait(min(left, BEAT_EVERY))
        return False

    @contextlib.contextmanager
    def beating(self) -> Iterator[None]:
        """Keep the beacon beating from a helper thread while the main thread is blocked
        in a bounded call (a connect with its timeout): a child waiting for the database
        is alive, not frozen."""
        if self.beacon is None:
            yield
            return
        done = threading.Event()  # set by the main thread, never by a signal handler

        def beat_until_done() -> None:
            while not done.wait(BEAT_EVERY):
                self.beat()

        helper = threading.Thread(target=beat_until_done, name="pgfleet-beat", daemon=True)
        helper.start()
        try:
            yield
        finally:
            done.set()
            helper.join()


def watch_parent(parent: int, wakeup: Wakeup, grace: float = PARENT_GONE_GRACE) -> None:
    """A daemon thread that wakes the loop when the parent is gone and ends the process
    if it has not stopped `grace` seconds later. It relies on no handler and no lock of
    the main thread, so a stuck main thread cannot keep an orphan alive."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(BEAT_EVERY)
        wakeup.poke()
        time.sleep(grace)
        log.error("the supervisor is gone and this process did not stop within %.0fs; "
                  "exiting", grace)
        exit_now(EXIT_PARENT_GONE)

    threading.Thread(target=watch, name="pgfleet-parent-watch", daemon=True).start()


def follow_parent_death(sig: int = signal.SIGINT) -> None:
    """Ask Linux to send `sig` when the supervisor dies (a quick stop); the loop's
    getppid() check and watch_parent() back this up."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def exit_now(code: int, drain: float = 0.2) -> None:
    """End this process at once, from any thread: the processes its jobs started (its
    threads' children in its group, and the rest of its group when it leads one) go
    first, so none outlives it. The log lines waiting get a moment to be written; the
    std streams are not flushed, since a reader that stopped would block the exit."""
    kill_job_processes()
    kill_rest_of_group()
    logs.drain(drain)
    os._exit(code)


def set_title(title: str) -> None:
    setproctitle(title)


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)
# Stop signals a forked child received before its handlers were installed.
EARLY_STOPS: list[int] = []


def keep_stops(into: list[int]) -> None:
    """Until the real handlers are in place, a stop signal is noted in `into` for them
    to act on, not left to the default action or to a handler inherited over a fork."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda signum, _frame: into.append(signum))


def fork_keeping_stops() -> int:
    """os.fork() with the stop signals held from before the fork until the child keeps
    them (keep_stops): a stop that reaches the new child before that is kept for it, not
    run by the parent's inherited handler, which would lose it (the worker would then
    claim jobs until the stop's deadline SIGKILLs it)."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    pid = os.fork()
    if pid == 0:
        keep_stops(EARLY_STOPS)
        # Not the parent's wake-up pipe, which the child closes next: a signal would then
        # make Python print "Exception ignored ... Bad file descriptor".
        signal.set_wakeup_fd(-1)
    signal.pthread_sigmask(signal.SIG_SETMASK, held)
    return pid


def run_child(title: str, body: Callable[[], int]) -> None:
    """Run `body` in a freshly forked child and exit with its code; never returns. The
    one top-level guard: an unexpected exception is logged once, with its traceback."""
    code = EXIT_CRASHED
    try:
        for sig in (signal.SIGHUP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        # Until the child installs its own handlers (after importing the task modules,
        # which may take seconds), a stop is kept for it: the supervisor's inherited
        # handler would record it where nobody looks, and the worker would claim jobs
        # after the stop.
        keep_stops(EARLY_STOPS)
        signal.set_wakeup_fd(-1)
        follow_parent_death()
        set_title(title)
        code = body()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        log.exception("%s failed", title)
        code = EXIT_CRASHED
    finally:
        exit_now(code, drain=logs.EXIT_DRAIN)
