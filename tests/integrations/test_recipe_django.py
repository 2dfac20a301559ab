"""The Django recipe of docs/integrations.md, run as written: transactional enqueue inside
transaction.atomic(), a rolled-back order leaving no job, and `manage.py pgfleet run`
starting a supervisor whose worker runs the job with Django's ORM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.integrations.recipes import environment, free_port, run, write_project
from tests.support.workers import scalar, wait_for

ROLLED_BACK = """
from django.db import transaction
from shop.orders import place_order
try:
    with transaction.atomic():
        place_order("rolled@example.com")
        raise RuntimeError("the request failed after the order")
except RuntimeError:
    pass
"""


def test_django_recipe(empty_dsn: str, tmp_path: Path) -> None:
    dsn = empty_dsn  # no pgfleet schema: `manage.py migrate` installs it
    write_project("Django", tmp_path)
    (tmp_path / "manage.py").write_text(
        "import os, sys\n"
        "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'mysite.settings')\n"
        "from django.core.management import execute_from_command_line\n"
        "execute_from_command_line(sys.argv)\n")
    env = environment(dsn, METRICS_PORT=str(free_port()))
    run(tmp_path, env, "manage.py", "makemigrations", "shop")
    run(tmp_path, env, "manage.py", "migrate")
    assert "0002_initial.py" in os.listdir(tmp_path / "shop" / "migrations")
    run(tmp_path, env, "manage.py", "pgfleet", "migrate")
    tests = run(tmp_path, env, "manage.py", "test", "shop", "--noinput")
    assert "Ran 1 test" in tests.stderr and "OK" in tests.stderr, tests.stderr
    run(tmp_path, env, "manage.py", "shell", "-c",
        "from shop.orders import place_order; place_order('a@example.com')")
    run(tmp_path, env, "manage.py", "shell", "-c", ROLLED_BACK)
    assert scalar(dsn, "SELECT array_agg(email) FROM shop_order") == ["a@example.com"]
    order_id = scalar(dsn, "SELECT id FROM shop_order")
    assert scalar(dsn, "SELECT array_agg(task || ' ' || args::text) FROM pgfleet.jobs") == [
        f'shop.tasks.send_receipt {{"order_id": {order_id}}}']

    log = (tmp_path / "run.log").open("wb")
    supervisor = subprocess.Popen([sys.executable, "manage.py", "pgfleet", "run"],
                                  cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    try:
        wait_for(lambda: scalar(dsn, "SELECT receipt_sent FROM shop_order"), timeout=60)
        # The task's own write commits before the worker records the job's end.
        wait_for(lambda: scalar(dsn, "SELECT state::text FROM pgfleet.jobs") == "succeeded",
                 timeout=30)
        status = run(tmp_path, env, "manage.py", "pgfleet", "status", "--json")
        assert '"default"' in status.stdout
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(60) == 0, (tmp_path / "run.log").read_text()
    finally:
        if supervisor.poll() is None:
            os.killpg(supervisor.pid, signal.SIGKILL)
            supervisor.wait(10)
        log.close()
