"""The docs stay true: every `pgfleet` command they show parses against the real CLI, and
the reference pages list every command, configuration key and metric."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import click
import pytest
from pydantic import BaseModel

from pgfleet import metrics
from pgfleet.cli import cli
from pgfleet.config import Config, QueueConfig, ScheduleConfig
from tests.support.metric_names import exported

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# Pages written by others, with their own checks.
NOT_OURS = {"performance.md", "performance-history.md", "reliability.md"}
PAGES = [*sorted(p for p in DOCS.glob("*.md") if p.name not in NOT_OURS), ROOT / "README.md"]


def command_lines() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for block in re.findall(r"```sh\n(.*?)```", page.read_text(), re.S):
            for line in block.splitlines():
                line = re.sub(r"\s+#\s.*$", "", line).strip()
                if line.startswith("pgfleet "):
                    found.append((page.name, line.split(" > ")[0]))
    return found


def test_dev_is_registered() -> None:
    assert "dev" in cli.commands, "pgfleet.cli.root must add pgfleet.cli.dev.dev"


@pytest.mark.parametrize(("page", "line"), command_lines())
def test_documented_command_parses(page: str, line: str) -> None:
    args = shlex.split(line)[1:]
    warnings.simplefilter("ignore", DeprecationWarning)  # click 8.2 deprecates protected_args
    # Options of the group come before the command name.
    ctx = cli.make_context("pgfleet", list(args), resilient_parsing=False)
    command: click.Command = cli
    rest = ctx.protected_args + ctx.args
    while isinstance(command, click.Group):
        name, rest = rest[0], rest[1:]
        sub = command.get_command(ctx, name)
        assert sub is not None, f"{page}: `{line}`: no command {name!r}"
        command = sub
        ctx = command.make_context(name, list(rest), parent=ctx)
        rest = ctx.protected_args + ctx.args if isinstance(command, click.Group) else []


def _all_commands() -> list[str]:
    names = []
    for name, command in cli.commands.items():
        names.append(name)
        if isinstance(command, click.Group):
            names += [f"{name} {sub}" for sub in command.commands]
    return names


def test_command_reference_covers_every_command() -> None:
    text = (DOCS / "commands.md").read_text()
    for name in _all_commands():
        top = name.split()[0]
        assert f"## pgfleet {top}" in text, f"commands.md has no section for {top}"
        assert f"pgfleet {name}" in text, f"commands.md never shows `pgfleet {name}`"


def _key_paths(model: type[BaseModel], prefix: str) -> list[str]:
    paths = []
    for name, field in model.model_fields.items():
        path = prefix + name
        if model is Config and name in ("queues", "schedules"):
            entry = QueueConfig if name == "queues" else ScheduleConfig
            paths += [path, *_key_paths(entry, f"{path}.NAME.")]
            continue
        sub = next((a for a in [field.annotation, *getattr(field.annotation, "__args__", ())]
                    if isinstance(a, type) and issubclass(a, BaseModel)), None)
        paths += _key_paths(sub, path + ".") if sub else [path]
    return paths


def test_configuration_page_lists_every_key() -> None:
    text = (DOCS / "configuration.md").read_text()
    missing = [p for p in _key_paths(Config, "") if f"| `{p}` |" not in text]
    assert missing == []


def test_monitoring_page_lists_every_metric() -> None:
    text = (DOCS / "monitoring.md").read_text()
    names = exported()  # the database gauges (served by the exporter) included
    assert metrics.database_up.name in names
    missing = sorted(n for n in names if f"`{n}" not in text)
    assert missing == []


def test_the_runtime_roles_grants_in_security_md_are_what_pgfleet_grants_prints(
        dsn: str) -> None:
    # Outside trial T7: the page listed four tables and three functions; the command
    # granted four tables and three claim functions more.
    out = subprocess.run([sys.executable, "-m", "pgfleet", "grants", "--runtime", "r"],
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "PGFLEET_DATABASE_URL": dsn}).stdout
    granted = set(re.findall(r"^GRANT [^\n]* ON (?:FUNCTION |SEQUENCE )?(pgfleet\.\w+)", out,
                             re.M))
    page = (DOCS / "security.md").read_text()
    bullet = page[page.index("- **Runtime role**"):page.index("- **Producer**")]
    listed = set(re.findall(r"`(pgfleet\.\w+)`", bullet))
    enqueue = {"pgfleet.enqueue", "pgfleet.enqueue_job", "pgfleet.enqueue_jobs",
               "pgfleet.jobs_holding_keys"}  # "the enqueue functions", listed under Producer
    assert granted - enqueue == listed, (granted - enqueue - listed, listed - granted)
