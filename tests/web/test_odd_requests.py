"""What an outside trial found: rows with timestamps Python cannot hold, form and filter
mistakes (400 naming the field, 409 only for a real conflict), control characters and
NUL in filters, and the "searched ids" line at the border of a full page."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable

import httpx
import psycopg
import pytest

from tests.web.conftest import WebServer, dead_job, insert_job, job_state
from tests.web.test_http import csrf_of

FAR = ["infinity", "-infinity", "10000-01-01 00:00:00+00", "0044-03-15 00:00:00+00 BC"]


@pytest.mark.parametrize("stored", FAR)
def test_every_page_renders_a_row_with_a_far_timestamp(web: Callable[..., WebServer],
                                                       dsn: str, stored: str) -> None:
    # Rows from before migration 0009, which refuses such a run_at since.
    job = insert_job(dsn, queue="far", run_at=stored, created_at=stored, legacy=True)
    done = dead_job(dsn, queue="far", finished_at=stored, lease_expires_at=stored,
                    run_at=stored, legacy=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pgfleet.schedule_runs (schedule, fire_time, job_id)"
                     " VALUES ('far', %s, %s)", (stored, job))
    server = web()
    with httpx.Client(base_url=server.url) as client:
        for path in ("/", "/jobs", "/jobs?queue=far", "/jobs?state=dead", f"/jobs/{job}",
                     f"/jobs/{done}", "/schedules"):
            page = client.get(path)
            assert page.status_code == 200, (path, page.text)
        assert stored in client.get(f"/jobs/{job}").text
        assert stored in client.get(f"/jobs/{done}").text
        assert stored in client.get("/schedules").text
        listed = client.get("/jobs").text
        assert f'data-job="{job}"' in listed and f'data-job="{done}"' in listed


def act(client: httpx.Client, name: str, **fields: str) -> httpx.Response:
    return client.post(f"/actions/{name}",
                       data={**fields, "confirmed": "yes", "csrf": csrf_of(client)})


@pytest.mark.parametrize(("name", "fields", "message"), [
    ("retry-job", {"job_id": "x"}, "job_id must be a positive whole number"),
    ("retry-job", {"job_id": "²"}, "job_id must be a positive whole number"),
    ("retry-job", {"job_id": "9" * 5000}, "job_id must be a positive whole number"),
    ("cancel-job", {"job_id": "-3"}, "job_id must be a positive whole number"),
    ("cancel-job", {}, "job_id must be a positive whole number"),
    ("pause-queue", {"queue": ""}, "queue must be a name of 1 to 128 characters"),
    ("pause-queue", {"queue": "a\x00b"}, "queue must not contain a NUL character"),
    ("retry-queue", {"queue": "q" * 129}, "queue must be a name of 1 to 128 characters"),
    ("delete-finished", {"older_than_hours": "-1"}, "older_than_hours must be a whole number"),
    ("delete-finished", {"older_than_hours": "²"}, "older_than_hours must be a whole number"),
    ("delete-finished", {"older_than_hours": "9" * 20},
     "older_than_hours must be a whole number"),
    ("explode", {}, "there is no action &#39;explode&#39;; the actions are retry-job"),
], ids=["letters", "superscript", "5000-digits", "negative", "missing", "empty-queue",
        "nul-queue", "long-queue", "negative-hours", "superscript-hours", "huge-hours",
        "unknown-action"])
def test_a_form_mistake_is_a_400_naming_the_field(web: Callable[..., WebServer], dsn: str,
                                                  name: str, fields: dict[str, str],
                                                  message: str) -> None:
    dead = dead_job(dsn, queue="mail")
    server = web()
    with httpx.Client(base_url=server.url) as client:
        answer = act(client, name, **fields)
        assert answer.status_code == 400, answer.text
        assert message in answer.text
        # Unconfirmed, too: no confirmation page for a form that cannot work.
        asked = client.post(f"/actions/{name}", data={**fields, "csrf": csrf_of(client)})
        assert asked.status_code == 400 and message in asked.text
    assert job_state(dsn, dead) == "dead"


def test_a_real_conflict_stays_a_409(web: Callable[..., WebServer], dsn: str) -> None:
    waiting = insert_job(dsn)
    server = web()
    with httpx.Client(base_url=server.url) as client:
        answer = act(client, "retry-job", job_id=str(waiting))
        assert answer.status_code == 409 and "is not dead or cancelled" in answer.text
        gone = act(client, "cancel-job", job_id="999999")
        assert gone.status_code == 409 and "only queued and running jobs cancel" in gone.text


@pytest.mark.parametrize(("query", "message"), [
    ("queue=%00", "queue must not contain a NUL character"),
    ("task=a%00b", "task must not contain a NUL character"),
    ("q=%00", "q must not contain a NUL character"),
    ("q=" + "x" * 1001, "q must be at most 1000 characters"),
    ("task=" + "t" * 256, "task must be at most 255 characters"),
    ("id=%C2%B2", "id must be a positive whole number"),
    ("before=" + "9" * 5000, "before must be a positive whole number"),
    ("id=9223372036854775808", "id must be a positive whole number"),
], ids=["nul-queue", "nul-task", "nul-search", "long-search", "long-task",
        "superscript-id", "5000-digit-before", "id-past-bigint"])
def test_a_bad_filter_is_a_400_naming_it(web: Callable[..., WebServer], dsn: str,
                                         query: str, message: str) -> None:
    insert_job(dsn)
    server = web()
    with httpx.Client(base_url=server.url) as client:
        answer = client.get(f"/jobs?{query}")
    assert answer.status_code == 400, answer.text
    assert message in answer.text


def test_a_queue_named_with_control_characters_is_filtered_and_paused(
        web: Callable[..., WebServer], dsn: str) -> None:
    """Rows written before migration 0009 (which refuses control characters in names)
    may hold such a queue: the overview's link to its jobs works, and so does pausing it."""
    odd = "q\x01\x1b[31m"
    job = dead_job(dsn, queue=odd, legacy=True)
    other = dead_job(dsn, queue="q")
    server = web()
    with httpx.Client(base_url=server.url) as client:
        overview = client.get("/").text
        link = re.search(r'href="(/jobs\?queue=q%01[^"]*state=dead)"', overview)
        assert link, "no link to the queue's dead jobs"
        page = re.search(r'href="(/queues/q%01[^"]*)"', overview)
        assert page, "no link to the queue's page"
        assert client.get(page.group(1)).status_code == 200
        listed = client.get(link.group(1).replace("&amp;", "&"))
        assert listed.status_code == 200
        assert f'data-job="{job}"' in listed.text and f'data-job="{other}"' not in listed.text
        assert act(client, "pause-queue", queue=odd).status_code == 303
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT paused FROM pgfleet.queues WHERE name = %s",
                            (odd,)).fetchone() == (True,)


def test_a_search_for_a_tab_or_line_break_is_a_search(web: Callable[..., WebServer],
                                                      dsn: str) -> None:
    job = dead_job(dsn, last_error="Traceback\nValueError:\tboom")
    server = web()
    with httpx.Client(base_url=server.url) as client:
        hit = client.get("/jobs", params={"q": "Traceback\nValueError:\tb"})
        miss = client.get("/jobs", params={"q": "\t\t\n"})
    assert hit.status_code == 200 and f'data-job="{job}"' in hit.text
    assert miss.status_code == 200 and 'id="no-jobs"' in miss.text


def test_a_job_page_of_a_huge_id_is_a_404(web: Callable[..., WebServer], dsn: str) -> None:
    server = web()
    with httpx.Client(base_url=server.url) as client:
        for path in ("/jobs/9223372036854775808", "/jobs/" + "9" * 5000, "/jobs/0",
                     "/jobs/abc", "/jobs/%C2%B2"):
            assert client.get(path).status_code == 404, path[:40]


def searched(page: str) -> tuple[int, int]:
    found = re.search(r'id="searched">searched ids (\d+) to (\d+)<', page)
    assert found, page
    return int(found.group(1)), int(found.group(2))


@pytest.mark.parametrize("query", ["task=noop", "state=dead"],
                         ids=["windowed", "indexed"])
def test_pages_name_each_id_once_at_their_borders(web: Callable[..., WebServer], dsn: str,
                                                  query: str) -> None:
    """120 dead jobs written in one statement (one created_at for all): following "older"
    lists each once, newest first; on a windowed filter the "searched ids" ranges of the
    pages join without a gap or an overlap, a full page's ending at its last row."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pgfleet.jobs (queue, task, state, finished_at, attempt)"
                     " SELECT 'q', 'noop', 'dead', now(), 1 FROM generate_series(1, 120)")
        ids = [row[0] for row in conn.execute("SELECT id FROM pgfleet.jobs ORDER BY id DESC")]
        assert conn.execute("SELECT count(DISTINCT created_at) FROM pgfleet.jobs"
                            ).fetchone() == (1,)
    server = web()
    seen: list[int] = []
    ranges: list[tuple[int, int]] = []
    url: str | None = f"/jobs?{query}"
    with httpx.Client(base_url=server.url) as client:
        while url is not None:
            page = client.get(url).text
            shown = [int(i) for i in re.findall(r'data-job="(\d+)"', page)]
            seen += shown
            if query == "task=noop":
                low, high = searched(page)
                assert not shown or low == shown[-1] or len(shown) < 50, (low, shown)
                ranges.append((low, high))
            else:
                assert 'id="searched"' not in page
            older = re.search(r'href="([^"]+)" id="older"', page)
            url = older.group(1).replace("&amp;", "&") if older else None
            assert len(seen) <= len(ids)
    assert seen == ids
    if ranges:
        assert ranges[0][1] == ids[0] and ranges[-1][0] == 1
        for newer, older_range in itertools.pairwise(ranges):
            assert older_range[1] == newer[0] - 1


def test_the_largest_bigint_id_is_listed_and_found(web: Callable[..., WebServer],
                                                   dsn: str) -> None:
    """The id bound is inclusive: a row with id 2^63-1 (written by hand) is on the first
    page and found by the id filter, without a numeric bound the index cannot use."""
    top = insert_job(dsn, id=2**63 - 1, queue="top")
    server = web()
    with httpx.Client(base_url=server.url) as client:
        for query in ("", f"id={top}", "queue=top", "state=queued"):
            page = client.get(f"/jobs?{query}")
            assert page.status_code == 200 and f'data-job="{top}"' in page.text, query
        assert client.get(f"/jobs/{top}").status_code == 200


def test_a_windowed_filter_skips_an_empty_stretch_of_ids(web: Callable[..., WebServer],
                                                         dsn: str) -> None:
    """Jobs at ids 1-3 and one far above them: a windowed filter reaches the old ones on
    its first page instead of walking windows through the empty ids between."""
    old = [insert_job(dsn, queue="q", task="t") for _ in range(3)]
    far = insert_job(dsn, id=2**62, queue="q", task="t")
    server = web()
    with httpx.Client(base_url=server.url) as client:
        page = client.get("/jobs?task=t").text
    assert [int(i) for i in re.findall(r'data-job="(\d+)"', page)] == [far, *reversed(old)]
    assert 'id="older"' not in page
