"""A throwaway PgBouncer (Debian's `pgbouncer`) in transaction mode, for the fault suite.

It runs as a non-root OS user (PgBouncer refuses root) on a free port of 127.0.0.1, with
an ini file and a userlist generated in a temp dir, and forwards every database name to
one PostgreSQL server (`* = host=… port=…`), so a test's fresh database is reachable
through it without a reload.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.cluster import SERVER_USER, free_port

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


def available() -> bool:
    return Path(PGBOUNCER).exists()


def version() -> tuple[int, ...]:
    out = subprocess.run([PGBOUNCER, "--version"], capture_output=True, text=True).stdout
    # "PgBouncer 1.18.0\n..."
    return tuple(int(p) for p in out.split()[1].split(".")[:2])


class Bouncer:
    """`Bouncer(server_port, users).start()`; `url(db, user)`; `stop()`."""

    def __init__(self, server_port: int, users: list[str], *, pool_mode: str = "transaction",
                 server_host: str = "127.0.0.1", pool_size: int = 4,
                 extra: dict[str, str] | None = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="pgfleet-pgbouncer-"))
        self.port = free_port()
        self.ini = self.root / "pgbouncer.ini"
        self.logfile = self.root / "pgbouncer.log"
        self.pidfile = self.root / "pgbouncer.pid"
        self.proc: subprocess.Popen[bytes] | None = None
        (self.root / "userlist.txt").write_text(
            "".join(f'"{user}" ""\n' for user in users))
        settings = {
            "listen_addr": "127.0.0.1",
            "listen_port": str(self.port),
            "unix_socket_dir": "",
            "auth_type": "trust",
            "auth_file": str(self.root / "userlist.txt"),
            "pool_mode": pool_mode,
            # Few server connections for many clients: server connections really are
            # shared between clients, as in production.
            "default_pool_size": str(pool_size),
            "max_client_conn": "500",
            "logfile": str(self.logfile),
            "pidfile": str(self.pidfile),
            "admin_users": "postgres",
            # A misconfigured backend must not keep clients waiting for minutes.
            "server_login_retry": "1",
            "query_wait_timeout": "20",
            **(extra or {}),
        }
        lines = ["[databases]", f"* = host={server_host} port={server_port}", "",
                 "[pgbouncer]", *(f"{k} = {v}" for k, v in settings.items())]
        self.ini.write_text("\n".join(lines) + "\n")
        if os.geteuid() == 0:
            entry = pwd.getpwnam(SERVER_USER)
            for path in (self.root, *self.root.iterdir()):
                os.chown(path, entry.pw_uid, entry.pw_gid)

    def start(self) -> Bouncer:
        cmd = [PGBOUNCER, str(self.ini)]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", SERVER_USER, "--", *cmd]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 15
        while "listening on 127.0.0.1" not in self.log():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"pgbouncer did not start:\n{self.log()}")
            time.sleep(0.05)
        return self

    def url(self, dbname: str, user: str = "postgres") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{dbname}"

    def log(self) -> str:
        try:
            return self.logfile.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            # runuser forwards the signal to pgbouncer; SIGINT is its "safe shutdown".
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        shutil.rmtree(self.root, ignore_errors=True)
