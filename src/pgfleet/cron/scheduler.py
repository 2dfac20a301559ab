"""The scheduler process: cron entries of the config become jobs, once per fire time in total.

Every supervisor runs one scheduler and there is no leader. A fire is one transaction:
insert (schedule, fire time) into pgfleet.schedule_runs with ON CONFLICT DO NOTHING, and
only if that inserted a row, enqueue the job and record its id. The primary key is the
arbiter between hosts; the shared transaction means a crash between the writes leaves
neither, so the fire time is still open for the next pass of any scheduler.

"Now" is always the database's now(); between passes the local wait uses time.monotonic().

Which fire times run. A scheduler that has been watching a schedule continuously (its
previous successful pass is at most CONTINUITY seconds old) fires every fire time that
fell due since that pass, even if the loop was late, so a busy host leaves no gap. A
scheduler that looks for the first time, or after an outage longer than CONTINUITY,
applies the catch-up rule: of the fire times due since the last recorded run only the
LATEST runs, once, and only if it is at most max_delay old; older misses are skipped with
one log line. A schedule that never ran waits for its next fire time.

Which definitions fire. Each pass first publishes this scheduler's config definitions
(pgfleet.publish_schedules) and fires what that returns: for every config name the
definition first published latest among the schedulers seen in the last minute, and every
schedule added at runtime. Hosts that disagree about a name thus fire one definition, the
newest config's; a scheduler whose own definition lost logs an error once.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from pydantic import ValidationError

from pgfleet import metrics
from pgfleet.client.enqueue import DEFAULT_MAX_ATTEMPTS
from pgfleet.config import Config, ScheduleConfig
from pgfleet.core.crontab import fire_times_after, previous_fire_time
from pgfleet.errors import DatabaseUnavailable, PayloadError
from pgfleet.runtime.beacon import Beacon
from pgfleet.runtime.child import BEAT_EVERY
from pgfleet.runtime.db_child import DatabaseChild
from pgfleet.sql import fleet as fleet_store
from pgfleet.sql.db import first_line, scrub
from pgfleet.sql.rows import PublishedSchedule

log = logging.getLogger("pgfleet.cron.scheduler")

# Passes happen at every fire time and at least this often (metrics, other hosts' runs).
REFRESH = 5.0
# A gap between two successful passes longer than this is downtime, not a slow loop.
CONTINUITY = 3 * REFRESH
# Counting the misses skipped by a catch-up stops here, so a long outage of an
# every-second schedule costs a bounded amount of cron arithmetic.
MISS_COUNT_CAP = 1000
_BATCH = 16

FireHook = Callable[[str, datetime], None]


@dataclass(frozen=True)
class Fired:
    """A fire time this scheduler turned into a job."""

    schedule: str
    fire_time: datetime
    job_id: int


class Scheduler(DatabaseChild):
    def __init__(self, config: Config, dsn: str, beacon: Beacon | None = None, *,
                 fire_hook: FireHook | None = None) -> None:
        super().__init__(dsn, beacon)
        self.config = config
        # Called inside each fire transaction between its two writes; tests make it raise
        # to show that a crash there leaves nothing behind.
        self.fire_hook = fire_hook
        # This host's config, every entry (a disabled one is a definition too: a newer
        # config that disables a schedule stops the older hosts' fires).
        self.own: dict[str, dict[str, Any]] = {
            name: s.definition() for name, s in config.schedules.items()
        }
        self.host = socket.gethostname()
        self.holder = f"{self.host}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        # What fires: the published definitions, filled by each pass.
        self.schedules: dict[str, ScheduleConfig] = {
            name: s for name, s in config.schedules.items() if s.enabled
        }
        # The published definition each of this host's disagreeing names was logged for.
        self.disagreed: dict[str, str] = {}
        # Database time of this scheduler's last successful pass over each schedule.
        self.seen: dict[str, datetime] = {}
        self.next_fire: dict[str, datetime] = {}
        # The last error logged per schedule, so a fire that keeps failing logs once.
        self.reported: dict[str, str] = {}

    # ------------------------------------------------------------------------ the loop

    def run(self) -> int:
        """Fire schedules until SIGTERM/SIGINT or the parent dies; returns the exit code."""
        log.info("scheduler started with %d enabled schedule(s)", len(self.schedules))
        for name in self.schedules:
            metrics.schedule_runs.labels(name)  # at 0 from the start, for increase()
        anchor: tuple[datetime, float] | None = None  # (database now, monotonic) of a pass
        last_pass = float("-inf")
        while not self.stopping and not self.parent_gone():
            self.beat()
            # Passes run without any config schedule too: runtime ones may appear.
            wait = self._time_to_next_pass(anchor, last_pass)
            if wait > 0:
                self.wakeup.wait(min(wait, BEAT_EVERY))
                continue
            try:
                anchor = self._pass()
            except (psycopg.Error, DatabaseUnavailable) as exc:
                self.drop_connection()
                delay = self.reconnect.failed()
                self.reconnect.report(log, "scheduler pass failed",
                                      first_line(exc, self.dsn), delay)
                self.pause(delay)
                continue
            if self.reconnect.succeeded():
                log.info("scheduler reconnected to the database")
            last_pass = time.monotonic()
        self.retire()
        self.drop_connection()
        return 0

    def retire(self) -> None:
        """Stop counting as a live scheduler, so a reload's new definitions win at once."""
        if self.conn is None:
            return
        try:
            fleet_store.retire_schedule_holder(self.conn, self.holder)
        except psycopg.Error as exc:
            # Then this scheduler's rows stop counting a minute after its last pass.
            log.warning("scheduler could not retire its schedules: %s",
                        first_line(exc, self.dsn))

    def _time_to_next_pass(self, anchor: tuple[datetime, float] | None,
                           last_pass: float) -> float:
        """Seconds until the earliest fire time by database time, or the next refresh."""
        if anchor is None:
            return 0.0
        refresh = last_pass + REFRESH - time.monotonic()
        if not self.next_fire:
            return refresh
        db_now, at = anchor
        estimated_now = db_now + timedelta(seconds=time.monotonic() - at)
        until_fire = (min(self.next_fire.values()) - estimated_now).total_seconds()
        return min(refresh, until_fire)

    def _pass(self) -> tuple[datetime, float]:
        conn = self.connection()
        now = fleet_store.db_now(conn)
        read_at = time.monotonic()
        self._fire_due(conn, now)
        return now, read_at

    # -------------------------------------------------------------------- one pass

    def tick(self, at: datetime | None = None) -> list[Fired]:
        """One pass over every enabled schedule; returns the fires this call made.

        `at` replaces the database's now() for choosing fire times; only tests of calendar
        edges (a daylight-saving day) pass it, since the server clock cannot be moved."""
        conn = self.connection()
        return self._fire_due(conn, fleet_store.db_now(conn) if at is None else at)

    def _fire_due(self, conn: psycopg.Connection[Any], now: datetime) -> list[Fired]:
        fired: list[Fired] = []
        published = fleet_store.publish_schedules(conn, holder=self.holder, host=self.host,
                                                  definitions=self.own)
        self.schedules = self._firing(published)
        for entry in published:
            if entry.name not in self.schedules:
                # Watched while paused or disabled: resumed, it fires from its next fire
                # time, not a catch-up of the ones it missed meanwhile.
                self.seen[entry.name] = now
        for name in list(self.next_fire):
            if name not in self.schedules:
                del self.next_fire[name]
        last_runs = fleet_store.schedule_last_runs(conn, list(self.schedules))
        for name, schedule in self.schedules.items():
            last = last_runs.get(name)
            try:
                made = self._fire_schedule(conn, name, schedule, now, last)
            except (psycopg.Error, PayloadError) as exc:
                if conn.broken or conn.closed:
                    raise  # the database went away: the pass retries with a new connection
                # A refused job (args over the limits, whose SQLSTATE psycopg counts as an
                # OperationalError; a trigger of the user's) must not stop other schedules;
                # the fire time stays open and is retried next pass.
                self._report(name, f"{type(exc).__name__}: {str(exc).strip()}")
                continue
            fired.extend(made)
            self.seen[name] = now
            self.reported.pop(name, None)
            for f in made:
                last = f.fire_time if last is None else max(last, f.fire_time)
            self._publish(name, schedule, now, last)
        return fired

    def _firing(self, published: list[PublishedSchedule]) -> dict[str, ScheduleConfig]:
        """The published schedules this pass fires: enabled, not paused, valid."""
        firing: dict[str, ScheduleConfig] = {}
        for entry in published:
            self._compare(entry)
            if entry.paused or not entry.definition.get("enabled", True):
                continue
            try:
                schedule = ScheduleConfig.model_validate(entry.definition)
            except ValidationError as exc:
                problem = "; ".join(e["msg"] for e in exc.errors())
                self._report(entry.name, problem,
                             verb="its definition in pgfleet.schedules is refused, so it"
                                  " fires nothing")
                continue
            if entry.name not in self.schedules:
                metrics.schedule_runs.labels(entry.name)  # at 0 from the start
            firing[entry.name] = schedule
        return firing

    def _compare(self, entry: PublishedSchedule) -> None:
        mine = self.own.get(entry.name)
        if mine is None or (entry.source == "config" and entry.definition == mine):
            self.disagreed.pop(entry.name, None)
            return
        shown = json.dumps(entry.definition, sort_keys=True)
        if self.disagreed.get(entry.name) == shown:
            return
        self.disagreed[entry.name] = shown
        if entry.source == "runtime":
            log.error("schedule %s: the name belongs to a schedule added at runtime; this"
                      " host's config entry is ignored and the runtime one fires", entry.name)
        else:
            log.error("schedule %s: this host's config defines it as %s, but a newer config"
                      " published %s; only the published definition fires (deploy the same"
                      " config everywhere)", entry.name, json.dumps(mine, sort_keys=True),
                      shown)

    def _fire_schedule(self, conn: psycopg.Connection[Any], name: str, schedule: ScheduleConfig,
                       now: datetime, last: datetime | None) -> list[Fired]:
        max_delay = timedelta(seconds=schedule.max_delay)
        seen = self.seen.get(name)
        if seen is not None and timedelta(0) <= now - seen <= timedelta(seconds=CONTINUITY):
            due = self._between(schedule, seen, now)
            late = [t for t in due if now - t > max_delay]
            if late:
                log.warning("schedule %s: skipped %d fire time(s) later than max_delay "
                            "(%gs), the last at %s", name, len(late), schedule.max_delay,
                            late[-1].isoformat())
            made = [self.fire(conn, name, schedule, t) for t in due if now - t <= max_delay]
            return [f for f in made if f is not None]
        return self._catch_up(conn, name, schedule, now, last, max_delay)

    def _catch_up(self, conn: psycopg.Connection[Any], name: str, schedule: ScheduleConfig,
                  now: datetime, last: datetime | None, max_delay: timedelta) -> list[Fired]:
        if last is None:
            # A schedule that never ran (new, or renamed) starts with its next fire time:
            # adding a nightly job at 03:30 should not run it at once.
            return []
        latest = previous_fire_time(schedule.cron, schedule.timezone, now)
        since = last
        if latest is None or latest <= since:
            return []
        older = self._count_between(schedule, since, latest)
        if now - latest > max_delay:
            log.warning("schedule %s: skipped %s missed fire time(s), the last at %s, older "
                        "than max_delay (%gs)", name, _count_text(older + 1),
                        latest.isoformat(), schedule.max_delay)
            return []
        if older:
            log.warning("schedule %s: skipped %s missed fire time(s) since %s; running only "
                        "the latest, %s", name, _count_text(older), since.isoformat(),
                        latest.isoformat())
        made = self.fire(conn, name, schedule, latest)
        return [made] if made is not None else []

    def _between(self, schedule: ScheduleConfig, after: datetime,
                 until: datetime) -> list[datetime]:
        """Fire times in (after, until]; callers keep the window short."""
        found: list[datetime] = []
        cursor = after
        while True:
            batch = fire_times_after(schedule.cron, schedule.timezone, cursor, _BATCH)
            found.extend(t for t in batch if t <= until)
            if len(batch) < _BATCH or batch[-1] > until:
                return found
            cursor = batch[-1]

    def _count_between(self, schedule: ScheduleConfig, after: datetime, before: datetime) -> int:
        """How many fire times lie strictly between; at most MISS_COUNT_CAP."""
        times = fire_times_after(schedule.cron, schedule.timezone, after, MISS_COUNT_CAP + 1)
        return min(sum(1 for t in times if t < before), MISS_COUNT_CAP)

    def fire(self, conn: psycopg.Connection[Any], name: str, schedule: ScheduleConfig,
             fire_time: datetime) -> Fired | None:
        """Turn one fire time into one job, unless any scheduler already did; idempotent."""
        with conn.transaction():
            if not fleet_store.insert_schedule_run(conn, schedule=name, fire_time=fire_time):
                return None
            if self.fire_hook is not None:
                self.fire_hook(name, fire_time)
            job_id = fleet_store.enqueue_schedule_run(
                conn, schedule=name, fire_time=fire_time, task=schedule.task,
                args_json=json.dumps(schedule.args), queue=schedule.queue,
                priority=schedule.priority, max_attempts=self._max_attempts(schedule),
            )
        metrics.schedule_runs.labels(name).inc()
        metrics.schedule_last_run.labels(name).set(fire_time.timestamp())
        log.info("schedule %s fired for %s: job %d", name, fire_time.isoformat(), job_id)
        return Fired(name, fire_time, job_id)

    def _max_attempts(self, schedule: ScheduleConfig) -> int:
        queue = self.config.queues.get(schedule.queue)
        # A queue this host does not run takes the default, as an enqueue would.
        return queue.max_attempts if queue is not None else DEFAULT_MAX_ATTEMPTS

    def _publish(self, name: str, schedule: ScheduleConfig, now: datetime,
                 last: datetime | None) -> None:
        if last is not None:
            metrics.schedule_last_run.labels(name).set(last.timestamp())
        upcoming = fire_times_after(schedule.cron, schedule.timezone, now, 1)
        if upcoming:
            self.next_fire[name] = upcoming[0]
            metrics.schedule_next_run.labels(name).set(upcoming[0].timestamp())
        else:
            self.next_fire.pop(name, None)

    def _report(self, name: str, error: str,
                verb: str = "could not enqueue its job (will retry)") -> None:
        if self.reported.get(name) != error:
            self.reported[name] = error
            log.error("schedule %s: %s: %s", name, verb, scrub(error, self.dsn))


def _count_text(count: int) -> str:
    return f"{count}+" if count >= MISS_COUNT_CAP else str(count)
