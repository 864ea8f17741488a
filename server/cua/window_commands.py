"""Cua's clipboard, window, app, accessibility and shell commands (its file commands are
``server.cua.file_commands``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from server.cua.call import CuaCall, Handler, int_param, str_param
from server.doors.call import Result
from wire.errors import ErrorCode, InvalidArgs, OpError

# -- clipboard, windows, apps --------------------------------------------------------------


async def copy_to_clipboard(call: CuaCall, params: Mapping[str, Any]) -> Result:
    answer = await call.action("desktop_clipboard_get")
    return {"content": answer["text"]}


async def set_clipboard(call: CuaCall, params: Mapping[str, Any]) -> Result:
    await call.action("desktop_clipboard_set", text=str_param(params, "text"))
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
    app = str_param(params, "app").lower()
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


def window_command(op: str, *fields: str) -> Handler:
    async def run(call: CuaCall, params: Mapping[str, Any]) -> Result:
        window_id = (await _window(call, params))["id"]
        extra = {name: int_param(params, name) for name in fields}
        await call.action("desktop_window", window_id=window_id, op=op, **extra)
        return {}

    return run


async def launch(call: CuaCall, params: Mapping[str, Any]) -> Result:
    if params.get("args"):
        raise InvalidArgs("args", "relaydesk starts apps by id only, without arguments")
    answer = await call.action("desktop_launch", app=str_param(params, "app"))
    window = answer.get("app_window")
    pid = window.get("pid") if isinstance(window, Mapping) else None
    return {"pid": pid}


async def open_target(call: CuaCall, params: Mapping[str, Any]) -> Result:
    target = str_param(params, "target")
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


# -- shell, and the shell-side file command create_dir (only where the relay opts in) ---------


async def run_command(call: CuaCall, params: Mapping[str, Any]) -> Result:
    extra: Result = {}
    if params.get("timeout") is not None:
        extra["timeout_s"] = max(1, min(300, int_param(params, "timeout")))
    answer = await call.action("desktop_shell", command=str_param(params, "command"), **extra)
    if answer.get("timed_out"):
        output = {"stdout": answer.get("stdout", ""), "stderr": answer.get("stderr", "")}
        raise OpError(ErrorCode.TIMEOUT, "the command timed out and was killed", output)
    code = answer.get("returncode")
    return {
        "stdout": answer["stdout"],
        "stderr": answer["stderr"],
        "return_code": -1 if code is None else code,
    }


def file_command(op: str, *names: str, answer_keys: tuple[str, ...] = ()) -> Handler:
    async def run(call: CuaCall, params: Mapping[str, Any]) -> Result:
        args: Result = {"path": str_param(params, "path")}
        for name in names:
            if params.get(name) is not None:
                args[name] = params[name]
        answer = await call.action("desktop_file", op=op, **args)
        return {key: answer[key] for key in answer_keys}

    return run
