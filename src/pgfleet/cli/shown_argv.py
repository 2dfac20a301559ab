"""The command line as other local accounts see it (`ps`, /proc/PID/cmdline)."""

from __future__ import annotations

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
