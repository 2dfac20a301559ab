"""Directories only this account may use, made or accepted without following links.

A directory at a known path (the embedded server's, a set PROMETHEUS_MULTIPROC_DIR) can be
planted beforehand by another local account, as a symbolic link to something of ours or
as a directory of theirs; either is refused rather than used.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from pgfleet.errors import PgfleetError


class RefusedDirectory(PgfleetError):
    """The directory is a link, not a directory, or someone else's."""


def private_dir(path: Path, *, owner: tuple[int, int], mode: int | None,
                allowed: set[int], dir_fd: int | None = None) -> None:
    """Create `path` or accept an existing one that is a real directory (not a symbolic
    link) owned by a uid in `allowed`; then give it `owner` and `mode` through a
    descriptor opened without following links, so nothing planted there is touched.
    With `dir_fd`, `path` is a name inside that open directory (openat)."""
    name: str | Path = path.name if dir_fd is not None else path
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o700, dir_fd=dir_fd)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError:
        kind = ("a symbolic link" if os.path.islink(path) or _is_link_at(name, dir_fd)
                else "not a directory")
        raise RefusedDirectory(f"refusing {path}: it is {kind}") from None
    try:
        info = os.fstat(fd)
        if info.st_uid not in allowed:
            raise RefusedDirectory(f"refusing {path}: it belongs to uid {info.st_uid}, not "
                                   "to this account")
        if (info.st_uid, info.st_gid) != owner:
            os.fchown(fd, *owner)
        if mode is not None:  # None keeps the mode an existing folder was given
            os.fchmod(fd, mode)
    finally:
        os.close(fd)


def open_private_dir(path: Path, *, create_mode: int) -> int:
    """A descriptor of the directory `path`, created with `create_mode` when missing,
    opened without following a link, and checked: this account's, writable by no one
    else. Whatever is opened inside it through the descriptor (`dir_fd=`) cannot be
    swapped by another local account."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, create_mode)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        kind = "a symbolic link" if path.is_symlink() else "not a directory"
        raise RefusedDirectory(f"refusing {path}: it is {kind}") from None
    info = os.fstat(fd)
    problem = None
    if info.st_uid != os.geteuid():
        problem = f"it belongs to uid {info.st_uid}, not to this account"
    elif info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        problem = f"other accounts may write in it (mode {stat.S_IMODE(info.st_mode):04o})"
    if problem:
        os.close(fd)
        raise RefusedDirectory(f"refusing {path}: {problem}")
    return fd


def _is_link_at(name: str | Path, dir_fd: int | None) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False
