"""Screenshots of every page of the web UI with 100,000 jobs in the table, for docs/web.md.

    python -m bench.web_screenshots              # writes docs/images/*.png
    python -m bench.web_screenshots --jobs 20000 --out /tmp/shots

Fills a throw-away database as bench.web_pages does (finished history with a busy last
hour, waiting and scheduled jobs, two hosts whose workers run jobs, one job with a result,
meta and a failed attempt), starts `pgfleet web`, and has Debian's Chromium (driven by
Playwright) take each page: the overview with its charts, a queue, the jobs list with a
bulk selection and its confirmation, a job, the hosts and the schedules.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from bench.common import Database, log
from bench.web_pages import fill

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]


def shoot(base: str, job_id: int, out: Path) -> None:
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1360, "height": 900})

        def take(name: str, full: bool = True) -> None:
            page.screenshot(path=str(out / f"{name}.png"), full_page=full)
            log(f"screenshots: {out / name}.png")

        page.goto(base + "/")
        take("overview")
        page.goto(base + "/queues/a")
        take("queue")
        page.goto(base + "/jobs?state=dead&queue=a")
        for n in (0, 1, 2, 4):
            page.locator("input.pick").nth(n).check()
        take("jobs", full=False)
        page.check("#select-page")
        page.click('button[data-action="bulk-retry"]')
        take("confirm")
        page.goto(f"{base}/jobs/{job_id}")
        take("job")
        page.goto(base + "/hosts")
        take("hosts")
        page.goto(base + "/schedules")
        take("schedules")
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    args = parser.parse_args()
    db = Database()
    db.create()
    web = None
    try:
        fill(db, args.jobs)
        with db.connect() as conn:
            conn.execute("INSERT INTO pgfleet.schedule_runs (schedule, fire_time, job_id)"
                         " SELECT 'nightly-invoices', date_trunc('day', now())"
                         " - make_interval(days => d), NULL FROM generate_series(0, 4) d")
            row = conn.execute("SELECT max(id) FROM pgfleet.jobs WHERE result IS NOT NULL"
                               ).fetchone()
        job_id = int(row[0]) if row and row[0] else 1
        web = subprocess.Popen([sys.executable, "-m", "pgfleet", "--database-url", db.dsn,
                                "web", "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                               text=True)
        assert web.stdout is not None
        base = web.stdout.readline().split("serving on ")[1].split()[0].rstrip("/")
        shoot(base, job_id, args.out)
    finally:
        if web is not None:
            web.terminate()
            web.wait()
        db.drop()


if __name__ == "__main__":
    main()
