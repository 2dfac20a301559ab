"""A module that must never be imported by a worker: a job row naming
`tests.faults.trap.spring` is hostile input. Importing it leaves a marker file."""

import os
from pathlib import Path

_marker = os.environ.get("PGFLEET_FAULTS_TRAP")
if _marker:
    Path(_marker).write_text(f"imported by pid {os.getpid()}\n")


def spring(**_: object) -> None:
    if _marker:
        Path(_marker).write_text(f"called in pid {os.getpid()}\n")
