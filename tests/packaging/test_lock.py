"""requirements.lock covers every extra the image or the docs install, the minimum
versions sit above known advisories, and `make audit` says plainly when it cannot run."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The first release past each public advisory of the web extra's packages. A minimum
# below one lets a fresh install pick a release that has it.
FIXED_IN = {
    "starlette": ("0.49.1", "CVE-2024-47874, CVE-2025-54121, CVE-2025-62727"),
    "jinja2": ("3.1.6", "CVE-2024-22195, CVE-2024-34064, CVE-2024-56201, CVE-2024-56326,"
                        " CVE-2025-27516"),
    "uvicorn": ("0.11.7", "CVE-2020-7694, CVE-2020-7695"),
}


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.split(r"[\[<>=~! ;]", requirement)[0]).lower()


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text))


def _project() -> dict[str, object]:
    project: dict[str, object] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project


def _pins() -> dict[str, str]:
    found = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if match := re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line):
            found[_name(match[1])] = match[2]
    return found


def _installed_extras() -> set[str]:
    """Every extra that a page of the docs, the README or the Dockerfile installs."""
    texts = [p.read_text() for p in [ROOT / "README.md", ROOT / "Dockerfile",
                                     *sorted((ROOT / "docs").glob("*.md"))]]
    extras: set[str] = set()
    for text in texts:
        for group in re.findall(r"pgfleet\[([a-z0-9,]+)\]", text):
            extras.update(group.split(","))
    return extras - {"dev", "bench"}  # the checkout's own, never the image's


def test_the_lock_covers_every_extra_the_image_or_the_docs_install() -> None:
    extras = _installed_extras()
    assert {"web", "otel", "embedded"} <= extras, extras
    optional = _project()["optional-dependencies"]
    assert isinstance(optional, dict)
    pins = _pins()
    missing = {extra: sorted(_name(r) for r in optional[extra] if _name(r) not in pins)
               for extra in extras}
    assert not any(missing.values()), missing


def test_minimum_versions_are_above_known_advisories() -> None:
    optional = _project()["optional-dependencies"]
    assert isinstance(optional, dict)
    pins = _pins()
    for group in ("web", "dev"):
        for requirement in optional[group]:
            name = _name(requirement)
            if name not in FIXED_IN:
                continue
            fixed, advisories = FIXED_IN[name]
            minimum = re.search(r">=\s*([0-9.]+)", requirement)
            assert minimum is not None, f"pyproject.toml [{group}] {requirement}: no minimum"
            assert _version(minimum[1]) >= _version(fixed), (
                f"pyproject.toml [{group}] {requirement} admits releases before {fixed}"
                f" ({advisories})")
            assert _version(pins[name]) >= _version(fixed), f"requirements.lock: {name}"


def test_make_audit_says_so_when_there_is_no_network() -> None:
    # A proxy that refuses every connection stands for a machine without a network.
    env = {**os.environ, "https_proxy": "http://127.0.0.1:9", "HTTPS_PROXY":
           "http://127.0.0.1:9", "no_proxy": "", "NO_PROXY": ""}
    proc = subprocess.run(["make", "-s", "-C", str(ROOT), "audit"], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.splitlines()[0] == ("make audit: no network: https://pypi.org cannot"
                                           " be reached, so no advisory was checked")
