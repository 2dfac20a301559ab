"""The recipes of docs/integrations.md as files: each `## ` section's code blocks whose
first line is `# file: PATH` (or `-- file: PATH` for SQL), written into a directory."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

from psycopg.conninfo import conninfo_to_dict

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "integrations.md"
FILE_MARK = re.compile(r"^(?:#|--) file: (\S+)\n")
BLOCK = re.compile(r"```[a-z]*\n(.*?)```", re.S)


def sections() -> dict[str, str]:
    """`## ` heading → its text."""
    parts = re.split(r"^## ", PAGE.read_text(), flags=re.M)[1:]
    return {part.split("\n", 1)[0].strip(): part for part in parts}


def files_of(heading_start: str) -> dict[str, str]:
    found = [text for title, text in sections().items() if title.startswith(heading_start)]
    assert len(found) == 1, f"no single section starting {heading_start!r} in {PAGE}"
    files = {}
    for block in BLOCK.findall(found[0]):
        mark = FILE_MARK.match(block)
        if mark:
            files[mark.group(1)] = block[mark.end():]
    assert files, f"section {heading_start!r} has no `# file:` blocks"
    return files


def write_project(heading_start: str, folder: Path) -> dict[str, str]:
    """Write the section's files, with an empty __init__.py in each package directory
    (every directory holding a .py file, except tests/)."""
    files = files_of(heading_start)
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if path.suffix == ".py":
            parent = path.parent
            while parent != folder and parent.name != "tests":
                (parent / "__init__.py").touch()
                parent = parent.parent
    return files


def environment(dsn: str, **extra: str) -> dict[str, str]:
    """The environment of a new user's shell: pgfleet importable (this checkout's), the
    recipe's directory first on the path, DATABASE_URL set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGFLEET_")}
    env["PYTHONPATH"] = str(ROOT / "src")
    env["DATABASE_URL"] = as_url(dsn) if dsn else ""
    env.update(extra)
    return env


def as_url(dsn: str) -> str:
    """A postgresql:// URL for a key=value DSN: what a user's DATABASE_URL looks like."""
    params = conninfo_to_dict(dsn)
    user = quote(str(params.get("user", "")))
    host = params.get("host", "")
    port = f":{params['port']}" if params.get("port") else ""
    return f"postgresql://{user}{'@' if user else ''}{host}{port}/{quote(str(params['dbname']))}"


def run(folder: Path, env: dict[str, str], *args: str, timeout: float = 120
        ) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, *args], cwd=folder, env=env, text=True,
                          capture_output=True, timeout=timeout)
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
