"""The web UI as a real `pgfleet web` process, and a real headless Chromium to drive it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

# Debian's chromium (make setup installs it); Playwright drives it, never a browser it fetched.
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
START_TIMEOUT = 60.0


@dataclass
class WebServer:
    proc: subprocess.Popen[str]
    url: str  # with the trailing slash
    output: list[str] = field(default_factory=list)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def run_web(args: list[str], env: dict[str, str] | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`pgfleet web ARGS` expected to exit (a refusal), with its output."""
    return subprocess.run([sys.executable, "-m", "pgfleet", "web", *args], text=True,
                          capture_output=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, check=False)


def start_web(args: list[str], env: dict[str, str] | None = None) -> WebServer:
    """`pgfleet web --listen 127.0.0.1:0 ARGS` serving; its first line names the URL."""
    listen = [] if "--listen" in args else ["--listen", "127.0.0.1:0"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgfleet", "web", *listen, *args], text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "serving on " not in line:
        try:  # the whole of what it said, a traceback included
            rest = proc.communicate(timeout=20)[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            rest = proc.communicate()[0]
        raise AssertionError(f"pgfleet web did not start: {line}{rest}")
    url = line.split("serving on ", 1)[1].split()[0]
    return WebServer(proc, url, [line])


@pytest.fixture
def web(dsn: str) -> Iterator[Callable[..., WebServer]]:
    """Start `pgfleet web` on the test's database (PGFLEET_DATABASE_URL is set to it)."""
    servers: list[WebServer] = []

    def start(*args: str, env: dict[str, str] | None = None) -> WebServer:
        server = start_web(list(args), env)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context()
    tab = context.new_page()
    tab.set_default_timeout(30_000)
    yield tab
    context.close()


def write_secret(path: Path, text: str) -> None:
    """A secret file as the UI wants it: readable by its owner only."""
    path.write_text(text)
    path.chmod(0o600)


def insert_job(dsn: str, legacy: bool = False, **fields: Any) -> int:
    """A job row with exactly these columns (a hand-written row, as the fault tests do);
    an explicit id overrides the identity, so a test can spread ids without setval.
    `legacy`: written past the args limits' trigger, as a row stored before migration
    0006 (or by a superuser) may be."""
    fields.setdefault("task", "noop")
    fields.setdefault("queue", "default")
    names = list(fields)
    placeholders = ", ".join(
        "%s::jsonb" if name in ("args", "errors") else "%s" for name in names)
    with psycopg.connect(dsn, autocommit=True) as conn:
        if legacy:
            conn.execute("SET session_replication_role = replica")
        row = conn.execute(
            f"INSERT INTO pgfleet.jobs ({', '.join(names)})"
            f"{' OVERRIDING SYSTEM VALUE' if 'id' in fields else ''}"
            f" VALUES ({placeholders}) RETURNING id",
            list(fields.values())).fetchone()
    assert row is not None
    return int(row[0])


def dead_job(dsn: str, **fields: Any) -> int:
    """A job that failed its only attempt."""
    fields.setdefault("errors", '[{"attempt": 1, "at": "2026-01-01T00:00:00Z", '
                                '"error": "ValueError: boom"}]')
    fields.setdefault("finished_at", "now")
    fields.setdefault("last_error", "ValueError: boom")
    return insert_job(dsn, state="dead", attempt=1, max_attempts=1, **fields)


def job_state(dsn: str, job_id: int) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT state::text FROM pgfleet.jobs WHERE id = %s",
                           (job_id,)).fetchone()
    assert row is not None
    return str(row[0])


SCREENSHOTS = os.environ.get("PGFLEET_WEB_SCREENSHOTS")


def screenshot(page: Any, name: str) -> None:
    """Save the docs' screenshots when PGFLEET_WEB_SCREENSHOTS names a directory."""
    if SCREENSHOTS:
        page.screenshot(path=str(Path(SCREENSHOTS) / f"{name}.png"), full_page=True)
