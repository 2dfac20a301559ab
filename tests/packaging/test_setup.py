"""`make setup` explains itself: each system package on one line with its reason, the
command to run when not root, and a virtual environment of its own on a Python that pip
may not install into (PEP 668, as Debian's is)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "setup.sh"
PACKAGES = ("prometheus", "pgbouncer", "faketime", "chromium", "patroni", "etcd-server",
            "etcd-client")
DEBIAN_PYTHON = Path("/usr/bin/python3")


def stand_ins(tmp_path: Path, uid: int) -> Path:
    """A PATH holding only `id` (saying `uid`) and recording apt-get and make; the system
    directories looked at are empty, so every package is missing."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    scripts = {"id": f"echo {uid}", "apt-get": f'echo "apt-get $*" >> {calls}',
               "make": f'echo "make $*" >> {calls}'}
    for name, body in scripts.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


def run_system_part(tmp_path: Path, uid: int) -> subprocess.CompletedProcess[str]:
    bin_dir = stand_ins(tmp_path, uid)
    return subprocess.run(["/bin/sh", str(SCRIPT), "system"], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, check=False,
                          env={"PATH": str(bin_dir), "PGFLEET_SETUP_ROOT": str(tmp_path)})


def test_not_root_it_names_each_package_and_the_command_to_run(tmp_path: Path) -> None:
    done = run_system_part(tmp_path, 1000)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for package in PACKAGES:
        [line] = [x for x in lines if x.startswith(f"make setup: {package}: missing: ")]
        assert len(line.split("missing: ", 1)[1].split()) >= 5  # a reason, not a word
    assert "make setup: not root, so no system package is installed. To install them, run:" \
        in lines
    assert (f"make setup:   sudo apt-get install -y {' '.join(PACKAGES)}"
            " && sudo make pgbouncer-service-off && sudo make etcd-service-off") in lines
    assert not (tmp_path / "calls").exists()  # nothing was installed or run


def test_as_root_it_installs_what_is_missing_and_turns_off_pgbouncer(tmp_path: Path) -> None:
    done = run_system_part(tmp_path, 0)
    assert done.returncode == 0, done.stderr
    assert f"make setup: installing with apt-get: {' '.join(PACKAGES)}" in done.stdout
    assert (tmp_path / "calls").read_text().splitlines() == [
        "apt-get update -qq",
        f"apt-get install -y -qq {' '.join(PACKAGES)}",
        "make --no-print-directory pgbouncer-service-off",
        "make --no-print-directory etcd-service-off",
    ]


def _externally_managed(python: Path) -> bool:
    probe = ("import os, sys, sysconfig; sys.exit(0 if sys.prefix == sys.base_prefix and"
             " os.path.exists(os.path.join(sysconfig.get_path('stdlib'),"
             " 'EXTERNALLY-MANAGED')) else 1)")
    return python.exists() and subprocess.run([str(python), "-c", probe],
                                               check=False).returncode == 0


@pytest.mark.skipif(not _externally_managed(DEBIAN_PYTHON),
                    reason="no externally managed system Python here")
def test_on_a_debian_system_python_it_makes_and_uses_a_venv_of_its_own(
        tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    clone.mkdir()
    for name in ("pyproject.toml", "README.md", "Makefile", "src", "scripts"):
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, clone / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy(source, clone / name)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    # What a new user meets first: pip itself refuses the system Python.
    refused = subprocess.run([str(DEBIAN_PYTHON), "-m", "pip", "install", "--dry-run", "-e",
                              "."], cwd=clone, capture_output=True, text=True, env=env,
                             timeout=120, check=False)
    assert refused.returncode != 0 and "externally-managed-environment" in refused.stderr
    done = subprocess.run(["sh", "scripts/setup.sh", "python"], cwd=clone, capture_output=True,
                          text=True, timeout=600, check=False,
                          env={**env, "PYTHON": str(DEBIAN_PYTHON), "PGFLEET_SETUP_EXTRAS": ""})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "is managed by the system (PEP 668)" in done.stdout
    assert f"making a virtual environment of its own: {clone}/.venv" in done.stdout
    venv_python = clone / ".venv" / "bin" / "python"
    where = subprocess.run([str(venv_python), "-c", "import pgfleet; print(pgfleet.__file__)"],
                           capture_output=True, text=True, check=True, cwd=tmp_path,
                           env=env).stdout
    assert where.startswith(str(clone / "src"))
    # make's targets pick the venv by themselves.
    dry = subprocess.run(["make", "-n", "-C", str(clone), "lint"], capture_output=True,
                         text=True, check=True, env=env).stdout
    assert ".venv/bin/python -m ruff check" in dry
    assert sys.executable not in dry
