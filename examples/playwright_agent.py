"""Playwright drives the browser a person watches in a relaydesk desktop, through the server.

``connect_over_cdp`` takes the desktop's CDP endpoint and an API token (docs/browser.md, "The
CDP endpoint"); the page it fills is the one showing in the desktop's Chromium, so the person
watching the viewer sees every step, and can take control at any time (Playwright's input is
then refused with ``takeover_active``). Needs ``pip install playwright`` (no browser download:
the browser is the desktop's) and a relay started with ``RELAYDESK_BROWSER_EVALUATE=1``
(Playwright runs its own script in the page).

  export RELAYDESK_API_TOKEN=rdk_...
  python examples/playwright_agent.py --server http://127.0.0.1:8400 --conversation ID \\
      --relay RELAY --url http://example.test/form.html \\
      --fill '#customer=Ada' --click 'button[type=submit]' --read '#result'

Prints the page's title and what ``--read`` finds. Exit status: 0 done; 1 the server or the
browser refused a step; 2 bad usage.
"""

from __future__ import annotations

import argparse
import os
import sys

from playwright.sync_api import Error, sync_playwright


def endpoint(args: argparse.Namespace) -> str:
    """The desktop's CDP endpoint (an http(s) URL: Playwright reads /json/version first)."""
    where = f"{args.relay}/{args.kind}/{args.slot}"
    return f"{args.server.rstrip('/')}/api/v1/conversations/{args.conversation}/cdp/{where}"


def run(args: argparse.Namespace, token: str) -> None:
    with sync_playwright() as playwright:
        browser = playwright.chromium.connect_over_cdp(
            endpoint(args), headers={"Authorization": f"Bearer {token}"}
        )
        try:
            context = browser.contexts[0]
            page = context.pages[0] if context.pages else context.new_page()
            if args.url:
                page.goto(args.url)
            print(f"title: {page.title()}")
            for step in args.fill:
                selector, _, text = step.partition("=")
                page.fill(selector, text)
            for selector in args.click:
                page.click(selector)
            if args.read:
                print(f"read: {page.text_content(args.read)}")
        finally:
            browser.close()  # disconnects; the desktop's browser stays open


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True)
    parser.add_argument("--conversation", required=True)
    parser.add_argument("--relay", required=True)
    parser.add_argument("--kind", default="virtual")
    parser.add_argument("--slot", default="main")
    parser.add_argument("--url")
    parser.add_argument("--fill", action="append", default=[], metavar="SELECTOR=TEXT")
    parser.add_argument("--click", action="append", default=[], metavar="SELECTOR")
    parser.add_argument("--read", metavar="SELECTOR")
    args = parser.parse_args()
    token = os.environ.get("RELAYDESK_API_TOKEN", "")
    if not token:
        print("set RELAYDESK_API_TOKEN (relaydesk admin create-token USER)", file=sys.stderr)
        return 2
    try:
        run(args, token)
    except Error as err:
        print(f"refused: {err.message.splitlines()[0]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
