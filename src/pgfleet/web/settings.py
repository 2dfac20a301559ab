"""What the web UI is told at start: where to listen, which database, who may use it."""

from __future__ import annotations

import ipaddress
import secrets
from dataclasses import dataclass, field

from pgfleet.errors import PgfleetError


class WebSettingsError(PgfleetError):
    """A setting of the web UI that cannot work; its text names the setting."""


@dataclass(frozen=True)
class WebSettings:
    dsn: str
    host: str = "127.0.0.1"
    port: int = 8080
    read_only: bool = False
    # Either is enough to get in: the token as a Bearer header or as a basic-auth password.
    token: str | None = None
    basic_user: str | None = None
    basic_password: str | None = None
    refresh_seconds: float = 2.0
    page_size: int = 50
    # Signs the CSRF tokens; a new one per process unless given (forms of an earlier
    # process then ask to be submitted again).
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))

    @property
    def has_auth(self) -> bool:
        return bool(self.token) or bool(self.basic_user and self.basic_password)

    def check(self) -> None:
        """Refuse to serve anything but loopback without a token or basic auth."""
        if not is_loopback(self.host) and not self.has_auth:
            raise WebSettingsError(
                f"--listen {self.host}:{self.port} is not a loopback address: set a token "
                "(PGFLEET_WEB_TOKEN or --token-file) or basic auth (PGFLEET_WEB_BASIC_AUTH "
                "or --basic-auth-file) first")
        if not 0 <= self.port <= 65535:
            raise WebSettingsError(f"--listen: port {self.port} is not between 0 and 65535")


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
