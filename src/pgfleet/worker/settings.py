"""What one worker runs with, built from the configuration in one place.

WorkerSettings has no defaults of its own: every value comes from the config models
(whose defaults are the only ones), so a supervised worker, `pgfleet worker` and a test
cannot disagree about what "the default" is."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pgfleet.config import Config, QueueConfig
from pgfleet.core.backoff import Backoff
from pgfleet.core.flow import FlowLimits
from pgfleet.core.payload import MAX_ARGS_BYTES
from pgfleet.runtime.beacon import Beacon
from pgfleet.tasks import Registry
from pgfleet.worker.defaults import Defaults


@dataclass
class WorkerSettings:
    dsn: str
    queue: str
    registry: Registry
    threads: int
    prefetch: int | None  # None: auto (pgfleet.worker.prefetch)
    poll_interval: float
    notify: bool
    lease: float
    heartbeat_interval: float
    timeout: float
    kill_grace: float
    shutdown_timeout: float
    backoff: Backoff
    max_jobs: int | None
    max_memory: int | None
    args_limit: int
    # The queue's flow control: the limited claim runs when set (docs/flow-control.md).
    flow: FlowLimits | None
    # Who this worker is; a worker without a supervisor names itself.
    worker_id: str
    supervisor_id: str | None
    title: Callable[[str], None] | None
    beacon: Beacon | None
    # Enqueue defaults to publish once connected (pgfleet.worker.defaults); None: publish nothing.
    defaults: Defaults | None


def build_settings(config: Config | None, queue_name: str, *, dsn: str, registry: Registry,
                   worker_id: str = "", supervisor_id: str | None = None,
                   title: Callable[[str], None] | None = None, beacon: Beacon | None = None,
                   defaults: Defaults | None = None, **overrides: Any) -> WorkerSettings:
    """The settings of a worker of `queue_name`; a queue the config does not name runs
    with the queue defaults. `overrides` replace single fields (command-line options,
    tests) and are checked against the field names. Without a config (a worker run
    without a file) every value is the config models' default."""
    if config is None:
        config = Config(queues={queue_name: QueueConfig()})
    queue = config.queues.get(queue_name) or QueueConfig()
    own_poll = queue.poll_interval
    settings = WorkerSettings(
        dsn=dsn, queue=queue_name, registry=registry, threads=queue.threads,
        prefetch=queue.prefetch if isinstance(queue.prefetch, int) else None,
        poll_interval=config.poll_interval if own_poll is None else own_poll,
        notify=config.notify, lease=config.supervisor.lease,
        heartbeat_interval=config.supervisor.heartbeat_interval, timeout=queue.timeout,
        kill_grace=queue.kill_grace, shutdown_timeout=config.supervisor.shutdown_timeout,
        backoff=queue.backoff.to_backoff(),
        max_jobs=queue.max_jobs, max_memory=queue.max_memory, args_limit=MAX_ARGS_BYTES,
        flow=queue.flow_limits(),
        worker_id=worker_id, supervisor_id=supervisor_id, title=title, beacon=beacon,
        defaults=defaults,
    )
    return dataclasses.replace(settings, **overrides)
