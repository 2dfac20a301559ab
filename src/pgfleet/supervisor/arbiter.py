"""The arbiter: one thread, no database connection, no task code.

It forks the children the configuration asks for (per queue `processes` workers, one
maintenance process, one scheduler, one exporter, one web server), keeps exactly that set
alive, and acts on signals. Signal handlers only record the signal; the loop below does the
work, so no handler ever runs in the middle of a fork or a waitpid.
"""

from __future__ import annotations

import logging
import os
import random
import select
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import multiprocess

from pgfleet import metrics
from pgfleet.config import Config, ConfigError, load_config
from pgfleet.runtime.beacon import BeaconBoard
from pgfleet.runtime.child import STOP_SIGNALS, fork_keeping_stops, run_child, set_title
from pgfleet.runtime.exit_codes import (
    EXIT_CRASHED,
    EXIT_OK,
    EXIT_RESCUE_FAILED,
    child_exit_reason,
    signal_name,
)
from pgfleet.runtime.process_groups import become_subreaper
from pgfleet.runtime.rescue_pipe import RescuePipe
from pgfleet.supervisor.children import (
    Identity,
    Slot,
    describe,
    desired_slots,
    label,
    run_slot,
    worker_count,
)
from pgfleet.supervisor.draining import Draining
from pgfleet.supervisor.restarts import Restarts
from pgfleet.supervisor.stopping import (
    FINAL_RESCUES,
    STOP_MARGIN,
    next_stop,
    signal_child as _kill,
)

log = logging.getLogger("pgfleet.supervisor")

BOARD_SLOTS = 4096
LOOP_TICK = 0.2

SINGLETONS = ("maintenance", "scheduler", "exporter", "web")


@dataclass
class Child:
    pid: int
    slot: Slot
    board_index: int
    started: float
    worker_id: str
    retiring: bool = False
    killed_for: str | None = None
    stale_seen: int = 0
    # It exited on purpose, unable to renew its leases: its jobs are no crash's.
    gave_up: bool = False


class Supervisor:
    def __init__(self, config_path: str | Path, config: Config, dsn: str,
                 adjust: Callable[[Config], Config] | None = None,
                 signals: list[int] | None = None) -> None:
        self.config_path = str(config_path)
        # Applied to every config read again on HUP, as it was to the first one.
        self.adjust = adjust
        self.config = config
        self.dsn = dsn
        self.host = socket.gethostname()
        self.token = f"{random.getrandbits(32):08x}"
        self.supervisor_id = f"{self.host}:{os.getpid()}:{self.token}"
        self.children: dict[int, Child] = {}
        self.restarts = Restarts()
        # Queues whose next worker publishes the enqueue defaults (pgfleet.worker.defaults).
        self.unpublished = set(config.queues)
        self.extra_processes = 0
        # Signals not yet handled: those that came before run() (pgfleet.cli.run) first.
        self.signals: list[int] = signals if signals is not None else []
        self.stopping: str | None = None
        self.exit_code = EXIT_OK  # EXIT_RESCUE_FAILED: a stop left jobs to their lease
        # A worker's jobs were handed to maintenance and no maintenance process has
        # confirmed them by a clean exit at the stop's end (maintenance_exited).
        self.rescue_asked = False
        self.final_rescues = 0  # maintenance processes started by a stop for its rescue
        self.stop_deadline = 0.0
        self.board = BeaconBoard(BOARD_SLOTS)
        self.free_slots = list(range(BOARD_SLOTS - 1, -1, -1))
        self.rescue = RescuePipe(keep_for=config.supervisor.lease)
        self.draining = Draining[tuple[Child, str, list[int]]](lambda d: self._request_rescue(*d))
        self.wake_read, self.wake_write = os.pipe()
        os.set_blocking(self.wake_read, False)
        os.set_blocking(self.wake_write, False)

    # ---- signals ---------------------------------------------------------------------

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.signals.append(signum)

    def install_signal_handlers(self) -> None:
        signal.set_wakeup_fd(self.wake_write)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP,
                    signal.SIGTTIN, signal.SIGTTOU, signal.SIGCHLD):
            signal.signal(sig, self._on_signal)

    def _handle_signals(self) -> None:
        while self.signals:
            sig = self.signals.pop(0)
            if sig == signal.SIGCHLD:
                continue
            name = signal_name(sig)
            if sig in STOP_SIGNALS:
                self.begin_stop(next_stop(self.stopping, sig), name)
            elif sig == signal.SIGHUP and not self.stopping:
                self._reload()
            elif sig in (signal.SIGTTIN, signal.SIGTTOU) and not self.stopping:
                self.extra_processes = scaled(self.extra_processes, sig, self.config)

    # ---- main loop -------------------------------------------------------------------

    def run(self) -> int:
        set_title(f"pgfleet supervisor -c {self.config_path}")
        self.install_signal_handlers()
        become_subreaper()
        metrics.zero_supervisor_counters(list(self.config.queues))
        log.info("supervisor %s starting: %d queue(s), pid %d", self.supervisor_id,
                 len(self.config.queues), os.getpid())
        try:
            self._loop()
            if self.rescue_asked:  # no maintenance process confirmed the give-backs
                self.exit_code = EXIT_RESCUE_FAILED
        except BaseException:
            # The top-level guard: whatever broke, the children must not be orphaned
            # (they would keep running jobs nobody supervises).
            log.exception("supervisor failed; stopping its children")
            self._stop_children_now()
            return EXIT_CRASHED
        if self.exit_code == EXIT_RESCUE_FAILED:
            log.warning("supervisor stopped; the jobs of some stopped workers could not be "
                        "given back and wait for their lease")
        else:
            log.info("supervisor stopped")
        return self.exit_code

    def _loop(self) -> None:
        while True:
            self._handle_signals()
            self._reap()
            self.draining.step()
            if self.stopping:
                if self.stop_step():
                    break
            else:
                self._check_heartbeats()
                self._spawn_missing()
            self._sleep()

    def _stop_children_now(self) -> None:
        """Quick stop for every child, then SIGKILL for what is left after STOP_MARGIN;
        each step guarded, since the state that broke the loop may be odd."""
        for pid in list(self.children):
            _kill_quietly(pid, signal.SIGINT)
        deadline = time.monotonic() + STOP_MARGIN
        while self.children and time.monotonic() < deadline:
            try:
                self._reap()
            except Exception:
                log.exception("reaping failed while stopping")
                break
            time.sleep(LOOP_TICK)
        for pid in list(self.children):
            _kill_quietly(pid, signal.SIGKILL)
        self.draining.kill_all([c.pid for c in self.children.values()
                                if c.slot.kind == "worker"])

    def _sleep(self) -> None:
        # A signal writes to wake_write (set_wakeup_fd), which ends the wait at once.
        select.select([self.wake_read], [], [], LOOP_TICK)
        try:
            while os.read(self.wake_read, 4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    # ---- desired set -----------------------------------------------------------------

    def _spawn_missing(self) -> None:
        now = time.monotonic()
        held = {c.slot for c in self.children.values() if not c.retiring}
        retiring_kinds = {c.slot.kind for c in self.children.values() if c.retiring}
        wanted = desired_slots(self.config, self.extra_processes)
        for slot in wanted:
            if slot in held:
                continue
            # A singleton's successor waits for the retiring one (it may hold a port).
            if slot.kind in SINGLETONS and slot.kind in retiring_kinds:
                continue
            if not self.restarts.may_start(slot, now):
                continue
            self.spawn(slot)
        # TTOU or a smaller reload: retire the workers beyond the wanted set.
        wanted_set = set(wanted)
        for child in self.children.values():
            if not child.retiring and child.slot not in wanted_set:
                self.retire(child, "no longer configured")
            elif child.slot.kind == "worker":
                # The `2/4` of its process title follows TTIN, TTOU and reloads.
                self.board.set_peers(child.board_index, self._worker_count(child.slot))

    def spawn(self, slot: Slot) -> None:
        board_index = self.free_slots.pop()
        self.board.reset_unready(board_index)
        self.board.set_peers(board_index, self._worker_count(slot))
        publish = slot.kind == "worker" and slot.queue in self.unpublished
        self.unpublished.discard(slot.queue or "")
        pid = fork_keeping_stops()
        if pid == 0:
            self._become_child(slot, board_index, publish)
        worker_id = f"{self.host}:{pid}:{self.token}"
        self.children[pid] = Child(pid, slot, board_index, time.monotonic(), worker_id)
        log.info("spawned %s pid %d", label(slot), pid)

    def _worker_count(self, slot: Slot) -> int:
        return worker_count(self.config, slot.queue, self.extra_processes)

    def _become_child(self, slot: Slot, board_index: int, publish: bool) -> None:
        os.close(self.wake_read)
        os.close(self.wake_write)
        self.rescue.close(keep_reader=slot.kind == "maintenance")
        identity = Identity(
            worker_id=f"{self.host}:{os.getpid()}:{self.token}",
            supervisor_id=self.supervisor_id, supervisor_pid=os.getppid(),
            title=describe(slot, self._worker_count(slot)),
            beacon=self.board.beacon(board_index), rescue_fd=self.rescue.read_fd,
            publish_defaults=publish, failed_queues=self.restarts.failed,
        )
        config, dsn = self.config, self.dsn
        run_child(identity.title, lambda: run_slot(config, dsn, slot, identity))

    # ---- reaping ---------------------------------------------------------------------

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = self.children.pop(pid, None)
            if child is None:
                continue  # as PID 1 it also reaps orphans that are not its children
            if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
                # Its live gauges must stop counting; its counters keep their totals.
                multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
            self.free_slots.append(child.board_index)
            self._on_exit(child, status)

    def _on_exit(self, child: Child, status: int) -> None:
        mark = self.board.gave_up_leases(child.board_index)  # a worker's chosen exit
        if self.board.killed_by_keeper(child.board_index):
            child.killed_for = child.killed_for or "by its keeper: leases not renewed"
        reason, restart_reason, child.gave_up = child_exit_reason(status, child.killed_for, mark)
        slot = child.slot
        was_ready = self.board.was_ready(child.board_index)
        log.info("%s pid %d exited: %s", label(slot), child.pid, reason)
        if slot.kind == "maintenance":
            self.maintenance_exited(status)
        if slot.kind == "worker" and not self._held_nothing(child, status):
            # What its jobs started may still run: the jobs wait for the group to empty.
            # Which jobs its threads were running is read now, before the slot is reused.
            running = self.board.running_jobs(child.board_index)
            self.draining.add(child.pid, (child, reason, running))
        if not child.retiring and not self.stopping:
            self.restarts.record_exit(self.config, slot, restart_reason, was_ready)

    def _held_nothing(self, child: Child, status: int) -> bool:
        """A worker that exited 0 saying it never claimed a job: no rescue to ask for."""
        return (os.WIFEXITED(status) and os.WEXITSTATUS(status) == EXIT_OK
                and self.board.held_nothing(child.board_index))

    def _request_rescue(self, child: Child, reason: str, running: list[int]) -> None:
        """Tell the maintenance process to give back what the dead worker held, never
        blocking: if the pipe were ever full, the lease expiry rescues the jobs instead."""
        self.rescue_asked = True
        if not self.rescue.request(child.worker_id, reason, running, gave_up=child.gave_up):
            log.warning("rescue pipe full; jobs of %s wait for their lease", child.worker_id)

    # ---- liveness --------------------------------------------------------------------

    def _check_heartbeats(self) -> None:
        stale_after = self.config.supervisor.stale_after
        now = time.monotonic()
        for child in self.children.values():
            if child.killed_for:
                continue
            beat, _ = self.board.read(child.board_index)
            # A slot is stamped before every fork, so 0 or a future time is a bad read.
            if now - beat <= stale_after or not 0 < beat <= now:
                child.stale_seen = 0
                continue
            # Killing is final: believe a stale slot only when two reads a tick apart
            # agree, so one torn read of the shared page can never kill a live worker.
            child.stale_seen += 1
            if child.stale_seen >= 2:
                child.killed_for = "heartbeat stale"
                log.error("%s pid %d has not beaten for %.0fs; killing it",
                          label(child.slot), child.pid, now - beat)
                _kill(child.pid, signal.SIGKILL)

    # ---- reload ----------------------------------------------------------------------

    def _reload(self) -> None:
        try:
            fresh = load_config(self.config_path)
        except ConfigError as exc:
            log.error("reload refused, keeping the running set: %s",
                      str(exc).replace("\n", "; "))
            return
        except OSError as exc:
            log.error("reload refused, keeping the running set: %s", exc)
            return
        log.info("reloading %s: starting the new set, retiring the old", self.config_path)
        self.config = self.adjust(fresh) if self.adjust is not None else fresh
        self.restarts.reset()
        self.unpublished = set(self.config.queues)
        for child in list(self.children.values()):
            self.retire(child, "reload")

    def retire(self, child: Child, why: str) -> None:
        """Ask a child to stop gracefully, once: a worker takes a second TERM for "stop
        quickly", so a reload then a stop, or two reloads, would cut the retiring workers'
        running jobs off."""
        if child.retiring:
            return
        child.retiring = True
        log.info("retiring %s pid %d (%s)", label(child.slot), child.pid, why)
        _kill(child.pid, signal.SIGTERM)

    def begin_stop(self, mode: str, signame: str) -> None:
        """Start the stop `mode` names, or make the one under way harder."""
        self.stopping = mode
        if mode == "graceful":
            self.stop_deadline = (time.monotonic() + self.config.supervisor.shutdown_timeout
                                  + STOP_MARGIN)
            log.info("%s: stopping gracefully (running jobs get %.0fs)", signame,
                     self.config.supervisor.shutdown_timeout)
            # Not the workers a reload retires: they are stopping gracefully already, and a
            # second TERM would hurry them (Supervisor.retire).
            for child in self.children.values():
                if child.slot.kind == "worker" and not child.retiring:
                    _kill(child.pid, signal.SIGTERM)
        elif mode == "quick":
            self.stop_deadline = time.monotonic() + STOP_MARGIN
            log.info("%s: quick stop (running jobs are given back)", signame)
            self.signal_kind("worker", signal.SIGINT)
        elif mode == "kill":
            log.warning("%s again: killing the workers; the jobs they were running "
                        "are given back as crashes", signame)
            self.kill_workers("stop signal repeated")
        else:
            log.warning("%s again: killing every child; their jobs wait for their lease",
                        signame)
            for pid in list(self.children):
                _kill(pid, signal.SIGKILL)


    def stop_step(self) -> bool:
        """Workers first; the helpers stop once no worker is left, so the maintenance
        process can still give back the jobs of a worker killed at the deadline."""
        if time.monotonic() > self.stop_deadline and self.stopping in ("graceful", "quick"):
            log.warning("children still running at the stop deadline; killing them")
            self.kill_workers("shutdown deadline")
        if self.stopping in ("kill", "kill-all") and time.monotonic() > self.stop_deadline:
            for pid in list(self.children):
                _kill(pid, signal.SIGKILL)
        if any(c.slot.kind == "worker" for c in self.children.values()):
            return False
        if self.draining and time.monotonic() <= self.stop_deadline + STOP_MARGIN:
            return False  # maintenance must stay for their rescue
        self.draining.give_up()
        self.start_final_rescue()
        for child in self.children.values():
            if not child.retiring:
                self.retire(child, "stop")
        return not self.children


    def start_final_rescue(self) -> None:
        """Once no worker is left: if stopped workers' jobs were handed to maintenance and no
        maintenance process is there to give them back (a reload's retiring one exited just
        before, or it was killed during the stop), start one; it is stopped at once and does
        the final rescue, so those jobs are not left to lease expiry, which charges them.
        Twice at most: a stop must end."""
        if (not self.rescue_asked or self.final_rescues >= FINAL_RESCUES
                or any(c.slot.kind == "maintenance" for c in self.children.values())):
            return
        if self.stopping in ("kill", "kill-all") and time.monotonic() > self.stop_deadline:
            # The stop is killing what is left: a new one would be killed at once, and its
            # death logged as a kill from outside.
            return
        self.final_rescues += 1
        log.info("starting a maintenance process to give back the stopped workers' jobs")
        self.spawn(Slot("maintenance"))


    def maintenance_exited(self, status: int) -> None:
        """A maintenance process exited. Cleanly during a stop with no worker left: its final
        rescue gave back all that was asked (no request can come after it). Otherwise, if
        it did not exit cleanly, it may have taken requests it read with it (say, killed
        while a client's lock held its statement): they are asked again of the
        next maintenance process, a successor or start_final_rescue's; but not of another
        final rescue once one waited for the database in vain (exit 69): the stop ends."""
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        if code == EXIT_OK:
            if self.stopping and not any(c.slot.kind == "worker" for c in self.children.values()):
                self.rescue_asked = False
            return
        if code == EXIT_RESCUE_FAILED:
            self.final_rescues = FINAL_RESCUES
        asked = self.rescue.resend()
        if asked:
            log.warning("maintenance exited before it confirmed its give-backs; asking the next"
                        " one again for the jobs of %d dead worker(s)", asked)


    def kill_workers(self, why: str) -> None:
        """SIGKILL the workers; the maintenance process gets STOP_MARGIN to give back the
        jobs they held (as crashes: their threads may have been anywhere)."""
        self.stopping = "kill"
        for child in self.children.values():
            if child.slot.kind == "worker":
                child.killed_for = why
                _kill(child.pid, signal.SIGKILL)
        self.stop_deadline = time.monotonic() + STOP_MARGIN


    def signal_kind(self, kind: str, sig: int) -> None:
        """Send `sig` to every child of one kind."""
        for child in self.children.values():
            if child.slot.kind == kind:
                _kill(child.pid, sig)


def scaled(extra: int, sig: int, config: Config) -> int:
    """The workers every queue runs beyond its config after TTIN (one more) or TTOU (one
    fewer, down to one worker per queue: a queue already at one stays there)."""
    if sig == signal.SIGTTIN:
        extra += 1
    else:
        extra = max(1 - max(q.processes for q in config.queues.values()), extra - 1)
    log.info("%s: every queue now runs %+d worker(s) beyond its config",
             signal_name(sig), extra)
    return extra


def _kill_quietly(pid: int, sig: int) -> None:
    try:
        _kill(pid, sig)
    except OSError:
        log.exception("could not signal pid %d", pid)
