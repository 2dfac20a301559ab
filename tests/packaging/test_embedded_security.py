"""The embedded server of `pgfleet dev` (the suite runs as root, so the server runs as
another account): its folder is never one planted by someone else, and no other local
user can reach the server."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import sys
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


def test_the_servers_own_account_cannot_connect(folder: Path) -> None:
    # SERVER owns run/ and so reaches the socket, as does every process running as that
    # account; peer authentication maps only the account that ran `pgfleet dev`.
    root = folder / "embedded"
    server = embedded.start(root)
    try:
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            assert conn.execute("SELECT current_user").fetchone() == ("postgres",)
        psql = str(embedded.binaries() / "psql")
        if not embedded._reachable(Path(psql), pwd.getpwnam(SERVER), execute=True):
            psql = shutil.which("psql") or "psql"
        for user in ("postgres", SERVER, "root"):
            url = server.dsn.replace("postgresql://postgres@", f"postgresql://{user}@")
            attempt = subprocess.run(
                ["runuser", "-u", SERVER, "--", psql, "-w", url, "-c", "SELECT 1"],
                capture_output=True, text=True, timeout=30, cwd="/")
            assert attempt.returncode != 0, attempt.stdout
            assert "Peer authentication failed" in attempt.stderr, attempt.stderr
    finally:
        server.stop()


def dev_command(project: Path) -> subprocess.CompletedProcess[str]:
    """`pgfleet dev` with no database URL, as root, in `project`."""
    config = project / "pgfleet.yaml"
    config.write_text("queues:\n  default: {}\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PGFLEET_DATABASE_URL", "DATABASE_URL", embedded.ENV_DIR)}
    return subprocess.run([sys.executable, "-m", "pgfleet", "dev", "-c", str(config)],
                          capture_output=True, text=True, timeout=60, cwd=project,
                          env={**env, embedded.ENV_USER: SERVER})


def victim_file(folder: Path) -> Path:
    victim = folder / "victim.conf"
    victim.write_text("root's own\n")
    return victim


def test_a_planted_gitignore_link_is_never_written_through(folder: Path) -> None:
    # Another account made .pgfleet first and planted .gitignore -> a file of root's.
    victim = victim_file(folder)
    project = folder / "project"
    project.mkdir()
    planted = project / ".pgfleet"
    planted.mkdir()
    (planted / ".gitignore").symlink_to(victim)
    outsider = pwd.getpwnam(OUTSIDER)
    os.chown(planted, outsider.pw_uid, outsider.pw_gid)
    done = dev_command(project)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"pgfleet: error: refusing {planted}: it belongs to uid {outsider.pw_uid}, not to "
        f"this account; remove it or set {embedded.ENV_DIR} to another folder")
    assert victim.read_text() == "root's own\n"
    assert not (planted / "embedded").exists()
    # Root's, but writable by everyone: anything in it may be planted.
    os.chown(planted, 0, 0)
    planted.chmod(0o777)
    done = dev_command(project)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(
        f"pgfleet: error: refusing {planted}: other accounts may write in it (mode 0777)")
    assert victim.read_text() == "root's own\n"
    # Root's and private, with a link left in it: the link is neither followed nor
    # replaced.
    planted.chmod(0o755)
    embedded.make_root(planted / "embedded", 0o700)
    assert victim.read_text() == "root's own\n"
    assert (planted / ".gitignore").is_symlink()


def test_a_gitignore_is_written_in_a_new_pgfleet_folder(folder: Path) -> None:
    project = folder / "project"
    project.mkdir()
    embedded.make_root(project / ".pgfleet" / "embedded", 0o700)
    made = project / ".pgfleet"
    assert (made / ".gitignore").read_text() == "*\n"
    assert (made.stat().st_uid, made.stat().st_mode & 0o777) == (0, 0o711)
    assert (made / "embedded").stat().st_mode & 0o777 == 0o700


def test_a_planted_location_file_redirects_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A root-owned folder elsewhere, and a file naming it where an older pgfleet looked
    # for the server's folder: nothing there may be chmodded or handed to SERVER.
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o755)
    (victim / "keep.txt").write_text("mine\n")
    before = snapshot(victim)
    project = tmp_path / "project"  # under pytest's 0700 folder: the server cannot enter
    (project / ".pgfleet").mkdir(parents=True)
    (project / ".pgfleet" / "embedded.location").write_text(f"{victim}\n")
    monkeypatch.chdir(project)
    monkeypatch.delenv(embedded.ENV_DIR, raising=False)
    user = pwd.getpwnam(SERVER)
    root = embedded.default_root(user)
    assert root != victim
    try:
        embedded._prepare_root(root, user)
        assert snapshot(victim) == before
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_root_gets_a_folder_of_its_own_when_the_server_cannot_reach_here(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "project"  # under pytest's 0700 folder: the server cannot enter
    project.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.delenv(embedded.ENV_DIR, raising=False)
    user = pwd.getpwnam(SERVER)
    first = embedded.default_root(user)
    assert first.parent == Path("/var/tmp") and first.name.startswith("pgfleet-embedded-0-")
    # Found again by the other commands (`pgfleet dev --url`, examples/burst.py).
    assert embedded.default_root(user) == first
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.chdir(other)
    assert embedded.default_root(user) != first
    monkeypatch.chdir(project)
    # Its name can be guessed, so it can be planted: then it is refused, never used.
    first.mkdir(mode=0o777)
    outsider = pwd.getpwnam(OUTSIDER)
    try:
        os.chown(first, outsider.pw_uid, outsider.pw_gid)
        before = snapshot(first)
        start_expecting_refusal(first, f"belongs to uid {outsider.pw_uid}")
        assert snapshot(first) == before
        os.chown(first, 0, 0)
        first.rmdir()
        first.symlink_to(tmp_path)
        start_expecting_refusal(first, "symbolic link")
    finally:
        if first.is_symlink():
            first.unlink()
        else:
            shutil.rmtree(first, ignore_errors=True)
