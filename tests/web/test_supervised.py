"""The `web:` section: the supervisor runs the UI as one more child, restarts it when it
dies and stops it with everything else; `pgfleet check` refuses what it would refuse."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.fleet import Fleet, alive, config_text
from tests.support.workers import wait_for
from tests.web.conftest import write_secret

LISTENING = re.compile(r"web UI listening on (http://\S+)")


def urls(fleet: Fleet) -> list[str]:
    return LISTENING.findall(fleet.log())


def page(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def refused(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=5).close()
    except urllib.error.URLError as exc:
        return isinstance(exc.reason, ConnectionRefusedError)
    return False


def web_child(fleet: Fleet) -> int | None:
    found = [pid for pid, title in fleet.children().items() if title == "pgfleet web"]
    return found[0] if len(found) == 1 else None


def test_the_supervisor_runs_restarts_and_stops_the_ui(dsn: str, tmp_path: Path) -> None:
    fleet = Fleet(dsn, tmp_path, config_text({"default": {}}, web={"listen": "127.0.0.1:0"}))
    fleet.start()
    try:
        wait_for(lambda: len(urls(fleet)) == 1, timeout=60)
        first = urls(fleet)[0]
        status, body = page(first)
        assert status == 200 and "Overview" in body
        # No token: the log says every local user can use it (docs/security.md).
        wait_for(lambda: "web UI: no token or basic auth: every local user of this host "
                         "can use it" in fleet.log(), timeout=30)
        old = web_child(fleet)
        assert old is not None

        os.kill(old, signal.SIGKILL)
        wait_for(lambda: len(urls(fleet)) == 2, timeout=60)
        assert f"web pid {old} exited: SIGKILL" in fleet.log()
        second = urls(fleet)[1]
        status, body = page(second)
        assert status == 200 and "Overview" in body
        frozen = web_child(fleet)
        assert frozen is not None and frozen != old

        # One that stops beating (here: stopped outright) is killed as stale and replaced.
        os.kill(frozen, signal.SIGSTOP)
        wait_for(lambda: len(urls(fleet)) == 3, timeout=90)
        assert f"web pid {frozen} has not beaten" in fleet.log()
        third = urls(fleet)[2]
        status, body = page(third)
        assert status == 200 and "Overview" in body
        new = web_child(fleet)
        assert new is not None and new != frozen

        children = list(fleet.children())
        fleet.signal(signal.SIGTERM)
        assert fleet.wait(60) == 0
        assert not any(alive(pid) for pid in children)
        assert refused(third)
        assert f"web pid {new} exited: exit code 0" in fleet.log()
    finally:
        fleet.stop()


def check(config: Path, dsn: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PGFLEET_DATABASE_URL": dsn}
    env.pop("PGFLEET_WEB_TOKEN", None)
    env.pop("PGFLEET_WEB_BASIC_AUTH", None)
    return subprocess.run([sys.executable, "-m", "pgfleet", "check", "-c", str(config)],
                          capture_output=True, text=True, env=env, timeout=60, check=False)


@pytest.mark.parametrize(("web", "error"), [
    ("  listen: 0.0.0.0:8080\n",
     r"^pgfleet\.yaml:4: web\.listen 0\.0\.0\.0:8080 is not a loopback address: set a "
     r"token \(PGFLEET_WEB_TOKEN or web\.token_file\)"),
    ("  listen: 127.0.0.1:8080\n  colour: red\n",
     r"^pgfleet\.yaml:5: web\.colour: unknown key `colour`"),
    ("  listen: nowhere\n", r"^pgfleet\.yaml:4: web\.listen: .*expected host:port"),
    ("  listen: 0.0.0.0:8080\n  token_file: missing.txt\n",
     r"^pgfleet\.yaml:5: web\.token_file .*missing\.txt: No such file"),
    ("  listen: 0.0.0.0:8080\n  token_file: token\n",
     r"^pgfleet\.yaml:4: web\.listen 0\.0\.0\.0:8080 is not a loopback address: serve TLS "
     r"\(web\.tls_cert and web\.tls_key\) or say that a proxy in front terminates it "
     r"\(web\.behind_proxy\)$"),
    ("  tls_cert: cert.pem\n",
     r"^pgfleet\.yaml:4: web\.tls_cert needs web\.tls_key as well$"),
])
def test_check_refuses_a_web_section_that_cannot_work(dsn: str, tmp_path: Path, web: str,
                                                        error: str) -> None:
    write_secret(tmp_path / "token", "s3cret-token-0123\n")
    config = tmp_path / "pgfleet.yaml"
    config.write_text(f"queues:\n  default: {{}}\nweb:\n{web}")
    result = check(config, dsn)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and re.search(error, lines[0].replace(str(tmp_path) + "/", "")), \
        result.stderr


def test_check_accepts_a_public_address_with_a_token_file_beside_the_config(
        dsn: str, tmp_path: Path) -> None:
    write_secret(tmp_path / "web-token", "s3cret-token-0123\n")
    config = tmp_path / "pgfleet.yaml"
    config.write_text("queues:\n  default: {}\nweb:\n  listen: 0.0.0.0:8080\n"
                      "  token_file: web-token\n  behind_proxy: true\n")
    result = check(config, dsn)
    assert result.returncode == 0, result.stderr
    assert "s3cret" not in result.stdout + result.stderr
