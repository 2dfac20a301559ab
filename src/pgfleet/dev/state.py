"""What a running `pgfleet dev` records about itself: `dev.json` in its folder (the
embedded server's, .pgfleet/embedded by default), mode 0600 because the URL may hold a
password. `pgfleet dev --stop` reads it to stop the supervisor; the other commands read it
to find the database when no URL is given."""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from pgfleet.dev import embedded

STATE_FILE = "dev.json"
# Beyond the supervisor's shutdown_timeout: stopping the children and the embedded server.
STOP_MARGIN = 30.0


@dataclass(frozen=True)
class DevState:
    pid: int
    dsn: str
    shutdown_timeout: float


def default_root() -> Path | None:
    """The folder `pgfleet dev` uses when not given --data-dir (PGFLEET_EMBEDDED_DIR, else
    .pgfleet/embedded here); None when it cannot be worked out."""
    try:
        return embedded.default_root(embedded.server_user())
    except embedded.EmbeddedError:
        return None


def record(root: Path, state: DevState) -> None:
    """Write the state file atomically, readable by its owner only."""
    embedded.make_root(root)
    partial = root / f".{STATE_FILE}.{os.getpid()}"
    try:
        partial.unlink(missing_ok=True)
        # O_EXCL and O_NOFOLLOW: never written through a link planted at that name.
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(asdict(state), out)
        os.replace(partial, root / STATE_FILE)
    except OSError as exc:
        raise embedded.EmbeddedError(
            f"cannot write {root / STATE_FILE}: {exc.strerror or exc}") from None


def read(root: Path) -> DevState | None:
    """The state of the `pgfleet dev` running in `root`, or None (none recorded, or its
    process is gone)."""
    try:
        data = json.loads(embedded.read_nofollow(root / STATE_FILE))
        state = DevState(pid=int(data["pid"]), dsn=str(data["dsn"]),
                         shutdown_timeout=float(data["shutdown_timeout"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return state if alive(state.pid) else None


def forget(root: Path, pid: int) -> None:
    """Remove the state file if it is still the one `pid` wrote."""
    state = read(root)
    if state is None or state.pid == pid:
        (root / STATE_FILE).unlink(missing_ok=True)


def alive(pid: int) -> bool:
    """Is `pid` a running pgfleet process? A recycled pid of another program is not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        # A reaped-but-unwaited zombie has an empty command line.
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no /proc: trust kill()
    return b"pgfleet" in command


def stop(state: DevState) -> bool:
    """SIGTERM the supervisor of `pgfleet dev` (a graceful stop: it stops its children,
    then the embedded server it started) and wait for it to exit. False if it is still
    running after its shutdown_timeout and a margin."""
    try:
        os.kill(state.pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + state.shutdown_timeout + STOP_MARGIN
    while alive(state.pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True
