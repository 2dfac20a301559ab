"""The web UI (the `web` extra): queues, jobs, schedules and hosts in a browser.

`serve(settings)` runs it; `pgfleet web` is its command line. Everything it shows comes from
the database, and every action goes through the same store functions as the CLI.
"""

from pgfleet.web.settings import WebSettings

__all__ = ["WebSettings", "serve"]


def serve(settings: WebSettings) -> None:
    """Run the UI until interrupted (imported here so `pgfleet.web` loads without uvicorn)."""
    from pgfleet.web.server import serve as run

    run(settings)
