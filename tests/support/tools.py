"""Find the executables the tests run: first beside the running interpreter (its venv's
bin/, where `pip install` puts console scripts such as `pgfleet` and `hadolint`, whether
or not that venv is activated), then on PATH."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def find_tool(name: str) -> str | None:
    """The path of `name` in the interpreter's own bin/, else on PATH, else None."""
    here = Path(sys.executable).parent / name
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which(name)
