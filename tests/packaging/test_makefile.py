"""`make setup` leaves no system PgBouncer or etcd enabled or running (the tests start their
own)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("systemctl", "update-rc.d", "service")
SERVICES = {
    "pgbouncer": ["systemctl disable pgbouncer.service pgbouncer.socket",
                  "update-rc.d pgbouncer disable", "service pgbouncer stop"],
    "etcd": ["systemctl disable etcd.service", "update-rc.d etcd disable",
             "service etcd stop"],
}


@pytest.mark.parametrize("service", SERVICES)
def test_service_off_disables_and_stops_the_service(tmp_path: Path, service: str) -> None:
    """The target run with stand-ins for the service tools, which record their calls."""
    calls = tmp_path / "calls"
    for tool in TOOLS:
        stand_in = tmp_path / tool
        stand_in.write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\n')
        stand_in.chmod(0o755)
    proc = subprocess.run(["make", "-s", "-C", str(ROOT), f"{service}-service-off"],
                          env={"PATH": f"{tmp_path}:/usr/bin:/bin"}, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert calls.read_text().splitlines() == SERVICES[service]


@pytest.mark.parametrize("service", SERVICES)
def test_setup_turns_off_the_service_it_has_just_installed(service: str) -> None:
    script = (ROOT / "scripts" / "setup.sh").read_text()
    install = script.index('apt-get install -y -qq "$@"')
    off = script.index(f"make --no-print-directory {service}-service-off")
    assert install < off
    assert "@PYTHON=$(PYTHON) sh scripts/setup.sh" in (ROOT / "Makefile").read_text()
