"""Cua's commands, each carried out through relaydesk's typed actions.

Every command that touches the desktop runs one or more typed actions through
``server.actions.invoke`` (``source="cua"``): the caller's role, the schemas, the takeover gate
and the audit are the actions' own. What is Cua's is only the shape: parameter names, answer
keys (``size``, ``position``, ``image_data``…) and the guard, which Cua's client does not
know about: a Cua session remembers the ``screen_revision`` of its own last screenshot and
guards every click with it (:class:`CuaSession`).
"""

from __future__ import annotations

import base64
import inspect
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from server.actions.invoke import ActionRunner
from server.auth.principal import Principal
from server.cua.protocol import PROTOCOL_VERSION
from server.version import server_version
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.ops import DesktopKind

SOURCE: Final = "cua"
Result = dict[str, Any]
Handler = Callable[["CuaCall", Mapping[str, Any]], Awaitable[Result]]
# A region this size around a point is what an unguarded (``?guard=off``) click looks at: a
# fresh zoom of it gives the click a revision of its own (the relay never clicks unguarded).
OWN_LOOK_SIDE: Final = 8
MAX_SCROLL: Final = 50
LISTING: Final = "desktop_list_active"
# The desktop the screen action reaches without naming one.
DEFAULT: Final = ("virtual", "main")


@dataclass
class CuaSession:
    """What a Cua client's session remembers between its commands (each command may come on a
    new connection): the revision of its last screenshot, which guards its clicks."""

    revision: str | None = None
    desktop_session_id: str | None = None


@dataclass(frozen=True)
class CuaTarget:
    """The desktop a Cua base URL names."""

    conversation_id: str
    relay: str
    kind: DesktopKind
    slot: str


@dataclass
class CuaCall:
    """One command's caller, target and session."""

    actions: ActionRunner
    principal: Principal
    target: CuaTarget
    session: CuaSession
    request_id: str
    guard: bool = True
    steps: list[str] = field(default_factory=list)

    async def action(self, name: str, **args: Any) -> Result:
        """Run the typed action ``name`` on this call's desktop; ``OpError`` on refusal."""
        body = {"conversation_id": self.target.conversation_id, **self._where(name), **args}
        status, answer = await self.actions.invoke(
            self.principal, name, body, source=SOURCE, request_id=self.request_id
        )
        self.steps.append(name)
        if status != 200:
            raise _op_error(answer)
        session_id = answer.get("desktop_session_id")
        if isinstance(session_id, str):
            self.session.desktop_session_id = session_id
        return answer

    def _where(self, name: str) -> Result:
        """How each action names the desktop: the screen action by ``local`` (and the default
        virtual desktop), the others by kind and slot."""
        if name == "screen":
            relay = {"relay": self.target.relay}
            if self.target.kind == "local":
                return {**relay, "local": True}
            if (self.target.kind, self.target.slot) == DEFAULT:
                return relay
            return {**relay, "desktop_session_id": self.session.desktop_session_id or ""}
        if name == LISTING:  # lists every desktop of the conversation
            return {}
        return {"relay": self.target.relay, "kind": self.target.kind, "slot": self.target.slot}

    async def screen(self, action: str, **args: Any) -> Result:
        if self.target.kind == "local" or (self.target.kind, self.target.slot) == DEFAULT:
            return await self.action("screen", action=action, **args)
        known = self.session.desktop_session_id
        if known is None:
            await self._session_of_slot()
        try:
            return await self.action("screen", action=action, **args)
        except OpError as err:
            if known is None or err.code is not ErrorCode.NOT_RUNNING:
                raise
        # The session's desktop stopped since: the slot may hold a new one.
        self.session.desktop_session_id = None
        await self._session_of_slot()
        return await self.action("screen", action=action, **args)

    async def _session_of_slot(self) -> None:
        """The running desktop in the target's slot of its relay (screen names it by session)."""
        target = self.target
        for row in (await self.action(LISTING)).get("desktops", []):
            where = (row.get("kind"), row.get("slot"), row.get("state"))
            relay_named = target.relay in (row.get("relay_id"), row.get("relay_name"))
            if relay_named and where == (target.kind, target.slot, "running"):
                self.session.desktop_session_id = str(row["desktop_session_id"])
                return
        raise OpError(ErrorCode.NOT_RUNNING, "no running desktop in that slot; start one first")


def _op_error(answer: Mapping[str, Any]) -> OpError:
    error = answer.get("error")
    if not isinstance(error, Mapping):
        return OpError(ErrorCode.INTERNAL, "internal error")
    try:
        code = ErrorCode(str(error.get("code")))
    except ValueError:
        code = ErrorCode.INTERNAL
    details = {k: v for k, v in error.items() if k not in ("code", "message")}
    return OpError(code, str(error.get("message", "")), details)


# -- parameters --------------------------------------------------------------------------


def _int(params: Mapping[str, Any], name: str) -> int:
    value = params.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgs(name, "must be a number")
    return int(value)


def _opt_point(params: Mapping[str, Any]) -> tuple[int, int] | None:
    if params.get("x") is None and params.get("y") is None:
        return None
    return _int(params, "x"), _int(params, "y")


def _str(params: Mapping[str, Any], name: str) -> str:
    value = params.get(name)
    if not isinstance(value, str):
        raise InvalidArgs(name, "must be a string")
    return value


def _button(params: Mapping[str, Any]) -> str:
    button = params.get("button", "left")
    if button not in ("left", "middle", "right"):
        raise InvalidArgs("button", "must be left, middle or right")
    return str(button)


# -- pixels ------------------------------------------------------------------------------


async def version(call: CuaCall, params: Mapping[str, Any]) -> Result:
    return {"protocol": PROTOCOL_VERSION, "package": f"relaydesk {server_version()}"}


async def get_screen_size(call: CuaCall, params: Mapping[str, Any]) -> Result:
    answer = await call.screen("screen_size")
    return {"size": {"width": answer["width"], "height": answer["height"]}}


async def get_cursor_position(call: CuaCall, params: Mapping[str, Any]) -> Result:
    answer = await call.screen("mouse_position")
    return {"position": {"x": answer["x"], "y": answer["y"]}}


async def screenshot(call: CuaCall, params: Mapping[str, Any]) -> Result:
    fmt = str(params.get("format") or "png").lower()
    fmt = "jpeg" if fmt == "jpg" else fmt
    if fmt not in ("png", "jpeg"):
        raise InvalidArgs("format", "must be png or jpeg")
    extra: Result = {}
    if fmt == "jpeg" and params.get("quality") is not None:
        extra["quality"] = max(1, min(95, _int(params, "quality")))
    answer = await call.screen("screenshot", format=fmt, **extra)
    call.session.revision = str(answer["screen_revision"])
    return {"image_data": answer["image"], "format": fmt}


async def _point_or_cursor(call: CuaCall, params: Mapping[str, Any]) -> tuple[int, int]:
    point = _opt_point(params)
    if point is not None:
        return point
    answer = await call.screen("mouse_position")
    return int(answer["x"]), int(answer["y"])


async def _revision_for(call: CuaCall, point: tuple[int, int]) -> str:
    """The revision that guards an action at ``point``: the session's last screenshot, or
    with the guard off a fresh look at the few pixels around the point."""
    if not call.guard:
        side = OWN_LOOK_SIDE
        size = await call.screen("screen_size")
        x = max(0, min(point[0] - side // 2, int(size["width"]) - side))
        y = max(0, min(point[1] - side // 2, int(size["height"]) - side))
        region = {"x": x, "y": y, "width": side, "height": side}
        answer = await call.screen("zoom", region=region)
        return str(answer["screen_revision"])
    if call.session.revision is None:
        # A caller the screen is not open to hears that first (forbidden, not_running…).
        await call.screen("mouse_position")
        raise OpError(
            ErrorCode.STALE_SCREEN,
            "no screenshot in this session yet: take a new screenshot, then click on it",
        )
    return call.session.revision


def _clicker(action: str, button: str) -> Handler:
    async def click(call: CuaCall, params: Mapping[str, Any]) -> Result:
        x, y = await _point_or_cursor(call, params)
        revision = await _revision_for(call, (x, y))
        await call.screen(action, x=x, y=y, button=button, expected_screen_revision=revision)
        return {}

    return click


async def move_cursor(call: CuaCall, params: Mapping[str, Any]) -> Result:
    await call.screen("move", x=_int(params, "x"), y=_int(params, "y"))
    return {}


async def mouse_down(call: CuaCall, params: Mapping[str, Any]) -> Result:
    x, y = await _point_or_cursor(call, params)
    revision = await _revision_for(call, (x, y))
    await call.screen(
        "mouse_down", x=x, y=y, button=_button(params), expected_screen_revision=revision
    )
    return {}


async def mouse_up(call: CuaCall, params: Mapping[str, Any]) -> Result:
    point = _opt_point(params)
    where = {"x": point[0], "y": point[1]} if point else {}
    await call.screen("mouse_up", button=_button(params), **where)
    return {}


async def drag_to(call: CuaCall, params: Mapping[str, Any]) -> Result:
    start = await call.screen("mouse_position")
    begin = (int(start["x"]), int(start["y"]))
    end = {"x": _int(params, "x"), "y": _int(params, "y")}
    revision = await _revision_for(call, begin)
    await call.screen(
        "drag", x=begin[0], y=begin[1], to=end, button=_button(params),
        expected_screen_revision=revision,
    )  # fmt: skip
    return {}


async def drag(call: CuaCall, params: Mapping[str, Any]) -> Result:
    path = params.get("path")
    if not isinstance(path, list) or len(path) < 2:
        raise InvalidArgs("path", "must be a list of at least two [x, y] points")
    points: list[tuple[int, int]] = []
    for index, point in enumerate(path):
        if not isinstance(point, list | tuple) or len(point) != 2:
            raise InvalidArgs(f"path[{index}]", "must be an [x, y] pair")
        pair = {"x": point[0], "y": point[1]}
        points.append((_int(pair, "x"), _int(pair, "y")))
    button = _button(params)
    first = points[0]
    revision = await _revision_for(call, first)
    await call.screen(
        "mouse_down", x=first[0], y=first[1], button=button, expected_screen_revision=revision
    )
    try:
        for x, y in points[1:]:
            await call.screen("move", x=x, y=y)
    finally:
        await call.screen("mouse_up", button=button)
    return {}


def _passed(action: str, name: str) -> Handler:
    """A command that hands one text parameter to a screen action as it is."""

    async def run(call: CuaCall, params: Mapping[str, Any]) -> Result:
        await call.screen(action, **{name: _str(params, name)})
        return {}

    return run


async def hotkey(call: CuaCall, params: Mapping[str, Any]) -> Result:
    keys = params.get("keys")
    if not isinstance(keys, list) or not keys or not all(isinstance(k, str) and k for k in keys):
        raise InvalidArgs("keys", "must be a non-empty list of key names")
    await call.screen("key", key="+".join(keys))
    return {}


async def _wheel(call: CuaCall, direction: str, clicks: int) -> None:
    if clicks > 0:
        await call.screen("scroll", direction=direction, amount=min(clicks, MAX_SCROLL))


async def scroll(call: CuaCall, params: Mapping[str, Any]) -> Result:
    """Cua's ``scroll(x, y)``: wheel amounts (y > 0 up, x > 0 right), not a position."""
    dx, dy = _int(params, "x"), _int(params, "y")
    await _wheel(call, "up" if dy > 0 else "down", abs(dy))
    await _wheel(call, "right" if dx > 0 else "left", abs(dx))
    return {}


def _clicks(params: Mapping[str, Any]) -> int:
    clicks = params.get("clicks", 1)
    if isinstance(clicks, bool) or not isinstance(clicks, int) or clicks < 1:
        raise InvalidArgs("clicks", "must be a positive integer")
    return int(clicks)


async def scroll_down(call: CuaCall, params: Mapping[str, Any]) -> Result:
    await _wheel(call, "down", _clicks(params))
    return {}


async def scroll_up(call: CuaCall, params: Mapping[str, Any]) -> Result:
    await _wheel(call, "up", _clicks(params))
    return {}


async def scroll_direction(call: CuaCall, params: Mapping[str, Any]) -> Result:
    direction = str(params.get("direction", "")).lower()
    if direction not in ("up", "down", "left", "right"):
        raise InvalidArgs("direction", "must be up, down, left or right")
    await _wheel(call, direction, _clicks(params))
    return {}


# -- clipboard, windows, apps --------------------------------------------------------------


async def copy_to_clipboard(call: CuaCall, params: Mapping[str, Any]) -> Result:
    answer = await call.action("desktop_clipboard_get")
    return {"content": answer["text"]}


async def set_clipboard(call: CuaCall, params: Mapping[str, Any]) -> Result:
    await call.action("desktop_clipboard_set", text=_str(params, "text"))
    return {}


async def _windows(call: CuaCall) -> Result:
    return await call.action("desktop_windows")


async def _window(call: CuaCall, params: Mapping[str, Any]) -> Result:
    wanted = params.get("window_id")
    if isinstance(wanted, str) and wanted.isdigit():
        wanted = int(wanted)
    if isinstance(wanted, bool) or not isinstance(wanted, int):
        raise InvalidArgs("window_id", "must be a window id (an integer)")
    for window in (await _windows(call))["windows"]:
        if window["id"] == wanted:
            return dict(window)
    raise OpError(
        ErrorCode.NOT_FOUND, f"no window {wanted} on this desktop", {"field": "window_id"}
    )


async def get_current_window_id(call: CuaCall, params: Mapping[str, Any]) -> Result:
    active = (await _windows(call)).get("active")
    if active is None:
        raise OpError(ErrorCode.NOT_FOUND, "no window has the focus")
    return {"window_id": active}


async def get_application_windows(call: CuaCall, params: Mapping[str, Any]) -> Result:
    app = _str(params, "app").lower()
    windows = (await _windows(call))["windows"]
    named = [w["id"] for w in windows if app in str(w.get("app", "")).lower()]
    titled = [w["id"] for w in windows if app in w["name"].lower() and w["id"] not in named]
    return {"windows": named + titled}


async def get_window_name(call: CuaCall, params: Mapping[str, Any]) -> Result:
    return {"name": (await _window(call, params))["name"]}


async def get_window_size(call: CuaCall, params: Mapping[str, Any]) -> Result:
    window = await _window(call, params)
    return {"width": window["width"], "height": window["height"]}


async def get_window_position(call: CuaCall, params: Mapping[str, Any]) -> Result:
    window = await _window(call, params)
    return {"x": window["x"], "y": window["y"]}


async def get_active_window_bounds(call: CuaCall, params: Mapping[str, Any]) -> Result:
    listed = await _windows(call)
    for window in listed["windows"]:
        if window["id"] == listed.get("active"):
            return {"bounds": {k: window[k] for k in ("x", "y", "width", "height")}}
    raise OpError(ErrorCode.NOT_FOUND, "no window has the focus")


def _window_op(op: str, *fields: str) -> Handler:
    async def run(call: CuaCall, params: Mapping[str, Any]) -> Result:
        window_id = (await _window(call, params))["id"]
        extra = {name: _int(params, name) for name in fields}
        await call.action("desktop_window", window_id=window_id, op=op, **extra)
        return {}

    return run


async def launch(call: CuaCall, params: Mapping[str, Any]) -> Result:
    if params.get("args"):
        raise InvalidArgs("args", "relaydesk starts apps by id only, without arguments")
    answer = await call.action("desktop_launch", app=_str(params, "app"))
    window = answer.get("app_window")
    pid = window.get("pid") if isinstance(window, Mapping) else None
    return {"pid": pid}


async def open_target(call: CuaCall, params: Mapping[str, Any]) -> Result:
    target = _str(params, "target")
    if target.startswith("-") or "\n" in target or "\x00" in target:
        raise InvalidArgs("target", "must be a file path or a URL")
    quoted = "'" + target.replace("'", "'\\''") + "'"
    await call.action("desktop_shell", command=f"xdg-open {quoted} >/dev/null 2>&1 &")
    return {}


async def get_desktop_environment(call: CuaCall, params: Mapping[str, Any]) -> Result:
    return {"environment": "openbox" if call.target.kind == "virtual" else "unknown"}


# -- accessibility -------------------------------------------------------------------------


def _tree_node(element: Mapping[str, Any]) -> Result:
    """One accessibility element in the shape Cua's tree uses (plus relaydesk's ``ref``)."""
    node: Result = {
        "role": element.get("role"),
        "title": element.get("name", ""),
        "ref": element.get("ref"),
        "children": [],
    }
    if element.get("value") is not None:
        node["value"] = element["value"]
    bounds = element.get("bounds")
    if isinstance(bounds, list | tuple) and len(bounds) == 4:
        x, y, width, height = bounds
        node["position"] = {"x": x, "y": y}
        node["size"] = {"width": width, "height": height}
    if element.get("states"):
        node["states"] = element["states"]
    return node


def _nested(elements: list[Mapping[str, Any]]) -> list[Result]:
    """A flat list with ``depth`` per element as a tree."""
    roots: list[Result] = []
    stack: list[tuple[int, Result]] = []
    for element in elements:
        depth = int(element.get("depth", 0))
        node = _tree_node(element)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        (stack[-1][1]["children"] if stack else roots).append(node)
        stack.append((depth, node))
    return roots


async def get_accessibility_tree(call: CuaCall, params: Mapping[str, Any]) -> Result:
    answer = await call.action("desktop_observe", format="json", view="all")
    elements = answer.get("elements") or []
    roots = _nested(list(elements))
    window = {"role": "window", "title": answer.get("window", ""), "children": roots}
    tree = roots[0] if len(roots) == 1 else window
    cut = answer.get("truncated")
    truncated = any(cut.values()) if isinstance(cut, Mapping) else bool(cut)
    return {"tree": tree, "truncated": truncated}


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


async def find_element(call: CuaCall, params: Mapping[str, Any]) -> Result:
    role, title, value = params.get("role"), params.get("title"), params.get("value")
    tests = []
    if isinstance(title, str) and title:
        tests.append(f"[name={_quoted(title)}]")
    if isinstance(value, str) and value:
        tests.append(f"[value={_quoted(value)}]")
    if not (isinstance(role, str) and role) and not tests:
        raise InvalidArgs("role", "name at least one of role, title or value")
    kind = role.lower().replace(" ", "_") if isinstance(role, str) and role else "*"
    if not re.fullmatch(r"\*|[a-z][a-z0-9_]{0,63}", kind):
        raise InvalidArgs("role", "must be a role name like 'push button' or 'check_box'")
    answer = await call.action("desktop_find", selector=kind + "".join(tests), limit=1)
    matches = answer.get("matches") or []
    return {"element": _tree_node(matches[0]) if matches else None}


# -- shell and files (only where the relay opts in) --------------------------------------------


async def run_command(call: CuaCall, params: Mapping[str, Any]) -> Result:
    extra: Result = {}
    if params.get("timeout") is not None:
        extra["timeout_s"] = max(1, min(300, _int(params, "timeout")))
    answer = await call.action("desktop_shell", command=_str(params, "command"), **extra)
    if answer.get("timed_out"):
        output = {"stdout": answer.get("stdout", ""), "stderr": answer.get("stderr", "")}
        raise OpError(ErrorCode.TIMEOUT, "the command timed out and was killed", output)
    code = answer.get("returncode")
    return {"stdout": answer["stdout"], "stderr": answer["stderr"],
            "return_code": -1 if code is None else code}  # fmt: skip


def _file(op: str, *names: str, answer_keys: tuple[str, ...] = ()) -> Handler:
    async def run(call: CuaCall, params: Mapping[str, Any]) -> Result:
        args: Result = {"path": _str(params, "path")}
        for name in names:
            if params.get(name) is not None:
                args[name] = params[name]
        answer = await call.action("desktop_file", op=op, **args)
        return {key: answer[key] for key in answer_keys}

    return run


async def write_bytes(call: CuaCall, params: Mapping[str, Any]) -> Result:
    content = _str(params, "content_b64")
    try:
        base64.b64decode(content, validate=True)
    except ValueError:
        raise InvalidArgs("content_b64", "must be base64") from None
    args = {"path": _str(params, "path"), "content": content,
            "append": bool(params.get("append", False))}  # fmt: skip
    await call.action("desktop_file", op="write_bytes", **args)
    return {}


@dataclass(frozen=True)
class Command:
    """One command: its handler and the parameters ``GET /commands`` lists (name, default;
    ``inspect.Parameter.empty`` when required)."""

    run: Handler
    params: tuple[tuple[str, Any], ...] = ()
    needs_shell: bool = False  # exists only where the relay opts in (RELAYDESK_CUA_SHELL=1)


REQUIRED: Final = inspect.Parameter.empty
_XY: Final = (("x", None), ("y", None))
_WINDOW: Final = (("window_id", REQUIRED),)
_PATH: Final = (("path", REQUIRED),)


def _shell(run: Handler, params: tuple[tuple[str, Any], ...] = ()) -> Command:
    """A shell or file command: offered only where the relay opts in."""
    return Command(run, params, needs_shell=True)


# fmt: off
COMMANDS: Final[Mapping[str, Command]] = {
    "version": Command(version),
    "get_screen_size": Command(get_screen_size),
    "get_cursor_position": Command(get_cursor_position),
    "screenshot": Command(screenshot, (("format", "png"), ("quality", 95))),
    "left_click": Command(_clicker("click", "left"), _XY),
    "right_click": Command(_clicker("click", "right"), _XY),
    "double_click": Command(_clicker("double_click", "left"), _XY),
    "move_cursor": Command(move_cursor, (("x", REQUIRED), ("y", REQUIRED))),
    "mouse_down": Command(mouse_down, (*_XY, ("button", "left"))),
    "mouse_up": Command(mouse_up, (*_XY, ("button", "left"))),
    "drag_to": Command(
        drag_to, (("x", REQUIRED), ("y", REQUIRED), ("button", "left"), ("duration", 0.5))
    ),
    "drag": Command(drag, (("path", REQUIRED), ("button", "left"), ("duration", 0.5))),
    "type_text": Command(_passed("type", "text"), (("text", REQUIRED),)),
    "press_key": Command(_passed("key", "key"), (("key", REQUIRED),)),
    "key_down": Command(_passed("key_down", "key"), (("key", REQUIRED),)),
    "key_up": Command(_passed("key_up", "key"), (("key", REQUIRED),)),
    "hotkey": Command(hotkey, (("keys", REQUIRED),)),
    "scroll": Command(scroll, (("x", REQUIRED), ("y", REQUIRED))),
    "scroll_down": Command(scroll_down, (("clicks", 1),)),
    "scroll_up": Command(scroll_up, (("clicks", 1),)),
    "scroll_direction": Command(scroll_direction, (("direction", REQUIRED), ("clicks", 1))),
    "copy_to_clipboard": Command(copy_to_clipboard),
    "set_clipboard": Command(set_clipboard, (("text", REQUIRED),)),
    "launch": Command(launch, (("app", REQUIRED), ("args", None))),
    "open": _shell(open_target, (("target", REQUIRED),)),
    "get_current_window_id": Command(get_current_window_id),
    "get_application_windows": Command(get_application_windows, (("app", REQUIRED),)),
    "get_window_name": Command(get_window_name, _WINDOW),
    "get_window_size": Command(get_window_size, _WINDOW),
    "get_window_position": Command(get_window_position, _WINDOW),
    "get_active_window_bounds": Command(get_active_window_bounds),
    "activate_window": Command(_window_op("activate"), _WINDOW),
    "close_window": Command(_window_op("close"), _WINDOW),
    "maximize_window": Command(_window_op("maximize"), _WINDOW),
    "minimize_window": Command(_window_op("minimize"), _WINDOW),
    "set_window_size": Command(
        _window_op("resize", "width", "height"),
        (*_WINDOW, ("width", REQUIRED), ("height", REQUIRED)),
    ),
    "set_window_position": Command(
        _window_op("move", "x", "y"), (*_WINDOW, ("x", REQUIRED), ("y", REQUIRED))
    ),
    "get_desktop_environment": Command(get_desktop_environment),
    "get_accessibility_tree": Command(get_accessibility_tree),
    "find_element": Command(find_element, (("role", None), ("title", None), ("value", None))),
    "run_command": _shell(run_command, (("command", REQUIRED), ("timeout", None))),
    "read_text": _shell(_file("read_text", answer_keys=("content",)), _PATH),
    "write_text": _shell(_file("write_text", "content", "append"),
                         (*_PATH, ("content", REQUIRED), ("append", False))),
    "read_bytes": _shell(_file("read_bytes", "offset", "length", answer_keys=("content_b64",)),
                         (*_PATH, ("offset", 0), ("length", None))),
    "write_bytes": _shell(write_bytes, (*_PATH, ("content_b64", REQUIRED), ("append", False))),
    "get_file_size": _shell(_file("size", answer_keys=("size",)), _PATH),
    "file_exists": _shell(_file("exists", answer_keys=("exists",)), _PATH),
    "directory_exists": _shell(_file("dir_exists", answer_keys=("exists",)), _PATH),
    "list_dir": _shell(_file("list_dir", answer_keys=("files",)), _PATH),
    "create_dir": _shell(_file("mkdir"), _PATH),
    "delete_file": _shell(_file("delete_file"), _PATH),
    "delete_dir": _shell(_file("delete_dir"), _PATH),
}
# fmt: on


def missing_params(command: Command, params: Mapping[str, Any]) -> str | None:
    """The first required parameter not given (Cua's server fails such a call too)."""
    for name, default in command.params:
        if default is REQUIRED and params.get(name) is None:
            return name
    return None


def listing(shell: bool) -> dict[str, Any]:
    """``GET /commands``: every command this desktop offers, its parameters and aliases."""
    from server.cua.protocol import ALIASES

    offered = {name: c for name, c in COMMANDS.items() if shell or not c.needs_shell}
    commands: dict[str, Any] = {}
    for name, command in offered.items():
        params = [{"name": p, "required": d is REQUIRED, "default": None if d is REQUIRED else d}
                  for p, d in command.params]  # fmt: skip
        entry: dict[str, Any] = {"params": params}
        aliases = [alias for alias, target in ALIASES.items() if target == name]
        if aliases:
            entry["aliases"] = aliases
        commands[name] = entry
    offered_aliases = {alias: target for alias, target in ALIASES.items() if target in offered}
    return {"commands": commands, "aliases": offered_aliases}
