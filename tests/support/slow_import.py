"""A task module that takes seconds to import when PGFLEET_TEST_SLOW_IMPORT names a file:
it writes that file first, so a test knows `pgfleet run` is inside its start-up checks
(which import the task modules) and can signal it there."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pgfleet

_marker = os.environ.get("PGFLEET_TEST_SLOW_IMPORT")
if _marker:
    Path(_marker).write_text(str(os.getpid()))
    time.sleep(3.0)


@pgfleet.task(name="slow_import.noop")
def noop() -> None:
    """Nothing: the module's import is what takes time."""
