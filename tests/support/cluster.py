"""A throwaway PostgreSQL cluster for the fault-injection suite.

The machine's PostgreSQL on 127.0.0.1:5432 is shared, so scenarios that restart, stop or
reconfigure the database get a cluster of their own: `initdb` in a temp dir, a free TCP port
on 127.0.0.1 and a Unix socket in the same dir. PostgreSQL refuses to run as root, so when
the tests run as root every server command runs as the `postgres` OS user.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgfleet.sql import migrate as migrations
from tests.support.pg import AUDIT_TABLE

BIN = Path(os.environ.get("PGFLEET_PG_BIN", "/usr/lib/postgresql/15/bin"))
SERVER_USER = "postgres"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """One PostgreSQL server in a temp dir. `start()`, `restart(mode)`, `stop(mode)`,
    `destroy()`; databases are made from a migrated template like tests.support.pg."""

    def __init__(self, root: Path | None = None, port: int | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.root = Path(root or tempfile.mkdtemp(prefix="pgfleet-cluster-"))
        # Extra environment of the server (a preloaded libfaketime, say).
        self.env = dict(os.environ, **(env or {}))
        self.data = self.root / "data"
        self.sockets = self.root / "sock"
        self.logfile = self.root / "server.log"
        self.port = port or free_port()
        self.as_root = os.geteuid() == 0
        self.template: str | None = None
        # Roles with passwords that must authenticate with SCRAM even on a trust cluster.
        self.password_roles: list[str] = []

    # ---- server ----------------------------------------------------------------------

    def _run(self, *argv: str, check: bool = True, timeout: float = 120) -> str:
        cmd = [str(BIN / argv[0]), *argv[1:]]
        if self.as_root:
            cmd = ["runuser", "-u", SERVER_USER, "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              cwd=self.root, env=self.env)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}):\n"
                               f"{done.stdout}{done.stderr}\n{self.server_log()}")
        return done.stdout

    def init(self) -> Cluster:
        self.sockets.mkdir(parents=True, exist_ok=True)
        if self.as_root:
            entry = pwd.getpwnam(SERVER_USER)
            for path in (self.root, self.sockets):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust",
                  "--no-sync", "-E", "UTF8", "--locale", "C")
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.sockets}'",
            "max_connections": "300",
            "shared_buffers": "64MB",
            # Throwaway data: fsync buys nothing, since the OS keeps what the server wrote
            # through a crash restart (`-m immediate`) and recovery replays it. Commits
            # stay synchronous: an acknowledged commit must survive the crash, as on a
            # real server, or the books would check PostgreSQL instead of pgfleet.
            "fsync": "off",
            "full_page_writes": "off",
            "log_connections": "off",
            "password_encryption": "'scram-sha-256'",
        }
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write("\n# pgfleet fault suite\n")
            for key, value in settings.items():
                conf.write(f"{key} = {value}\n")
        self.write_hba()
        return self

    def write_hba(self) -> None:
        """Trust for everyone except the password roles, which must use SCRAM over TCP."""
        lines = [f"host all {role} 127.0.0.1/32 scram-sha-256" for role in self.password_roles]
        lines += ["local all all trust", "host all all 127.0.0.1/32 trust"]
        hba = self.data / "pg_hba.conf"
        hba.write_text("\n".join(lines) + "\n")
        if self.as_root:
            entry = pwd.getpwnam(SERVER_USER)
            os.chown(hba, entry.pw_uid, entry.pw_gid)

    def reload(self) -> None:
        self._run("pg_ctl", "reload", "-D", str(self.data))

    def start(self) -> None:
        self._run("pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data),
                  "-l", str(self.logfile))

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "stop", "-w", "-t", "60", "-m", mode, "-D", str(self.data))

    def restart(self, mode: str = "fast") -> None:
        """`fast`: backends are terminated cleanly; `immediate`: a crash, then recovery."""
        self._run("pg_ctl", "restart", "-w", "-t", "60", "-m", mode, "-D", str(self.data),
                  "-l", str(self.logfile))

    def running(self) -> bool:
        cmd = [str(BIN / "pg_ctl"), "status", "-D", str(self.data)]
        if self.as_root:
            cmd = ["runuser", "-u", SERVER_USER, "--", *cmd]
        return subprocess.run(cmd, capture_output=True).returncode == 0

    def server_log(self) -> str:
        try:
            return self.logfile.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def destroy(self) -> None:
        with contextlib.suppress(Exception):
            if self.running():
                self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    # ---- connections and databases ---------------------------------------------------

    def dsn(self, dbname: str = "postgres", user: str = "postgres", **extra: Any) -> str:
        return make_conninfo(f"postgresql://{user}@127.0.0.1:{self.port}/{dbname}", **extra)

    def url(self, dbname: str, user: str = "postgres", password: str | None = None) -> str:
        auth = f"{user}:{password}" if password else user
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{dbname}"

    def admin(self, dbname: str = "postgres") -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn(dbname), autocommit=True)

    def execute(self, statement: str | sql.Composable, params: Any = None,
                dbname: str = "postgres") -> None:
        with self.admin(dbname) as conn:
            conn.execute(statement, params)  # type: ignore[arg-type]

    def make_template(self) -> str:
        name = f"pgfleet_tpl_{uuid.uuid4().hex[:8]}"
        self.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        migrations.migrate(self.dsn(name))
        with self.admin(name) as conn:
            conn.execute(AUDIT_TABLE)
            conn.execute("GRANT SELECT, INSERT ON audit TO PUBLIC")
        self.template = name
        return name

    def create_database(self, template: str | None = None) -> str:
        name = f"pgfleet_fault_{uuid.uuid4().hex[:10]}"
        statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template:
            statement += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        self.execute(statement)
        return name

    def drop_database(self, name: str) -> None:
        with contextlib.suppress(psycopg.Error):
            self.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                         .format(sql.Identifier(name)))

    @contextlib.contextmanager
    def fresh_database(self) -> Iterator[str]:
        """A migrated database with an audit table; yields its name."""
        name = self.create_database(self.template or self.make_template())
        try:
            yield name
        finally:
            if self.running():
                self.drop_database(name)

    def backends(self, dbname: str, application_name: str | None = None) -> list[int]:
        """Backend pids of client connections to `dbname`."""
        with self.admin() as conn:
            rows = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> "
                "pg_backend_pid() AND backend_type = 'client backend'"
                " AND (%s::text IS NULL OR application_name = %s)",
                (dbname, application_name, application_name),
            ).fetchall()
        return [r[0] for r in rows]


def started_cluster() -> Cluster:
    cluster = Cluster().init()
    cluster.start()
    return cluster
