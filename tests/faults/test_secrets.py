"""A password in the database URL appears in no log line, error, process title
(/proc/*/cmdline, ps), metric or `status` output. The role really authenticates with it
(SCRAM), so a run that works proves the password was used."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from tests.faults import books
from tests.faults.conftest import Db
from tests.faults.helpers import create_runtime_role, enqueue, mixed_batch, wait_settled
from tests.support.cluster import Cluster, free_port
from tests.support.fleet import Fleet

pytestmark = pytest.mark.faults


def cli(dsn: str, *argv: str) -> str:
    done = subprocess.run([sys.executable, "-m", "pgfleet", *argv], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PGFLEET_DATABASE_URL": dsn})
    return f"$ pgfleet {' '.join(argv)} -> {done.returncode}\n{done.stdout}{done.stderr}"


def every_cmdline() -> str:
    """Every process's command line (what `ps` shows, process titles included)."""
    lines = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                raw = Path(f"/proc/{entry}/cmdline").read_bytes()
                comm = Path(f"/proc/{entry}/comm").read_text()
            except OSError:
                continue
            argv = raw.replace(b"\0", b" ").decode(errors="replace")
            lines.append(f"{entry} {comm.strip()} {argv}")
    ps = subprocess.run(["ps", "-eww", "-o", "pid,args"], capture_output=True, text=True)
    return "\n".join(lines) + "\n" + ps.stdout


def test_password_never_shows(db: Db, cfleet: Callable[..., Fleet], tmp_path: Path) -> None:
    cluster = db.cluster
    role = f"pgfleet_secret_{uuid.uuid4().hex[:6]}"
    secret = f"s3cr3t-{uuid.uuid4().hex[:10]}"
    wrong = f"wr0ng-{uuid.uuid4().hex[:10]}"
    create_runtime_role(cluster, db.name, role, password=secret)
    cluster.password_roles.append(role)
    cluster.write_hba()
    cluster.reload()
    url = cluster.url(db.name, user=role, password=secret)
    port = free_port()
    f = cfleet({"default": {"processes": 2}}, dsn=url,
               metrics={"enabled": True, "listen": f"127.0.0.1:{port}"})
    f.wait_workers(2)
    ids = enqueue(url, mixed_batch(50, n_sleep=5, n_fail_once=5))
    ids += enqueue(url, [{"task": "fail", "max_attempts": 1}, {"task": "crash",
                                                              "max_attempts": 1}])
    wait_settled(url, log=f.log)
    os.kill(next(iter(f.wait_workers(2))), signal.SIGKILL)
    f.wait_workers(2)

    seen: list[str] = [every_cmdline()]
    for path in ("/metrics", "/livez", "/readyz"):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as answer:
            seen.append(answer.read().decode())
    assert "pgfleet_jobs_finished" in seen[1]
    seen += [cli(url, "status"), cli(url, "status", "--json"),
             cli(url, "jobs", "list", "--json"), cli(url, "jobs", "show", str(ids[-1])),
             cli(url, "cron", "list", "-c", str(f.config))]
    # Errors: a wrong database, a wrong password, a refused port, a bad file holding the URL.
    errors = [
        cli(cluster.url("no_such_db", user=role, password=secret), "status"),
        cli(cluster.url(db.name, user=role, password=wrong), "status"),
        cli(f"postgresql://{role}:{secret}@127.0.0.1:{free_port()}/x", "status"),
        cli(f"postgresql://{role}@127.0.0.1/{db.name}?password={secret}&port=1", "status"),
    ]
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"database_url: {url}\nqueues: {{default: {{processes: 0}}}}\nbogus: 1\n")
    errors += [cli(url, "check", "-c", str(bad)), cli(url, "run", "-c", str(bad))]
    assert "password authentication failed" in errors[1], errors[1]
    assert all("***" in e for e in errors[:4]), errors
    seen += errors
    f.signal(signal.SIGTERM)
    f.wait(60)
    seen.append(f.log())
    assert "worker died" in seen[-1] or "exited: SIGKILL" in seen[-1]

    everything = "\n".join(seen)
    for word in (secret, wrong):
        assert word not in everything, everything[max(0, everything.find(word) - 500):][:1000]
    books.check(url, ids)



PLUGIN_SUITE = '''
import psycopg


def test_uses_the_database(pgfleet_dsn):
    with psycopg.connect(pgfleet_dsn) as conn:
        assert conn.execute("SELECT current_user").fetchone()[0] == ROLE
    print("the URL:", pgfleet_dsn, repr(pgfleet_dsn))
    assert pgfleet_dsn == "something else", pgfleet_dsn
'''


def test_the_pytest_plugin_never_prints_the_servers_password(
        cluster: Cluster, tmp_path: Path) -> None:
    """A failing test that uses pgfleet_dsn, printed with its arguments and locals, and a
    setup error (a role that may not create databases), with the driver's frames."""
    role, weak = (f"pgfleet_plugin_{uuid.uuid4().hex[:6]}" for _ in range(2))
    # Pieces no other text holds, joined by what a passfile escapes.
    pieces = [uuid.uuid4().hex[:8] for _ in range(3)]
    secret = f"{pieces[0]}:{pieces[1]}\\{pieces[2]}"
    with cluster.admin() as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN CREATEDB PASSWORD '{secret}'")
        conn.execute(f"CREATE ROLE {weak} LOGIN PASSWORD '{secret}'")
    cluster.password_roles += [role, weak]
    cluster.write_hba()
    cluster.reload()
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_app.py").write_text(f"ROLE = {role!r}\n" + PLUGIN_SUITE)
    outputs = []
    for who in (role, weak):
        server = (f"host=127.0.0.1 port={cluster.port} dbname=postgres user={who}"
                  f" password='{secret.replace(chr(92), chr(92) * 2)}'")
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *plugin_args(),
             "--tb=long", "-l", "-rA", "--pgfleet-server", server, str(suite)],
            capture_output=True, text=True, timeout=300, cwd=suite,
            env={k: v for k, v in os.environ.items() if not k.startswith("PG")})
        outputs.append(done.stdout + done.stderr)
    assert "1 failed" in outputs[0] and "something else" in outputs[0], outputs[0]
    assert "1 error" in outputs[1] and "permission denied to create database" in outputs[1], \
        outputs[1]
    for text in outputs:
        for piece in pieces:
            assert piece not in text, text[max(0, text.find(piece) - 500):][:1000]


def plugin_args() -> list[str]:
    registered = any(e.value == "pgfleet.pytest_plugin" for e in entry_points(group="pytest11"))
    return [] if registered else ["-p", "pgfleet.pytest_plugin"]
