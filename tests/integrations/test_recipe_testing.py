"""The testing section of docs/integrations.md, run as a new user runs it: the small
application's own pytest suite, using pgfleet.testing both ways (eager mode without a
database, run_jobs on the plugin's migrated database)."""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path

from tests.integrations.recipes import environment, run, write_project
from tests.support import pg


def plugin_args() -> list[str]:
    """`-p pgfleet.pytest_plugin` unless the installed distribution registers it already
    (this checkout may be newer than the installed metadata)."""
    registered = any(e.value == "pgfleet.pytest_plugin" for e in entry_points(group="pytest11"))
    return [] if registered else ["-p", "pgfleet.pytest_plugin"]


def test_an_apps_suite_uses_pgfleet_testing_both_ways(tmp_path: Path) -> None:
    write_project("Testing your application", tmp_path)
    env = environment("", PGFLEET_TEST_SERVER=pg.ADMIN_DSN)
    done = run(tmp_path, env, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               *plugin_args(), "tests")
    assert "3 passed" in done.stdout, done.stdout


def test_the_plugin_is_registered_for_pytest() -> None:
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert '[project.entry-points.pytest11]\npgfleet = "pgfleet.pytest_plugin"' in pyproject
