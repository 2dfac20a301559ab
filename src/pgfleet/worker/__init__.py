"""The worker of one queue: a loop of fixed phases (loop.py) over an executor of job
threads (executor.py), a completer of outcomes (completer.py), leases (leases.py) and
settings built from the configuration (settings.py)."""

from __future__ import annotations

from typing import Any

from pgfleet.tasks import Registry
from pgfleet.worker import settings as _settings
from pgfleet.worker.events import WorkerEvents
from pgfleet.worker.loop import Worker
from pgfleet.worker.settings import build_settings

__all__ = ["Worker", "WorkerEvents", "WorkerSettings", "build_settings"]


def WorkerSettings(*, dsn: str, queue: str, registry: Registry,
                   **overrides: Any) -> _settings.WorkerSettings:
    """Compatibility for `pgfleet worker` until it calls build_settings itself: the
    config models' defaults, with the given fields replaced. The settings type is
    pgfleet.worker.settings.WorkerSettings."""
    return build_settings(None, queue, dsn=dsn, registry=registry, **overrides)
