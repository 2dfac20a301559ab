"""The claim's cost must not grow with the backlog or with history (DESIGN, Data)."""

from __future__ import annotations

import json
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from pgfleet.core.flow import FlowLimits, Rate
from pgfleet.sql import fleet, store
from pgfleet.worker.prefetch import claim_bytes
from tests.support import pg
from tests.support.flow import claim_limited


def nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found.extend(nodes(child))
    return found


def index_pages(plan: dict[str, Any]) -> int:
    """Pages of jobs_claim_idx's scans (with the heap pages they fetch) read by a plan."""
    return sum(n["Shared Hit Blocks"] + n.get("Shared Read Blocks", 0) for n in nodes(plan)
               if n.get("Index Name") == "jobs_claim_idx")


def nested_plans(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    """Collect, from here on, the plans auto_explain logs for the statements run inside
    functions (the limited claim is a PL/pgSQL function, which EXPLAIN does not open)."""
    superuser = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
                             ).fetchone()
    assert superuser == (True,), "auto_explain needs a superuser connection"
    plans: list[dict[str, Any]] = []

    def keep(notice: psycopg.errors.Diagnostic) -> None:
        text = notice.message_primary or ""
        if "plan:" in text:
            plans.append(json.loads(text.split("plan:", 1)[1]))

    conn.add_notice_handler(keep)
    conn.execute("LOAD 'auto_explain'")
    for setting in ("log_min_duration = 0", "log_analyze = on", "log_buffers = on",
                    "log_nested_statements = on", "log_format = json"):
        conn.execute(f"SET auto_explain.{setting}")
    conn.execute("SET client_min_messages = log")
    return plans


def admin_dsn(dsn: str) -> str:
    """The test database as the server's superuser whatever PGFLEET_TEST_ROLE says:
    auto_explain needs one, and the plan does not depend on the role."""
    return pg.dsn_for(conninfo_to_dict(dsn)["dbname"])


def claim_statement(plans: list[dict[str, Any]]) -> dict[str, Any]:
    """The top plan node of the claim statement run inside pgfleet.claim_jobs or
    pgfleet.complete_and_claim_jobs (migration 0018), among the plans logged."""
    [plan] = [p["Plan"] for p in plans if "SKIP LOCKED" in p["Query Text"]
              and "CREATE" not in p["Query Text"] and "claim_jobs(" not in p["Query Text"]]
    return plan


def test_claim_plan_uses_the_partial_index_with_millions_of_rows(dsn: str) -> None:
    with psycopg.connect(admin_dsn(dsn), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pgfleet.jobs (queue, task, args, run_at)"
            " SELECT 'default', 'noop', '{}', now() - interval '1 hour' + g * interval '1 ms'"
            " FROM generate_series(1, 1000000) g")
        conn.execute(
            "INSERT INTO pgfleet.jobs (queue, task, state, finished_at, attempt)"
            " SELECT 'default', 'noop', 'succeeded', now(), 1 FROM generate_series(1, 1000000)")
        conn.execute("VACUUM ANALYZE pgfleet.jobs")
        plan = explain(conn, "claim", limit=10, held=None, held_solo=None)
    every = nodes(plan)
    kinds = [n["Node Type"] for n in every]
    scans = [n for n in every if n["Node Type"] == "Index Scan"
             and n.get("Index Name") == "jobs_claim_idx"]
    assert scans, kinds
    assert "Seq Scan" not in kinds and "Sort" not in kinds, kinds
    assert any(n["Node Type"] == "LockRows" for n in every)
    # Only about the batch size is read: no walk over the backlog or the history.
    assert scans[0]["Actual Rows"] <= 20
    assert plan["Actual Rows"] == 10
    assert plan["Shared Hit Blocks"] + plan.get("Shared Read Blocks", 0) < 500


def test_a_claim_planned_on_an_empty_table_still_probes_the_index_under_a_backlog(
        dsn: str) -> None:
    """Migration 0018: each claim function keeps one plan per session, made at its first
    call. Made while the table was empty, a generic plan leased the claimed rows by reading
    every row of jobs (25 s for a claim of 100 over 900,000 rows). The pinned plan claims
    100 jobs from a backlog that arrived after it with index probes alone."""
    with psycopg.connect(admin_dsn(dsn), autocommit=True) as conn:
        for query in ("claim", "complete_and_claim"):  # plans made on the empty table
            assert len(conn.execute(store.q(query), {**CLAIM_PARAMS, "limit": 100}).fetchall()) \
                == DONE_ROWS[query]
        conn.execute(
            "INSERT INTO pgfleet.jobs (queue, task, args, run_at)"
            " SELECT 'default', 'noop', '{}', now() - interval '1 hour' + g * interval '1 ms'"
            " FROM generate_series(1, 300000) g")
        conn.execute(
            "INSERT INTO pgfleet.jobs (queue, task, state, finished_at, attempt)"
            " SELECT 'default', 'noop', 'succeeded', now(), 1 FROM generate_series(1, 300000)")
        for query in ("claim", "complete_and_claim"):
            plan = explain(conn, query, limit=100)
            kinds = {n["Node Type"] for n in nodes(plan)}
            assert not kinds & {"Seq Scan", "Sort", "Hash Join", "Merge Join"}, (query, kinds)
            assert plan["Actual Rows"] == 100
            # Leasing 100 rows writes their new versions into each index: 1,400-1,800 pages
            # (the statement planned per claim before 0018 read 1,625); a plan that reads
            # the 600,000 rows reads over 19,000.
            assert plan["Shared Hit Blocks"] + plan.get("Shared Read Blocks", 0) < 3000, query


def test_a_claim_past_its_last_key_skips_the_dead_entries_of_claimed_jobs(dsn: str) -> None:
    """200,000 jobs claimed (and finished) leave their entries at the head of the claim
    index until a vacuum; a claim that starts past the last claimed key reads only about
    its own batch."""
    with psycopg.connect(admin_dsn(dsn), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pgfleet.jobs (queue, task, args, run_at)"
            " SELECT 'default', 'noop', '{}', now() - interval '1 hour' + g * interval '1 ms'"
            " FROM generate_series(1, 300000) g")
        conn.execute("VACUUM ANALYZE pgfleet.jobs")
        conn.execute("SET plan_cache_mode = force_custom_plan")
        last = None
        for _ in range(200):
            jobs = store.claim(conn, queue="default", limit=1000, worker="w", lease=60,
                               held=0, held_solo=False, after=last)
            assert len(jobs) == 1000
            last = max((j.priority, j.run_at, j.id) for j in jobs)
            store.complete_succeeded(conn, worker="w", done=[(j.id, j.fence) for j in jobs])
        assert last is not None
        plan = explain(conn, "claim", limit=100, after_priority=last[0],
                       after_run_at=last[1], after_id=last[2])
    assert plan["Actual Rows"] == 100
    [scan] = [n for n in nodes(plan) if n["Node Type"] == "Index Scan"
              and n.get("Index Name") == "jobs_claim_idx"]
    # The head holds 200,000 dead entries (over 1,000 index pages); past them: a few pages
    # (measured: 4), where a claim from the head reads them all until a vacuum.
    assert scan["Actual Rows"] == 100
    assert scan["Shared Hit Blocks"] + scan.get("Shared Read Blocks", 0) < 50
    # Nor does any other probe of the claim index (the walk over priorities) start at the
    # head: the cursor's priority is taken as given.
    assert index_pages(plan) < 60


CLAIM_PARAMS: dict[str, Any] = {
    "queue": "default", "worker": "w", "lease": 60.0, "args_limit": 1024 * 1024, "held": 0,
    "held_solo": False, "after_priority": None, "after_run_at": None, "after_id": None,
    "max_bytes": claim_bytes(8), **store.done_params([], None)}
# complete_and_claim answers one row of completed ids before the claimed jobs (the plans
# below are of the claim statement inside the functions, which answers only the jobs).
DONE_ROWS = {"claim": 0, "complete_and_claim": 1}


def explain(conn: psycopg.Connection[Any], query: str, part: str = "SKIP LOCKED",
            **params: Any) -> dict[str, Any]:
    """The plan (ANALYZE, BUFFERS) of a statement a claim query runs inside its functions
    (by default the claim's; `part`: text that picks another), rolled back: its top plan
    node. `conn` must be a superuser's."""
    plans = nested_plans(conn)
    with conn.transaction(force_rollback=True):
        conn.execute(store.q(query), {**CLAIM_PARAMS, **params}).fetchall()
    conn.execute("SET auto_explain.log_min_duration = -1")
    if part == "SKIP LOCKED":
        return claim_statement(plans)
    [plan] = [p["Plan"] for p in plans if part in p["Query Text"]
              and "CREATE" not in p["Query Text"]]
    return plan


def schedule_later(conn: psycopg.Connection[Any], n: int, priorities: str,
                   queue: str = "default") -> None:
    """n jobs due an hour or more from now, dealt over the given priorities (an SQL array)."""
    conn.execute(
        "INSERT INTO pgfleet.jobs (queue, task, args, priority, run_at)"
        " SELECT %(q)s, 'later', '{}', (%(p)s::int[])[1 + g %% cardinality(%(p)s::int[])],"
        "        now() + interval '1 hour' + g * interval '1 ms'"
        "   FROM generate_series(1, %(n)s) g", {"n": n, "p": priorities, "q": queue})


def test_an_empty_claim_does_not_read_the_jobs_scheduled_for_later(dsn: str) -> None:
    """Issue 16: 200,000 jobs due later, none now. The claim ends each priority's range at
    now() instead of reading the future rows behind it: a few index probes per priority
    (measured: 12 pages with one priority, 25 with three), where the plain ordered scan
    of the claim before it read every future entry (1,209 pages with one priority)."""
    with psycopg.connect(admin_dsn(dsn), autocommit=True) as conn:
        schedule_later(conn, 200_000, "{0}")
        schedule_later(conn, 200_000, "{-5,0,5}", queue="spread")
        conn.execute("VACUUM ANALYZE pgfleet.jobs")
        conn.execute("SET plan_cache_mode = force_custom_plan")
        for query in ("claim", "complete_and_claim"):
            plan = explain(conn, query, limit=100)
            assert plan["Actual Rows"] == 0
            assert plan["Shared Hit Blocks"] + plan.get("Shared Read Blocks", 0) < 40, query
        # Three priorities of future jobs: one probe more each, still a handful of pages.
        for query in ("claim", "complete_and_claim"):
            plan = explain(conn, query, limit=100, queue="spread")
            assert plan["Actual Rows"] == 0
            assert plan["Shared Hit Blocks"] + plan.get("Shared Read Blocks", 0) < 80, query


def insert_due(conn: psycopg.Connection[Any], priority: int, n: int, ago: int) -> None:
    """n jobs of one priority, due between `ago` and `ago - n` seconds before now."""
    conn.execute(
        "INSERT INTO pgfleet.jobs (queue, task, args, priority, run_at)"
        " SELECT 'default', 'now', '{}', %(p)s, now() - make_interval(secs => %(ago)s - g)"
        "   FROM generate_series(1, %(n)s) g", {"p": priority, "n": n, "ago": ago})


def test_claims_across_priorities_come_in_claim_order_and_take_no_future_job(
        dsn: str) -> None:
    """Due jobs at four priorities, future jobs at two of them and at one of their own:
    successive claims (plain, combined with a completion, from the head and past the last
    key) hand out exactly the due jobs, in (priority, run_at, id) order."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        schedule_later(conn, 200_000, "{0,3,4}")
        for priority, n, ago in ((3, 40, 500), (-2, 25, 100), (0, 60, 900), (7, 30, 50)):
            insert_due(conn, priority, n, ago)
        conn.execute("VACUUM ANALYZE pgfleet.jobs")
        conn.execute("SET plan_cache_mode = force_custom_plan")
        expected = [tuple(r) for r in conn.execute(
            "SELECT priority, run_at, id FROM pgfleet.jobs WHERE run_at <= now()"
            " ORDER BY priority, run_at, id")]
        assert len(expected) == 155
        got: list[tuple[Any, ...]] = []
        last: store.ClaimKey | None = None
        done: list[tuple[int, int]] = []
        for turn in range(100):
            if turn % 2:
                jobs = store.claim(conn, queue="default", limit=7, worker="w", lease=60,
                                   held=0, held_solo=False, after=last)
            else:
                _, jobs = store.complete_and_claim(
                    conn, queue="default", done=done, limit=7, worker="w", lease=60, held=0,
                    held_solo=False, after=last)
            if not jobs:
                break
            batch = sorted((j.priority, j.run_at, j.id) for j in jobs)
            got.extend(batch)
            done = [(j.id, j.fence) for j in jobs]
            # From the head every third claim, as the worker does after a short claim.
            last = None if turn % 3 == 0 else batch[-1]
        assert got == expected
        assert not store.claim(conn, queue="default", limit=100, worker="w", lease=60)


def test_a_claim_locks_only_the_rows_it_claims(dsn: str) -> None:
    """The per-priority scans are pulled only as far as the claim's limit: a claim of 8
    across priorities 0 (5 due) and 1 (10 due) leaves the 7 other due rows unlocked."""
    with psycopg.connect(dsn, autocommit=True) as conn, \
            psycopg.connect(dsn, autocommit=True) as other:
        schedule_later(conn, 1_000, "{0,1}")
        insert_due(conn, 0, 5, 100)
        insert_due(conn, 1, 10, 100)
        conn.execute("SET plan_cache_mode = force_custom_plan")
        for query in ("claim", "complete_and_claim"):
            with conn.transaction(force_rollback=True):
                claimed = conn.execute(store.q(query), {**CLAIM_PARAMS, "limit": 8}).fetchall()
                assert len(claimed) == 8 + DONE_ROWS[query]
                free = other.execute(
                    "SELECT id FROM pgfleet.jobs WHERE state = 'queued' AND run_at <= now()"
                    "   FOR UPDATE SKIP LOCKED").fetchall()
                assert len(free) == 7, query


def test_a_limited_claim_does_not_read_the_jobs_scheduled_for_later(dsn: str) -> None:
    """Migration 0016: the limited claim (flow control) walks the priorities as the plain
    claim does. 200,000 jobs due later: its claim statement reads a handful of pages (the
    one of 0014 read them all: 1,691 pages); with due jobs among them, it claims
    those alone, in claim order."""
    # As the server's superuser whatever PGFLEET_TEST_ROLE says: auto_explain needs one,
    # and the plan does not depend on the role.
    admin_dsn = pg.dsn_for(conninfo_to_dict(dsn)["dbname"])
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        schedule_later(conn, 200_000, "{0,3}")
        conn.execute("VACUUM ANALYZE pgfleet.jobs")
        plans = nested_plans(conn)
        assert claim_limited(conn, queue="default", limit=32, worker="w", lease=60,
                                   limits=FlowLimits()) == []
        [claim] = [p for p in plans if "SKIP LOCKED" in p["Query Text"]]
        top = claim["Plan"]
        assert top["Shared Hit Blocks"] + top.get("Shared Read Blocks", 0) < 60
        for priority, n, ago in ((3, 4, 500), (-2, 3, 100), (0, 5, 900)):
            insert_due(conn, priority, n, ago)
        expected = [r[0] for r in conn.execute(
            "SELECT id FROM pgfleet.jobs WHERE run_at <= now() ORDER BY priority, run_at, id")]
        got = claim_limited(conn, queue="default", limit=100, worker="w", lease=60,
                                  limits=FlowLimits())
        assert [j.id for j in got] == expected


def test_a_limited_claim_planned_on_an_empty_table_still_probes_the_indexes_under_a_backlog(
        dsn: str) -> None:
    """Migration 0020: the limited claim keeps one plan per statement per session, made at
    its first call, pinned like the plain claim's (0018). Planned on an empty table with
    every limit set (so every statement runs), then run over 300,000 due jobs, 300,000
    finished ones and a few hundred running: every statement probes indexes, and none
    reads the table (a plain generic plan's lease joined the claimed rows by reading every
    row of jobs)."""
    limits = FlowLimits(global_concurrency=10_000, rate=Rate(1_000_000, 1.0),
                        key_concurrency=2)
    with psycopg.connect(admin_dsn(dsn), autocommit=True) as conn:
        # Plans made on the empty table: the first call plans each statement it reaches.
        with conn.transaction():
            assert claim_limited(conn, queue="default", limit=100, worker="w",
                                       lease=60, limits=limits) == []
        conn.execute("INSERT INTO pgfleet.jobs (queue, task) VALUES ('default', 'noop')")
        with conn.transaction():  # and the statements that run only once there are jobs
            assert len(claim_limited(conn, queue="default", limit=100, worker="w",
                                           lease=60, limits=limits)) == 1
        conn.execute(
            "INSERT INTO pgfleet.jobs (queue, task, args, run_at, concurrency_key)"
            " SELECT 'default', 'noop', '{}', now() - interval '1 hour' + g * interval '1 ms',"
            "        CASE WHEN g % 3 = 0 THEN 'k' || (g % 500) END"
            " FROM generate_series(1, 300000) g")
        conn.execute(
            "INSERT INTO pgfleet.jobs (queue, task, state, finished_at, attempt)"
            " SELECT 'default', 'noop', 'succeeded', now(), 1 FROM generate_series(1, 300000)")
        conn.execute(
            "INSERT INTO pgfleet.jobs (queue, task, state, attempt, lease_holder,"
            "                          lease_expires_at, started_at, concurrency_key)"
            " SELECT 'default', 'noop', 'running', 1, 'other', now() + interval '1 hour',"
            "        now(), 'r' || (g % 50) FROM generate_series(1, 300) g")
        plans = nested_plans(conn)
        with conn.transaction(force_rollback=True):
            got = claim_limited(conn, queue="default", limit=100, worker="w",
                                      lease=60, limits=limits)
        conn.execute("SET auto_explain.log_min_duration = -1")
    assert len(got) == 100
    statements = [p for p in plans if "pgfleet.claim_jobs(" not in p["Query Text"]]
    assert any("SKIP LOCKED" in p["Query Text"] for p in statements)
    assert len(statements) >= 7, [p["Query Text"][:40] for p in statements]
    for statement in statements:
        every = nodes(statement["Plan"])
        kinds = {n["Node Type"] for n in every}
        assert not kinds & {"Seq Scan", "Bitmap Heap Scan", "Hash Join", "Merge Join"}, (
            statement["Query Text"], kinds)
        # Leasing 100 rows writes their new versions into each index (under 2,000 pages);
        # reading the 600,000 rows of the table would take over 19,000.
        top = statement["Plan"]
        pages = top["Shared Hit Blocks"] + top.get("Shared Read Blocks", 0)
        assert pages < 3000, (statement["Query Text"], pages)
        # No statement reads more rows than the running ones and the claimed batch with
        # the keyed jobs ahead of each (an index probe each).
        assert all(n["Actual Rows"] * n["Actual Loops"] < 5000 for n in every
                   if n["Node Type"] in ("Index Scan", "Index Only Scan")), (
            statement["Query Text"])




def test_a_limited_claim_reads_the_claimed_jobs_by_key_not_the_whole_table(dsn: str) -> None:
    """The claim under flow control, planned on an empty table's statistics, reads the
    claimed rows by primary key, not the whole table and its history."""
    with psycopg.connect(admin_dsn(dsn), autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE pgfleet.jobs")  # statistics of an empty table, as in
        conn.execute(                                # a drain of a fresh backlog
            "INSERT INTO pgfleet.jobs (queue, task) SELECT 'default', 'noop'"
            " FROM generate_series(1, 100000)")
        conn.execute(
            "INSERT INTO pgfleet.jobs (queue, task, state, finished_at, attempt)"
            " SELECT 'default', 'noop', 'succeeded', now(), 1 FROM generate_series(1, 100000)")
        fleet.publish_fallback_limits(conn, queue="default", published_by="w",
                                      limits=FlowLimits(global_concurrency=1000))
        plans = nested_plans(conn)
        with conn.transaction(force_rollback=True):
            got = store.claim(conn, queue="default", limit=16, worker="w", lease=60)
        conn.execute("SET auto_explain.log_min_duration = -1")
    assert len(got) == 16
    scans = [n for p in plans for n in nodes(p["Plan"]) if n.get("Relation Name") == "jobs"]
    assert scans and all(n["Node Type"] != "Seq Scan" for n in scans), scans
    assert all(n["Actual Rows"] * n["Actual Loops"] <= 16 for n in scans
               if n["Node Type"] != "Aggregate")



def completion_params(jobs: list[store.ClaimedJob]) -> dict[str, Any]:
    return {"worker": "w", **store.done_params([(j.id, j.fence) for j in jobs], None),
            "queue": "default", "limit": 200, "lease": 60.0, "args_limit": 1024 * 1024,
            "held": 0, "held_solo": False, "after_priority": None, "after_run_at": None,
            "after_id": None, "max_bytes": claim_bytes(8)}


def test_a_completion_compares_each_job_once_without_statistics(dsn: str) -> None:
    """A backlog inserted and not yet analyzed (a fresh queue, every drain of the bench):
    the planner expects about one running row. Joined with unnest() of the batch, that
    made a nested loop comparing every running row with every job of the batch (200 x 200)
    and re-reading the arrays 200 times; the completions must look each job up once."""
    with psycopg.connect(admin_dsn(dsn), autocommit=True) as conn:
        conn.execute("SET plan_cache_mode = force_custom_plan")
        conn.execute("INSERT INTO pgfleet.jobs (queue, task) SELECT 'default', 'noop'"
                     " FROM generate_series(1, 100000)")
        jobs = store.claim(conn, queue="default", limit=200, worker="w", lease=60,
                           held=0, held_solo=False)
        for name in ("complete_and_claim", "complete_succeeded"):
            if name == "complete_and_claim":  # a function (0018): its completion statement
                plan = explain(conn, name, part="finished AS", **completion_params(jobs))
            else:
                with conn.transaction(force_rollback=True):
                    cur = conn.execute(b"EXPLAIN (ANALYZE, FORMAT JSON) " + store.q(name),
                                       completion_params(jobs))
                    row = cur.fetchone()
                    assert row is not None
                    raw = row[0]
                plan = (raw if isinstance(raw, list) else json.loads(raw))[0]["Plan"]
            every = nodes(plan)
            assert sum(n.get("Rows Removed by Join Filter", 0) for n in every) == 0, name
            assert all(n["Actual Loops"] == 1 for n in every
                       if n["Node Type"] == "Function Scan"), name
            completed = [n for n in every if n["Node Type"] == "ModifyTable"
                         and n["Actual Rows"] == 200]
            assert completed, name
