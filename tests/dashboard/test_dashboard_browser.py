"""The dashboard in a real browser (Debian's Chromium under Selenium), beside a live controller running
a real job: every page loads with no console error, shows the numbers of `gpuctl status -o json` and
`gpuctl cost report -o json`, updates as the job advances without a reload, and shows a hostile team
and user literally. With ``GPUCTL_DASHBOARD_SCREENSHOTS=FOLDER`` it saves a screenshot of each page there
(docs/images holds the ones the docs show)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.dashboard import views
from tests.controller.conftest import TINY, Gpuctl, write_job
from tests.dashboard.dashboard_home import HOSTILE, HOSTILE_USER, make_home

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import NoAlertPresentException, StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
SHOTS = os.environ.get("GPUCTL_DASHBOARD_SCREENSHOTS")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                       reason="needs Debian's chromium and chromium-driver (apt-get install -y chromium chromium-driver)"),
]  # fmt: skip


@pytest.fixture
def browser() -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1360,900"):  # fmt: skip
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def dashboard(gpuctl: Gpuctl) -> Iterator[str]:
    """`gpuctl dashboard` on a free loopback port; its address."""
    proc = gpuctl.popen("dashboard", "--port", "0", "--poll-seconds", "1")
    assert proc.stdout is not None
    line = proc.stdout.readline()
    found = re.search(r"on (http://127\.0\.0\.1:\d+/)", line)
    try:
        assert found, line + (proc.stdout.read() if proc.poll() is not None else "")
        yield found.group(1)
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(timeout=20)
        assert code == 0, proc.stdout.read()


def wait(driver: Any, what: str, predicate: Callable[[Any], Any], timeout: float = 120) -> Any:
    return WebDriverWait(driver, timeout, poll_frequency=0.3, ignored_exceptions=[StaleElementReferenceException]
                         ).until(predicate, message=what)  # fmt: skip


def cells(driver: Any, selector: str) -> dict[str, str]:
    """The text shown in each element of ``selector``, by its data-field (read at one moment)."""
    found: dict[str, str] = driver.execute_script(
        "const out = {}; for (const c of document.querySelectorAll(arguments[0])) out[c.dataset.field] = c.innerText;"
        " return out;", selector)  # fmt: skip
    return found


def no_console_errors(driver: Any, page: str) -> None:
    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not severe, f"{page}: {severe}"


def nothing_ran(driver: Any) -> None:
    """A hostile name did not become markup: no alert, no image element, no injected script ran."""
    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert.text  # noqa: B018
    assert driver.find_elements(By.CSS_SELECTOR, "main img") == []


def shot(driver: Any, tmp: Path, name: str) -> None:
    path = tmp / f"dashboard-{name}.png"
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 10_000, "a blank page"
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(SHOTS) / path.name)


def _step(text: str) -> int:
    return int(text.split("/")[0]) if text[:1].isdigit() else -1


def test_dashboard_in_chromium_follows_a_live_job(
    gpuctl: Gpuctl, tmp_path: Path, browser: Any, dashboard: str
) -> None:
    fixed = make_home(gpuctl.home)  # ended jobs, one by a hostile team and user
    (gpuctl.home / "config.yaml").write_text("budgets:\n  teams: {ml: 50}\n  other_teams_monthly_usd: 20\n")
    job_file = write_job(tmp_path, "dashjob", f"team: '{HOSTILE}'\nuser: alice\ncommand: {TINY} 90 0.25\n"
                         "resources: {nodes: 2}\ncheckpoint: {notice_grace_seconds: 5}\n")  # fmt: skip
    job = gpuctl.run(
        "submit", str(job_file), "--detach", "--preempt-at", "step:15", "--outage", "2s"
    ).stdout.strip()

    # jobs: the live job's row updates in place as it trains
    browser.get(dashboard)
    wait(browser, "the job's row", lambda d: d.find_elements(By.CSS_SELECTOR, f'tr[data-job="{job}"]'))
    browser.execute_script("window.notReloaded = true;")
    row = f'tr[data-job="{job}"] td'
    first = wait(
        browser, "a step", lambda d: _step(cells(d, row)["step"]) >= 1 and _step(cells(d, row)["step"])
    )
    wait(browser, "the step to advance", lambda d: _step(cells(d, row)["step"]) > first)
    assert browser.execute_script("return window.notReloaded === true;"), "updated by polling, not a reload"
    shown = cells(browser, row)
    doc = gpuctl.status(job)
    assert shown["team"] == HOSTILE == doc["team"] and shown["user"] == "alice"
    assert (
        doc["progress"] is None or _step(shown["step"]) <= doc["progress"]["step"]
    )  # (None: between attempts)
    assert cells(browser, f'tr[data-job="{fixed["hostile"]}"] td')["user"] == HOSTILE_USER
    nothing_ran(browser)
    shot(browser, tmp_path, "jobs")
    no_console_errors(browser, "jobs")

    # the job: its summary follows it to the end, then equals `gpuctl status JOB -o json`
    browser.get(f"{dashboard}jobs/{job}")
    wait(browser, "the progress chart", lambda d: d.find_elements(By.CSS_SELECTOR, "#progress-chart canvas"))
    wait(
        browser, "the job to succeed", lambda d: cells(d, "#summary dd")["state"] == "SUCCEEDED", timeout=240
    )
    doc = gpuctl.status(job)
    wait(browser, "the final numbers", lambda d: cells(d, "#summary dd") == _summary(views.job_summary(doc)))
    shown = cells(browser, "#summary dd")
    assert (
        shown["cost"] == f"{doc['cost_usd']:.4f}"
        and shown["on_demand"] == f"{doc['on_demand_equivalent_usd']:.4f}"
    )
    assert shown["step"] == f"{doc['progress']['step']}/{doc['progress']['total_steps']}"
    assert (
        doc["preemptions"] == 1
        and len(browser.find_elements(By.CSS_SELECTOR, "#timeline line.preempted")) == 1
    )
    assert len(browser.find_elements(By.CSS_SELECTOR, "#timeline rect.seg")) == len(doc["segments"]) == 2
    assert browser.find_element(By.CSS_SELECTOR, "#logs pre").text.strip()
    nothing_ran(browser)
    shot(browser, tmp_path, "job")
    no_console_errors(browser, "job")

    # costs: the table and totals are `gpuctl cost report --by team -o json`
    browser.get(f"{dashboard}costs?by=team")
    wait(browser, "the cost chart", lambda d: d.find_elements(By.CSS_SELECTOR, "#cost-chart canvas"))
    wait(browser, "the burn charts", lambda d: d.find_elements(By.CSS_SELECTOR, "#burn-charts canvas"))
    report = json.loads(gpuctl.run("cost", "report", "--by", "team", "-o", "json").stdout)
    _same_costs(browser, report)
    assert {
        r.get_attribute("data-name") for r in browser.find_elements(By.CSS_SELECTOR, "#budgets tbody tr")
    } == {"ml", "other teams (shared budget)"}
    nothing_ran(browser)
    shot(browser, tmp_path, "costs")
    no_console_errors(browser, "costs")


def _summary(values: dict[str, str]) -> dict[str, str]:
    """What the page's summary shows of :func:`views.job_summary` (those it has a field for)."""
    keys = (
        "state",
        "message",
        "team",
        "user",
        "step",
        "throughput",
        "eta",
        "forecast",
        "waiting",
        "attempts",
        "nodes",
        "cost",
        "projected",
        "on_demand",
        "savings",
        "gpu_hours",
        "gpu_detail",
        "submitted",
        "updated",
    )
    return {k: values[k] for k in keys}


def _four(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.4f}"


def _same_costs(driver: Any, report: dict[str, Any]) -> None:
    totals = cells(driver, "#totals dd")
    for key in ("totalCost", "projectedCost", "onDemandCost", "savings", "gpuHours"):
        assert totals[key] == f"{report['totals'][key]:.4f}", key
    for row in report["rows"]:
        shown = cells(driver, f'#cost-rows tr[data-name="{_css(row["name"])}"] td')
        assert shown["name"] == row["name"] and shown["jobs"] == str(row["jobs"])
        for key in ("gpuHours", "totalCost", "onDemandCost", "savings", "lostGpuHours", "lostCost"):
            assert shown[key] == f"{row[key]:.4f}", (row["name"], key)
        assert shown["idleGpuHours"] == _four(row["idleGpuHours"])


def _css(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')
