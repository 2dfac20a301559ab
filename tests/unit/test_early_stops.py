"""A stop signal that reaches a freshly forked child before it has handlers of its own is
kept for it (outside trial T11: a TERM right after `pgfleet run` started ran the
supervisor's inherited handler in a new worker, which then claimed jobs until the stop
deadline SIGKILLed it; an innocent job with max_attempts 1 ended dead)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from pgfleet.runtime import child


@pytest.fixture
def parent_handler() -> Iterator[list[int]]:
    """A handler like the supervisor's, which a child inherits over the fork."""
    seen: list[int] = []
    before = signal.signal(signal.SIGTERM, lambda signum, _frame: seen.append(signum))
    try:
        yield seen
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_stop_sent_while_the_child_is_still_forking_is_kept_for_it(
        parent_handler: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    ready_read, ready_write = os.pipe()
    keep = child.keep_stops

    def slow_keep(into: list[int], *args: Any) -> None:
        # The child is slow to get its handlers in place: the parent stops it meanwhile.
        os.write(ready_write, b"x")
        time.sleep(0.3)  # the window the parent's TERM must land in
        keep(into, *args)

    monkeypatch.setattr(child, "keep_stops", slow_keep)
    pid = child.fork_keeping_stops()
    if pid == 0:
        # A signal held back is delivered once the mask is restored: wait for it (a
        # child that lost it exits 10 after the bound).
        deadline = time.monotonic() + 10
        while not child.EARLY_STOPS and time.monotonic() < deadline:
            time.sleep(0.005)
        os._exit(10 + len(child.EARLY_STOPS))
    os.read(ready_read, 1)
    os.kill(pid, signal.SIGTERM)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 11  # the child kept the one TERM
    assert parent_handler == []  # and the parent's own handler saw nothing
    # The parent's stop signals are not left blocked after the fork.
    assert not set(child.STOP_SIGNALS) & signal.pthread_sigmask(signal.SIG_BLOCK, [])


def test_a_child_does_not_inherit_the_parents_wake_up_pipe() -> None:
    """Outside trial T12: the supervisor's signal wake-up fd stayed set in a new child,
    which closes that pipe; a signal meanwhile made Python print "Exception ignored ...
    Bad file descriptor" into the log."""
    _, write_end = os.pipe()
    os.set_blocking(write_end, False)
    before = signal.set_wakeup_fd(write_end)
    try:
        pid = child.fork_keeping_stops()
        if pid == 0:
            os._exit(0 if signal.set_wakeup_fd(-1) == -1 else 1)
        _, status = os.waitpid(pid, 0)
    finally:
        signal.set_wakeup_fd(before)
    assert os.waitstatus_to_exitcode(status) == 0
