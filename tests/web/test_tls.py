"""TLS built into `pgfleet web`, and plain HTTP refused off loopback unless a proxy in front
terminates TLS."""

from __future__ import annotations

import ssl
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.web.conftest import WebServer, run_web, write_secret

TOKEN = "tls-token-0123456789"


def self_signed(folder: Path, name: str = "ui") -> tuple[Path, Path]:
    cert, key = folder / f"{name}.crt", folder / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True,
                   capture_output=True)
    key.chmod(0o600)
    return cert, key


def trusting(cert: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cert))


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    return self_signed(tmp_path)


def test_the_ui_serves_https_with_secure_cookies(
        web: Callable[..., WebServer], dsn: str, pair: tuple[Path, Path]) -> None:
    cert, key = pair
    server = web("--tls-cert", str(cert), "--tls-key", str(key))
    assert server.url.startswith("https://127.0.0.1:")
    with httpx.Client(base_url=server.url, verify=trusting(cert)) as client:
        page = client.get("/")
        assert page.status_code == 200
        cookie = page.headers["set-cookie"]
        assert "pgfleet_csrf=" in cookie and "Secure" in cookie and "HttpOnly" in cookie
    # Plain HTTP to the TLS port gets no page.
    plain = server.url.replace("https://", "http://")
    with pytest.raises(httpx.HTTPError):
        httpx.get(plain, timeout=5)


def test_plain_http_on_loopback_sets_no_secure_cookie(
        web: Callable[..., WebServer], dsn: str) -> None:
    server = web()
    cookie = httpx.get(server.url).headers["set-cookie"]
    assert "pgfleet_csrf=" in cookie and "Secure" not in cookie


def test_off_loopback_plain_http_is_refused_unless_a_proxy_terminates_tls(
        web: Callable[..., WebServer], dsn: str, pair: tuple[Path, Path]) -> None:
    refused = run_web(["--listen", "0.0.0.0:0"], env={"PGFLEET_WEB_TOKEN": TOKEN})
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "pgfleet: error: --listen 0.0.0.0:0 is not a loopback address: serve TLS "
        "(--tls-cert and --tls-key) or say that a proxy in front terminates it "
        "(--behind-proxy)"]
    cert, key = pair
    server = web("--listen", "0.0.0.0:0", "--tls-cert", str(cert), "--tls-key", str(key),
                 env={"PGFLEET_WEB_TOKEN": TOKEN})
    url = server.url.replace("0.0.0.0", "127.0.0.1")
    assert url.startswith("https://")
    with httpx.Client(base_url=url, verify=trusting(cert)) as client:
        assert client.get("/").status_code == 401
        answer = client.get("/", headers={"Authorization": f"Bearer {TOKEN}"})
        assert answer.status_code == 200 and "Secure" in answer.headers["set-cookie"]
    proxied = web("--listen", "0.0.0.0:0", "--behind-proxy", env={"PGFLEET_WEB_TOKEN": TOKEN})
    assert proxied.url.startswith("http://")
    cookie = httpx.get(proxied.url.replace("0.0.0.0", "127.0.0.1"),
                       headers={"Authorization": f"Bearer {TOKEN}"}).headers["set-cookie"]
    assert "Secure" in cookie  # the browser reaches the proxy by https


def test_bad_tls_files_are_one_line_at_start(dsn: str, tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    other_cert, _ = self_signed(tmp_path, "other")
    loose = tmp_path / "loose.key"
    write_secret(loose, key.read_text())
    loose.chmod(0o644)
    garbage = tmp_path / "garbage.crt"
    garbage.write_text("not a certificate\n")
    cases = [
        (["--tls-cert", str(cert)], "--tls-cert needs --tls-key as well"),
        (["--tls-key", str(key)], "--tls-key needs --tls-cert as well"),
        (["--tls-cert", str(cert), "--tls-key", str(loose)],
         f"--tls-key {loose}: group or others may open it (mode 0644): chmod 600 it"),
        (["--tls-cert", str(tmp_path / "none.crt"), "--tls-key", str(key)],
         f"--tls-cert {tmp_path / 'none.crt'}: No such file or directory"),
        (["--tls-cert", str(other_cert), "--tls-key", str(key)],
         f"--tls-cert {other_cert} with --tls-key {key}: not a certificate and key that "
         "match"),
        (["--tls-cert", str(garbage), "--tls-key", str(key)],
         f"--tls-cert {garbage} with --tls-key {key}: not a certificate and key that match"),
    ]
    for args, message in cases:
        result = run_web(args)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2, (args, result.stderr)
        assert len(lines) == 1 and lines[0].startswith(f"pgfleet: error: {message}"), lines
