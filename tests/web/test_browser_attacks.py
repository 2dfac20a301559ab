"""Attacks in a real browser: `javascript:` URLs in rows never become links, and a form
on another site's page (another port of the same host: the same *site*, so the
SameSite cookie goes along) cannot make the UI act."""

from __future__ import annotations

import html
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.web.conftest import WebServer, dead_job, job_state


def test_javascript_urls_in_rows_never_become_links(web: Callable[..., WebServer], dsn: str,
                                                    page: Any) -> None:
    job_id = dead_job(
        dsn, queue="javascript:alert(1)",
        args='{"url": "javascript:alert(2)", "a": "<a href=\\"javascript:alert(3)\\">x</a>"}',
        errors='[{"attempt": 1, "at": "javascript:alert(4)", '
               '"error": "<a id=\\"evil\\" href=\\"javascript:alert(5)\\">click</a>"}]')
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    server = web()
    for path in ("", "jobs", f"jobs/{job_id}", "jobs?queue=javascript%3Aalert(1)",
                 "queues/javascript%3Aalert(1)", "hosts"):
        page.goto(server.url + path)
        hrefs = page.eval_on_selector_all("a", "links => links.map(a => a.getAttribute('href'))")
        assert hrefs and all(h.startswith("/") for h in hrefs), (path, hrefs)
    assert page.locator("#evil").count() == 0
    page.goto(f"{server.url}jobs/{job_id}")
    page.click("text=javascript:alert(1)")  # the queue link: its page, not a script
    page.wait_for_url("**/queues/javascript%3Aalert%281%29")
    assert page.inner_text("h1").startswith("Queue javascript:alert(1)")
    assert dialogs == []


@pytest.fixture
def evil_site() -> Iterator[Callable[[str], str]]:
    """A page on another port of 127.0.0.1 that submits whatever form it is given."""
    pages: dict[str, str] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path, "").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def serve(markup: str) -> str:
        pages["/"] = markup
        return f"http://127.0.0.1:{server.server_address[1]}/"

    yield serve
    server.shutdown()
    server.server_close()


def test_a_form_on_another_site_cannot_act(web: Callable[..., WebServer], dsn: str,
                                           page: Any, evil_site: Callable[[str], str]) -> None:
    job_id = dead_job(dsn)
    server = web()
    page.goto(f"{server.url}jobs/{job_id}")  # the operator's browser has the UI's cookie
    action = html.escape(f"{server.url}actions/retry-job")
    url = evil_site(
        f'<form method="post" action="{action}"><input name="job_id" value="{job_id}">'
        '<input name="confirmed" value="yes"><input name="csrf" value="guess"></form>'
        "<script>document.forms[0].submit()</script>")
    with page.expect_response(lambda r: "/actions/retry-job" in r.url) as answer:
        page.goto(url)
    assert answer.value.status == 403
    assert job_state(dsn, job_id) == "dead"
