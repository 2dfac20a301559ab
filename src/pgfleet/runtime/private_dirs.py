"""Directories only this account may use, made or accepted without following links.

A directory at a known path (the embedded server's, a set PROMETHEUS_MULTIPROC_DIR) can be
planted beforehand by another local account, as a symbolic link to something of ours or
as a directory of theirs; either is refused rather than used.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from pgfleet.errors import PgfleetError


class RefusedDirectory(PgfleetError):
    """The directory is a link, not a directory, or someone else's."""


def private_dir(path: Path, *, owner: tuple[int, int], mode: int | None,
                allowed: set[int]) -> None:
    """Create `path` or accept an existing one that is a real directory (not a symbolic
    link) owned by a uid in `allowed`; then give it `owner` and `mode` through a
    descriptor opened without following links, so nothing planted there is touched."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        kind = "a symbolic link" if path.is_symlink() else "not a directory"
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
