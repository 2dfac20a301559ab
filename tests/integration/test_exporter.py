"""The exporter as a real process: /metrics merged from multiprocess files and checked by
promtool, /livez, /readyz, a corrupt metrics file, many concurrent scrapes, a busy port."""

from __future__ import annotations

import gzip
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client import CONTENT_TYPE_LATEST

from tests.support.workers import wait_for

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"

WRITE_METRICS = """
from pgfleet import metrics as m
m.jobs_enqueued.labels("default").inc(7)
m.jobs_started.labels("default", "noop").inc(3)
m.jobs_finished.labels("default", "noop", "succeeded").inc(2)
m.jobs_finished.labels("default", "noop", "failed").inc(1)
m.job_retries.labels("default", "noop").inc(1)
m.job_duration.labels("default", "noop").observe(0.3)
m.job_wait.labels("default").observe(1.5)
m.worker_restarts.labels("default", "crashed").inc()
m.jobs_rescued.labels("default").inc()
m.workers.labels("default").set(2)
m.workers_busy.labels("default").set(1)
"""

RUN_EXPORTER = """
import logging, sys
from pgfleet.config import Config
from pgfleet.exporter.process import Exporter
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
config = Config.model_validate({"queues": {"default": {}},
                                "metrics": {"listen": sys.argv[1]}})
exporter = Exporter(config, sys.argv[2], supervisor_pid=int(sys.argv[3]))
exporter.install_signal_handlers()
sys.exit(exporter.run())
"""


@dataclass
class Running:
    proc: subprocess.Popen[bytes]
    base: str
    log: Path

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes, str]:
        request = urllib.request.Request(self.base + path, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                return resp.status, resp.read(), resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(), exc.headers.get("Content-Type", "")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def multiproc_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "prom"
    folder.mkdir()
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(folder))
    subprocess.run([sys.executable, "-c", WRITE_METRICS], env=env, check=True, timeout=60)
    return folder


def _answers(base: str) -> bool:
    try:
        with urllib.request.urlopen(base + "/livez", timeout=5):
            return True
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def exporter(dsn: str, folder: Path | None, tmp_path: Path, *, listen: str | None = None,
             supervisor_pid: int | None = None) -> Iterator[Running]:
    listen = listen or f"127.0.0.1:{free_port()}"
    env = dict(os.environ)
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    if folder is not None:
        env["PROMETHEUS_MULTIPROC_DIR"] = str(folder)
    log = tmp_path / f"exporter-{listen.replace(':', '_')}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", RUN_EXPORTER, listen, dsn,
             str(supervisor_pid if supervisor_pid is not None else os.getpid())],
            env=env, stdout=out, stderr=subprocess.STDOUT,
        )
    running = Running(proc, f"http://{listen}", log)
    try:
        wait_for(lambda: proc.poll() is not None or _answers(running.base), timeout=30)
        assert proc.poll() is None, log.read_text()
        yield running
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
        assert code == 0, log.read_text()


def promtool_check(text: bytes) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROMTOOL, "check", "metrics"], input=text.decode(),
                          capture_output=True, text=True, timeout=60)


def test_metrics_merge_every_process_and_pass_promtool(
    dsn: str, multiproc_dir: Path, tmp_path: Path
) -> None:
    with exporter(dsn, multiproc_dir, tmp_path) as ex:
        status, body, content_type = ex.get("/metrics")
    assert status == 200
    assert content_type == CONTENT_TYPE_LATEST
    text = body.decode()
    for line in (
        'pgfleet_jobs_enqueued_total{queue="default"} 7.0',
        'pgfleet_jobs_started_total{queue="default",task="noop"} 3.0',
        'pgfleet_jobs_finished_total{outcome="succeeded",queue="default",task="noop"} 2.0',
        'pgfleet_job_retries_total{queue="default",task="noop"} 1.0',
        'pgfleet_job_duration_seconds_count{queue="default",task="noop"} 1.0',
        'pgfleet_job_wait_seconds_bucket{le="0.01",queue="default"} 0.0',
        'pgfleet_worker_restarts_total{queue="default",reason="crashed"} 1.0',
        'pgfleet_workers_busy{queue="default"} 1.0',
        'pgfleet_queue_jobs{queue="default",state="queued"} 0.0',
        'pgfleet_queue_oldest_job_age_seconds{queue="default"} 0.0',
        "pgfleet_database_up 1.0",
        "pgfleet_supervisor_up 1.0",
        'pgfleet_build_info{version="',
    ):
        assert line in text, line
    check = promtool_check(body)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.strip() == "", check.stdout


def test_metrics_without_multiprocess_dir_use_the_default_registry(
    dsn: str, tmp_path: Path
) -> None:
    with exporter(dsn, None, tmp_path) as ex:
        status, body, _ = ex.get("/metrics")
    assert status == 200
    assert b"pgfleet_supervisor_up 1.0" in body
    check = promtool_check(body)
    assert check.returncode == 0, check.stdout + check.stderr


def test_metrics_are_gzipped_when_asked(dsn: str, multiproc_dir: Path, tmp_path: Path) -> None:
    with exporter(dsn, multiproc_dir, tmp_path) as ex:
        request = urllib.request.Request(ex.base + "/metrics",
                                         headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(request, timeout=30) as resp:
            assert resp.headers["Content-Encoding"] == "gzip"
            assert b"pgfleet_jobs_started_total" in gzip.decompress(resp.read())


def test_livez_follows_the_supervisor_pid(dsn: str, tmp_path: Path) -> None:
    with exporter(dsn, None, tmp_path) as ex:
        assert ex.get("/livez")[:2] == (200, b"ok\n")
        assert ex.get("/nothing")[0] == 404
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(30)
    with exporter(dsn, None, tmp_path, supervisor_pid=gone.pid) as ex:
        assert ex.get("/livez")[0] == 503


def test_readyz_on_a_migrated_database(dsn: str, tmp_path: Path) -> None:
    with exporter(dsn, None, tmp_path) as ex:
        status, body, _ = ex.get("/readyz")
    assert status == 200, body
    assert body.startswith(b"ok")


def test_readyz_without_the_schema(empty_dsn: str, tmp_path: Path) -> None:
    with exporter(empty_dsn, None, tmp_path) as ex:
        status, body, _ = ex.get("/readyz")
    assert status == 503
    assert body.count(b"\n") == 1
    assert b"pgfleet migrate" in body


def test_readyz_with_the_database_down_names_no_password(tmp_path: Path) -> None:
    down = f"postgresql://pgfleet:hunter2secret@127.0.0.1:{free_port()}/nothing"
    with exporter(down, None, tmp_path) as ex:
        status, body, _ = ex.get("/readyz")
        scraped = ex.get("/metrics")[1].decode()
        log = ex.log.read_text()
    assert status == 503
    # The database gauges are absent, not frozen: only the check's own 0.
    assert "pgfleet_database_up 0.0" in scraped.splitlines()
    assert "pgfleet_queue_jobs" not in scraped
    assert "pgfleet_queue_oldest" not in scraped
    assert "hunter2secret" not in scraped
    # Anyone reaching the port may ask: the answer is generic, the log has the details.
    assert body == b"database unavailable\n"
    assert b"hunter2secret" not in body
    assert "hunter2secret" not in log
    port = down.rsplit(":", 1)[1].split("/")[0]
    assert "/readyz: database unavailable:" in log and port in log, log
    assert b"pgfleet" not in body and port.encode() not in body


def _trickle(clients: list[socket.socket], closed: set[int], stop: threading.Event) -> None:
    """Send one more header line on every client every 2 s; note who the server closed."""
    while not stop.wait(2.0):
        for n, client in enumerate(clients):
            if n in closed:
                continue
            try:
                client.sendall(b"X-Slow: 1\r\n")
                if client.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                    closed.add(n)
            except BlockingIOError:
                pass
            except OSError:
                closed.add(n)


def test_livez_answers_while_forty_clients_trickle_their_headers(
        dsn: str, tmp_path: Path) -> None:
    with exporter(dsn, None, tmp_path) as ex:
        host, port = ex.base.removeprefix("http://").split(":")
        clients = [socket.create_connection((host, int(port)), timeout=10) for _ in range(40)]
        closed: set[int] = set()
        stop = threading.Event()
        for client in clients:
            client.sendall(b"GET /livez HTTP/1.0\r\n")
            client.setblocking(False)  # so that peeking says "nothing yet" at once
        trickler = threading.Thread(target=_trickle, args=(clients, closed, stop))
        trickler.start()
        try:
            assert ex.get("/livez")[:2] == (200, b"ok\n")
            assert ex.get("/metrics")[0] == 200
            # They were all still connected while /livez answered ...
            still_open = 0
            for client in clients:
                try:
                    client.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
                except BlockingIOError:
                    still_open += 1
            assert still_open == 40
            # ... and each is cut at its request's deadline although it keeps sending.
            wait_for(lambda: len(closed) == 40, timeout=60)
        finally:
            stop.set()
            trickler.join()
            for client in clients:
                client.close()


def test_a_corrupt_metrics_file_gives_500_and_the_exporter_keeps_running(
    dsn: str, multiproc_dir: Path, tmp_path: Path
) -> None:
    victim = next(multiproc_dir.glob("counter_*.db"))
    with victim.open("r+b") as f:
        f.truncate(12)
    with exporter(dsn, multiproc_dir, tmp_path) as ex:
        for _ in range(3):
            status, body, _ = ex.get("/metrics")
            # Half the counters would look like a reset to rate(); a failed scrape is a gap.
            assert status == 500
            assert victim.name.encode() in body
        assert ex.get("/livez")[0] == 200
        assert ex.proc.poll() is None
        log = ex.log.read_text()
        # Reported once, not on every scrape.
        assert log.count(victim.name) == 1, log
        victim.unlink()
        status, body, _ = ex.get("/metrics")
        assert status == 200
        assert b"pgfleet_job_duration_seconds_count" in body


def test_two_hundred_concurrent_scrapes_all_complete(
    dsn: str, multiproc_dir: Path, tmp_path: Path
) -> None:
    paths = ["/metrics", "/readyz", "/livez", "/metrics"] * 50
    with exporter(dsn, multiproc_dir, tmp_path) as ex, ThreadPoolExecutor(200) as pool:
        results = list(pool.map(ex.get, paths))
        assert ex.proc.poll() is None
    for path, (status, body, _) in zip(paths, results, strict=True):
        assert status == 200, (path, body)
    assert all(b"pgfleet_jobs_started_total" in r[1] for p, r in zip(paths, results,
                                                                      strict=True)
               if p == "/metrics")


def test_a_busy_port_is_one_log_line_and_exit_1(dsn: str, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        listen = f"127.0.0.1:{taken.getsockname()[1]}"
        proc = subprocess.run(
            [sys.executable, "-c", RUN_EXPORTER, listen, dsn, str(os.getpid())],
            capture_output=True, text=True, timeout=60,
        )
    assert proc.returncode == 1
    lines = proc.stdout.splitlines() + proc.stderr.splitlines()
    assert len(lines) == 1, lines
    assert "cannot listen on " + listen in lines[0]
    assert "postgres" not in lines[0]


def test_ipv6_listen_address(dsn: str, tmp_path: Path) -> None:
    with exporter(dsn, None, tmp_path, listen=f"[::1]:{free_port()}") as ex:
        assert ex.get("/livez")[0] == 200
        log = ex.log.read_text()
    assert "exporter listening on http://[::1]:" in log
