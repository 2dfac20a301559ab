"""A real Prometheus server (Debian's `prometheus` package) for the metrics tests."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import IO, Any

import yaml

from tests.support.workers import wait_for

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def http_get(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def reachable(url: str) -> bool:
    try:
        return http_get(url, timeout=2.0)[0] == 200
    except OSError:
        return False


def check_metrics(text: bytes) -> subprocess.CompletedProcess[str]:
    """`promtool check metrics` on one scrape (it reads the exposition from stdin)."""
    return subprocess.run(
        [PROMTOOL, "check", "metrics"], input=text.decode(), capture_output=True, text=True,
        timeout=60, check=False,
    )


def has_value(result: list[dict[str, Any]]) -> bool:
    """At least one sample of an instant-query result is a number (not NaN)."""
    for series in result:
        value = series.get("value")
        if value is not None and not math.isnan(float(value[1])):
            return True
    return False


class PrometheusServer:
    """One Prometheus scraping `targets` every second, with `rule_files` loaded; its data
    and config live in `folder`. Use as a context manager; the server is stopped on exit."""

    def __init__(self, folder: Path, targets: list[str], rule_files: list[Path],
                 interval: str = "1s") -> None:
        self.folder = folder
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.config = folder / "prometheus.yml"
        self.log_path = folder / "prometheus.log"
        self.config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": interval, "evaluation_interval": interval,
                       "scrape_timeout": interval},
            "rule_files": [str(path.resolve()) for path in rule_files],
            "scrape_configs": [{
                "job_name": "pgfleet",
                "metrics_path": "/metrics",
                "static_configs": [{"targets": targets}],
            }],
        }, sort_keys=False))
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def start(self, timeout: float = 60.0) -> PrometheusServer:
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={self.config}",
             f"--storage.tsdb.path={self.folder / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}",
             "--log.level=warn"],
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
        )

        def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited {self.proc.returncode}:\n{self.log()}")
            return reachable(self.base + "/-/ready")

        wait_for(ready, timeout=timeout, interval=0.1)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.proc is not None:
            # Nothing of ours may outlive the test.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        if self._log is not None:
            self._log.close()
            self._log = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/PATH; returns `data` of a successful answer, raises otherwise."""
        query = urllib.parse.urlencode(params)
        status, body = http_get(f"{self.base}/api/v1/{path}" + (f"?{query}" if query else ""))
        answer = json.loads(body)
        if status != 200 or answer.get("status") != "success":
            raise AssertionError(f"/api/v1/{path} {params}: HTTP {status}: {answer}")
        return answer["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query; the result as a list of {metric, value} (scalars wrapped)."""
        data = self.api("query", query=expr)
        if data["resultType"] in {"scalar", "string"}:
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result

    def targets_up(self) -> bool:
        active = self.api("targets", state="active")["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)

    def rule_groups(self) -> list[dict[str, Any]]:
        groups: list[dict[str, Any]] = self.api("rules")["groups"]
        return groups
