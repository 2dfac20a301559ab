"""What every forked child does first: forget the master's signal set-up, follow the
master's death, name itself for `ps`, and never return into the master's code."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable

from setproctitle import setproctitle

log = logging.getLogger("pgfleet.process")

_PR_SET_PDEATHSIG = 1

# Exit codes a child uses to tell the supervisor why it left.
EXIT_RECYCLE = 64
EXIT_TIMEOUT = 65
EXIT_START_FAILED = 66
EXIT_LEASE_LOST = 67


def follow_parent_death(sig: int = signal.SIGINT) -> None:
    """Ask Linux to send `sig` when the master dies (a quick stop), so children do not
    outlive a SIGKILLed supervisor. The loop's getppid() check backs this up."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def set_title(title: str) -> None:
    setproctitle(title)


def run_child(title: str, body: Callable[[], int]) -> None:
    """Run `body` in a freshly forked child and exit with its code; never returns."""
    code = 70
    try:
        for sig in (signal.SIGHUP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        follow_parent_death()
        set_title(title)
        code = body()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        log.error("%s failed:\n%s", title, traceback.format_exc())
        code = 70
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
