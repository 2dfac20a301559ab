"""What each kind of forked child runs. Imported by the arbiter, but the heavy imports
(the worker, task modules, the database driver's connections) happen only in the child."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from pgfleet.config import Config
from pgfleet.errors import PgfleetError
from pgfleet.runtime.beacon import Beacon
from pgfleet.runtime.failed_queues import FailedQueues

log = logging.getLogger("pgfleet.children")


class Runnable(Protocol):
    """What every child is (pgfleet.runtime.child.ChildProcess); named here so the arbiter's
    module does not import the child base's dependencies."""

    def install_signal_handlers(self) -> None: ...

    def run(self) -> int: ...


@dataclass(frozen=True)
class Slot:
    """One place in the desired set of children: (kind, queue, index)."""

    kind: str
    queue: str | None = None
    index: int = 0


@dataclass(frozen=True)
class Identity:
    worker_id: str
    supervisor_id: str
    supervisor_pid: int
    title: str
    beacon: Beacon
    rescue_fd: int
    # A worker: publish its queue's and tasks' enqueue defaults (pgfleet.worker.defaults).
    publish_defaults: bool = False
    # Maintenance: the queues the arbiter gave up on, to record in the database.
    failed_queues: FailedQueues | None = None


def desired_slots(config: Config, extra_processes: int) -> list[Slot]:
    """Every child the config asks for; TTIN/TTOU move each queue by `extra_processes`."""
    # A scheduler runs even without schedules in the file: it fires the ones added at
    # runtime (pgfleet cron add).
    slots = [Slot("maintenance"), Slot("scheduler")]
    if config.metrics.enabled:
        slots.append(Slot("exporter"))
    if config.web.enabled:
        slots.append(Slot("web"))
    for name in config.queues:
        count = worker_count(config, name, extra_processes)
        slots.extend(Slot("worker", name, i) for i in range(count))
    return slots


def worker_count(config: Config, queue: str | None, extra_processes: int) -> int:
    """Workers of `queue` wanted now (1 for a helper or a queue no longer configured)."""
    if queue is None or queue not in config.queues:
        return 1
    return max(1, config.queues[queue].processes + extra_processes)


def label(slot: Slot) -> str:
    """A child's name in log lines: `worker emails#2`, `maintenance`."""
    return f"worker {slot.queue}#{slot.index + 1}" if slot.kind == "worker" else slot.kind


def describe(slot: Slot, count: int) -> str:
    """A child's process title: `pgfleet worker emails 2/4`."""
    if slot.kind == "worker":
        return f"pgfleet worker {slot.queue} {slot.index + 1}/{count}"
    return f"pgfleet {slot.kind}"


def run_slot(config: Config, dsn: str, slot: Slot, me: Identity) -> int:
    """Build the child of `slot`, give it its signal handlers and run it."""
    from pgfleet.runtime import keeper
    from pgfleet.runtime.exit_codes import EXIT_START_FAILED
    from pgfleet.runtime.process_groups import lead_own_group, leads_own_group

    if slot.kind == "worker":
        # Before any task code: every process the worker's jobs start joins this group,
        # which the supervisor kills when the worker dies.
        lead_own_group()
        if leads_own_group():
            # Before any connection, thread or task code: the keeper bounds the group
            # when the supervisor is frozen and the worker dead or frozen.
            keeper.start(me.beacon, config.supervisor.lease)
    child = build(config, dsn, slot, me)
    if child is None:
        return EXIT_START_FAILED
    child.install_signal_handlers()
    return child.run()


def build(config: Config, dsn: str, slot: Slot, me: Identity) -> Runnable | None:
    if slot.kind == "worker":
        return build_worker(config, dsn, slot, me)
    if slot.kind == "maintenance":
        from pgfleet.maintenance.process import Maintenance

        return Maintenance(
            config, dsn, supervisor_id=me.supervisor_id, supervisor_pid=me.supervisor_pid,
            rescue_fd=me.rescue_fd, beacon=me.beacon, own_id=me.worker_id,
            failed_queues=me.failed_queues,
        )
    if slot.kind == "scheduler":
        from pgfleet.cron.scheduler import Scheduler

        return Scheduler(config, dsn, beacon=me.beacon)
    if slot.kind == "exporter":
        from pgfleet.exporter.process import Exporter

        return Exporter(config, dsn, beacon=me.beacon, supervisor_pid=me.supervisor_pid)
    if slot.kind == "web":
        return build_web(config, dsn, me)
    raise ValueError(f"unknown child kind {slot.kind!r}")


def build_web(config: Config, dsn: str, me: Identity) -> Runnable | None:
    """The web UI of the `web:` section; None (logged) without the web extra or with a
    setting that cannot work (a secret file gone since the start, say)."""
    try:
        from pgfleet.web.configured import from_config
        from pgfleet.web.process import WebChild

        settings = from_config(config, dsn)
    except ImportError as exc:
        log.error("the web UI needs its extra: pip install 'pgfleet[web]' (%s is missing)",
                  exc.name)
        return None
    except PgfleetError as exc:
        log.error("web UI cannot start: %s", exc)
        return None
    return WebChild(settings, beacon=me.beacon)


def build_worker(config: Config, dsn: str, slot: Slot, me: Identity) -> Runnable | None:
    """A worker of the slot's queue; None (logged) if its task modules do not import."""
    from pgfleet import middleware
    from pgfleet.runtime.child import set_title
    from pgfleet.tasks import load_registry
    from pgfleet.worker import Worker, build_settings
    from pgfleet.worker.defaults import for_worker

    assert slot.queue is not None
    try:
        registry = load_registry(config.task_modules(slot.queue))
    except Exception as exc:
        log.error("worker of queue %r cannot import its tasks: %s: %s", slot.queue,
                  type(exc).__name__, exc)
        return None
    try:
        middleware.load(config.middleware)
    except PgfleetError as exc:
        log.error("worker of queue %r cannot load its middleware: %s", slot.queue, exc)
        return None
    return Worker(build_settings(
        config, slot.queue, dsn=dsn, registry=registry, worker_id=me.worker_id,
        supervisor_id=me.supervisor_id,
        title=lambda status: set_title(f"{describe(slot, me.beacon.peers())}: {status}"),
        beacon=me.beacon,
        defaults=for_worker(config, slot.queue, registry) if me.publish_defaults else None,
    ))
