"""The worker's self-pipe never loses a wake-up, whichever moment another thread (or a
signal handler) pokes it at. The race that lost them: a poke landing while `wait` drained
the pipe. It is provoked here by poking from inside the drain."""

from __future__ import annotations

import select

from pgfleet.runtime.child import Wakeup


class PokedWhileDraining(Wakeup):
    """Pokes once, as another thread would, just as the waiter starts draining."""

    def __init__(self) -> None:
        super().__init__()
        self.poke_in_drain = True

    def _drain(self) -> None:
        if self.poke_in_drain:
            self.poke_in_drain = False
            self.poke()
        super()._drain()


def readable(wakeup: Wakeup) -> bool:
    return bool(select.select([wakeup.read_fd], [], [], 0)[0])


def test_a_poke_after_a_wait_that_raced_a_poke_wakes_the_next_wait() -> None:
    wakeup = PokedWhileDraining()
    try:
        wakeup.poke()
        wakeup.wait(0)  # returns at once; a second poke lands during its drain
        wakeup.poke()   # after the wait returned: the next wait must not sleep
        assert readable(wakeup)
    finally:
        wakeup.close()


def test_a_poke_between_waits_is_never_swallowed_by_the_clear() -> None:
    wakeup = PokedWhileDraining()
    wakeup.poke_in_drain = False
    try:
        for _ in range(3):
            assert not readable(wakeup)
            wakeup.poke()
            assert readable(wakeup)
            wakeup.wait(0)
    finally:
        wakeup.close()
