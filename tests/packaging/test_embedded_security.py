"""The embedded server of `pgfleet dev` (the suite runs as root, so the server runs as
another account): its folder is never one planted by someone else, and no other local
user can reach the server."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pgfleet.dev import embedded

# The server runs as SERVER; OUTSIDER is any other local account.
SERVER, OUTSIDER = "daemon", "nobody"


@pytest.fixture
def folder(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder in /var/tmp every account can enter (pytest's tmp_path is root's 0700)."""
    monkeypatch.setenv(embedded.ENV_USER, SERVER)
    path = Path(tempfile.mkdtemp(prefix="pgfleet-embedded-test-", dir="/var/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def snapshot(path: Path) -> list[tuple[str, int, int, int]]:
    """Owner, group and mode of `path` and of everything under it, not following links."""
    entries = [path, *sorted(path.rglob("*"))]
    return [(str(p), (s := p.lstat()).st_uid, s.st_gid, s.st_mode) for p in entries]


def start_expecting_refusal(root: Path, match: str) -> None:
    try:
        with pytest.raises(embedded.EmbeddedError, match=match):
            server = embedded.start(root)
            server.stop()  # not refused: stop it before the assertion fails
    finally:
        with contextlib.suppress(embedded.EmbeddedError):
            embedded.EmbeddedServer(root=root, port=0, dsn="", owned=True,
                                    bin_dir=embedded.binaries(),
                                    user=embedded.server_user()).stop()


def test_a_planted_symlink_is_refused_and_its_target_untouched(folder: Path) -> None:
    target = folder / "victim"
    target.mkdir(mode=0o755)
    (target / "keep.txt").write_text("mine\n")
    before = snapshot(target)
    root = folder / "embedded"
    root.symlink_to(target)
    start_expecting_refusal(root, "symbolic link")
    assert snapshot(target) == before
    assert (target / "keep.txt").read_text() == "mine\n"


def test_a_planted_run_or_data_link_is_refused(folder: Path) -> None:
    target = folder / "victim"
    target.mkdir(mode=0o755)
    before = snapshot(target)
    root = folder / "embedded"
    root.mkdir(mode=0o700)
    (root / "run").symlink_to(target)
    start_expecting_refusal(root, "symbolic link")
    (root / "run").unlink()
    (root / "data").symlink_to(target)
    start_expecting_refusal(root, "symbolic link")
    assert snapshot(target) == before


def test_a_folder_of_another_account_is_refused(folder: Path) -> None:
    root = folder / "embedded"
    root.mkdir(mode=0o777)
    outsider = pwd.getpwnam(OUTSIDER)
    os.chown(root, outsider.pw_uid, outsider.pw_gid)
    before = snapshot(root)
    start_expecting_refusal(root, f"belongs to uid {outsider.pw_uid}")
    assert snapshot(root) == before


def test_another_local_user_cannot_connect(folder: Path) -> None:
    root = folder / "embedded"
    server = embedded.start(root)
    try:
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            row = conn.execute("SHOW listen_addresses").fetchone()
        assert row == ("",)  # no TCP listener at all
        assert (root.stat().st_mode & 0o777, (root / "run").stat().st_mode & 0o777) \
            == (0o711, 0o700)
        assert (root / "dsn").stat().st_mode & 0o777 == 0o600
        psql = str(embedded.binaries() / "psql")
        if not embedded._reachable(Path(psql), pwd.getpwnam(OUTSIDER), execute=True):
            psql = shutil.which("psql") or "psql"
        outsider = subprocess.run(
            ["runuser", "-u", OUTSIDER, "--", psql, "-w", server.dsn, "-c", "SELECT 1"],
            capture_output=True, text=True, timeout=30, cwd="/")
        assert outsider.returncode != 0, outsider.stdout
        assert "Permission denied" in outsider.stderr, outsider.stderr
    finally:
        server.stop()


def test_root_gets_a_fresh_unpredictable_folder_when_the_server_cannot_reach_here(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "project"  # under pytest's 0700 folder: the server cannot enter
    project.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.delenv(embedded.ENV_DIR, raising=False)
    user = pwd.getpwnam(SERVER)
    first = embedded.default_root(user, create=True)
    try:
        assert first.parent == Path("/var/tmp") and first.name.startswith("pgfleet-embedded-")
        assert first.stat().st_uid == 0 and not first.is_symlink()
        # Found again by the other commands (`pgfleet dev --url`, examples/burst.py).
        assert embedded.default_root(user) == first
        other = tmp_path / "other"
        other.mkdir()
        monkeypatch.chdir(other)
        second = embedded.default_root(user, create=True)
        assert second != first  # not derived from anything another user can predict
        second.rmdir()
    finally:
        first.rmdir()
