"""Signals that reach the `pgfleet` command before it has handlers of its own.

Importing pgfleet, its driver, pydantic and click takes about a second on an idle host
and several on a loaded one. Under the default actions a TERM or a HUP in that window
would end `pgfleet run` with 143 or 129 and nothing in its log (so a `reload` right after
a deploy's start would kill the supervisor), and a TTIN or TTOU would suspend it.
The package's __init__ calls keep() first, when this process is the pgfleet command, so
such a signal is noted instead. The supervisor then takes what was noted (take) and
acts on it as if it had come a moment later; every other command gets the default
actions back at once and the noted signals delivered again (release), so a Ctrl-C or a
TERM ends it as usual.

A top-level module that imports nothing of pgfleet and nothing slow.
"""

from __future__ import annotations

import signal

# What is kept: the stops (as pgfleet.runtime.child.STOP_SIGNALS), a reload, and one worker
# more or fewer (TTIN, TTOU: their default action suspends the process, and a suspended
# supervisor would not act on the TERM of a `systemctl stop`).
KEPT_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP,
                signal.SIGTTIN, signal.SIGTTOU)

_kept: list[int] = []
_state = "idle"  # "keeping" once keep() ran; "taken" or "released" after


def _note(signum: int, _frame: object) -> None:
    _kept.append(signum)


def keep() -> None:
    """Note the signals of KEPT_SIGNALS instead of acting on them, until take or release."""
    global _state
    for sig in KEPT_SIGNALS:
        signal.signal(sig, _note)
    _state = "keeping"


def take() -> list[int]:
    """For a command that installs its own handlers next: the signals noted so far, in
    order, in the list later ones are appended to until it replaces the handlers."""
    global _state
    _state = "taken"
    return _kept


def release() -> None:
    """For every other command: the default actions back, and each signal noted until now
    delivered again, so it acts as it would have. Nothing once taken or released."""
    global _state
    if _state != "keeping":
        return
    _state = "released"
    for sig in KEPT_SIGNALS:
        signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT
                      else signal.SIG_DFL)
    while _kept:
        signal.raise_signal(_kept.pop(0))
