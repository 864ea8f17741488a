"""Cua's own client (``cua-computer``) driving a relaydesk desktop: a scripted agent loop.

Usage (in a Python >= 3.12 environment with ``pip install cua-computer``; relaydesk's
scripts/install builds one in .venv-cua):

    RELAYDESK_API_TOKEN=rdk_… python examples/cua_agent.py \\
        --server https://relaydesk.example --relay my-relay \\
        --conversation 0123456789abcdef0123456789abcdef \\
        [--slot main] [--screenshot shot.png] [--click X,Y] [--type TEXT]

It points ``Computer`` at the desktop's Cua base URL
(``/api/v1/conversations/{conversation}/cua/{relay}/virtual/{slot}``) with the token in the
``Authorization`` header, runs Cua's readiness sequence, then: reads the screen size, takes a
screenshot (saved with ``--screenshot``), clicks at ``--click`` (default: the centre) — relaydesk
guards that click with the screenshot just taken — types ``--type`` if given, and reads the
focused window's accessibility tree. One line per step with its time. Exit 0 when every step
worked, 1 with the server's message otherwise, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("CUA_TELEMETRY", "off")

from computer import Computer  # after the telemetry switch


def _arguments() -> argparse.Namespace:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--server", required=True, help="relaydesk's URL")
    parser.add_argument(
        "--conversation",
        required=True,
        help="the conversation id: 32 hex characters, as GET /api/v1/conversations lists them",
    )
    parser.add_argument("--relay", required=True, help="the relay's name or id")
    parser.add_argument("--slot", default="main", help="the desktop's slot (default main)")
    parser.add_argument(
        "--token-file",
        help="a file holding the API token (default: the RELAYDESK_API_TOKEN variable)",
    )
    parser.add_argument("--screenshot", type=Path, help="save the screenshot here (PNG)")
    parser.add_argument("--click", help="X,Y to click (default: the screen's centre)")
    parser.add_argument("--type", dest="text", help="text to type after the click")
    return parser.parse_args()


def _token(args: argparse.Namespace) -> str:
    if args.token_file:
        return Path(args.token_file).read_text(encoding="utf-8").strip()
    token = os.environ.get("RELAYDESK_API_TOKEN", "").strip()
    if not token:
        print("no API token: pass --token-file or set RELAYDESK_API_TOKEN", file=sys.stderr)
        sys.exit(2)
    return token


def _step(name: str, started: float, detail: str) -> None:
    print(f"{name:<12} {(time.perf_counter() - started) * 1000:8.1f} ms  {detail}", flush=True)


def _count(node: dict[str, Any]) -> int:
    return 1 + sum(_count(child) for child in node.get("children", []))


async def run(args: argparse.Namespace) -> int:
    base = (
        f"{args.server.rstrip('/')}/api/v1/conversations/{args.conversation}/cua/"
        f"{args.relay}/virtual/{args.slot}"
    )
    computer = Computer(
        os_type="linux",
        use_host_computer_server=True,
        api_base_url=base,
        api_headers={"Authorization": f"Bearer {_token(args)}"},
        telemetry_enabled=False,
    )
    started = time.perf_counter()
    await computer.run()
    _step("ready", started, base)
    screen = computer.interface
    try:
        started = time.perf_counter()
        size = await screen.get_screen_size()
        _step("screen size", started, f"{size['width']}x{size['height']}")

        started = time.perf_counter()
        png = await screen.screenshot()
        if args.screenshot:
            args.screenshot.write_bytes(png)
        _step("screenshot", started, f"{len(png)} bytes")

        x, y = (
            (int(v) for v in args.click.split(","))
            if args.click
            else (size["width"] // 2, size["height"] // 2)
        )
        started = time.perf_counter()
        # Cua's client does not report a refused click: ask the protocol directly for its answer.
        reply = await screen._send_command("left_click", {"x": x, "y": y})
        if not reply.get("success"):
            print(f"click refused: {reply.get('error')}", file=sys.stderr)
            return 1
        _step("click", started, f"at {x},{y} (guarded by the screenshot)")

        if args.text:
            started = time.perf_counter()
            await screen.type_text(args.text)
            _step("type", started, f"{len(args.text)} characters")

        started = time.perf_counter()
        tree = await screen.get_accessibility_tree()
        root = tree.get("tree") or {}
        _step(
            "a11y tree",
            started,
            f"{root.get('role')} {root.get('title')!r}, {_count(root)} elements",
        )
    except RuntimeError as err:  # Cua's client raises on success: false for reads
        print(f"failed: {err}", file=sys.stderr)
        return 1
    finally:
        await computer.stop()
    return 0


def main() -> None:
    sys.exit(asyncio.run(run(_arguments())))


if __name__ == "__main__":
    main()
