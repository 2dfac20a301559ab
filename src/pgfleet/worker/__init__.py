"""The worker of one queue: a loop of fixed phases (loop.py) over an executor of job
threads (executor.py), a completer of outcomes (completer.py), leases (leases.py) and
settings built from the configuration (settings.py)."""

from __future__ import annotations

from pgfleet.worker.events import WorkerEvents
from pgfleet.worker.loop import Worker
from pgfleet.worker.settings import WorkerSettings, build_settings

__all__ = ["Worker", "WorkerEvents", "WorkerSettings", "build_settings"]
