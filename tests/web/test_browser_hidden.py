"""Hidden characters in a real browser: a row written straight into pgfleet.jobs with
controls, bidi overrides and invisible characters in its names shows them as escapes in a
styled box, on every page, while filters and actions still act on the real values."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlencode

import psycopg

from tests.web.conftest import WebServer, dead_job, insert_job

# Past the names trigger of migration 0009 (a superuser's or an older pgfleet's row).
QUEUE = "q\x1b]0;pwned\x07"
TASK = "invoice\u202etxt.exe"  # drawn raw, reads "invoiceexe.txt"
TWIN_TASK = "send\u200bmail"  # drawn raw, looks exactly like "sendmail"
ERROR = "boom\x1b[2J\x9b line\u2028two"
KEY = "key\ufeff1"
HOST = "web\u20661"
SCHEDULE = "night\u00a0ly"

# Every hidden character above, raw: none may reach the text a reader sees.
RAW = "\x1b\x07\u202e\u200b\x9b\u2028\ufeff\u2066\u00a0"


def hostile_rows(dsn: str) -> tuple[int, int, int]:
    hostile = dead_job(dsn, legacy=True, queue=QUEUE, task=TASK, unique_key=KEY,
                       args='{"note": "x\\u202ey", "\\u200bk": "\\u001b[1m"}',
                       errors=json.dumps([{"attempt": 1, "at": "2026-01-01",
                                           "error": ERROR}]),
                       last_error=ERROR)
    twin = insert_job(dsn, legacy=True, task=TWIN_TASK)
    plain = insert_job(dsn, task="sendmail")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pgfleet.processes (id, host, pid, kind, queue, supervisor)"
                     " VALUES (%s, %s, 100, 'supervisor', NULL, NULL)", (f"{HOST}:100:s", HOST))
        conn.execute("INSERT INTO pgfleet.schedule_runs (schedule, fire_time, job_id)"
                     " VALUES (%s, now() - interval '1 hour', %s)", (SCHEDULE, hostile))
    return hostile, twin, plain


def seen(page: Any, selector: str) -> str:
    """The text the browser draws for `selector`."""
    return str(page.locator(selector).first.inner_text())


def boxes(page: Any) -> list[str]:
    return list(page.eval_on_selector_all("span.ctl", "s => s.map(e => e.textContent)"))


def test_hidden_characters_show_as_escapes_on_every_page(
        web: Callable[..., WebServer], dsn: str, page: Any) -> None:
    hostile, twin, plain = hostile_rows(dsn)
    server = web()

    page.goto(server.url)
    row = page.locator("#queues tbody tr").filter(has_text="pwned")
    assert row.locator("td").first.inner_text() == "q\\x1b]0;pwned\\x07"
    body = page.inner_text("body")
    assert not any(c in body for c in RAW), repr(body)
    # The escape is set apart: a queue named with a literal backslash would not be boxed.
    style = page.eval_on_selector(
        "#queues span.ctl", "e => [getComputedStyle(e).backgroundColor, "
                            "getComputedStyle(e.parentElement).backgroundColor]")
    assert style[0] != style[1]
    assert boxes(page)[:2] == ["\\x1b", "\\x07"]

    page.goto(server.url + "jobs")
    cells = {int(r.get_attribute("data-job")): r.locator("td")
             for r in page.locator("#jobs tbody tr").all()}
    # The first cell is the row's tick box.
    assert cells[hostile].nth(2).inner_text() == "q\\x1b]0;pwned\\x07"
    assert cells[hostile].nth(3).inner_text() == "invoice\\u202etxt.exe"
    assert "boom\\x1b[2J\\x9b line\\u2028two" in cells[hostile].nth(9).inner_text()
    # Two names that look the same raw differ on the page.
    assert cells[twin].nth(3).inner_text() == "send\\u200bmail"
    assert cells[plain].nth(3).inner_text() == "sendmail"
    body = page.inner_text("body")
    assert not any(c in body for c in RAW), repr(body)

    page.goto(f"{server.url}jobs/{hostile}")
    assert seen(page, "#job-task") == "invoice\\u202etxt.exe"
    fields = seen(page, "#job-fields")
    assert "key\\ufeff1" in fields and "q\\x1b]0;pwned\\x07" in fields
    assert "boom\\x1b[2J\\x9b line\\u2028two" in seen(page, "#job-errors")
    args = seen(page, "#job-args")
    assert "x\\u202ey" in args and "\\u200bk" in args
    body = page.inner_text("body")
    assert not any(c in body for c in RAW), repr(body)
    assert not any(c in page.title() for c in RAW)
    assert "\\u202e" in boxes(page) and "\\ufeff" in boxes(page)

    page.goto(server.url + "hosts")
    assert "web\\u20661" in seen(page, "#hosts")
    assert not any(c in page.inner_text("body") for c in RAW)

    page.goto(server.url + "queues/" + quote(QUEUE))
    assert seen(page, "h1").startswith("Queue q\\x1b]0;pwned\\x07")
    assert not any(c in page.inner_text("body") for c in RAW)

    page.goto(server.url + "schedules")
    assert "night\\xa0ly" in seen(page, "#schedules")
    assert "\\xa0" in boxes(page)


def test_a_filter_on_a_hidden_character_finds_the_real_row(
        web: Callable[..., WebServer], dsn: str, page: Any) -> None:
    hostile, twin, _ = hostile_rows(dsn)
    server = web()

    page.goto(server.url + "jobs?" + urlencode({"task": TWIN_TASK}))
    shown = [r.get_attribute("data-job") for r in page.locator("#jobs tbody tr").all()]
    assert shown == [str(twin)]  # the real name, not the look-alike "sendmail"
    # The field keeps the real value (a new search sends it back as it is); the line
    # below the fields spells it out, and the field is marked.
    assert page.input_value('#filter input[name="task"]') == TWIN_TASK
    assert "task = send\\u200bmail" in seen(page, "#filter-echo")
    assert "has-hidden" in (page.get_attribute('#filter input[name="task"]', "class") or "")
    page.click('#filter button[type="submit"]')
    page.wait_for_load_state()
    assert [r.get_attribute("data-job") for r in page.locator("#jobs tbody tr").all()] \
        == [str(twin)]

    page.goto(server.url + "jobs?" + urlencode({"q": "line\u2028two"}))
    assert [r.get_attribute("data-job") for r in page.locator("#jobs tbody tr").all()] \
        == [str(hostile)]
    assert "search = line\\u2028two" in seen(page, "#filter-echo")
    page.goto(server.url + "jobs?" + urlencode({"task": "sendmail"}))
    assert page.locator("#filter-echo").count() == 0

    # The overview's link and Pause button act on the real queue; the confirmation shows it
    # escaped.
    page.goto(server.url)
    row = page.locator("#queues tbody tr").filter(has_text="pwned")
    row.locator('button[data-action="pause-queue"]').click()
    assert "queue q\\x1b]0;pwned\\x07 on every host" in seen(page, "#question")
    assert not any(c in seen(page, "#question") for c in RAW)
    page.click("#confirm")
    page.wait_for_url(server.url)
    with psycopg.connect(dsn, autocommit=True) as conn:
        paused = conn.execute("SELECT name FROM pgfleet.queues WHERE paused").fetchall()
    assert paused == [(QUEUE,)]
    page.goto(server.url)
    row = page.locator("#queues tbody tr").filter(has_text="pwned")
    row.locator("td a").first.click()
    page.wait_for_url("**/queues/*")
    assert seen(page, "h1").startswith("Queue q\\x1b]0;pwned\\x07")
    page.click("#count-dead")
    page.wait_for_url("**/jobs?queue=*")
    assert [r.get_attribute("data-job") for r in page.locator("#jobs tbody tr").all()] \
        == [str(hostile)]


def test_args_and_tracebacks_keep_their_lines_and_only_hidden_characters_are_boxed(
        web: Callable[..., WebServer], dsn: str, page: Any) -> None:
    # Outside trial T7: the job page drew pretty-printed args on one line, every line
    # break of the layout in a red box, for every job: the warning then meant nothing.
    traceback = "Traceback (most recent call last):\n  File \"t.py\", line 1\nValueError: x\r"
    job = dead_job(dsn, args='{"x": 1, "y": "a\\nb"}',
                   errors=json.dumps([{"attempt": 1, "at": "2026-01-01", "error": traceback}]))
    bare = dead_job(dsn, last_error=traceback, errors="[]")  # no history: the last error alone
    server = web()
    page.goto(f"{server.url}jobs/{job}")
    assert seen(page, "#job-args").splitlines() == ["{", '  "x": 1,', '  "y": "a\\nb"', "}"]
    assert "  File \"t.py\", line 1\nValueError: x\\r" in seen(page, "#job-errors")
    # The carriage return is boxed; no line break is.
    assert boxes(page) == ["\\r"]
    page.goto(f"{server.url}jobs/{bare}")
    assert seen(page, "#job-last-error").splitlines() == [
        "Traceback (most recent call last):", '  File "t.py", line 1', "ValueError: x\\r"]
    assert boxes(page) == ["\\r"]
