"""`pgfleet dev` runs the web UI as one more child on a free loopback port and prints its
URL; the UI stays through a reload and goes with the supervisor."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.workers import wait_for
from tests.web.test_supervised import page, refused

ROOT = Path(__file__).resolve().parents[2]
WEB_URL = re.compile(r"^web UI: (http://127\.0\.0\.1:\d+/)$", re.M)


def test_dev_prints_the_url_of_the_ui_it_runs(dsn: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(PGFLEET_DATABASE_URL=dsn, PGFLEET_METRICS_LISTEN="127.0.0.1:0",
               PGFLEET_EMBEDDED_DIR=str(tmp_path / "embedded"))
    log_path = tmp_path / "dev.log"
    with open(log_path, "wb") as log:
        dev = subprocess.Popen(
            [sys.executable, "-m", "pgfleet", "dev", "-c", "examples/pgfleet.yaml"], cwd=ROOT,
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def output() -> str:
        return log_path.read_text(errors="replace")

    try:
        wait_for(lambda: "web UI listening on" in output() or dev.poll() is not None,
                 timeout=60)
        found = WEB_URL.findall(output())
        assert len(found) == 1, output()
        url = found[0]
        assert f"web UI listening on {url}" in output()
        status, body = page(url)
        assert status == 200 and "Overview" in body

        # A reload reads the file again, which has no `web:` section: dev's UI stays.
        dev.send_signal(signal.SIGHUP)
        wait_for(lambda: output().count("web UI listening on") == 2, timeout=60)
        status, body = page(url)
        assert status == 200 and "Overview" in body

        dev.send_signal(signal.SIGTERM)
        assert dev.wait(60) == 0, output()
        assert refused(url)
    finally:
        if dev.poll() is None:
            os.killpg(dev.pid, signal.SIGKILL)
            dev.wait(10)


def test_dev_runs_no_ui_when_the_file_turns_it_off(dsn: str, tmp_path: Path) -> None:
    config = tmp_path / "pgfleet.yaml"
    config.write_text("tasks: [tests.support.tinytasks]\n"
                      "queues: {default: {processes: 1}}\n"
                      "web: {enabled: false}\n")
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(PGFLEET_DATABASE_URL=dsn, PGFLEET_METRICS_LISTEN="127.0.0.1:0",
               PGFLEET_EMBEDDED_DIR=str(tmp_path / "embedded"))
    log_path = tmp_path / "dev.log"
    with open(log_path, "wb") as log:
        dev = subprocess.Popen(
            [sys.executable, "-m", "pgfleet", "dev", "-c", str(config)], cwd=ROOT,
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def output() -> str:
        return log_path.read_text(errors="replace")

    try:
        wait_for(lambda: "started on queue" in output() or dev.poll() is not None,
                 timeout=60)
        dev.send_signal(signal.SIGTERM)
        assert dev.wait(60) == 0, output()
        assert "web UI" not in output() and "spawned web" not in output(), output()
    finally:
        if dev.poll() is None:
            os.killpg(dev.pid, signal.SIGKILL)
            dev.wait(10)
