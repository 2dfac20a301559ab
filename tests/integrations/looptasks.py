"""Async tasks that show which event loop ran them: each records the serial number of
its loop (in the order loops were first seen by this process) in the audit table."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pgfleet
from tests.support.jobtasks import audit

LOOPS: list[asyncio.AbstractEventLoop] = []  # strong references: ids stay unique
SHARED: dict[str, asyncio.Event] = {}


def _record_loop() -> None:
    loop = asyncio.get_running_loop()
    if loop not in LOOPS:
        LOOPS.append(loop)
    audit(f"loop:{LOOPS.index(loop)}")


@pgfleet.task(name="loop.bind_event")
async def bind_event() -> None:
    """The first run makes an Event and binds it to its loop (a wait that times out); a
    later run waits on the same Event, which raises RuntimeError on any other loop."""
    _record_loop()
    event = SHARED.setdefault("event", asyncio.Event())
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), 0.01)
    audit("bound")


@pgfleet.task(name="loop.await_forever", timeout=0.5)
async def await_forever() -> None:
    _record_loop()
    await asyncio.sleep(3600)


@pgfleet.task(name="loop.block_loop", timeout=0.5)
async def block_loop() -> None:
    """Never yields to its loop: only an interrupt from outside can end it."""
    _record_loop()
    end = time.monotonic() + 3600
    while time.monotonic() < end:
        pass


@pgfleet.task(name="loop.which")
async def which() -> None:
    _record_loop()
