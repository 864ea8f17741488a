"""A fresh user's first hour, walked end to end as README and the docs tell it.

1. README's start: what ``scripts/run`` does once the machine is installed,
   ``relaydesk db upgrade`` then ``relaydesk up`` (a data directory of its own, a free port),
   and the one-time login link it prints.
2. The chat: the link opened in Chromium, **Sign in** pressed, ``/desktop`` typed; the viewer
   tab it opens shows the desktop.
3. The viewer at a desktop size (1280x800) and a phone's (390x844): connected, the picture
   there, every toolbar control inside the window.
4. The quick starts: every block of docs/http-api.md's "Quick start", docs/mcp.md and
   docs/cua.md, run as a reader runs them (tests/support/reader.py) with an API token made
   by ``relaydesk admin create-token``, against the ``up`` server.
5. Compose: docs/docker.md's first run (``tests/docker/test_compose.py``'s walk of it), when
   the images it needs are on this machine (``scripts/docker-build``); otherwise the walk says
   which are missing.

Each step prints its time.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright._impl._api_structures import SetCookieParam
from playwright.async_api import Browser, BrowserContext, Page, ViewportSize, expect

from tests.support.browser import chromium
from tests.support.doc_blocks import CodeBlock, code_blocks, section
from tests.support.processes import ProcessFactory, free_port, scaled
from tests.support.reader import Reader
from tests.support.stack import FAST_ENV, relaydesk_argv

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio, pytest.mark.timeout(scaled(900))]

LINK = re.compile(r"one-time login link: (http://\S+/login/rdl_\S+)")
PHONE: ViewportSize = {"width": 390, "height": 844}
DESKTOP: ViewportSize = {"width": 1280, "height": 800}
# What docs/docker.md's first run uses on a machine without a registry.
COMPOSE_IMAGES = (
    "relaydesk/server:dev",
    "relaydesk/relay:dev",
    "relaydesk/postgres:dev",
    "relaydesk/redis:dev",
)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@contextmanager
def step(name: str) -> Iterator[None]:
    began = time.monotonic()
    print(f"\n== {name}", flush=True)
    yield
    print(f"   done in {time.monotonic() - began:.1f} s", flush=True)


def quick_start_blocks() -> list[CodeBlock]:
    """The blocks a new agent developer runs first: http-api.md's quick start, mcp.md's and
    cua.md's code (the scripted agent of http-api.md needs a form of its own: it is run by
    tests/integration/test_doc_blocks.py)."""
    quick = section("http-api.md", "Quick start").split("### A scripted agent", 1)[0]
    blocks = [b for b in code_blocks("http-api.md") if b.text in quick]
    blocks += code_blocks("mcp.md") + code_blocks("cua.md")
    return [b for b in blocks if b.kind in {"shell", "python"} and b.runnable]


def start_up(process_factory: ProcessFactory, data_dir: Path, port: int) -> tuple[Any, str]:
    # The relay's default profile, as a fresh install has it (the suite's default is minimal).
    env = {**FAST_ENV, "RELAYDESK_DATA_DIR": str(data_dir), "RELAYDESK_DESKTOP_PROFILE": "standard"}
    upgrade = subprocess.run(
        relaydesk_argv("db", "upgrade"),
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=scaled(120),
        check=False,
    )
    assert upgrade.returncode == 0, upgrade.stderr
    up = process_factory(relaydesk_argv("up", "--port", str(port)), name="up", env=env)
    return up, up.wait_for_line(LINK, scaled(90)).group(1)


def admin_token(data_dir: Path) -> str:
    done = subprocess.run(
        relaydesk_argv("admin", "create-token", "admin", "--json"),
        env={**os.environ, "RELAYDESK_DATA_DIR": str(data_dir)},
        capture_output=True,
        text=True,
        timeout=scaled(60),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    token: str = json.loads(done.stdout)["token"]
    return token


async def viewer_ready(viewer: Page) -> None:
    await viewer.wait_for_function(
        "() => document.body.dataset.state === 'connected'", timeout=scaled(60) * 1000
    )
    canvas = viewer.locator("#screen canvas")
    await expect(canvas).to_be_visible()


async def controls_inside(viewer: Page, width: int) -> list[str]:
    """The toolbar's visible controls that leave the window (none should)."""
    outside: list[str] = await viewer.evaluate(
        """(width) => [...document.querySelectorAll('header button, header .status, header a')]
            .filter((e) => e.offsetParent !== null)
            .map((e) => [e.id || e.textContent.trim(), e.getBoundingClientRect()])
            .filter(([, r]) => r.left < 0 || r.right > width + 0.5)
            .map(([name]) => name)""",
        width,
    )
    return outside


async def walk_the_viewer(context: BrowserContext, browser: Browser, url: str) -> None:
    """The viewer tab at a desktop's size, then the same viewer on a phone."""
    viewer = context.pages[-1]
    await viewer_ready(viewer)
    await expect(viewer.locator("#status")).to_contain_text("Connected")
    assert await controls_inside(viewer, DESKTOP["width"]) == []
    phone = await browser.new_context(
        viewport=PHONE, device_scale_factor=2, is_mobile=True, has_touch=True
    )
    try:
        phone.set_default_timeout(scaled(30) * 1000)
        cookies = [
            SetCookieParam(name=c["name"], value=c["value"], url=url)
            for c in await context.cookies(url)
        ]
        await phone.add_cookies(cookies)
        page = await phone.new_page()
        await page.goto(viewer.url)
        await viewer_ready(page)
        assert await controls_inside(page, PHONE["width"]) == []
    finally:
        await phone.close()


async def a_desktop_runs(url: str, token: str, cid: str) -> None:
    """The conversation's desktop a reader of the quick starts has (started if a block
    stopped it), as the chat's ``/desktop`` would give it."""
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=scaled(90)) as client:
        listed = await client.post(
            "/api/v1/actions/desktop_list_active", json={"conversation_id": cid}
        )
        if not listed.json()["desktops"]:
            started = await client.post(
                "/api/v1/actions/desktop_start", json={"conversation_id": cid}
            )
            assert started.status_code == 200, started.text


async def browser_or_reason(url: str, token: str, cid: str) -> str:
    """What the first desktop (the standard profile's) shows: its browser window, or a row
    whose ``reason`` says which program failed (docs/desktops.md, Watchdog)."""
    headers = {"Authorization": f"Bearer {token}"}
    body = {"conversation_id": cid}
    deadline = time.monotonic() + scaled(60)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=scaled(30)) as client:
        while True:
            shown = await client.post("/api/v1/actions/desktop_windows", json=body)
            titles = [w["name"] for w in shown.json().get("windows", [])]
            if any("Chromium" in title for title in titles):
                return f"windows: {titles}"
            listed = await client.post("/api/v1/actions/desktop_list_active", json=body)
            reasons = [row["reason"] for row in listed.json()["desktops"] if row["reason"]]
            if reasons:
                return f"no browser; the desktop says: {reasons}"
            assert time.monotonic() < deadline, ("no browser window and no reason", titles)
            await asyncio.sleep(0.5)


def missing_images() -> list[str]:
    missing = []
    for image in COMPOSE_IMAGES:
        found = subprocess.run(
            ["docker", "image", "inspect", image], capture_output=True, check=False
        )
        if found.returncode != 0:
            missing.append(image)
    return missing


async def test_a_fresh_users_first_hour(process_factory: ProcessFactory, tmp_path: Path) -> None:
    port = free_port()
    data_dir = tmp_path / "data"
    with step("README: relaydesk db upgrade, relaydesk up"):
        up, link = start_up(process_factory, data_dir, port)
        url = link.split("/login/", 1)[0]

    async with chromium() as browser:
        context = await browser.new_context(viewport=DESKTOP)
        context.set_default_timeout(scaled(30) * 1000)
        page = await context.new_page()
        with step("chat: the login link, Sign in, /desktop"):
            await page.goto(link)
            await page.get_by_role("button", name="Sign in").click()
            await page.wait_for_selector("body[data-view='app']")
            async with context.expect_page(timeout=scaled(90) * 1000):
                composer = page.get_by_label("Message", exact=True)
                await composer.fill("/desktop")
                await composer.press("Enter")
            result = page.locator("#transcript .message-result").last
            await expect(result).to_have_attribute("data-outcome", "started")
        with step("viewer at 1280x800 and on a 390x844 phone"):
            await walk_the_viewer(context, browser, url)
        await context.close()

    token = admin_token(data_dir)
    async with httpx.AsyncClient(base_url=url, timeout=scaled(30)) as client:
        headers = {"Authorization": f"Bearer {token}"}
        conversations = (await client.get("/api/v1/conversations", headers=headers)).json()
        cid = conversations["conversations"][0]["conversation_id"]
        about = (await client.get(f"/api/v1/conversations/{cid}", headers=headers)).json()
    with step("the first desktop shows its browser, or names the program that failed"):
        print(f"   {await browser_or_reason(url, token, cid)}")
    reader = Reader(url, token, cid, about["relays"][0]["name"])
    for block in quick_start_blocks():
        with step(f"quick start {block.where}"):
            await a_desktop_runs(url, token, cid)
            workdir = tmp_path / block.where.replace(":", "-")
            workdir.mkdir()
            done = await asyncio.to_thread(reader.run, block, workdir)
            assert done.returncode == 0, (block.where, done.stdout[-2000:], done.stderr[-2000:])
            print("   " + "\n   ".join(done.stdout.strip().splitlines()[-3:]))
            if "screen.png" in block.text:
                assert (workdir / "screen.png").read_bytes().startswith(PNG_MAGIC)
    assert up.is_alive(), "relaydesk up kept running through the walk"

    with step("Compose: docs/docker.md's first run"):
        if missing := missing_images():
            print(f"   not walked: {', '.join(missing)} not built (scripts/docker-build)")
            return
        compose_walk(tmp_path / "compose")


def compose_walk(workdir: Path) -> None:
    """docs/docker.md's first run, with the stand-in database and bus where Docker cannot pull
    the official ones, and a desktop's screenshot through the HTTP API."""
    from tests.docker import test_compose as compose_test
    from tests.support.docker import unique_name

    workdir.mkdir(mode=0o700)
    compose = compose_test.Compose(unique_name("first-hour"), workdir, free_port())
    compose_test._write_settings(compose)
    try:
        setup = compose_test._first_run(compose)
        deadline = time.monotonic() + scaled(90)
        while not compose_test._relay_connected(compose):
            assert time.monotonic() < deadline, compose.logs()
            time.sleep(1)
        assert setup.api_token.startswith("rdk_")
    finally:
        compose.run("down", "--volumes", "--remove-orphans", "--timeout", "30", timeout=300)
