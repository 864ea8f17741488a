"""A scripted agent over relaydesk's plain HTTP action API: look, click, then act by ref.

Every step is one POST /api/v1/actions/NAME with a JSON body, and every refusal is the one
body {"ok": false, "error": {"code", "message", "suggestion" or "hint"}} (docs/http-api.md).
No MCP and no SDK: httpx (installed with relaydesk) is all it needs beyond the standard library.

  export RELAYDESK_API_TOKEN=rdk_...    # or --token-file FILE (relaydesk admin create-token USER)
  python examples/http_agent.py --server http://127.0.0.1:8400 --conversation ID \\
      --screenshot screen.png --find 'text[name="Name"]' --type 'hello from an agent' \\
      --submit 'button[name="Save"]'

The steps, one printed line per call with its time:

  1. desktop_list_active: a running virtual desktop of the conversation, else desktop_start
     (which needs the write role); every later call names that desktop;
  2. screen screenshot (saved with --screenshot FILE);
  3. screen click at --click X,Y (default: the screen's centre), guarded by that screenshot:
     its screen_revision goes along as expected_screen_revision, so the click is refused with
     stale_screen, and no input, if the screen changed there meanwhile. Then a new
     screenshot and one retry;
  4. desktop_observe: the focused window (or --window TITLE) through its accessibility tree;
     with no window focused (app_not_found), as that error suggests, the first window that
     desktop_apps lists;
  5. desktop_find: the first element of that window matching --find SELECTOR
     (docs/accessibility-selectors.md), then desktop_type with --type TEXT, else desktop_click,
     on its ref; --submit SELECTOR finds and clicks one more element (a form's Save button).

Without --find it prints the observed tree, to write a selector from.
Exit status: 0 done; 1 the server refused a step (its code, message and advice on stderr) or
could not be reached; 2 bad usage.
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
import time
from pathlib import Path
from typing import Any, Final

import httpx

TOKEN_ENV: Final = "RELAYDESK_API_TOKEN"  # noqa: S105 - a variable's name
TIMEOUT_S: Final = 60.0
Point = tuple[int, int]


class AgentError(Exception):
    """A step that could not be done; the message says which and why."""


class ActionError(AgentError):
    """An action the server refused: its HTTP status and the error's code, message and advice."""

    def __init__(self, action: str, status: int, error: dict[str, Any]) -> None:
        self.code = str(error.get("code", "unknown"))
        self.message = str(error.get("message", ""))
        advice = error.get("suggestion") or error.get("hint")
        text = f"{action}: {status} {self.code}: {self.message}"
        super().__init__(f"{text} ({advice})" if advice else text)


class Desk:
    """The actions of one conversation; ``target`` names the desktop once one is chosen."""

    def __init__(self, http: httpx.Client, conversation: str) -> None:
        self.http, self.conversation = http, conversation
        self.target: dict[str, str] = {}

    def call(self, name: str, /, **args: Any) -> dict[str, Any]:
        """The answer of action ``name``; an error answer raises ``ActionError``."""
        body = {"conversation_id": self.conversation, **self.target, **args}
        response = self.http.post(f"/api/v1/actions/{name}", json=body)
        try:
            answer: dict[str, Any] = response.json()
        except ValueError:  # not relaydesk answering (a proxy's error page, …)
            answer = {"ok": False, "error": {"code": "not_json", "message": response.text[:200]}}
        if answer.get("ok") is not True:
            raise ActionError(name, response.status_code, answer.get("error") or {})
        return answer


def say(step: str, started: float, what: str) -> None:
    """One line per step: the call, how long it took, what it did."""
    elapsed_ms = (time.perf_counter() - started) * 1000
    print(f"{step:<20}{elapsed_ms:8.1f} ms  {what}", flush=True)


def ensure_desktop(desk: Desk, relay: str | None) -> None:
    """A running virtual desktop (of ``relay`` when named), started when there is none."""
    started = time.perf_counter()
    rows = desk.call("desktop_list_active")["desktops"]
    row = next((r for r in rows if _usable(r, relay)), None)
    if row is not None:
        say("desktop_list_active", started, f"running: {_desktop(row)}")
    else:
        say("desktop_list_active", started, f"none of {len(rows)} live desktop(s) will do")
        started = time.perf_counter()
        row = desk.call("desktop_start", **({"relay": relay} if relay else {}))["desktop"]
        say("desktop_start", started, f"started: {_desktop(row)}")
    # Later calls name this very desktop: a newer one in its slot is never clicked by mistake.
    desk.target = {"relay": row["relay_id"], "desktop_session_id": row["desktop_session_id"]}


def _desktop(row: dict[str, Any]) -> str:
    return f"{row['desktop_session_id']} on {row['relay_name']} ({row['geometry']})"


def _usable(row: dict[str, Any], relay: str | None) -> bool:
    # A "local" desktop is a person's own screen: this script only clicks virtual ones.
    named = relay is None or relay in (row["relay_id"], row["relay_name"])
    return named and row["kind"] == "virtual" and row["state"] == "running"


def screenshot(desk: Desk, out: Path | None) -> dict[str, Any]:
    """A screenshot; its ``screen_revision`` guards clicks chosen on it."""
    started = time.perf_counter()
    shot = desk.call("screen", action="screenshot")
    if out is not None:
        out.write_bytes(base64.b64decode(shot["image"]))
    saved = f", saved to {out}" if out is not None else ""
    say(
        "screen screenshot",
        started,
        f"{shot['width']}x{shot['height']} {shot['format']}, "
        f"revision {shot['screen_revision'][:16]}…{saved}",
    )
    return shot


def click(desk: Desk, shot: dict[str, Any], point: Point | None) -> None:
    """A click at ``point`` (default the centre) chosen on ``shot``, guarded by its revision."""
    x, y = point or (shot["width"] // 2, shot["height"] // 2)
    started = time.perf_counter()
    try:
        done = desk.call(
            "screen", action="click", x=x, y=y, expected_screen_revision=shot["screen_revision"]
        )
    except ActionError as err:
        say("screen click", started, f"({x}, {y}) refused: {err.code}")
        raise
    difference = done["guard"].get("difference", 0.0)
    say("screen click", started, f"({done['x']}, {done['y']}), guard difference {difference:.3f}")


def guarded_click(desk: Desk, point: Point | None, out: Path | None) -> None:
    """Screenshot, click; if the screen changed at the point meanwhile, look again once."""
    try:
        click(desk, screenshot(desk, out), point)
    except ActionError as err:
        if err.code != "stale_screen":
            raise
        click(desk, screenshot(desk, out), point)


def observe(desk: Desk, window: str | None, show_tree: bool) -> str:
    """The accessibility tree of ``window``, else of the focused window, else (as the error
    suggests) of the first window that desktop_apps lists; answers the window's title."""
    try:
        seen = _observe(desk, window)
    except ActionError as err:
        if window is not None or err.code != "app_not_found":
            raise
        seen = _observe(desk, first_window(desk))
    if show_tree:
        print(seen["text"])
    title: str = seen["window"]
    return title


def _observe(desk: Desk, window: str | None) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        seen = desk.call("desktop_observe", **({"window": window} if window else {}))
    except ActionError as err:
        say("desktop_observe", started, f"refused: {err.code}")
        raise
    say(
        "desktop_observe",
        started,
        f"{seen['window']!r} of {seen['app']}: "
        f"{seen['nodes']} elements (snapshot {seen['snapshot']})",
    )
    return seen


def first_window(desk: Desk) -> str:
    """The id of the first showing window of the running apps."""
    started = time.perf_counter()
    running = desk.call("desktop_apps")["running"]
    windows = [(app, w) for app in running for w in app["windows"] if w["showing"]]
    if not windows:
        raise AgentError("desktop_apps: no app shows a window to observe")
    app, window = windows[0]
    say("desktop_apps", started, f"{window['name']!r} of {app['name']} ({len(windows)} shown)")
    window_id: str = window["id"]
    return window_id


def find(desk: Desk, selector: str, window: str) -> dict[str, Any]:
    """The first element of ``window`` that ``selector`` matches (its ``ref``, role, name)."""
    started = time.perf_counter()
    found = desk.call("desktop_find", selector=selector, **({"window": window} if window else {}))
    if not found["matches"]:
        raise AgentError(f"desktop_find: nothing in {window!r} matches {selector}")
    element: dict[str, Any] = found["matches"][0]
    say(
        "desktop_find",
        started,
        f"{_named(element)} {element['ref']} "
        f"(first of {found['count']}{'+' if found['more'] else ''})",
    )
    return element


def act(desk: Desk, element: dict[str, Any], text: str | None) -> None:
    """Type ``text`` into the element by its ref, or click it when there is no text."""
    started = time.perf_counter()
    if text is None:
        done = desk.call("desktop_click", ref=element["ref"])
        say("desktop_click", started, f"{_named(element)}, {done['method']}")
        return
    done = desk.call("desktop_type", ref=element["ref"], text=text)
    say(
        "desktop_type",
        started,
        f"{len(text)} characters into {_named(element)}, "
        f"{done['method']}; it reads {done.get('text')!r}",
    )


def _named(element: dict[str, Any]) -> str:
    return f'{element["role"]} "{element["name"]}"'


def run(desk: Desk, args: argparse.Namespace) -> None:
    ensure_desktop(desk, args.relay)
    guarded_click(desk, args.click, args.screenshot)
    window = observe(desk, args.window, show_tree=args.find is None)
    if args.find is not None:
        act(desk, find(desk, args.find, window), args.type)
    if args.submit is not None:
        act(desk, find(desk, args.submit, window), None)


def point(text: str) -> Point:
    """``X,Y`` in screen pixels."""
    try:
        x, y = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected X,Y in pixels, got {text!r}") from None
    return x, y


def api_token(token_file: Path | None) -> str:
    """The token in ``token_file``, else in RELAYDESK_API_TOKEN ("" when neither has one)."""
    if token_file is None:
        return os.environ.get(TOKEN_ENV, "").strip()
    return token_file.read_text(encoding="utf-8").strip()


def parse_args() -> tuple[argparse.Namespace, str]:
    """The command line and the API token; a usage error exits with status 2."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    env = os.environ.get
    add = parser.add_argument
    add(
        "--server",
        metavar="URL",
        default=env("RELAYDESK_SERVER_URL"),
        help="the server's URL (default: RELAYDESK_SERVER_URL)",
    )
    add(
        "--conversation",
        metavar="ID",
        default=env("RELAYDESK_CONVERSATION_ID"),
        help="the conversation to act in (default: RELAYDESK_CONVERSATION_ID)",
    )
    add(
        "--token-file",
        metavar="FILE",
        type=Path,
        help=f"file holding the API token (default: {TOKEN_ENV})",
    )
    add("--relay", metavar="NAME", help="relay name or id (needed with several relays)")
    add("--screenshot", metavar="FILE", type=Path, help="save the screenshot there (PNG)")
    add(
        "--click",
        metavar="X,Y",
        type=point,
        help="where to click, in screenshot pixels (default: the centre)",
    )
    add("--window", metavar="TITLE", help="observe this window instead of the focused one")
    add("--find", metavar="SELECTOR", help="the element of that window to act on")
    add("--type", metavar="TEXT", help="type TEXT into that element instead of clicking it")
    add("--submit", metavar="SELECTOR", help="then click this element too")
    args = parser.parse_args()
    if not (args.server and args.conversation):
        parser.error("name the server and the conversation (--server, --conversation)")
    if args.type is not None and args.find is None:
        parser.error("--type needs --find: the element to type into")
    try:
        token = api_token(args.token_file)
    except OSError as err:
        parser.error(f"--token-file: {err.strerror}")
    if not token:
        parser.error(f"no API token: use --token-file FILE or set {TOKEN_ENV}")
    return args, token


def main() -> None:
    args, token = parse_args()
    headers = {"Authorization": f"Bearer {token}"}
    try:
        with httpx.Client(base_url=args.server, headers=headers, timeout=TIMEOUT_S) as http:
            run(Desk(http, args.conversation), args)
    except AgentError as err:
        sys.exit(f"http_agent: {err}")
    except httpx.HTTPError as err:
        sys.exit(f"http_agent: cannot reach {args.server}: {err}")


if __name__ == "__main__":
    main()
