"""The exporter process: /metrics for the whole host, /livez and /readyz.

In a supervised run every process writes its metric values to files in
PROMETHEUS_MULTIPROC_DIR; this process merges them on each scrape. It is a child of the
supervisor like any other: it beats its beacon and exits when the supervisor goes away.
"""

from __future__ import annotations

import gzip
import io
import logging
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import psycopg
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from pgfleet import metrics
from pgfleet.config import Config, parse_listen
from pgfleet.core.version import VERSION
from pgfleet.errors import DatabaseUnavailable
from pgfleet.exporter.database import DatabaseCollector
from pgfleet.exporter.request_heads import Arrived, HeadReader
from pgfleet.metrics import files as metrics_files
from pgfleet.runtime.beacon import Beacon
from pgfleet.runtime.child import BEAT_EVERY, ChildProcess
from pgfleet.sql import migrate as migrations
from pgfleet.sql.db import connect, scrub

log = logging.getLogger("pgfleet.exporter.process")

# From accepting a connection to the last byte of its answer, whatever the client does.
REQUEST_DEADLINE = 5.0
HEAD_LIMIT = 16384
# Connections still sending their head; past this the oldest is closed.
MAX_PENDING = 512
# Threads answering complete requests.
MAX_HANDLERS = 32
READY_CACHE_SECONDS = 1.0
SCRAPE_TRIES = 4
READY_CONNECT_TIMEOUT = 2  # libpq rounds anything lower up to 2 seconds


class ScrapeError(Exception):
    """The multiprocess files could not be merged; the message names the bad files."""


class _Server(HTTPServer):
    """Accepts on the serving thread, reads request heads on one thread (request_heads)
    and answers complete requests on a pool of MAX_HANDLERS threads."""

    request_queue_size = 256

    def __init__(self, address: tuple[str, int], exporter: Exporter, ipv6: bool) -> None:
        self.address_family = socket.AF_INET6 if ipv6 else socket.AF_INET
        self.exporter = exporter
        self.closing = False
        self.pool = ThreadPoolExecutor(MAX_HANDLERS, thread_name_prefix="exporter-http")
        self.heads = HeadReader(self._dispatch, deadline=REQUEST_DEADLINE,
                                head_limit=HEAD_LIMIT, max_pending=MAX_PENDING)
        super().__init__(address, _Handler)
        self.heads.start()

    def server_bind(self) -> None:
        # HTTPServer.server_bind does a reverse DNS lookup of the address: skip it, a
        # slow resolver must not delay start-up. SO_REUSEADDR as TCPServer.server_bind
        # sets it: without it, the connections of recent scrapes (TIME_WAIT on this side)
        # keep the port from the successor after a HUP or a restart for about a minute.
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind(self.server_address)
        self.server_address = self.socket.getsockname()[:2]

    def process_request(self, request: Any, client_address: Any) -> None:
        self.heads.add(request, client_address)

    def _dispatch(self, arrived: Arrived) -> None:
        self.pool.submit(self._answer, arrived)

    def _answer(self, arrived: Arrived) -> None:
        try:
            self.finish_request(arrived, arrived.address)  # type: ignore[arg-type]
        except Exception:
            self.handle_error(arrived, arrived.address)
        finally:
            self.shutdown_request(arrived)

    def shutdown_request(self, request: Any) -> None:
        super().shutdown_request(request.conn if isinstance(request, Arrived) else request)

    def server_close(self) -> None:
        super().server_close()
        self.heads.close()
        self.pool.shutdown(wait=False, cancel_futures=True)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients hanging up or timing out are routine; do not print a traceback each time.
        log.debug("connection from %s failed", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"

    def setup(self) -> None:
        # The head was read by the HeadReader; what is left of the request's deadline
        # bounds writing the answer.
        arrived: Arrived = self.request
        self.connection = arrived.conn
        self.connection.settimeout(max(0.05, arrived.deadline - time.monotonic()))
        self.rfile = io.BytesIO(arrived.head)
        self.wfile = self.connection.makefile("wb")

    def version_string(self) -> str:
        return f"pgfleet/{VERSION}"

    def do_GET(self) -> None:
        self._answer(head=False)

    def do_HEAD(self) -> None:
        self._answer(head=True)

    def _answer(self, *, head: bool) -> None:
        path = self.path.split("?", 1)[0]
        exporter = self.server.exporter
        content_type = "text/plain; charset=utf-8"
        try:
            if path == "/metrics":
                try:
                    status, body = 200, exporter.scrape()
                    content_type = CONTENT_TYPE_LATEST
                except ScrapeError as exc:
                    status, body = 500, f"{exc}\n".encode()
            elif path == "/livez":
                alive = exporter.supervisor_alive()
                status = 200 if alive else 503
                body = b"ok\n" if alive else b"supervisor is gone\n"
            elif path == "/readyz":
                ready, reason = exporter.readiness()
                status, body = (200 if ready else 503), f"{reason}\n".encode()
            else:
                status, body = 404, b"not found: try /metrics, /livez or /readyz\n"
        except Exception:
            log.exception("%s failed", path)
            status, body = 500, b"internal error\n"
        gzipped = status == 200 and "gzip" in self.headers.get("Accept-Encoding", "")
        if gzipped:
            body = gzip.compress(body, compresslevel=1)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if gzipped:
            self.send_header("Content-Encoding", "gzip")
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        # One line per scrape would drown the supervisor's log.
        pass


class Exporter(ChildProcess):
    def __init__(self, config: Config, dsn: str, beacon: Beacon | None = None,
                 supervisor_pid: int | None = None) -> None:
        super().__init__(beacon)
        self.config = config
        self.dsn = dsn
        self.supervisor_pid = supervisor_pid
        self.multiproc_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None
        self.scrape_lock = threading.Lock()
        self._ready_lock = threading.Lock()
        self._ready_at = -READY_CACHE_SECONDS
        self._ready: tuple[bool, str] = (False, "not checked yet")
        self._reported: set[tuple[str, int]] = set()
        # The database gauges, read at scrape time (pgfleet/exporter/database.py).
        self.database_registry = CollectorRegistry()
        self.database_registry.register(DatabaseCollector(dsn, config.queues))
        self._logged_failure = ""

    # ---- the process ---------------------------------------------------------------

    def run(self) -> int:
        listen = self.config.metrics.listen
        host, port = parse_listen(listen)
        try:
            server = _Server((host, port), self, ipv6=":" in host)
        except OSError as exc:
            log.error("exporter cannot listen on %s: %s", listen, exc.strerror or exc)
            return 1
        metrics.supervisor_up.set(1)
        metrics.build_info.labels(VERSION).set(1)
        bound_host, bound_port = str(server.server_address[0]), server.server_address[1]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        log.info("exporter listening on http://%s:%s (/metrics, /livez, /readyz)",
                 shown, bound_port)
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.25},
            name="exporter-http", daemon=True,
        )
        thread.start()
        try:
            while not self.stopping:
                self.beat()
                if self.parent_gone():
                    log.info("exporter: the supervisor is gone; stopping")
                    break
                self.wakeup.wait(BEAT_EVERY)
        finally:
            server.closing = True
            server.shutdown()
            server.server_close()
        return 0

    # ---- endpoints -----------------------------------------------------------------

    def scrape(self) -> bytes:
        from_database = bytes(generate_latest(self.database_registry))
        if self.multiproc_dir is None:
            return bytes(generate_latest(REGISTRY)) + from_database
        # One scrape at a time: compaction renames files another scrape could be reading,
        # and a merge takes milliseconds, so even a burst of scrapers queues briefly.
        with self.scrape_lock:
            return self._scrape_files(self.multiproc_dir) + from_database

    def _scrape_files(self, directory: str) -> bytes:
        folded = metrics_files.compact(directory)
        if folded:
            log.info("folded the metric files of %d dead process(es) into the archive", folded)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
        for _ in range(SCRAPE_TRIES - 1):
            try:
                return bytes(generate_latest(registry))
            except Exception:
                # A process creating its file at this instant shows it empty (created,
                # not yet sized); a moment later it reads whole.
                time.sleep(0.05)
        try:
            return bytes(generate_latest(registry))
        except Exception:
            bad = self._corrupt_files()
        self._report(bad)
        names = ", ".join(str(p) for p in bad) or "(none found on re-reading)"
        # Half a scrape would look like counters resetting; a failed one is a gap.
        raise ScrapeError(f"cannot read metric files in {self.multiproc_dir}: {names}")

    def _corrupt_files(self) -> list[Path]:
        assert self.multiproc_dir is not None
        bad = []
        for path in sorted(Path(self.multiproc_dir).glob("*.db")):
            try:
                MultiProcessCollector.merge([str(path)])  # type: ignore[no-untyped-call]
            except FileNotFoundError:
                continue
            except Exception:
                bad.append(path)
        return bad

    def _report(self, bad: list[Path]) -> None:
        """One log line per bad file (and size), not one per scrape."""
        for path in bad:
            try:
                key = (str(path), path.stat().st_size)
            except OSError:
                continue
            if key not in self._reported:
                self._reported.add(key)
                log.error("metrics file %s is corrupt (%d bytes); /metrics answers 500 "
                          "until it is removed", path, key[1])
        if not bad:
            log.error("merging metric files in %s failed", self.multiproc_dir)

    def supervisor_alive(self) -> bool:
        if self.supervisor_pid is None:
            return True
        try:
            os.kill(self.supervisor_pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def readiness(self) -> tuple[bool, str]:
        """(ready, reason); one database check per second however many probes arrive."""
        with self._ready_lock:
            now = time.monotonic()
            if now - self._ready_at >= READY_CACHE_SECONDS:
                self._ready = self._check_database()
                if self._ready[0]:
                    self._logged_failure = ""
                self._ready_at = time.monotonic()
            return self._ready

    def _unavailable(self, detail: str) -> tuple[bool, str]:
        """Anyone who reaches the port may ask /readyz: the answer names no user, host,
        port or database; the log does, once per distinct failure."""
        detail = scrub(detail, self.dsn)
        if detail != self._logged_failure:
            self._logged_failure = detail
            log.warning("/readyz: database unavailable: %s", detail)
        return False, "database unavailable"

    def _check_database(self) -> tuple[bool, str]:
        latest = migrations.latest_version()
        try:
            with connect(self.dsn, autocommit=False,
                         connect_timeout=READY_CONNECT_TIMEOUT) as conn:
                # Transaction-scoped, so a pooled server connection keeps no session state.
                conn.execute("SET LOCAL statement_timeout = '2s'")
                version = migrations.current_version(conn)
                conn.rollback()
        except DatabaseUnavailable as exc:
            return self._unavailable(str(exc))
        except psycopg.Error as exc:
            text = str(exc).strip()
            return self._unavailable(text.splitlines()[0] if text else type(exc).__name__)
        if version == 0:
            return False, "the pgfleet schema is not installed: run `pgfleet migrate`"
        if version < latest:
            return False, f"schema version {version}, expected {latest}: run `pgfleet migrate`"
        if version > latest:
            return False, f"schema version {version} is newer than this pgfleet ({latest})"
        return True, f"ok (schema version {version})"
