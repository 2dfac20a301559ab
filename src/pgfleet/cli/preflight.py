"""Checks between a valid file and a start: do the task modules exist, and does every
schedule name a registered task?

Finding a module uses the import system's path finders without executing anything, so
the arbiter can run it. Checking schedule tasks needs the modules imported; `run` does
that in a short-lived forked child so that task code never enters the arbiter.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

from pgfleet.config import Config


def locate_module(name: str) -> bool:
    """Is `name` importable? Walks packages through their search paths, not by import."""
    parts = name.split(".")
    if parts[0] in sys.builtin_module_names:
        return len(parts) == 1
    path: list[str] | None = list(sys.path)
    spec = None
    for index, part in enumerate(parts):
        spec = importlib.machinery.PathFinder.find_spec(part, path)
        if spec is None:
            return False
        if index < len(parts) - 1:
            if spec.submodule_search_locations is None:
                return False
            path = list(spec.submodule_search_locations)
    return spec is not None


def task_modules(config: Config) -> list[tuple[str, str]]:
    """(where in the file, module name) of every task module the file names."""
    found = [(config.where("tasks", index), module) for index, module in enumerate(config.tasks)]
    for queue_name, queue in config.queues.items():
        found.extend((config.where("queues", queue_name, "tasks", index), module)
                     for index, module in enumerate(queue.tasks))
    return found


def missing_modules(config: Config) -> list[str]:
    return config.hide_values([f"{where}: no module named {module!r}"
                               for where, module in task_modules(config)
                               if not locate_module(module)])


def import_problems(config: Config) -> list[str]:
    """Import every task module into the calling process (`pgfleet check`, never the
    arbiter); one line per module that fails, naming it and its exception."""
    import importlib

    problems = []
    for where, module in task_modules(config):
        try:
            importlib.import_module(module)
        except Exception as exc:
            text = str(exc).strip()
            first = text.splitlines()[0] if text else ""
            problems.append(f"{where}: task module {module!r} fails to import: "
                            f"{type(exc).__name__}: {first}".rstrip(": "))
    return config.hide_values(problems + middleware_problems(config))


def middleware_problems(config: Config) -> list[str]:
    """One line per `middleware:` entry that does not name an importable callable."""
    from pgfleet.errors import PgfleetError
    from pgfleet.middleware import resolve

    problems = []
    for index, name in enumerate(config.middleware):
        try:
            resolve(name)
        except PgfleetError as exc:
            problems.append(f"{config.where('middleware', index)}: {exc}")
    return problems


def unregistered_schedule_tasks(config: Config) -> tuple[list[str], list[str]]:
    """(problems, warnings). Imports the task modules into the calling process."""
    from pgfleet.tasks import load_registry

    modules = list(dict.fromkeys(
        [*config.tasks, *(m for q in config.queues.values() for m in q.tasks)]))
    try:
        registry = load_registry(modules)
    except Exception as exc:
        # A module that fails to import is a runtime fault (its queue backs off), not a
        # configuration error; the schedule check then cannot be made.
        return [], config.hide_values([f"could not import the task modules to check "
                                       f"schedules: {type(exc).__name__}: {exc}"])
    problems = [
        f"{config.where('schedules', name, 'task')}: task {schedule.task!r} is not registered "
        f"by the modules in `tasks`"
        for name, schedule in config.schedules.items()
        if registry.get(schedule.task) is None
    ]
    return config.hide_values(problems), []


def check_in_child(config: Config) -> tuple[list[str], list[str]]:
    """Run unregistered_schedule_tasks in a forked child and bring back its findings."""
    if not config.schedules:
        return [], []
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(read_end)
            problems, warnings = unregistered_schedule_tasks(config)
            text = "\n".join([*(f"E{p}" for p in problems), *(f"W{w}" for w in warnings)])
            os.write(write_end, text.encode())
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 65536):
        chunks.append(chunk)
    os.close(read_end)
    os.waitpid(pid, 0)
    lines = b"".join(chunks).decode().splitlines()
    return [x[1:] for x in lines if x.startswith("E")], [x[1:] for x in lines if x.startswith("W")]


WEB_EXTRA = ("starlette", "uvicorn", "jinja2")


def web_problems(config: Config, dsn: str) -> list[str]:
    """The `web:` section as the web child will read it: its extra installed, its secret
    files readable, and no address beyond loopback without a token or basic auth."""
    if not config.web.enabled:
        return []
    from pgfleet.web.configured import from_config
    from pgfleet.web.settings import WebSettingsError

    missing = [name for name in WEB_EXTRA if importlib.util.find_spec(name) is None]
    if missing:
        return [f"{config.where('web')}: the web UI needs its extra: pip install "
                f"'pgfleet[web]' ({', '.join(missing)} missing)"]
    try:
        from_config(config, dsn).check()
    except WebSettingsError as exc:
        return config.hide_values([str(exc)])
    return []
