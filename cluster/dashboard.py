"""The Ray dashboard as a user sees it, in a real browser: headless Chromium (Debian's `chromium` and its
`chromium-driver`, installed by `make chromium`) driven by Selenium opens the dashboard, types the cluster's token
into its "Authentication Token Required" dialog as a user would (token auth stays on), and saves screenshots of the
overview, jobs, a job's page, the actors and the cluster views, with the text each shows, so a check can say which
jobs and named actors (rollout workers, tool servers, reward, learner) are on screen.

`python -m cluster.dashboard [--dir runs/cluster] [--out DIR] [--job SUBMISSION_ID] [--expect NAME ...]` for the
cluster `make cluster-up` started (or `--url` and `--token-file` for any other); bench/nodes.py runs it during a
job. Chromium is started with the flags a closed network needs (no background networking, component updates, sync
or QUIC: each would try to reach the internet). The dashboard's time-series charts stay hidden without Prometheus and
Grafana; where a user sees the project's own metrics is docs/debugging.md's.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
         "--window-size=1400,1400")
VIEWS = {"overview": "#/overview", "jobs": "#/jobs", "actors": "#/actors", "cluster": "#/cluster"}
LOAD_S = 30.0


def missing_browser() -> str:
    """"" when Chromium and its driver are here, else the line saying what to install."""
    absent = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).is_file()]
    return (f"{' and '.join(absent)} not found: `make chromium` installs Debian's chromium and chromium-driver"
            if absent else "")


def browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    # the driver named explicitly: Selenium's own manager would try to download one
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def body_text(driver: Any) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.TAG_NAME, "body").text


def wait_text(driver: Any, needle: str, timeout: float = LOAD_S) -> str:
    """The page's text once it holds `needle` (the dashboard fills its tables after the page loads); the text as it
    is after `timeout` otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        text = body_text(driver)
        if needle in text or time.monotonic() > deadline:
            return text
        time.sleep(0.5)


def log_in(driver: Any, url: str, token: str) -> None:
    """The token typed into the dashboard's dialog and submitted, as a user does; the dashboard keeps it in a
    cookie for the pages after."""
    from selenium.webdriver.common.by import By

    driver.get(url + "/")
    wait_text(driver, "Authentication Token Required", timeout=15)
    fields = driver.find_elements(By.CSS_SELECTOR, "input[type=password]")
    if not fields:  # no dialog: a cluster without token auth (never ours) or a token already known
        return
    fields[0].send_keys(token)
    driver.find_element(By.XPATH, "//button[translate(normalize-space(), 'submit', 'SUBMIT')='SUBMIT']").click()
    time.sleep(1.0)


def show_many_rows(driver: Any) -> None:
    """The actors table shows 10 rows a page: 100, so a job's named actors are on the first."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    for field in driver.find_elements(By.XPATH, "//label[contains(., 'Page Size')]/following::input[1]")[:1]:
        field.send_keys(Keys.CONTROL, "a")
        field.send_keys("100")
        time.sleep(1.0)


def capture(url: str, token: str, out: Path, job: str = "", expect: tuple[str, ...] = ()) -> dict[str, Any]:
    """Screenshots of the dashboard's views (and of `job`'s page) under `out`; which of `expect`'s actor names the
    actors view shows, and whether the jobs view shows `job`. Raises RuntimeError naming a missing browser."""
    if why := missing_browser():
        raise RuntimeError(why)
    out.mkdir(parents=True, exist_ok=True)
    url = url.rstrip("/")
    driver = browser()
    shots, texts = {}, {}
    try:
        log_in(driver, url, token)
        views = dict(VIEWS)
        if job:
            views["job"] = f"#/jobs/{job}"
        for name, path in views.items():
            driver.get(f"{url}/{path}")
            wait_text(driver, {"jobs": job or "Job ID", "job": "Status", "actors": "Class",
                               "cluster": "ALIVE"}.get(name, "Overview"))
            if name == "actors":
                show_many_rows(driver)
                wait_text(driver, expect[0] if expect else "Class")
            texts[name] = body_text(driver)
            shots[name] = str(out / f"dashboard_{name}.png")
            driver.save_screenshot(shots[name])
    finally:
        driver.quit()
    return {"shots": shots, "token_dialog_passed": "Authentication Token Required" not in texts["overview"],
            "job_shown": bool(job) and job in texts.get("jobs", "") + texts.get("job", ""),
            "actors_shown": [n for n in expect if n in texts["actors"]],
            "actors_missing": [n for n in expect if n not in texts["actors"]]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m cluster.dashboard", description=__doc__.splitlines()[0])
    p.add_argument("--dir", default="", help="the cluster make cluster-up recorded (default runs/cluster)")
    p.add_argument("--url", default="", help="another cluster's dashboard (with --token-file)")
    p.add_argument("--token-file", default="")
    p.add_argument("--out", default="runs/dashboard")
    p.add_argument("--job", default="", help="a submission id (or job id) whose page to capture")
    p.add_argument("--expect", nargs="*", default=[], help="actor names the actors view must show")
    a = p.parse_args(argv)
    if a.url:
        url, token = a.url, Path(a.token_file).read_text().strip()
    else:
        from cluster.nodes import load

        c = load(Path(a.dir) if a.dir else None)
        url, token = c.dashboard_url, Path(c.token_path).read_text().strip()
    try:
        got = capture(url, token, Path(a.out), a.job, tuple(a.expect))
    except RuntimeError as e:
        print(f"dashboard: {e}", file=sys.stderr)
        return 2
    for name, path in got["shots"].items():
        print(f"{name}: {path}")
    if a.expect:
        print(f"actors shown: {got['actors_shown']}; missing: {got['actors_missing']}")
    return 0 if not got["actors_missing"] else 1


if __name__ == "__main__":
    sys.exit(main())
