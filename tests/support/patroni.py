"""A throwaway high-availability stack: one etcd and two Patroni nodes managing
PostgreSQL 15, all on free ports of 127.0.0.1, in one temp dir that `destroy()` removes.

Patroni and PostgreSQL run as the `postgres` OS user when the tests run as root, since
PostgreSQL refuses root. Timings are short (ttl 8 s, loop_wait 1 s), so a failover takes
a few seconds, and a replica however far behind may be promoted (maximum_lag_on_failover
is huge): the failover of an asynchronous replica is what the tests are about.

Each node's replication connection goes through a TCP proxy of its own (the node's
`connect_address` in Patroni is the proxy): the replica streams from the primary's proxy.
`start_lag()` stops that proxy forwarding, so WAL really stops reaching the replica while
the primary keeps committing. Clients use the nodes' real ports.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psycopg
import yaml
from psycopg import sql

from tests.support.cluster import BIN, SERVER_USER, free_port
from tests.support.proxy import Proxy

PATRONI = shutil.which("patroni") or "/usr/bin/patroni"
ETCD = shutil.which("etcd") or "/usr/bin/etcd"
ETCDCTL = shutil.which("etcdctl") or "/usr/bin/etcdctl"
NAMESPACE = "/service"
# Large enough that Patroni promotes a replica however far behind it is.
HUGE_LAG = 1 << 40


def available() -> str | None:
    """Why the stack cannot run here, or None."""
    for tool in (PATRONI, ETCD, ETCDCTL):
        if not os.path.exists(tool):
            return f"{tool} is missing (make setup installs patroni, etcd-server, etcd-client)"
    if not (BIN / "postgres").exists():
        return f"{BIN}/postgres is missing"
    return None


def wait_until(check: Callable[[], Any], timeout: float, what: str,
               interval: float = 0.1, log: Callable[[], str] | None = None) -> Any:
    """Poll `check` until it returns something true; return it. On a timeout, say what
    was awaited (and the tail of `log`)."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
        except (OSError, psycopg.Error, ValueError) as exc:
            last, value = exc, None
        if value:
            return value
        time.sleep(interval)
    tail = log()[-6000:] if log else ""
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}"
                         f" (last error: {last})\n{tail}")


@dataclass
class Node:
    name: str
    root: Path
    port: int  # PostgreSQL, for clients
    rest: int  # Patroni's REST API
    replication: Proxy  # what the other node streams from
    proc: subprocess.Popen[bytes] | None = None
    log_file: IO[bytes] | None = field(default=None, repr=False)

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        return self.root / "patroni.log"

    def dsn(self, dbname: str = "postgres", **extra: Any) -> str:
        params = {"host": "127.0.0.1", "port": self.port, "user": "postgres",
                  "dbname": dbname, "connect_timeout": 3, **extra}
        return " ".join(f"{k}={v}" for k, v in params.items())

    def connect(self, dbname: str = "postgres") -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn(dbname), autocommit=True)

    def in_recovery(self) -> bool | None:
        """True on a replica, False on a primary, None when PostgreSQL does not answer."""
        try:
            with self.connect() as conn:
                row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
        except psycopg.Error:
            return None
        return bool(row and row[0])

    def patroni_alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        try:
            text = self.log_path.read_text(errors="replace")[-3000:]
        except OSError:
            text = ""
        server = ""
        with contextlib.suppress(OSError):
            logs = sorted((self.data / "log").glob("*.log"))
            if logs:
                server = logs[-1].read_text(errors="replace")[-2000:]
        return f"--- {self.name} patroni\n{text}\n--- {self.name} postgres\n{server}\n"


@dataclass
class FailoverReport:
    old: str
    new: str
    lag_bytes: int  # WAL the old primary had written that the replica had not received
    seconds: float  # from the crash to a writable new primary
    timeline: int  # the new primary's


class HaStack:
    """etcd + two Patroni nodes. `start()`, `primary()`, `replica()`, `dsn()`,
    `start_lag()`, `fail_over()`, `rejoin()`, `destroy()` (always: it ends every process
    and removes the temp dir)."""

    def __init__(self, synchronous: bool = False, strict: bool = False) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="pgfleet-ha-"))
        self.scope = f"pgfleet-ha-{uuid.uuid4().hex[:8]}"
        self.synchronous = synchronous
        self.strict = strict
        self.as_root = os.geteuid() == 0
        self.etcd_client = free_port()
        self.etcd_peer = free_port()
        self.etcd: subprocess.Popen[bytes] | None = None
        self.nodes: list[Node] = []
        self._files: list[IO[bytes]] = []
        for i in range(2):
            port = free_port()
            node_root = self.root / f"node{i}"
            node_root.mkdir()
            self.nodes.append(Node(f"node{i}", node_root, port, free_port(),
                                   Proxy(("127.0.0.1", port))))
        if self.as_root:
            entry = pwd.getpwnam(SERVER_USER)
            for path in (self.root, *(n.root for n in self.nodes)):
                os.chown(path, entry.pw_uid, entry.pw_gid)

    # ---- processes ---------------------------------------------------------------------

    def _spawn(self, argv: list[str], log: Path, as_server: bool) -> subprocess.Popen[bytes]:
        out = open(log, "ab")  # noqa: SIM115 - closed in destroy()
        self._files.append(out)
        # Patroni runs on the system's Python: nothing of the tests' environment leaks in.
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(self.root)}
        extra: dict[str, Any] = {}
        if as_server and self.as_root:
            extra = {"user": SERVER_USER, "group": SERVER_USER}
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=self.root, start_new_session=True, **extra)

    def _start_etcd(self) -> None:
        peer = f"http://127.0.0.1:{self.etcd_peer}"
        client = f"http://127.0.0.1:{self.etcd_client}"
        self.etcd = self._spawn([
            ETCD, "--name", "etcd0", "--data-dir", str(self.root / "etcd"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"etcd0={peer}", "--initial-cluster-state", "new",
            "--initial-cluster-token", self.scope, "--log-level", "warn",
        ], self.root / "etcd.log", as_server=False)
        wait_until(lambda: self._etcd_get("/health").get("health") == "true", 30,
                   "etcd to answer", log=lambda: self._read(self.root / "etcd.log"))

    def _etcd_get(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.etcd_client}{path}",
                                    timeout=2) as answer:
            data: dict[str, Any] = json.load(answer)
        return data

    def _etcdctl(self, *args: str) -> str:
        done = subprocess.run(
            [ETCDCTL, f"--endpoints=http://127.0.0.1:{self.etcd_client}", *args],
            capture_output=True, text=True, timeout=30, env={"ETCDCTL_API": "3",
                                                             "PATH": "/usr/bin:/bin"})
        if done.returncode != 0:
            raise RuntimeError(f"etcdctl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def _patroni_config(self, node: Node) -> dict[str, Any]:
        sockets = str(node.root)
        parameters = {
            "unix_socket_directories": sockets,
            "max_connections": 200,
            "shared_buffers": "32MB",
            "wal_level": "replica",
            "hot_standby": "on",
            "wal_log_hints": "on",  # pg_rewind brings a failed primary back as a replica
            "max_wal_senders": 10,
            "max_replication_slots": 10,
            "wal_keep_size": "256MB",
            # Throwaway data; commits stay synchronous on the primary's own disk.
            "fsync": "off",
            "full_page_writes": "off",
            "synchronous_commit": "on",
            "logging_collector": "on",
            "log_directory": "log",
            "log_min_messages": "warning",
        }
        hba = ["local all all trust", "host all all 127.0.0.1/32 trust",
               "host replication all 127.0.0.1/32 trust", "local replication all trust"]
        return {
            "scope": self.scope,
            "namespace": NAMESPACE,
            "name": node.name,
            "log": {"level": "INFO"},
            "restapi": {"listen": f"127.0.0.1:{node.rest}",
                        "connect_address": f"127.0.0.1:{node.rest}"},
            "etcd3": {"hosts": [f"127.0.0.1:{self.etcd_client}"]},
            "bootstrap": {
                "dcs": {
                    # loop_wait + 2 * retry_timeout <= ttl, Patroni's rule.
                    "ttl": 8, "loop_wait": 1, "retry_timeout": 3,
                    "maximum_lag_on_failover": HUGE_LAG,
                    "synchronous_mode": self.synchronous,
                    "synchronous_mode_strict": self.strict,
                    "postgresql": {"use_pg_rewind": True, "use_slots": True,
                                   "parameters": parameters},
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C"}, "no-sync"],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{node.port}",
                # The other node replicates (and rewinds) through this node's proxy.
                "connect_address": f"127.0.0.1:{node.replication.port}",
                "data_dir": str(node.data),
                "bin_dir": str(BIN),
                "pgpass": str(node.root / "pgpass"),
                "use_unix_socket": True,
                "remove_data_directory_on_rewind_failure": True,
                "remove_data_directory_on_diverged_timelines": True,
                "authentication": {"superuser": {"username": "postgres"},
                                   "replication": {"username": "postgres"},
                                   "rewind": {"username": "postgres"}},
                "parameters": {"unix_socket_directories": sockets},
                "pg_hba": hba,
            },
            "watchdog": {"mode": "off"},
            "tags": {"nofailover": False, "noloadbalance": False},
        }

    def start_patroni(self, node: Node) -> None:
        config = node.root / "patroni.yml"
        config.write_text(yaml.safe_dump(self._patroni_config(node), sort_keys=False))
        if self.as_root:
            entry = pwd.getpwnam(SERVER_USER)
            os.chown(config, entry.pw_uid, entry.pw_gid)
        node.proc = self._spawn([PATRONI, str(config)], node.log_path, as_server=True)

    def start(self) -> HaStack:
        self._start_etcd()
        first, second = self.nodes
        self.start_patroni(first)
        wait_until(lambda: first.in_recovery() is False, 90, "the first node to be a primary",
                   log=self.logs)
        self.start_patroni(second)
        self.wait_streaming(second)
        return self

    # ---- roles -------------------------------------------------------------------------

    def node_named(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def leader(self) -> str | None:
        """The node whose name the leader key holds, or None."""
        out = self._etcdctl("get", "--print-value-only", f"{NAMESPACE}/{self.scope}/leader")
        return out.strip() or None

    def primary(self) -> Node:
        """The node that is the leader and accepts writes."""
        def writable() -> Node | None:
            name = self.leader()
            node = self.node_named(name) if name else None
            return node if node and node.in_recovery() is False else None
        found: Node = wait_until(writable, 60, "a writable primary", log=self.logs)
        return found

    def replica(self) -> Node:
        primary = self.primary()
        return next(n for n in self.nodes if n is not primary)

    def wait_streaming(self, node: Node, timeout: float = 120) -> None:
        """`node` is a replica whose WAL receiver streams from the primary, caught up."""
        def streaming() -> bool:
            with node.connect() as conn:
                row = conn.execute(
                    "SELECT pg_is_in_recovery(),"
                    " (SELECT status FROM pg_stat_wal_receiver)").fetchone()
            if not row or not row[0] or row[1] != "streaming":
                return False
            primary = next(n for n in self.nodes if n is not node)
            with primary.connect() as conn:
                lag = conn.execute(
                    "SELECT max(pg_current_wal_lsn() - replay_lsn) FROM pg_stat_replication"
                    " WHERE state = 'streaming'").fetchone()
            return bool(lag and lag[0] is not None and lag[0] < 1 << 20)
        wait_until(streaming, timeout, f"{node.name} to stream from the primary",
                   interval=0.2, log=self.logs)

    def wait_replayed(self, timeout: float = 30) -> None:
        """The replica has replayed everything the primary had written when called."""
        primary = self.primary()
        replica = next(n for n in self.nodes if n is not primary)
        with primary.connect() as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None

        def replayed() -> bool:
            with replica.connect() as conn:
                got = conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn",
                                   (row[0],)).fetchone()
            return bool(got and got[0])
        wait_until(replayed, timeout, f"{replica.name} to replay up to {row[0]}",
                   log=self.logs)

    # ---- databases ---------------------------------------------------------------------

    def dsn(self, dbname: str, ports: tuple[int, int] | None = None, **extra: Any) -> str:
        """A multi-host DSN that lands on whichever node accepts writes. `ports`: other
        ports in the nodes' order (proxies in front of them, say)."""
        first, second = ports or (self.nodes[0].port, self.nodes[1].port)
        params = {"host": "127.0.0.1,127.0.0.1", "port": f"{first},{second}",
                  "user": "postgres", "dbname": dbname,
                  "target_session_attrs": "read-write", "connect_timeout": 3, **extra}
        return " ".join(f"{k}={v}" for k, v in params.items())

    def create_database(self, name: str) -> None:
        with self.primary().connect() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))

    def set_synchronous(self, on: bool, strict: bool = False) -> None:
        """Patroni's synchronous_mode (and _strict) through its dynamic configuration;
        returns once the primary has a synchronous standby (when on)."""
        body = json.dumps({"synchronous_mode": on, "synchronous_mode_strict": strict}).encode()
        primary = self.primary()
        request = urllib.request.Request(f"http://127.0.0.1:{primary.rest}/config",
                                         data=body, method="PATCH")
        with urllib.request.urlopen(request, timeout=10):
            pass
        self.synchronous, self.strict = on, strict

        def applied() -> bool:
            with primary.connect() as conn:
                row = conn.execute(
                    "SELECT current_setting('synchronous_standby_names'),"
                    " (SELECT count(*) FROM pg_stat_replication"
                    "  WHERE sync_state = 'sync')").fetchone()
            assert row is not None
            return (row[0] != "" and row[1] == 1) if on else row[0] == ""
        wait_until(applied, 60, f"synchronous mode {'on' if on else 'off'}", log=self.logs)

    # ---- faults ------------------------------------------------------------------------

    def start_lag(self) -> None:
        """WAL stops reaching the replica: the primary's replication proxy swallows what
        it is sent (no reset, as a network dropping packets)."""
        self.primary().replication.blackhole()

    def lag_bytes(self) -> int:
        """WAL the primary has written and the replica has not received."""
        primary = self.primary()
        replica = next(n for n in self.nodes if n is not primary)
        with primary.connect() as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        with replica.connect() as conn:
            got = conn.execute("SELECT pg_wal_lsn_diff(%s::pg_lsn,"
                               " pg_last_wal_receive_lsn())::bigint",
                               (row[0] if row else None,)).fetchone()
        # A replica that received a record the primary has not flushed yet counts 0.
        return max(0, int(got[0])) if got and got[0] is not None else 0

    def fail_over(self, timeout: float = 60) -> FailoverReport:
        """The primary's host dies: its Patroni is killed and its PostgreSQL stopped `-m
        immediate` (no shutdown checkpoint, nothing more sent to the replica). Its leader
        key is then deleted, standing for the key's ttl running out, and the other node
        promotes itself. Returns once that node accepts writes."""
        old = self.primary()
        new = next(n for n in self.nodes if n is not old)
        lag = self.lag_bytes()
        began = time.monotonic()
        assert old.proc is not None
        old.proc.send_signal(signal.SIGKILL)
        old.proc.wait(30)
        self._pg_ctl("stop", "-m", "immediate", "-w", "-t", "30", "-D", str(old.data))
        # The replica's WAL receiver sees its connection end at once, as when a host dies
        # and its replies stop (after wal_receiver_timeout, on a real network).
        old.replication.cut()
        self._etcdctl("del", f"{NAMESPACE}/{self.scope}/leader")

        def promoted() -> bool:
            return self.leader() == new.name and new.in_recovery() is False
        wait_until(promoted, timeout, f"{new.name} to be promoted", log=self.logs)
        seconds = time.monotonic() - began
        with new.connect() as conn:
            row = conn.execute("SELECT timeline_id FROM pg_control_checkpoint()").fetchone()
            wal = conn.execute("SELECT pg_walfile_name(pg_current_wal_lsn())").fetchone()
        # pg_control's checkpoint may still show the old timeline until the first
        # checkpoint; the WAL file name carries the current one.
        timeline = int(wal[0][:8], 16) if wal else (int(row[0]) if row else 0)
        return FailoverReport(old.name, new.name, lag, seconds, timeline)

    def rejoin(self, node: Node, wait: bool = True, timeout: float = 120) -> None:
        """Bring a failed node back: its replication proxy opens again and its Patroni
        starts; Patroni rewinds it and it streams from the new primary (awaited unless
        `wait` is false: then call wait_streaming)."""
        node.replication.restore()
        if not node.patroni_alive():
            self.start_patroni(node)
        if wait:
            self.wait_streaming(node, timeout)

    def _pg_ctl(self, *argv: str) -> None:
        cmd = [str(BIN / "pg_ctl"), *argv]
        if self.as_root:
            cmd = ["runuser", "-u", SERVER_USER, "--", *cmd]
        subprocess.run(cmd, capture_output=True, timeout=60)

    # ---- reports and teardown ----------------------------------------------------------

    @staticmethod
    def _read(path: Path) -> str:
        try:
            return path.read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def logs(self) -> str:
        return "".join(n.log() for n in self.nodes) + "--- etcd\n" + self._read(
            self.root / "etcd.log")

    def destroy(self) -> None:
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.proc.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.proc.wait(10)
            if (node.data / "postmaster.pid").exists():
                self._pg_ctl("stop", "-m", "immediate", "-w", "-t", "30", "-D", str(node.data))
            self._kill_postmaster(node)
            node.replication.close()
        if self.etcd is not None and self.etcd.poll() is None:
            self.etcd.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.etcd.wait(10)
        for out in self._files:
            out.close()
        shutil.rmtree(self.root, ignore_errors=True)

    @staticmethod
    def _kill_postmaster(node: Node) -> None:
        """A postmaster pg_ctl could not stop (its pid file gone mid-start) is found by its
        data directory on its command line and killed with its process group."""
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if str(node.data).encode() in cmdline and cmdline[0].endswith(b"postgres"):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(entry), signal.SIGKILL)
