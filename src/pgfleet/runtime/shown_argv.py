"""The command line as other local accounts see it (`ps`, /proc/PID/cmdline).

A top-level module that imports nothing of pgfleet and nothing slow: the package's
__init__ calls hide_database_url() first when is_this_the_command(), so a URL given as
--database-url is hidden before the driver, pydantic and click are imported (which takes
most of a start-up), not after.
"""

from __future__ import annotations

import os
import sys

from setproctitle import setproctitle

OPTION = "--database-url"
HIDDEN = "***"


def without_database_url(argv: list[str]) -> list[str] | None:
    """argv with the value of every --database-url replaced, or None if there is none."""
    shown: list[str] = []
    value_next = False
    for arg in argv:
        if value_next:
            shown.append(HIDDEN)
            value_next = False
        elif arg.startswith(OPTION + "="):
            shown.append(f"{OPTION}={HIDDEN}")
        else:
            shown.append(arg)
            value_next = arg == OPTION
    return shown if shown != argv else None


def hide_database_url(argv: list[str]) -> None:
    """A URL given as --database-url may hold a password, and any local account can read
    a process's command line: rewrite it (setproctitle overwrites argv's memory) with the
    value hidden. Passwords belong in PGFLEET_DATABASE_URL or a .pgpass/service file."""
    shown = without_database_url(argv)
    if shown is not None:
        setproctitle(" ".join(["pgfleet", *shown[1:]]))


def is_pgfleet_command(argv: list[str], orig_argv: list[str]) -> bool:
    """Is this process the `pgfleet` command: the console script, or `python -m pgfleet`
    (whose argv[0] is "-m" while the package is being imported)? An application that
    imports pgfleet keeps its own process title."""
    if os.path.basename(argv[0]) == "pgfleet":
        return True
    for index, arg in enumerate(orig_argv[1:], start=1):
        if arg == "-m":
            return orig_argv[index + 1:index + 2] == ["pgfleet"]
        if arg.startswith("-m"):
            return arg == "-mpgfleet"
    return False


def is_this_the_command() -> bool:
    """is_pgfleet_command() of this process."""
    argv = list(sys.argv)
    return bool(argv) and is_pgfleet_command(argv, list(getattr(sys, "orig_argv", [])))
