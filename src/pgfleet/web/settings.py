"""What the web UI is told at start: where to listen, which database, who may use it."""

from __future__ import annotations

import ipaddress
import os
import secrets
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from pgfleet.errors import PgfleetError

TOKEN_ENV = "PGFLEET_WEB_TOKEN"
VIEWER_TOKEN_ENV = "PGFLEET_WEB_VIEWER_TOKEN"
BASIC_ENV = "PGFLEET_WEB_BASIC_AUTH"
# A token is all a request needs: a short one is guessed, even at the pace wrong guesses
# are answered at.
MIN_TOKEN_LENGTH = 16


class WebSettingsError(PgfleetError):
    """A setting of the web UI that cannot work; its text names the setting."""


@dataclass(frozen=True)
class Labels:
    """How the settings are named where they were given: command-line options for
    `pgfleet web`, `FILE:LINE: web.key` for the `web:` section of the config."""

    listen: str = "--listen"
    token_file: str = "--token-file"
    basic_auth_file: str = "--basic-auth-file"
    viewer_token_file: str = "--viewer-token-file"
    tls_cert: str = "--tls-cert"
    tls_key: str = "--tls-key"
    behind_proxy: str = "--behind-proxy"

    @staticmethod
    def short(label: str) -> str:
        """The option or key alone, without a `FILE:LINE:` in front."""
        return label.rsplit(" ", 1)[-1]


@dataclass(frozen=True)
class WebSettings:
    dsn: str
    host: str = "127.0.0.1"
    port: int = 8080
    read_only: bool = False
    # Either is enough to get in: the token as a Bearer header or as a basic-auth password.
    token: str | None = None
    # A second token that may look but not act (the viewer role); `token` is the operator's.
    viewer_token: str | None = None
    basic_user: str | None = None
    basic_password: str | None = None
    # A reverse proxy is in front: trust its X-Forwarded-Host in the Origin check, and let
    # uvicorn take X-Forwarded-For/-Proto from the addresses in FORWARDED_ALLOW_IPS.
    behind_proxy: bool = False
    # Served over TLS with this certificate chain and key (PEM files), checked at start.
    tls_cert: Path | None = None
    tls_key: Path | None = None
    refresh_seconds: float = 2.0
    page_size: int = 50
    # Signs the CSRF tokens; a new one per process unless given (forms of an earlier
    # process then ask to be submitted again).
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    labels: Labels = Labels()

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None

    @property
    def has_auth(self) -> bool:
        return (bool(self.token) or bool(self.viewer_token)
                or bool(self.basic_user and self.basic_password))

    def check(self) -> None:
        """Refuse to serve anything but loopback without a token or basic auth."""
        names = self.labels
        if not is_loopback(self.host) and not self.has_auth:
            raise WebSettingsError(
                f"{names.listen} {self.host}:{self.port} is not a loopback address: set a "
                f"token ({TOKEN_ENV} or {names.short(names.token_file)}) or basic auth "
                f"({BASIC_ENV} or {names.short(names.basic_auth_file)}) first")
        if not is_loopback(self.host) and self.tls_cert is None and not self.behind_proxy:
            # A token or a password sent in clear is read by anyone on the path.
            raise WebSettingsError(
                f"{names.listen} {self.host}:{self.port} is not a loopback address: serve "
                f"TLS ({names.short(names.tls_cert)} and {names.short(names.tls_key)}) or "
                f"say that a proxy in front terminates it ({names.short(names.behind_proxy)})")
        if not 0 <= self.port <= 65535:
            raise WebSettingsError(
                f"{names.listen}: port {self.port} is not between 0 and 65535")


def _secret_env(name: str) -> str | None:
    """A secret from the environment; one that is set but blank is refused, as an empty
    secret file is (a token of spaces would pass any client sending spaces)."""
    value = os.environ.get(name)
    if value and not value.strip():
        raise WebSettingsError(f"{name} holds only white space")
    return value.strip() if value else None


def build_settings(listen: str, dsn: str, read_only: bool, token_file: Path | None,
                   basic_auth_file: Path | None, labels: Labels = Labels(),
                   behind_proxy: bool = False, tls_cert: Path | None = None,
                   tls_key: Path | None = None,
                   viewer_token_file: Path | None = None) -> WebSettings:
    """Settings from the options (or the config) and the environment; secrets never come
    from argv, where `ps` would show them."""
    host, port = parse_listen(listen)
    token = _secret_file(token_file, labels.token_file) or _secret_env(TOKEN_ENV)
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        where = f"{labels.token_file} {token_file}" if token_file else TOKEN_ENV
        raise WebSettingsError(
            f"{where}: the token has {len(token)} characters, fewer than "
            f"{MIN_TOKEN_LENGTH} (e.g. `openssl rand -hex 32`)")
    viewer = (_secret_file(viewer_token_file, labels.viewer_token_file)
              or _secret_env(VIEWER_TOKEN_ENV))
    if viewer is not None and len(viewer) < MIN_TOKEN_LENGTH:
        where = (f"{labels.viewer_token_file} {viewer_token_file}" if viewer_token_file
                 else VIEWER_TOKEN_ENV)
        raise WebSettingsError(
            f"{where}: the token has {len(viewer)} characters, fewer than "
            f"{MIN_TOKEN_LENGTH} (e.g. `openssl rand -hex 32`)")
    if viewer is not None and viewer == token:
        raise WebSettingsError(f"the viewer token is the operator's token: a viewer could "
                               f"act ({VIEWER_TOKEN_ENV} or "
                               f"{Labels.short(labels.viewer_token_file)})")
    basic = _secret_file(basic_auth_file, labels.basic_auth_file) or os.environ.get(BASIC_ENV)
    user, password = parse_basic(basic, labels.basic_auth_file if basic_auth_file
                                 else BASIC_ENV) if basic else (None, None)
    check_tls(tls_cert, tls_key, labels)
    return WebSettings(dsn=dsn, host=host, port=port, read_only=read_only, token=token,
                       viewer_token=viewer,
                       basic_user=user, basic_password=password, labels=labels,
                       behind_proxy=behind_proxy, tls_cert=tls_cert, tls_key=tls_key)


def check_tls(cert: Path | None, key: Path | None, labels: Labels) -> None:
    """Both files or neither, and a pair that loads: a mistake is one line at start, not
    a handshake failure for every browser later."""
    if (cert is None) != (key is None):
        given, missing = ((labels.tls_cert, labels.tls_key) if key is None
                          else (labels.tls_key, labels.tls_cert))
        raise WebSettingsError(f"{given} needs {Labels.short(missing)} as well")
    if cert is None or key is None:
        return
    try:
        mode = key.stat().st_mode
    except OSError as exc:
        raise WebSettingsError(f"{labels.tls_key} {key}: {exc.strerror}") from None
    if mode & 0o077:
        raise WebSettingsError(
            f"{labels.tls_key} {key}: group or others may open it (mode {mode & 0o777:04o}): "
            "chmod 600 it")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert, key)
    except FileNotFoundError as exc:
        raise WebSettingsError(f"{labels.tls_cert} {cert}: {exc.strerror}") from None
    except (ssl.SSLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)
        raise WebSettingsError(
            f"{labels.tls_cert} {cert} with {Labels.short(labels.tls_key)} {key}: not a "
            f"certificate and key that match ({reason})") from None


def _secret_file(path: Path | None, option: str) -> str | None:
    if path is None:
        return None
    try:
        mode = path.stat().st_mode
        # Another account that can read the file can use the UI as its owner would.
        if mode & 0o077:
            raise WebSettingsError(
                f"{option} {path}: group or others may open it (mode {mode & 0o777:04o}): "
                f"chmod 600 it")
        text = path.read_text("utf-8").strip()
    except OSError as exc:
        raise WebSettingsError(f"{option} {path}: {exc.strerror}") from None
    if not text:
        raise WebSettingsError(f"{option} {path}: the file is empty")
    return text


def is_loopback(host: str) -> bool:
    """True only for names that cannot be reached from another machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_listen(value: str) -> tuple[str, int]:
    """'HOST:PORT' (IPv6 as '[::1]:8080') into (host, port)."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise WebSettingsError(f"--listen {value!r}: expected HOST:PORT, e.g. 127.0.0.1:8080")
    return host.strip("[]"), int(port)


def parse_basic(value: str, where: str) -> tuple[str, str]:
    """'user:password' into its two parts; both must be non-empty."""
    user, sep, password = value.strip().partition(":")
    if not sep or not user or not password:
        raise WebSettingsError(f"{where}: expected 'user:password' with both parts non-empty")
    return user, password
