"""The directory of prometheus-client's multiprocess files (PROMETHEUS_MULTIPROC_DIR),
prepared for a run and cleaned after it.

The variable names a path that may be anything: an application's folder set by mistake,
a link planted by another account. pgfleet empties, chmods or removes only a directory it
made and marked as its own, or an empty one given to it; anything else is refused before
any metric is created (importing pgfleet.metrics already writes files there, which is
why this module imports nothing of prometheus-client).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from pgfleet.runtime.private_dirs import RefusedDirectory

# What marks a directory as pgfleet's own. The token changes with every run, so a run
# removes only the directory it prepared itself, not one another run took over since.
MARKER = ".pgfleet-metrics"
_MARKER_TEXT = "pgfleet metrics directory\n{token}\n"
_MARKER_FORMAT = re.compile(r"pgfleet metrics directory\n([0-9a-f]{32})\n")
_MARKER_MAX = 256
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


@dataclass(frozen=True)
class MetricsDirectory:
    """A directory prepared for one run: its marker's token, and whether this run
    created it (then the run removes it at the end, otherwise it only empties it)."""

    path: Path
    token: str
    created: bool


def fresh_directory(directory: str | Path) -> MetricsDirectory:
    """Make `directory` an empty 0700 directory of ours for a new run. Every process of
    the run writes its values there and the exporter serves what it finds.

    A new directory is created and marked. An existing one is used only when it is a
    real directory of this account (never followed through a link) and either carries
    pgfleet's marker or is empty (a mount point, systemd's RuntimeDirectory=): then it
    is marked, made 0700 and emptied. Anything else is refused (RefusedDirectory) and
    nothing in it is touched."""
    folder = Path(directory)
    folder.parent.mkdir(parents=True, exist_ok=True)
    created = True
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        created = False
    fd = _open_directory(folder)
    try:
        if not created:
            if _marker_token(fd) is None and os.listdir(fd):
                raise RefusedDirectory(
                    f"refusing {folder}: it is not empty and has no {MARKER} of pgfleet's, "
                    "so it is not a metrics directory pgfleet made; name a new or empty one")
            os.fchmod(fd, 0o700)
        _empty(fd)
        return MetricsDirectory(folder, _mark(fd), created)
    finally:
        os.close(fd)


def own_directory(directory: str | Path) -> MetricsDirectory:
    """Mark a directory this run has just created itself (tempfile.mkdtemp)."""
    folder = Path(directory)
    fd = _open_directory(folder)
    try:
        return MetricsDirectory(folder, _mark(fd), created=True)
    finally:
        os.close(fd)


def release(prepared: MetricsDirectory) -> None:
    """At the end of the run: empty the directory, and remove it when the run created it,
    if it still carries this run's marker (never through a link, never someone else's)."""
    try:
        fd = _open_directory(prepared.path)
    except (RefusedDirectory, OSError):
        return
    try:
        if _marker_token(fd) != prepared.token:
            return
        _empty(fd, keep_marker=False)
    finally:
        os.close(fd)
    if prepared.created:
        with contextlib.suppress(OSError):
            prepared.path.rmdir()


def _open_directory(folder: Path) -> int:
    try:
        fd = os.open(folder, _DIRECTORY_FLAGS)
    except OSError:
        kind = "a symbolic link" if folder.is_symlink() else "not a directory"
        raise RefusedDirectory(f"refusing {folder}: it is {kind}") from None
    info = os.fstat(fd)
    if info.st_uid != os.geteuid():
        os.close(fd)
        raise RefusedDirectory(f"refusing {folder}: it belongs to uid {info.st_uid}, not "
                               "to this account")
    return fd


def _marker_token(fd: int) -> str | None:
    """The token of the marker in the directory `fd`, None when there is no valid one
    (missing, a link, not a regular file of ours, not pgfleet's text)."""
    try:
        marker = os.open(MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    except OSError:
        return None
    try:
        info = os.fstat(marker)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            return None
        text = os.read(marker, _MARKER_MAX).decode(errors="replace")
    finally:
        os.close(marker)
    match = _MARKER_FORMAT.fullmatch(text)
    return match[1] if match else None


def _mark(fd: int) -> str:
    token = secrets.token_hex(16)
    temporary = f"{MARKER}.{token}"
    out = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                  dir_fd=fd)
    with os.fdopen(out, "w") as file:
        file.write(_MARKER_TEXT.format(token=token))
    os.replace(temporary, MARKER, src_dir_fd=fd, dst_dir_fd=fd)
    return token


def _empty(fd: int, keep_marker: bool = True) -> None:
    """Remove what the directory `fd` holds, by name relative to it: a link is removed,
    never followed."""
    for name in os.listdir(fd):
        if keep_marker and name == MARKER:
            continue
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(info.st_mode):
            shutil.rmtree(name, dir_fd=fd)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=fd)
