"""The browser actions: the desktop's own browser, driven over its private DevTools channel
(relay/browser; docs/browser.md).

Reads (``browser_tabs``, ``browser_snapshot``, ``browser_wait``, ``browser_screenshot``) show
what is on the desktop: role ``write``, like the screen. Everything that changes the page
(open, close, history, click, fill, press, select, hover, scroll) is agent input: it runs
under the desktop's control gate (a person's takeover refuses it with ``takeover_active``,
Stop with ``stopped_by_user``) and is audited. Every argument is checked by the schema here
and again by the relay.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from server.actions import audit
from server.actions.context import ActionContext
from server.actions.desktop import KIND, RELAY, SESSION_ID, SLOT, running_row
from server.actions.registry import Action, tool_schema
from server.actions.schema import Schema
from server.control.gate import DesktopTarget, agent_input
from server.db.rows import DesktopRow
from wire import a11y_selector
from wire import browser as rules
from wire.errors import InvalidArgs

TARGET: Final[dict[str, Schema]] = {
    "relay": RELAY,
    "kind": KIND,
    "slot": SLOT,
    "desktop_session_id": SESSION_ID,
}
TAB: Final[Schema] = {
    "type": "string",
    "pattern": rules.TAB_PATTERN,
    "description": "A tab's id from browser_tabs; without it, the tab showing in the browser.",
}
REF: Final[Schema] = {
    "type": "string",
    "pattern": rules.REF_PATTERN,
    "description": "An element ref from browser_snapshot, e.g. '@b1a2b3c4:e7'.",
}
REVISION: Final[Schema] = {
    "type": "string",
    "pattern": rules.REVISION_PATTERN,
    "description": "The revision of the browser_screenshot the element was chosen on: if "
    "the page looks different around the element now (or the screenshot did not show it), "
    "the act is refused with stale_screen and nothing reaches the page.",
}
TIMEOUT: Final[Schema] = {
    "type": "number",
    "minimum": rules.TIMEOUT_MIN_S,
    "maximum": rules.TIMEOUT_MAX_S,
    "default": rules.TIMEOUT_DEFAULT_S,
    "description": "Give up (error timeout) after this many seconds.",
}
SCROLL: Final[Schema] = {
    "type": "number",
    "minimum": -rules.SCROLL_MAX,
    "maximum": rules.SCROLL_MAX,
    "description": "CSS pixels to scroll by (x: right, y: down; negative: back).",
}
AUDIT: Final = "desktop.browser"
# Beyond a wait's own limit: the relay's answer on the way back.
EXTRA_S: Final = 10.0


async def browser_call(
    ctx: ActionContext,
    row: DesktopRow,
    call: rules.BrowserCall,
    params: dict[str, Any],
    wait_s: float = 0.0,
) -> dict[str, Any]:
    """One call on the desktop's browser; the answer says ``backend: "cdp"``."""
    args: rules.BrowserArgs = {
        "desktop_session_id": row.desktop_session_id,
        "call": call,
        "params": params,
    }
    answer = await ctx.relay_call(rules.DESKTOP_BROWSER, args, wait_s + EXTRA_S)
    return {**answer["result"], "desktop_session_id": row.desktop_session_id, "backend": "cdp"}


def _pick(args: dict[str, Any], *names: str) -> dict[str, Any]:
    return {n: args[n] for n in names if n in args}


def _read(call: rules.BrowserCall, *fields: str) -> Any:
    """A call that only looks at the browser."""

    async def handler(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
        row = await running_row(ctx, args)
        params = _pick(args, *fields)
        return await browser_call(ctx, row, call, params, float(args.get("timeout_s", 0)))

    return handler


def _change(
    call: rules.BrowserCall,
    outcome: str | None,
    *fields: str,
    check: Callable[[dict[str, Any]], object] | None = None,
    **fixed: Any,
) -> Any:
    """A call that changes the page: agent input under the desktop's control gate;
    ``check`` refuses arguments the schema cannot (before the gate)."""

    async def handler(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
        if "url" in args:  # file: is the relay's to allow (it knows the desktop's home)
            rules.check_url(args["url"], allow_file=True)
        if check is not None:
            check(args)
        row = await running_row(ctx, args)
        params = _pick(args, *fields) | fixed
        async with agent_input(ctx, DesktopTarget.of_row(row)) as grant:
            result = await browser_call(ctx, row, call, params, float(args.get("timeout_s", 0)))
            grant.acted(f"browser_{outcome or call}")  # never the URL or the text
        ctx.outcome = outcome or call
        if "ref" in args:  # an act on an element: the row names it
            ctx.details = audit.act_details(outcome or call, result, args)
        return result

    return handler


_WAIT: Final = _read("wait", "tab", "for", "value", "timeout_s")


async def wait(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    condition = args["for"]
    if condition in ("url", "selector") and not args.get("value"):
        raise InvalidArgs("value", f"required when waiting for {condition}")
    if condition == "selector":
        _check_selector(args["value"], "value")
    result: dict[str, Any] = await _WAIT(ctx, args)
    return result


def _check_selector(text: str, field: str) -> None:
    """A ``css:`` selector must say something; any other is an accessibility selector."""
    if text.startswith(rules.CSS_PREFIX):
        if not text[len(rules.CSS_PREFIX) :].strip():
            raise InvalidArgs(field, "css: needs a CSS selector after it")
        return
    try:
        a11y_selector.parse(text)
    except a11y_selector.SelectorError as err:
        raise InvalidArgs(field, str(err)) from None


_FIND: Final = _read("find", "tab", "selector", "limit")


async def find(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    _check_selector(args["selector"], "selector")
    result: dict[str, Any] = await _FIND(ctx, args)
    return result


def _schema(extra: dict[str, Schema], required: tuple[str, ...] = ()) -> Schema:
    return tool_schema({**TARGET, **extra}, required)


def _action(name: str, extra: dict[str, Schema], doc: str, handler: Any, **kw: Any) -> Action:
    required = tuple(kw.pop("required", ()))
    return Action(name, "write", _schema(extra, required), doc, handler, **kw)


BROWSER_ACTIONS: Final[tuple[Action, ...]] = (
    _action(
        "browser_tabs",
        {},
        "List the tabs of the desktop's browser: id, url, title, active (showing in its "
        "window), loading.",
        _read("tabs"),
        read_only=True,
    ),
    _action(
        "browser_open",
        {
            "url": {
                "type": "string",
                "minLength": 1,
                "maxLength": rules.URL_MAX,
                "description": "An http, https or about: URL (file: of the desktop's home "
                f"where the relay allows it: {rules.FILE_ENV}=1).",
            },
            "new_tab": {
                "type": "boolean",
                "default": False,
                "description": "Open it in a new tab instead of the showing one.",
            },
            "tab": TAB,
            "timeout_s": TIMEOUT,
        },
        "Open a URL in the desktop's browser (the showing tab, or a new one) and answer once "
        "the page has loaded, with the tab.",
        _change("open", None, "url", "new_tab", "tab", "timeout_s"),
        audit_op=f"{AUDIT}.open",
        required=("url",),
    ),
    _action(
        "browser_close_tab",
        {"tab": TAB},
        "Close a tab of the desktop's browser (the showing one unless named); answers the "
        "tabs left.",
        _change("close_tab", None, "tab"),
        audit_op=f"{AUDIT}.close_tab",
    ),
    *(
        _action(
            f"browser_{direction}",
            {"tab": TAB, "timeout_s": TIMEOUT},
            f"{doc} in a tab of the desktop's browser and answer once the page is there.",
            _change("history", direction, "tab", "timeout_s", direction=direction),
            audit_op=f"{AUDIT}.{direction}",
        )
        for direction, doc in (
            ("back", "Go back one page"),
            ("forward", "Go forward one page"),
            ("reload", "Reload the page"),
        )
    ),
    _action(
        "browser_snapshot",
        {
            "tab": TAB,
            "depth": {
                "type": "integer",
                "minimum": 1,
                "maximum": 256,
                "default": 64,
                "description": "How deep into the page's tree to list.",
            },
            "max_nodes": {
                "type": "integer",
                "minimum": 10,
                "maximum": 5000,
                "default": 400,
                "description": "At most this many elements; the answer says when the tree was cut.",
            },
            "view": {
                "type": "string",
                "enum": ["interactive", "all"],
                "default": "interactive",
                "description": "interactive: controls and named context; all: every element.",
            },
            "format": {
                "type": "string",
                "enum": ["text", "json", "both"],
                "default": "text",
                "description": "text: one element a line; json: a list of elements.",
            },
        },
        "Read a tab's page as its accessibility tree (from the browser itself), one element "
        "a line: '@b… role \"name\" value=… [states]'. Act on the refs with browser_click, "
        "browser_fill, browser_press, browser_select, browser_hover and browser_scroll.",
        _read("snapshot", "tab", "depth", "max_nodes", "view", "format"),
        read_only=True,
    ),
    _action(
        "browser_click",
        {"ref": REF, "expected_revision": REVISION},
        "Click an element of the page (found again live; scrolled into view) with the "
        "browser's own input events.",
        _change("act", "click", "ref", "expected_revision", action="click"),
        audit_op=f"{AUDIT}.click",
        required=("ref",),
    ),
    _action(
        "browser_fill",
        {
            "ref": REF,
            "expected_revision": REVISION,
            "text": {
                "type": "string",
                "maxLength": rules.TEXT_MAX,
                "description": "The text that replaces the field's (as typed input).",
            },
        },
        "Replace the text of a field of the page; answers the value read back.",
        _change("act", "fill", "ref", "text", "expected_revision", action="fill"),
        audit_op=f"{AUDIT}.fill",
        required=("ref", "text"),
    ),
    _action(
        "browser_press",
        {
            "ref": REF,
            "tab": TAB,
            "keys": {
                "type": "string",
                "minLength": 1,
                "maxLength": rules.KEYS_MAX,
                "description": "A key or chord, e.g. 'Enter', 'ctrl+a', 'shift+Tab'.",
            },
        },
        "Press a key or chord in the page: in an element (focused first) or where the focus is.",
        _change("act", "press", "ref", "tab", "keys", action="press"),
        audit_op=f"{AUDIT}.press",
        required=("keys",),
    ),
    _action(
        "browser_select",
        {
            "ref": REF,
            "expected_revision": REVISION,
            "value": {
                "type": "string",
                "maxLength": rules.OPTION_MAX,
                "description": "The option's value (its value attribute).",
            },
            "label": {
                "type": "string",
                "maxLength": rules.OPTION_MAX,
                "description": "The option's label: the text the list shows for it.",
            },
        },
        "Choose an option of a list (a <select>) of the page by its value or its label (give "
        "one); the page hears it as a person's choice. Answers the option selected.",
        _change(
            "act",
            "select",
            "ref",
            "value",
            "label",
            "expected_revision",
            check=rules.check_select,
            action="select",
        ),
        audit_op=f"{AUDIT}.select",
        required=("ref",),
    ),
    _action(
        "browser_hover",
        {"ref": REF, "expected_revision": REVISION},
        "Move the mouse onto an element of the page (found again live; scrolled into view), "
        "as a person pointing at it: menus and tooltips that open on hover open.",
        _change("act", "hover", "ref", "expected_revision", action="hover"),
        audit_op=f"{AUDIT}.hover",
        required=("ref",),
    ),
    _action(
        "browser_scroll",
        {
            "ref": REF,
            "tab": TAB,
            "dx": SCROLL,
            "dy": SCROLL,
        },
        "Scroll the page: an element into view (ref alone), or by dx/dy CSS pixels with the "
        "mouse wheel (over the element given by ref, else over the middle of the page; "
        "positive dy scrolls down). Answers where the page is scrolled to.",
        _change(
            "act",
            "scroll",
            "ref",
            "tab",
            "dx",
            "dy",
            check=rules.check_scroll,
            action="scroll",
        ),
        audit_op=f"{AUDIT}.scroll",
    ),
    _action(
        "browser_wait",
        {
            "tab": TAB,
            "for": {
                "type": "string",
                "enum": list(rules.WAIT_FOR),
                "description": "load: the page has loaded; network_idle: no request for "
                "half a second; url: the URL contains value (or matches it as a glob with "
                "*); selector: value ('css:…' or an accessibility selector) matches.",
            },
            "value": {
                "type": "string",
                "maxLength": rules.SELECTOR_MAX,
                "description": "The URL or selector waited for.",
            },
            "timeout_s": TIMEOUT,
        },
        "Wait until a tab's page has loaded, its network is idle, its URL matches, or a "
        "selector matches.",
        wait,
        read_only=True,
        required=("for",),
    ),
    _action(
        "browser_screenshot",
        {
            "tab": TAB,
            "full_page": {
                "type": "boolean",
                "default": False,
                "description": "The whole page, beyond what the window shows.",
            },
        },
        "A PNG of a tab's page as the browser renders it (base64 in image), with a "
        "revision: pass it as expected_revision to an act chosen on this image, and the act "
        "is refused (stale_screen) if the page changed around its element since.",
        _read("screenshot", "tab", "full_page"),
        read_only=True,
    ),
    _action(
        "browser_find",
        {
            "tab": TAB,
            "selector": {
                "type": "string",
                "minLength": 1,
                "maxLength": rules.SELECTOR_MAX,
                "description": "An accessibility selector as desktop_find takes it (e.g. "
                "'push_button[name=\"Save\"]', 'entry', '\"Next page\"'), or 'css:' and a "
                "CSS selector (e.g. 'css:form input[name=q]').",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": rules.FIND_LIMIT_MAX,
                "default": 20,
                "description": "At most this many matches.",
            },
        },
        "Find elements of a tab's page by selector and return them as refs for browser_click, "
        "browser_fill and browser_press, without reading the whole page.",
        find,
        read_only=True,
        required=("selector",),
    ),
    _action(
        "browser_evaluate",
        {
            "tab": TAB,
            "expression": {
                "type": "string",
                "minLength": 1,
                "maxLength": rules.EXPRESSION_MAX,
                "description": "A JavaScript expression; a promise is awaited.",
            },
        },
        "Evaluate a JavaScript expression in a tab's page and answer its value (as JSON). "
        f"Off unless the relay was started with {rules.EVALUATE_ENV}=1.",
        _change("evaluate", None, "tab", "expression"),
        audit_op=f"{AUDIT}.evaluate",
        required=("expression",),
    ),
    _action(
        "browser_downloads",
        {},
        "List the browser's downloads (saved in the desktop's ~/Downloads as its user): id, "
        "file, url, state (inProgress, completed, canceled), received_bytes, total_bytes.",
        _read("downloads"),
        read_only=True,
    ),
)
