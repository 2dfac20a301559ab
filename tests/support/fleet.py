"""Start `pgfleet run` as a real process and look at its children through /proc."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import yaml

from tests.support.workers import wait_for

FAST_SUPERVISOR = {
    "heartbeat_interval": "0.5s", "stale_after": "10s", "shutdown_timeout": "5s",
    "lease": "30s", "restart_backoff": {"initial": "0.2s", "max": "1s"},
    "max_start_failures": 3,
}


def config_text(queues: dict[str, Any], **extra: Any) -> str:
    data: dict[str, Any] = {
        "tasks": ["tests.support.jobtasks"],
        "poll_interval": "0.2s",
        "queues": queues,
        "metrics": {"enabled": False},
        "maintenance": {"interval": "0.2s"},
        "supervisor": dict(FAST_SUPERVISOR),
    }
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key].update(value)
        else:
            data[key] = value
    return yaml.safe_dump(data, sort_keys=False)


class Fleet:
    """One supervisor process with its own config file and log file."""

    def __init__(self, dsn: str, folder: Path, text: str, name: str = "fleet") -> None:
        self.dsn = dsn
        self.config = folder / f"{name}.yaml"
        self.config.write_text(text)
        self.log_path = folder / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self, *args: str) -> Fleet:
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        env = dict(os.environ, PGFLEET_DATABASE_URL=self.dsn)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pgfleet", *args, "run", "-c", str(self.config)],
            env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def children(self) -> dict[int, str]:
        """pid → process title of every live child of the supervisor."""
        found = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                state = stat.rsplit(")", 1)[1].split()[0]
                if ppid == self.pid and state != "Z":
                    title = Path(f"/proc/{entry}/cmdline").read_bytes()
                    found[int(entry)] = title.replace(b"\0", b" ").decode().strip()
            except (OSError, IndexError, ValueError):
                continue
        return found

    def workers(self, queue: str | None = None) -> dict[int, str]:
        prefix = "pgfleet worker " + (f"{queue} " if queue else "")
        return {pid: t for pid, t in self.children().items() if t.startswith(prefix)}

    def wait_workers(self, count: int, queue: str | None = None,
                     timeout: float = 30) -> dict[int, str]:
        def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"supervisor exited {self.proc.returncode}:\n{self.log()}")
            workers = self.workers(queue)
            return len(workers) == count and all(":" in t for t in workers.values())

        wait_for(ready, timeout=timeout)
        return self.workers(queue)

    def signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def wait(self, timeout: float = 60) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc is None:
            return
        # Each worker leads a process group of its own (what its jobs start).
        groups = list(self.workers())
        if self.proc.poll() is None:
            self.signal(signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self.proc.wait(10)
        # Nothing of ours may outlive the test.
        for group in [self.pid, *groups]:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        if self._log:
            self._log.close()


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def settle(seconds: float) -> None:
    """Let the system run a while (not a timing assertion)."""
    time.sleep(seconds)
