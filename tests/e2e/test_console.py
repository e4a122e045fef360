"""The web console driven by a real browser: Playwright with Debian's Chromium (never a
downloaded browser) against a live real-clock server - sign in, create a job with a
keep-alive, see it run and its pool count down, release it, buy a plan and see it on
its timeline, an operator's fleet and quota requests, and a second account that sees
nothing of the first's. Each page's screenshot lands in DOCKYARD_SCREENSHOTS when set
(docs/console.md shows them)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.harness import DockyardServer

CHROMIUM = "/usr/bin/chromium"
LEFT = re.compile(r"^\d+m \d\ds left$")


@pytest.fixture
def console_server(tmp_path: Path) -> Iterator[DockyardServer]:
    instance = DockyardServer(tmp_path / "data").start()
    yield instance
    instance.stop()


@pytest.fixture
def browser() -> Iterator[Browser]:
    assert Path(CHROMIUM).exists(), "apt-get install chromium (make test does, as root)"
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM)
        yield launched
        launched.close()


def shot(page: Page, name: str) -> None:
    """A screenshot of the page as it is: into the docs when asked, else just taken."""
    where = os.environ.get("DOCKYARD_SCREENSHOTS")
    data = page.screenshot(full_page=True)
    assert data[:4] == b"\x89PNG"
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        (Path(where) / f"{name}.png").write_bytes(data)


def nav(page: Page, name: str) -> None:
    page.get_by_role("navigation").get_by_role("link", name=name, exact=True).click()


def signed_in(browser: Browser, server: DockyardServer, key: tuple[str, str]) -> Page:
    page = browser.new_context(viewport={"width": 1200, "height": 800}).new_page()
    page.goto(server.endpoint + "/console/")
    expect(page).to_have_url(re.compile(r"/console/signin"))
    page.get_by_label("Access key ID").fill(key[0])
    page.get_by_label("Secret access key").fill(key[1])
    page.get_by_role("button", name="Sign in", exact=True).click()
    expect(page).to_have_url(re.compile(r"/console/jobs$"))
    return page


def test_a_person_runs_a_job_keeps_its_pool_and_buys_a_plan(
    browser: Browser, console_server: DockyardServer
) -> None:
    server = console_server
    page = browser.new_context(viewport={"width": 1200, "height": 800}).new_page()
    page.goto(server.endpoint + "/console/")
    shot(page, "signin")
    # A wrong secret is refused, saying so.
    key = server.credentials()
    page.get_by_label("Access key ID").fill(key[0])
    page.get_by_label("Secret access key").fill("not-the-secret")
    page.get_by_role("button", name="Sign in", exact=True).click()
    expect(page.get_by_role("alert")).to_contain_text("not right")
    page.close()
    page = signed_in(browser, server, key)
    expect(page.get_by_text("No training jobs")).to_be_visible()

    # Create a job with a keep-alive period.
    page.get_by_role("link", name="Create training job").click()
    page.get_by_label("Job name").fill("console-demo")
    page.get_by_label("Keep-alive period (seconds)").fill("300")
    shot(page, "create-job")
    page.get_by_role("button", name="Create training job").click()
    expect(page).to_have_url(re.compile(r"/console/jobs/console-demo$"))
    expect(page.locator("#job-status")).to_have_text("Completed", timeout=120_000)
    pool = page.locator("#pool-status")
    expect(pool).to_contain_text("Available", timeout=60_000)
    countdown = pool.locator(".countdown")
    expect(countdown).to_have_text(LEFT)
    first = countdown.inner_text()
    time.sleep(2.5)
    assert LEFT.match(countdown.inner_text()) and countdown.inner_text() != first  # counting
    expect(page.locator(".chart polyline")).to_have_count(1)  # the loss metric, charted
    expect(page.locator("pre.log")).to_contain_text("loss=0.200")
    shot(page, "job")

    # The list shows the pool counting down; "Release cluster" ends it.
    nav(page, "Training jobs")
    row = page.get_by_role("row", name=re.compile("console-demo"))
    expect(row).to_contain_text("Available")
    expect(row.locator(".countdown")).to_have_text(LEFT)
    shot(page, "jobs")
    row.get_by_role("button", name="Release cluster").click()
    expect(page.get_by_role("row", name=re.compile("console-demo"))).to_contain_text(
        "Terminated", timeout=60_000
    )

    # Search offerings, buy one, see it on the plan's timeline.
    nav(page, "Training plans")
    expect(page.get_by_text("No training plans yet")).to_be_visible()
    page.get_by_role("link", name="Search offerings").first.click()
    page.get_by_label("Instance type").select_option("ml.p5.48xlarge")
    page.get_by_label("Duration (hours)").fill("24")
    page.get_by_role("button", name="Search").click()
    expect(page.get_by_role("heading", name=re.compile(r"^Offering 1"))).to_be_visible()
    shot(page, "offerings")
    page.locator("#plan_name_1").fill("console-plan")
    page.get_by_role("button", name="Buy offering 1").click()
    expect(page).to_have_url(re.compile(r"/console/plans/console-plan$"))
    expect(page.get_by_role("heading", name="console-plan")).to_be_visible()
    timeline = page.locator("figure.timeline")
    expect(timeline.locator("rect.bar")).not_to_have_count(0)
    expect(timeline.locator("line.now")).to_have_count(1)
    expect(
        page.get_by_role("img", name=re.compile(r"Block 1: 1 x ml.p5.48xlarge"))
    ).to_be_visible()
    shot(page, "plan")
    nav(page, "Training plans")
    expect(page.get_by_role("row", name=re.compile("console-plan"))).to_be_visible()
    shot(page, "plans")

    # Quotas: ask for more.
    page.goto(server.endpoint + "/console/quotas?type=ml.m5.xlarge+for+training+job+usage")
    quota_row = page.get_by_role("row", name=re.compile("ml.m5.xlarge for training job usage"))
    quota_row.get_by_role("spinbutton").fill("90")
    quota_row.get_by_role("button", name="Request").click()
    expect(page.get_by_role("status")).to_contain_text("Requested")
    shot(page, "quotas")

    # An operator sees the fleet (the plan's lease on it) and approves the request.
    operator = browser.new_context(viewport={"width": 1200, "height": 800}).new_page()
    operator.goto(server.endpoint + "/console/signin")
    operator.get_by_text("Operators").click()
    token = (server.data_dir / "operator.key").read_text().strip()
    operator.get_by_label(re.compile("Operator key")).fill(token)
    operator.get_by_role("button", name="Sign in as operator").click()
    expect(operator).to_have_url(re.compile(r"/console/fleet$"))
    expect(operator.locator("rect.bar.reserved-capacity")).not_to_have_count(0)
    shot(operator, "fleet")
    nav(operator, "Quota requests")
    operator.get_by_role("button", name="Approve").click()
    expect(operator.get_by_role("status")).to_contain_text("APPROVED")
    shot(operator, "quota-requests")
    page.goto(server.endpoint + "/console/quotas?type=ml.m5.xlarge+for+training+job+usage")
    # The quota is 90 now, and the request says APPROVED.
    expect(page.get_by_role("row", name=re.compile(r"usage 90 New value"))).to_have_count(1)
    expect(page.get_by_role("row", name=re.compile(r"usage 90 APPROVED"))).to_have_count(1)

    # A second account sees none of it, even by address.
    _, stranger_key = server.new_account("stranger")
    other = signed_in(browser, server, stranger_key)
    expect(other.get_by_text("No training jobs")).to_be_visible()
    other.goto(server.endpoint + "/console/plans")
    expect(other.get_by_text("No training plans yet")).to_be_visible()
    for address in ("/console/jobs/console-demo", "/console/plans/console-plan"):
        response = other.goto(server.endpoint + address)
        assert response is not None and response.status == 400
        expect(other.get_by_role("alert")).to_contain_text("not")
    # And an account's page is not an operator's.
    response = other.goto(server.endpoint + "/console/fleet")
    assert response is not None and response.status == 403


def test_a_narrow_window_and_the_keyboard(
    browser: Browser, console_server: DockyardServer
) -> None:
    """Readable at a phone's width (nothing wider than the window but tables, which
    scroll), and a person signs in and reaches every page with the keyboard alone."""
    server = console_server
    page = browser.new_context(viewport={"width": 380, "height": 800}).new_page()
    page.goto(server.endpoint + "/console/signin")
    key = server.credentials()
    page.keyboard.press("Tab")  # the skip link first
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    expect(page.get_by_label("Access key ID")).to_be_focused()
    page.keyboard.type(key[0])
    page.keyboard.press("Tab")
    page.keyboard.type(key[1])
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"/console/jobs$"))
    for address in ("/console/jobs", "/console/jobs/new", "/console/plans", "/console/quotas"):
        page.goto(server.endpoint + address)
        width: Any = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 380, (address, width)
    shot(page, "narrow")
