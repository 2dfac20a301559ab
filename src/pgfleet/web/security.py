"""Who may see the UI, which POSTs are the UI's own, and the headers every answer carries."""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import secrets
import time
from collections.abc import Awaitable, Callable

from starlette.datastructures import Headers
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp

from pgfleet.web.settings import WebSettings, is_loopback

CSRF_COOKIE = "pgfleet_csrf"
CSRF_FIELD = "csrf"
# No inline script or style anywhere: a value that slipped through escaping still cannot run.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
}

# Wrong credentials are answered one at a time, each after this long, however many
# connections send them: at most 10 guesses a second reach an answer.
FAILURE_DELAY = 0.1

Next = Callable[[Request], Awaitable[Response]]


OPERATOR = "operator"
VIEWER = "viewer"


def authorized(settings: WebSettings, header: str | None) -> str | None:
    """The role the Authorization header proves, or None. It carries a token (Bearer, or
    as a basic-auth password with any user name, so a browser's login prompt works) or the
    basic-auth pair. The viewer token gives the viewer role; the others the operator's."""
    if not settings.has_auth:
        return OPERATOR
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer":
        return _role(settings, value.strip())
    if scheme.lower() != "basic":
        return None
    try:
        user, _, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    role = _role(settings, password)
    if role is not None:
        return role
    pair = _same(user, settings.basic_user) & _same(password, settings.basic_password)
    return OPERATOR if pair else None


def _role(settings: WebSettings, token: str) -> str | None:
    operator, viewer = _same(token, settings.token), _same(token, settings.viewer_token)
    return OPERATOR if operator else VIEWER if viewer else None


def _same(given: str, expected: str | None) -> bool:
    return expected is not None and hmac.compare_digest(given.encode(), expected.encode())


def host_is_loopback(host_header: str) -> bool:
    """Without auth only a loopback Host is served: a page on another site cannot reach
    the UI by pointing a name it controls at 127.0.0.1 (DNS rebinding)."""
    host = host_header.rsplit(":", 1)[0] if not host_header.endswith("]") else host_header
    return is_loopback(host)


def same_origin(headers: Headers, behind_proxy: bool = False) -> bool:
    """Did this POST come from the UI's own pages? A browser says so in Sec-Fetch-Site
    (which survives a reverse proxy); one too old for that sends an Origin, which must be
    the Host. X-Forwarded-Host counts too only when the operator said a proxy is in front
    (`--behind-proxy`): without one, any client can send that header, and taking it would
    let a page name its own origin there. "null", from a sandboxed frame or a data: URL, is
    never ours. A request with neither header is not from a browser: it holds the cookie
    and the token because it read them itself, which is no forgery. "none" (a request the
    user made, not a page) still has its Origin checked when it sends one: no browser sends
    "none" with another site's Origin."""
    site = headers.get("sec-fetch-site")
    if site is not None and site != "none":
        return site == "same-origin"
    origin = headers.get("origin")
    if origin is None:
        return True
    _, sep, rest = origin.partition("://")
    hosts = {headers.get("host", "").lower()}
    if behind_proxy:
        # A proxy that appends to the header (host1, host2) names the client's host first.
        hosts.add(headers.get("x-forwarded-host", "").split(",")[0].strip().lower())
    return bool(sep) and rest.rstrip("/").lower() in hosts - {""}


def csrf_token(settings: WebSettings, cookie: str) -> str:
    return hmac.new(settings.secret, cookie.encode(), hashlib.sha256).hexdigest()


def csrf_valid(settings: WebSettings, cookie: str | None, submitted: str | None) -> bool:
    if not cookie or not submitted:
        return False
    return hmac.compare_digest(csrf_token(settings, cookie), submitted)


class Guard(BaseHTTPMiddleware):
    """Authentication, the CSRF cookie, the security headers and Server-Timing."""

    def __init__(self, app: ASGIApp, settings: WebSettings) -> None:
        super().__init__(app)
        self.settings = settings
        self.failures = asyncio.Lock()

    async def dispatch(self, request: Request, call_next: Next) -> Response:
        started = time.perf_counter()
        response = await self._answer(request, call_next)
        response.headers.update(SECURITY_HEADERS)
        if not request.url.path.startswith("/static/"):
            response.headers["Cache-Control"] = "no-store"
        elapsed_ms = (time.perf_counter() - started) * 1000
        response.headers["Server-Timing"] = f"app;dur={elapsed_ms:.1f}"
        return response

    async def _answer(self, request: Request, call_next: Next) -> Response:
        if not self.settings.has_auth and not host_is_loopback(request.headers.get("host", "")):
            return PlainTextResponse("this UI answers to a loopback host name only\n", 421)
        role = authorized(self.settings, request.headers.get("authorization"))
        if role is None:
            if request.headers.get("authorization"):
                async with self.failures:
                    await asyncio.sleep(FAILURE_DELAY)
            return PlainTextResponse("authentication required\n", 401,
                                     headers={"WWW-Authenticate": 'Basic realm="pgfleet"'})
        if request.method == "POST" and not same_origin(request.headers,
                                                          self.settings.behind_proxy):
            # Beside the CSRF token: another site's form (a sibling port or subdomain is
            # the same *site*, so SameSite lets the cookie through) is refused outright.
            return PlainTextResponse("a form from another origin is refused\n", 403)
        request.state.role = role
        # What this request may do: nothing in --read-only, nothing for a viewer.
        request.state.read_only = self.settings.read_only or role == VIEWER
        cookie = request.cookies.get(CSRF_COOKIE)
        if not cookie:
            cookie = secrets.token_urlsafe(32)
        request.state.csrf = csrf_token(self.settings, cookie)
        request.state.csrf_cookie = cookie
        response = await call_next(request)
        if request.cookies.get(CSRF_COOKIE) != cookie:
            # Behind a proxy or over TLS the browser reaches the UI by https: the cookie
            # then never travels in clear.
            secure = self.settings.behind_proxy or request.url.scheme == "https"
            response.set_cookie(CSRF_COOKIE, cookie, httponly=True, samesite="strict",
                                path="/", secure=secure)
        return response
