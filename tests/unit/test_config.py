"""Configuration loading: FAULTS.md section E, interpolation, durations, sizes, schema."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from pgfleet.config import (
    Config,
    ConfigError,
    config_json_schema,
    load_config,
    parse_config_text,
)
from pgfleet.core.durations import format_duration, parse_duration, parse_size

DESIGN_EXAMPLE = """\
database_url: ${DATABASE_URL}
tasks: [myapp.tasks]              # modules whose @task functions workers may run
queues:
  default: {processes: 2}
  emails:
    processes: 1
    threads: 8                    # I/O-bound work: many jobs per process
    timeout: 30s
    max_attempts: 10
    backoff: {initial: 2s, max: 10m}
    max_jobs: 1000                # recycle a process after this many jobs
    max_memory: 512MiB            # or above this RSS
schedules:
  nightly-report:
    cron: "0 3 * * *"
    timezone: Europe/Berlin
    task: myapp.tasks.nightly_report
    args: {format: pdf}
metrics: {listen: "127.0.0.1:9464"}
supervisor: {heartbeat_interval: 5s, stale_after: 30s, shutdown_timeout: 30s}
"""


def errors_of(text: str, environ: dict[str, str] | None = None) -> list[str]:
    """Validate `text` as pgfleet.yaml and return its error lines (none is a failure)."""
    with pytest.raises(ConfigError) as caught:
        parse_config_text(textwrap.dedent(text), "pgfleet.yaml", environ or {})
    assert str(caught.value) == "\n".join(caught.value.errors)
    return caught.value.errors


def load(text: str, environ: dict[str, str] | None = None) -> Config:
    return parse_config_text(textwrap.dedent(text), "pgfleet.yaml", environ or {})


# ------------------------------------------------------------------ valid files


def test_design_example_loads(tmp_path: Path) -> None:
    path = tmp_path / "pgfleet.yaml"
    path.write_text(DESIGN_EXAMPLE)
    config = load_config(path, {"DATABASE_URL": "postgresql://app:s3cr3t@db/app"})
    emails = config.queues["emails"]
    assert config.database_url == "postgresql://app:s3cr3t@db/app"
    assert (emails.threads, emails.timeout, emails.max_memory) == (8, 30.0, 512 * 1024**2)
    assert (emails.backoff.initial, emails.backoff.max, emails.backoff.factor) == (2, 600, 2)
    assert config.schedules["nightly-report"].timezone == "Europe/Berlin"
    assert config.queue_poll_interval("default") == 1.0
    assert config.task_modules("emails") == ["myapp.tasks"]


def test_defaults_and_repr_hides_the_database_url() -> None:
    config = load("database_url: postgresql://u:s3cr3t@h/db\nqueues: {default: {}}\n")
    queue = config.queues["default"]
    assert (queue.processes, queue.threads, queue.timeout, queue.kill_grace) == (1, 1, 1800, 10)
    assert config.supervisor.lease == 60 and config.maintenance.retention == 7 * 86400
    assert config.metrics.listen == "127.0.0.1:9464" and config.notify is True
    assert "s3cr3t" not in repr(config)


def test_config_is_frozen() -> None:
    config = load("queues: {default: {}}")
    with pytest.raises(ValueError):
        config.notify = False


def test_json_schema_export_is_json_with_queues() -> None:
    schema = json.loads(json.dumps(config_json_schema()))
    assert "queues" in schema["properties"]
    assert "queues" in schema["required"]
    assert schema["properties"]["queues"]["description"]


# ------------------------------------------------------------- E1 malformed YAML


def test_e1_tab_indentation_names_line_and_column() -> None:
    assert errors_of("queues:\n\tdefault: {}\n") == [
        "pgfleet.yaml:2:1: found character '\\t' that cannot start any token"
        " (indent with spaces, not tabs)"
    ]


def test_e1_unclosed_bracket() -> None:
    [error] = errors_of("tasks: [a.b\nqueues: {default: {}}\n")
    assert error.startswith("pgfleet.yaml:2:")


def test_e1_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "pgfleet.yaml"
    path.write_text("# nothing here\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.errors == [
        f"{path}:1: the file is empty; expected a mapping with at least `queues`"
    ]


def test_e1_unquoted_star_cron_gets_a_hint() -> None:
    [error] = errors_of("schedules:\n  s: {cron: * * * * *}\n")
    assert error.startswith("pgfleet.yaml:2:") and "must be quoted" in error


# ------------------------------------------------------------------ E2 tags


def test_e2_python_tag_is_refused_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    errors = errors_of(
        f"""\
        queues: {{default: {{}}}}
        x: !!python/object/apply:os.system ["touch {marker}"]
        """
    )
    assert errors == [
        "pgfleet.yaml:2: x: tag `!!python/object/apply:os.system` is not allowed;"
        " only plain data is"
    ]
    assert not marker.exists()


# ------------------------------------------------------------- E3 duplicates


def test_e3_duplicate_top_level_key() -> None:
    errors = errors_of("queues: {a: {}}\nnotify: true\nqueues: {b: {}}\n")
    assert errors == [
        "pgfleet.yaml:3: queues: duplicate key `queues` (first on line 1, again on line 3)"
    ]


def test_e3_duplicate_queue_name() -> None:
    errors = errors_of(
        """\
        queues:
          emails: {threads: 2}
          default: {}
          emails: {threads: 4}
        """
    )
    assert errors == [
        "pgfleet.yaml:4: queues.emails: duplicate key `emails` (first on line 2, again on line 4)"
    ]


def test_e3_merge_keys_may_override_without_a_duplicate_error() -> None:
    config = load(
        """\
        queues:
          base: &base {threads: 4, processes: 2}
          child:
            <<: *base
            threads: 8
        """
    )
    assert (config.queues["child"].threads, config.queues["child"].processes) == (8, 2)


# ------------------------------------------------------------- E4 coercions


def test_e4_yaml11_boolean_words_stay_queue_names() -> None:
    config = load("queues:\n  no: {}\n  on: {}\n  off: {}\n  yes: {}\n  null: {}\n")
    assert list(config.queues) == ["no", "on", "off", "yes", "null"]


def test_e4_boolean_values_still_work() -> None:
    config = load("notify: off\nqueues: {default: {}}\nmetrics: {enabled: no}\n")
    assert config.notify is False and config.metrics.enabled is False


def test_e4_leading_zero_integer_is_an_error_not_octal() -> None:
    errors = errors_of("queues:\n  default:\n    processes: 010\n")
    assert errors == [
        "pgfleet.yaml:3: queues.default.processes: YAML 1.1 reads `010` as octal, i.e. 8;"
        " write integers in plain decimal, without leading zeros (quote text)"
    ]


def test_e4_hex_and_base60_integers_are_errors() -> None:
    errors = errors_of("queues:\n  default:\n    threads: 0x10\n    prefetch: 1:30\n")
    assert errors[0].startswith("pgfleet.yaml:3: queues.default.threads: YAML 1.1 reads `0x10`")
    assert errors[1].startswith("pgfleet.yaml:4: queues.default.prefetch: YAML 1.1 reads `1:30`")


def test_e4_exponent_without_dot_is_not_a_duration() -> None:
    errors = errors_of("queues:\n  default:\n    timeout: 1e3\n")
    assert errors == [
        "pgfleet.yaml:3: queues.default.timeout: expected a duration like 30s, 5m, 1h"
    ]


def test_e4_quoted_duration_and_plain_number_of_seconds() -> None:
    config = load('queues:\n  a: {timeout: "30s"}\n  b: {timeout: 90}\n  c: {timeout: 1.5}\n')
    assert [q.timeout for q in config.queues.values()] == [30.0, 90.0, 1.5]


def test_e4_dates_stay_strings_in_args() -> None:
    config = load(
        "queues: {a: {}}\nschedules:\n  s: {cron: '@daily', task: t, args: {d: 2026-01-01}}"
    )
    assert config.schedules["s"].args == {"d": "2026-01-01"}


# ---------------------------------------------------------------- E5 unknown keys


def test_e5_misspelled_key_gets_a_suggestion() -> None:
    errors = errors_of("queues:\n  default:\n    theads: 4\n")
    assert errors == [
        "pgfleet.yaml:3: queues.default.theads: unknown key `theads`; did you mean `threads`?"
    ]


def test_e5_concurrency_from_other_systems_points_to_threads() -> None:
    errors = errors_of("queues:\n  default:\n    concurency: 5\n")
    assert errors == [
        "pgfleet.yaml:3: queues.default.concurency: unknown key `concurency`;"
        " did you mean `threads`? (pgfleet's name for concurrency)"
    ]


def test_e5_unknown_top_level_key_lists_the_choices() -> None:
    errors = errors_of("queues: {a: {}}\nfrobnicate: 1\n")
    assert errors[0].startswith("pgfleet.yaml:2: frobnicate: unknown key `frobnicate`; expected")


def test_e5_misspelling_in_a_nested_model() -> None:
    errors = errors_of("queues: {a: {}}\nsupervisor:\n  stale_afer: 30s\n")
    assert errors == [
        "pgfleet.yaml:3: supervisor.stale_afer: unknown key `stale_afer`;"
        " did you mean `stale_after`?"
    ]


# ---------------------------------------------------------------- E6 values


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", "expected a value of at least 1"),
        ("-1", "expected a value of at least 1"),
        ("1000000", "expected a value of at most 64"),
        ("yes", "expected a number, not true/false"),
        ("many", "expected an integer"),
    ],
)
def test_e6_processes_out_of_range(value: str, expected: str) -> None:
    errors = errors_of(f"queues:\n  default:\n    threads: 2\n    processes: {value}\n")
    assert errors == [f"pgfleet.yaml:4: queues.default.processes: {expected}"]


def test_e6_every_problem_is_reported_at_once() -> None:
    errors = errors_of(
        """\
        poll_interval: 0s
        queues:
          default:
            timeout: -5s
            max_attempts: 0
            max_memory: 1MiB
            backoff: {initial: 10s, max: 1s, jitter: 2}
        schedules:
          nightly:
            cron: "60 * * * *"
            timezone: Mars/Olympus
        metrics: {listen: "::1:9464"}
        """
    )
    assert errors == [
        "pgfleet.yaml:1: poll_interval: expected a duration greater than 0s",
        "pgfleet.yaml:4: queues.default.timeout: expected a duration like 30s, 5m, 1h",
        "pgfleet.yaml:5: queues.default.max_attempts: expected a value of at least 1",
        "pgfleet.yaml:6: queues.default.max_memory: expected a size of at least 32MiB",
        "pgfleet.yaml:7: queues.default.backoff.jitter: expected a value of at most 1",
        "pgfleet.yaml:9: schedules.nightly.task: required key is missing",
        'pgfleet.yaml:10: schedules.nightly.cron: invalid cron expression "60 * * * *":'
        " minute 60 is out of range 0-59",
        "pgfleet.yaml:11: schedules.nightly.timezone: unknown time zone 'Mars/Olympus'",
        "pgfleet.yaml:12: metrics.listen: expected host:port, e.g. 127.0.0.1:9464 or"
        " [::1]:9464 (IPv6 addresses go in brackets)",
    ]


def test_e6_backoff_max_below_initial() -> None:
    errors = errors_of("queues:\n  default:\n    backoff:\n      initial: 10s\n      max: 1s\n")
    assert errors == [
        "pgfleet.yaml:5: queues.default.backoff.max: max (1s) must be at least initial (10s)"
    ]


def test_e6_timeout_longer_than_a_week() -> None:
    errors = errors_of("queues:\n  default:\n    timeout: 8d\n")
    assert errors == ["pgfleet.yaml:3: queues.default.timeout: expected a duration of at most 7d"]


def test_e6_heartbeat_must_be_under_half_of_stale_after() -> None:
    errors = errors_of(
        "queues: {a: {}}\nsupervisor:\n  stale_after: 30s\n  heartbeat_interval: 15s\n"
    )
    assert errors == [
        "pgfleet.yaml:4: supervisor.heartbeat_interval: heartbeat_interval (15s) must be less"
        " than half of stale_after (30s)"
    ]


def test_e6_lease_must_outlive_stale_after_plus_kill_grace() -> None:
    errors = errors_of(
        """\
        queues:
          fast: {kill_grace: 5s}
          slow: {kill_grace: 45s}
        supervisor:
          lease: 70s
        """
    )
    assert errors == [
        "pgfleet.yaml:5: supervisor.lease: lease (1m10s) must be greater than stale_after (30s)"
        " + kill_grace of queue `slow` (45s) = 1m15s: the supervisor must kill a stuck worker"
        " before its jobs' lease can expire"
    ]


def test_e6_missing_and_empty_queues() -> None:
    assert errors_of("notify: true\n") == ["pgfleet.yaml:1: queues: required key is missing"]
    assert errors_of("queues: {}\n") == ["pgfleet.yaml:1: queues: expected at least 1 entries"]


def test_e6_queue_names_and_task_modules() -> None:
    errors = errors_of('queues:\n  " lead": {}\n  ok: {tasks: ["my app"]}\ntasks: [1x.y]\n')
    assert errors == [
        'pgfleet.yaml:2: queues[" lead"]: a name must not start with whitespace',
        "pgfleet.yaml:3: queues.ok.tasks[0]: expected a dotted Python module name like"
        " myapp.tasks, got 'my app'",
        "pgfleet.yaml:4: tasks[0]: expected a dotted Python module name like myapp.tasks,"
        " got '1x.y'",
    ]


def test_e6_schedule_for_a_queue_not_configured_here_is_fine() -> None:
    config = load("queues: {a: {}}\nschedules:\n  s: {cron: '@hourly', task: t, queue: b}\n")
    assert config.schedules["s"].queue == "b"


@pytest.mark.parametrize("listen", ["127.0.0.1:9464", "[::1]:9464", "0.0.0.0:0", "localhost:80"])
def test_e6_listen_forms_accepted(listen: str) -> None:
    assert load(f"queues: {{a: {{}}}}\nmetrics: {{listen: '{listen}'}}\n").metrics.listen == listen


@pytest.mark.parametrize("listen", ["9464", "host:65536", "[::1]", ":9464", "h:-1"])
def test_e6_listen_forms_rejected(listen: str) -> None:
    [error] = errors_of(f"queues: {{a: {{}}}}\nmetrics: {{listen: '{listen}'}}\n")
    assert error.startswith("pgfleet.yaml:2: metrics.listen: expected")


# ------------------------------------------------------------------- E7 cron


@pytest.mark.parametrize(
    ("cron", "reason"),
    [
        ("* * * *", "expected 5 fields"),
        ("60 * * * *", "minute 60 is out of range 0-59"),
        ("* 24 * * *", "hour 24 is out of range 0-23"),
        ("*/0 * * * *", "minute step 0 is out of range 1-59"),
        ("0 0 30 2 *", "day-of-month 30 never occurs in month 2"),
        ("0-99999999 * * * *", "minute 99999999 is out of range 0-59"),
    ],
)
def test_e7_invalid_cron_names_the_schedule_and_line(cron: str, reason: str) -> None:
    errors = errors_of(
        f"""\
        queues: {{default: {{}}}}
        schedules:
          nightly:
            task: myapp.tasks.nightly
            cron: "{cron}"
        """
    )
    assert len(errors) == 1
    assert errors[0].startswith(
        f'pgfleet.yaml:5: schedules.nightly.cron: invalid cron expression "{cron}": '
    )
    assert reason in errors[0]


def test_e7_unknown_timezone() -> None:
    errors = errors_of(
        "queues: {a: {}}\nschedules:\n  s:\n    cron: '@daily'\n    task: t\n"
        "    timezone: Nowhere/X\n"
    )
    assert errors == ["pgfleet.yaml:6: schedules.s.timezone: unknown time zone 'Nowhere/X'"]


# ---------------------------------------------------------- E8 interpolation


def test_e8_missing_variable_names_it_and_the_line() -> None:
    errors = errors_of("queues: {a: {}}\ndatabase_url: ${PG_URL}\n")
    assert errors == [
        "pgfleet.yaml:2: database_url: environment variable `PG_URL` is not set and has no default"
    ]


def test_e8_default_and_numeric_interpolation() -> None:
    config = load(
        """\
        notify: ${NOTIFY:-false}
        queues:
          default:
            processes: ${N:-2}
            threads: ${T}
            timeout: ${TIMEOUT:-45s}
        database_url: ${DATABASE_URL:-}
        """,
        {"T": "3", "NOTIFY": ""},
    )
    queue = config.queues["default"]
    assert (queue.processes, queue.threads, queue.timeout) == (2, 3, 45.0)
    assert config.notify is False and config.database_url is None


def test_e8_injected_yaml_stays_one_literal_string() -> None:
    evil = "x\nqueues: {evil: {processes: 64}}"
    config = load(
        "queues: {a: {}}\nschedules:\n  s: {cron: '@daily', task: '${EVIL}'}\n", {"EVIL": evil}
    )
    assert config.schedules["s"].task == evil
    assert list(config.queues) == ["a"]


def test_e8_no_recursive_expansion_and_escape() -> None:
    config = load(
        "queues: {a: {}}\nschedules:\n"
        "  s: {cron: '@daily', task: t, args: {a: '${A}', b: '$${A}'}}\n",
        {"A": "${SECRET}", "SECRET": "leak"},
    )
    assert config.schedules["s"].args == {"a": "${SECRET}", "b": "${A}"}


def test_e8_malformed_reference() -> None:
    errors = errors_of("queues: {a: {}}\ndatabase_url: 'x${'\n")
    assert errors[0].startswith("pgfleet.yaml:2: database_url: malformed `${`")


def test_e8_password_never_in_errors() -> None:
    errors = errors_of(
        "database_url: ${URL}\nqueues: {a: {processes: 0}}\n",
        {"URL": "postgresql://app:s3cr3t@db/app"},
    )
    assert "s3cr3t" not in "\n".join(errors)


# ---------------------------------------------------------- E9 size and aliases


def test_e9_file_over_one_mebibyte(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("queues: {a: {}}\n" + "# padding\n" * 120_000)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.errors == [f"{path}:1: the file is larger than 1 MiB; refusing to parse it"]


def test_e9_alias_fan_out_is_refused() -> None:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for name, previous in zip("bcdefghi", "abcdefgh", strict=True):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{previous}"] * 10) + "]")
    errors = errors_of("\n".join(lines) + "\n")
    assert len(errors) == 1 and "through aliases; refusing it" in errors[0]


def test_e9_too_many_aliases() -> None:
    text = "a: &a 1\nqueues: {q: {}}\nb: [" + ", ".join(["*a"] * 101) + "]\n"
    assert errors_of(text) == ["pgfleet.yaml:3: more than 100 aliases; refusing the document"]


def test_e9_self_referencing_alias() -> None:
    [error] = errors_of("a: &a [*a]\nqueues: {q: {}}\n")
    assert "refers to itself" in error


# ------------------------------------------------------- durations and sizes


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        (30, 30.0),
        (1.5, 1.5),
        ("500ms", 0.5),
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("7d", 604800.0),
        ("1h30m", 5400.0),
        ("1m0.5s", 60.5),
        ("2w", 1209600.0),
        ("45", 45.0),
        (" 10s ", 10.0),
        ("0s", 0.0),
    ],
)
def test_parse_duration(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text", ["", "-5s", -1, "5x", "30m1h", "1h1h", "1.5.2s", "s", True, None, "1e3", float("nan")]
)
def test_parse_duration_rejects(text: object) -> None:
    with pytest.raises(ValueError, match=r"^expected a duration like 30s, 5m, 1h$"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        (1024, 1024),
        ("1024", 1024),
        ("64KiB", 65536),
        ("512MiB", 512 * 1024**2),
        ("1GiB", 1024**3),
        ("100MB", 100_000_000),
        ("1.5GiB", 3 * 1024**3 // 2),
        ("10 kb", 10_000),
    ],
)
def test_parse_size(text: object, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "-1", -1, "12 parsecs", "MiB", True, 1.5, "1e9"])
def test_parse_size_rejects(text: object) -> None:
    with pytest.raises(ValueError, match="expected a size"):
        parse_size(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (0.5, "500ms"),
        (30, "30s"),
        (90, "1m30s"),
        (3600, "1h"),
        (93784.25, "1d2h3m4s250ms"),
    ],
)
def test_format_duration_round_trips(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text) == seconds


def test_crash_limit_values_are_checked_one_line_each() -> None:
    errors = errors_of("queues: {default: {}}\n"
                       "supervisor:\n  crash_limit:\n    count: 0\n    window: 0s\n")
    assert errors == [
        "pgfleet.yaml:4: supervisor.crash_limit.count: expected a value of at least 1",
        "pgfleet.yaml:5: supervisor.crash_limit.window: expected a duration greater than 0s",
    ]


def test_a_bad_prefetch_is_one_plain_line() -> None:
    """Outside trial: `prefetch: -1` printed two lines per value under pydantic's internal
    names of the union's members (`function-after[functools.partial(<function ...`)."""
    errors = errors_of("queues:\n  a:\n    prefetch: -1\n  b:\n    prefetch: lots\n"
                       "  c:\n    prefetch: true\n  d:\n    prefetch: 1001\n")
    expected = "expected auto or a whole number from 0 to 1000"
    assert errors == [f"pgfleet.yaml:{line}: queues.{name}.prefetch: {expected}"
                      for line, name in ((3, "a"), (5, "b"), (7, "c"), (9, "d"))]


@pytest.mark.parametrize(("line", "field"), [
    ("poll_interval: \"\uff15s\"", "poll_interval"),
    ("poll_interval: \"\u0665\"", "poll_interval"),
    ("metrics: {listen: \"127.0.0.1:\u0669\u0664\u0666\u0664\"}", "metrics.listen"),
])
def test_digits_other_than_ascii_are_refused(line: str, field: str) -> None:
    # Outside trial T7 (a rate of a full-width 5 per second passed `pgfleet check`): int()
    # and \d take full-width and Arabic-Indic digits, which a reader may not see as such.
    errors = errors_of(f"database_url: postgresql://x/y\ntasks: [t]\n{line}\n"
                       "queues: {default: {}}\n")
    assert any(field in error for error in errors), errors
