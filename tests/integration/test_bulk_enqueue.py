"""enqueue_many's streamed path (issue 16): chunks are validated while earlier ones are
already inserted, in one pipeline; the columns travel as hand-built binary arrays (NULL
when NULL in every row); migration 0017 inserts a batch without unique keys plainly."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import pgfleet
from pgfleet import PayloadError
from pgfleet.client import enqueue as client
from pgfleet.sql import arrays as bulk_arrays
from tests.support.workers import scalar

CHUNK = 10


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 10 rows, so a few dozen jobs take the several-chunk path."""
    monkeypatch.setattr(client, "BULK_CHUNK", CHUNK)


def jobs_with_bad_one(count: int, bad: int) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = [{"task": "noop", "args": {"i": i}} for i in range(count)]
    jobs[bad] = {"task": "noop", "args": {"x": float("nan")}}
    return jobs


@pytest.mark.usefixtures("small_chunks")
def test_a_bad_job_in_a_later_chunk_undoes_the_chunks_sent_and_keeps_the_transaction(
        dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        mine = pgfleet.enqueue(conn, "noop", {"before": True})
        with pytest.raises(PayloadError, match=r"jobs\[25\]\.args\.x"):
            pgfleet.enqueue_many(conn, jobs_with_bad_one(35, 25))
        # The caller's own work survives and the transaction is still usable.
        after = pgfleet.enqueue_many(conn, [{"task": "noop"}] * 15)
        conn.commit()
    with psycopg.connect(dsn) as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM pgfleet.jobs ORDER BY id")]
    assert ids == [mine, *after]


@pytest.mark.usefixtures("small_chunks")
def test_a_bad_job_in_a_later_chunk_leaves_nothing_on_an_autocommit_connection(
        dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(PayloadError, match=r"jobs\[31\]\.args\.x"):
            pgfleet.enqueue_many(conn, jobs_with_bad_one(40, 31))
        assert conn.info.transaction_status is psycopg.pq.TransactionStatus.IDLE
    with pytest.raises(PayloadError, match=r"jobs\[12\]\.args\.x"):
        pgfleet.enqueue_many(dsn, iter(jobs_with_bad_one(40, 12)))
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.jobs") == 0


@pytest.mark.usefixtures("small_chunks")
def test_an_iterable_failing_in_a_later_chunk_undoes_the_chunks_sent(dsn: str) -> None:
    def jobs() -> Iterator[dict[str, Any]]:
        yield from ({"task": "noop"} for _ in range(25))
        raise RuntimeError("the caller's source broke")

    with psycopg.connect(dsn) as conn:
        with pytest.raises(RuntimeError, match="source broke"):
            pgfleet.enqueue_many(conn, jobs())
        assert conn.info.transaction_status is psycopg.pq.TransactionStatus.INTRANS
        conn.commit()
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.jobs") == 0


@pytest.mark.usefixtures("small_chunks")
def test_a_database_error_in_a_later_chunk_aborts_the_transaction_as_before(
        dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute("ALTER TABLE pgfleet.jobs ADD CONSTRAINT probe CHECK (task <> 'boom')")
        conn.commit()
        pgfleet.enqueue(conn, "noop")
        jobs = [{"task": "noop"}] * 25 + [{"task": "boom"}]
        with pytest.raises(psycopg.errors.CheckViolation):
            pgfleet.enqueue_many(conn, jobs)
        assert conn.info.transaction_status is psycopg.pq.TransactionStatus.INERROR
        conn.rollback()
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.jobs") == 0


@pytest.mark.usefixtures("small_chunks")
def test_several_chunks_keep_input_order_keys_and_mixed_columns(dsn: str) -> None:
    held = pgfleet.enqueue(dsn, "noop", unique_key="held")
    at = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    jobs: list[dict[str, Any]] = [{"task": "noop", "args": {"i": i}} for i in range(45)]
    jobs[3] = {"task": "noop", "unique_key": "k"}
    jobs[27] = {"task": "noop", "unique_key": "k"}  # the same key two chunks later
    jobs[14] = {"task": "noop", "unique_key": "held"}
    jobs[20] = {"task": "other", "queue": "q2", "priority": -5, "max_attempts": 3,
                "meta": {"m": 1}, "concurrency_key": "ck", "run_at": at}
    jobs[33] = {"task": "noop", "delay": timedelta(hours=1)}
    ids = pgfleet.enqueue_many(dsn, (job for job in jobs))  # a generator is enough
    assert len(ids) == 45 and ids[27] == ids[3] and ids[14] == held
    with psycopg.connect(dsn) as conn:
        rows = {r[0]: r[1:] for r in conn.execute(
            "SELECT id, task, queue, priority, max_attempts, meta, concurrency_key, run_at,"
            " args, run_at > now() + interval '59 minutes' FROM pgfleet.jobs")}
    assert len(rows) == 1 + 43
    assert rows[ids[20]][:7] == ("other", "q2", -5, 3, {"m": 1}, "ck", at)
    assert rows[ids[0]][:6] == ("noop", "default", 0, 20, {}, None)
    assert rows[ids[33]][8] is True and rows[ids[32]][8] is False
    keyless = [i for i in range(45) if i not in (3, 27, 14)]
    assert [rows[ids[i]][7] for i in keyless if i not in (20, 33)] == [
        {"i": i} for i in keyless if i not in (20, 33)]
    assert [ids[i] for i in keyless] == sorted(ids[i] for i in keyless)


def test_enqueue_jobs_takes_null_arrays_for_columns_null_in_every_row(dsn: str) -> None:
    """What pgfleet.enqueue_many sends for an all-NULL column; a batch without keys comes
    back without task and key (0017), one with a key as before."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        plain = conn.execute(
            "SELECT id, task, unique_key FROM pgfleet.enqueue_jobs("
            " '{a,b}', '{\"{}\",\"{\\\"x\\\": 1}\"}', NULL, '{0,1}', NULL, '{0,0}',"
            " NULL, NULL, NULL, NULL)").fetchall()
        keyed = conn.execute(
            "SELECT id, task, unique_key FROM pgfleet.enqueue_jobs("
            " '{a,b}', '{\"{}\",\"{}\"}', NULL, '{0,0}', NULL, '{0,0}',"
            " NULL, '{NULL,k}', NULL, NULL)").fetchall()
        stored = conn.execute(
            "SELECT task, queue, max_attempts, meta, args FROM pgfleet.jobs ORDER BY id"
        ).fetchall()
    assert [(t, k) for _, t, k in plain] == [(None, None), (None, None)]
    assert plain[0][0] < plain[1][0]
    assert [(t, k) for _, t, k in keyed] == [("a", None), ("b", "k")]
    assert stored[:2] == [("a", "default", 20, {}, {}), ("b", "default", 20, {}, {"x": 1})]


@pytest.mark.parametrize(("build", "values", "cast"), [
    (bulk_arrays.text_array, ["a", "é☃", None, "", "a"], "text[]"),
    (bulk_arrays.text_array, ["same"] * 4, "text[]"),
    (bulk_arrays.int4_array, [1, -2**31, 2**31 - 1, None], "int[]"),
    (bulk_arrays.int4_array, [0] * 3, "int[]"),
    (bulk_arrays.float8_array, [0.0, -1.5, 1e300], "float8[]"),
])
def test_binary_arrays_read_back_as_sent(dsn: str, build: Any, values: list[Any],
                                         cast: str) -> None:
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        bulk_arrays.register(cur.adapters)
        got = cur.execute(f"SELECT %b::{cast}, array_lower(%b::{cast}, 1)",
                          (build(values), build(values))).fetchone()
    assert got == (values, 1)


def test_an_all_null_column_is_a_null_array() -> None:
    assert bulk_arrays.text_array([None, None]) is None
    assert bulk_arrays.int4_array([None]) is None
    assert bulk_arrays.text_array(["x", None]) is not None


@pytest.mark.parametrize("statement", [
    "SELECT * FROM pgfleet.enqueue_jobs('{noop,noop}', %s, NULL, '{0,0}', NULL, '{0,0}',"
    " NULL, NULL, NULL, NULL)",
    "INSERT INTO pgfleet.jobs (queue, task, args)"
    " SELECT 'default', 'noop', a::jsonb FROM unnest(%s::text[]) AS a",
])
@pytest.mark.parametrize(("args", "kind"), [
    ("[1]", "array"), ('"x"', "string"), ("null", "null"), ("7", "number")])
def test_args_that_are_not_an_object_are_refused_by_every_sql_path(
        dsn: str, statement: str, args: str, kind: str) -> None:
    # Outside trial T6: enqueue_jobs and a plain INSERT took them (enqueue_job did not),
    # and the job failed alone at its worker, long after the caller had gone.
    with psycopg.connect(dsn, autocommit=True) as conn, pytest.raises(
            psycopg.errors.InvalidParameterValue, match=f"args must be a JSON object, got {kind}"):
        conn.execute(statement, (["{}", args],))
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.jobs") == 0


ENQUEUE_JOBS = ("SELECT id FROM pgfleet.enqueue_jobs(%s::text[], %s::text[], %s::text[],"
                " %s::int[], NULL, %s::float8[], NULL, NULL, NULL, NULL)")


@pytest.mark.parametrize(("arrays", "error", "message"), [
    # Outside trial T7: the third job went to 'default', unnest padding the queues.
    ((["a", "b", "c"], None, ["q1", "q2"], None, None), psycopg.errors.ArraySubscriptError,
     r"3 tasks, but queues has 2 \(each array"),
    ((["a", "b"], ["{}"], None, [0, 0, 0], None), psycopg.errors.ArraySubscriptError,
     "2 tasks, but args has 1, priorities has 3"),
    ((["a", None], None, None, None, None), psycopg.errors.NullValueNotAllowed,
     r"tasks\[2\] is NULL"),
    ((None, None, None, None, None), psycopg.errors.NullValueNotAllowed, r"tasks\[1\] is NULL"),
    ((["a", "b"], None, None, None, [0, -100]), psycopg.errors.InvalidParameterValue,
     "delays must be finite and not negative"),
    ((["a"], None, None, None, [float("nan")]), psycopg.errors.InvalidParameterValue,
     "delays must be finite"),
])
def test_enqueue_jobs_says_what_is_wrong_with_its_arrays(
        dsn: str, arrays: tuple[Any, ...], error: type[Exception], message: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn, pytest.raises(error, match=message):
        conn.execute(ENQUEUE_JOBS, arrays)
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.jobs") == 0


def test_enqueue_jobs_takes_null_arrays_and_elements_for_the_defaults(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(ENQUEUE_JOBS, (["a", "b"], None, None, None, None))
        conn.execute(ENQUEUE_JOBS, (["c", "d"], ['{"x": 1}', None], ["q", None], [None, 5],
                                    [None, 60]))
        rows = conn.execute(
            "SELECT task, args, queue, priority, run_at > now() + interval '59 seconds'"
            "  FROM pgfleet.jobs ORDER BY id").fetchall()
    assert rows == [("a", {}, "default", 0, False), ("b", {}, "default", 0, False),
                    ("c", {"x": 1}, "q", 0, False), ("d", {}, "default", 5, True)]


@pytest.mark.parametrize("job", ["noop", ["noop"], None, 7])
def test_a_job_that_is_not_a_mapping_is_a_payload_error(dsn: str, job: Any) -> None:
    # Outside trial T7: enqueue_many(dsn, ["noop"]) raised AttributeError ('str' object has
    # no attribute 'keys').
    with pytest.raises(PayloadError, match=r"^jobs\[1\]: must be a mapping of the job's "
                                           rf"fields, got {type(job).__name__}$"):
        pgfleet.enqueue_many(dsn, [{"task": "noop"}, job])
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.jobs") == 0
