"""The worker's self-pipe (pgfleet.child.Wakeup) must not lose a poke: a lost one left the
main loop asleep until its wait timed out while finished jobs waited for their commit."""

from __future__ import annotations

import select

from pgfleet.child import Wakeup


class PokedDuringDrain(Wakeup):
    """An executor thread finishing a job while the waiter drains the pipe."""

    def _drain(self) -> None:
        self.poke()
        super()._drain()


def byte_waiting(wakeup: Wakeup) -> bool:
    ready, _, _ = select.select([wakeup.read_fd], [], [], 0)
    return bool(ready)


def test_a_poke_after_the_wait_wakes_the_next_wait() -> None:
    wakeup = Wakeup()
    try:
        wakeup.poke()
        wakeup.wait(0)
        assert not byte_waiting(wakeup)
        wakeup.poke()
        assert byte_waiting(wakeup)
    finally:
        wakeup.close()


def test_a_poke_racing_the_drain_does_not_swallow_later_pokes() -> None:
    wakeup = PokedDuringDrain()
    try:
        wakeup.poke()
        wakeup.wait(0)
        # The racing poke's work is the caller's to find now; a later poke must write.
        wakeup.poke()
        assert byte_waiting(wakeup)
    finally:
        wakeup.close()
