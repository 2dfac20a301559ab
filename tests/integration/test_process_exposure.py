"""What a pgfleet process shows other local accounts and takes from its surroundings:
its command line, and the working directory on sys.path."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.support.workers import wait_for

REPORT_PATH = """
import json, os, sys
with open(os.environ["PATH_REPORT"], "w") as out:
    json.dump(sys.path, out)
raise SystemExit(0)
"""


def test_the_working_directory_comes_last_on_sys_path(dsn: str, tmp_path: Path) -> None:
    (tmp_path / "report_path.py").write_text(REPORT_PATH)
    report = tmp_path / "path.json"
    env = {**os.environ, "PATH_REPORT": str(report), "PGFLEET_DATABASE_URL": dsn}
    subprocess.run([sys.executable, "-m", "pgfleet", "worker", "--queue", "q",
                    "--tasks", "report_path"], cwd=tmp_path, env=env, timeout=60,
                   capture_output=True, check=True)
    path = json.loads(report.read_text())
    # The task module was found there, but nothing in it can shadow an installed module.
    assert path[-1] == str(tmp_path)
    assert "" not in path and path.count(str(tmp_path)) == 1


SLOW_IMPORT = """
import os, time
open(os.environ["IMPORTING"], "w").close()
time.sleep(60)
"""


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def shown_while_running(argv: list[str], ready: Callable[[], bool], cwd: Path) -> str:
    """The command line of `pgfleet *argv` once ready() holds, read while it still runs."""
    proc = subprocess.Popen([sys.executable, "-m", "pgfleet", *argv], cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "IMPORTING": str(cwd / "importing")})
    try:
        wait_for(lambda: ready() and "pgfleet" in cmdline(proc.pid).split(" ", 1)[0])
        shown = cmdline(proc.pid)
        assert proc.poll() is None
        return shown
    finally:
        proc.kill()
        proc.wait(30)


def test_database_url_is_hidden_from_the_command_line(tmp_path: Path) -> None:
    # A server that accepts connections and never answers: the commands wait in connect.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        url = f"postgresql://pgfleet:s3cretpw@127.0.0.1:{silent.getsockname()[1]}/db"
        (tmp_path / "slow_import.py").write_text(SLOW_IMPORT)
        # The worker is shown hidden while it still imports its task modules ...
        shown = shown_while_running(
            ["worker", "--queue", "q", "--tasks", "slow_import", "--database-url", url],
            lambda: (tmp_path / "importing").exists(), tmp_path)
        assert "s3cretpw" not in shown and "--database-url ***" in shown, shown
        # ... and a one-shot command while it connects, in either spelling.
        for argv in (["status", "--database-url", url], ["jobs", f"--database-url={url}",
                                                          "list"]):
            shown = shown_while_running(argv, lambda: True, tmp_path)
            assert "s3cretpw" not in shown and "127.0.0.1" not in shown, shown


# Started before pgfleet: records what /proc/self/cmdline shows when the first slow
# dependency (the database driver) begins to import.
SPY = """
import os, sys

class Spy:
    def find_spec(self, name, path=None, target=None):
        if name == "psycopg" and not os.path.exists(os.environ["SEEN"]):
            with open(os.environ["SEEN"], "wb") as out:
                out.write(open("/proc/self/cmdline", "rb").read())
        return None

sys.meta_path.insert(0, Spy())
"""


def test_database_url_is_hidden_before_the_dependencies_load(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(SPY)
    seen = tmp_path / "seen"
    url = "postgresql://pgfleet:s3cretpw@127.0.0.1:1/db"
    env = {**os.environ, "SEEN": str(seen),
           "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ['PYTHONPATH']}"}
    for argv in (["--database-url", url, "status"], ["status", f"--database-url={url}"]):
        seen.unlink(missing_ok=True)
        subprocess.run([sys.executable, "-m", "pgfleet", *argv], env=env, timeout=60,
                       capture_output=True)
        shown = seen.read_bytes().replace(b"\0", b" ").decode()
        assert "s3cretpw" not in shown and "--database-url" in shown, shown
    # An application importing pgfleet keeps its own command line, option and all.
    seen.unlink()
    subprocess.run([sys.executable, "-c", "import pgfleet", "--database-url", url], env=env,
                   timeout=60, capture_output=True, check=True)
    assert "s3cretpw" in seen.read_bytes().decode()
