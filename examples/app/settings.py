"""Where the example app writes: one folder, EXAMPLE_DATA_DIR (default .pgfleet/example)."""

from __future__ import annotations

import os
from pathlib import Path


def data_dir() -> Path:
    folder = Path(os.environ.get("EXAMPLE_DATA_DIR", ".pgfleet/example"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def outbox() -> Path:
    folder = data_dir() / "outbox"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def reports() -> Path:
    folder = data_dir() / "reports"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def failure_rate() -> float:
    """How often the simulated payment provider answers with an error (0 to 1)."""
    return float(os.environ.get("EXAMPLE_FAILURE_RATE", "0.35"))
