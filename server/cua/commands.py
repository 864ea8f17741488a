"""Cua's commands, each carried out through relaydesk's typed actions: the table of what a
client may call (``GET /commands``) and what each takes.

What is Cua's is only the shape: parameter names, answer keys (``size``, ``position``,
``image_data``…) and the guard (``server.cua.call``). The commands themselves live by concept:
``server.cua.input_commands`` (screen, pointer, keys), ``server.cua.window_commands``
(clipboard, windows, apps, accessibility, shell) and ``server.cua.file_commands`` (files in
the desktop's home).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from server.cua import file_commands as files
from server.cua.call import Handler
from server.cua.input_commands import (
    clicker,
    drag,
    drag_to,
    get_cursor_position,
    get_screen_size,
    hotkey,
    mouse_down,
    mouse_up,
    move_cursor,
    passed_through,
    screenshot,
    scroll,
    scroll_direction,
    scroll_down,
    scroll_up,
    version,
)
from server.cua.window_commands import (
    copy_to_clipboard,
    file_command,
    find_element,
    get_accessibility_tree,
    get_active_window_bounds,
    get_application_windows,
    get_current_window_id,
    get_desktop_environment,
    get_window_name,
    get_window_position,
    get_window_size,
    launch,
    open_target,
    run_command,
    set_clipboard,
    window_command,
)
from server.db.records import Role, role_allows


@dataclass(frozen=True)
class Command:
    """One command: its handler and the parameters ``GET /commands`` lists (name, default;
    ``inspect.Parameter.empty`` when required)."""

    run: Handler
    params: tuple[tuple[str, Any], ...] = ()
    needs_shell: bool = False  # exists only where the relay opts in (RELAYDESK_CUA_SHELL=1)
    # The least role that runs it: that of the actions it calls (``write`` for the screen,
    # windows, accessibility, clipboard, launch, shell and file writes).
    role: Role = "write"


REQUIRED: Final = inspect.Parameter.empty
_XY: Final = (("x", None), ("y", None))
_WINDOW: Final = (("window_id", REQUIRED),)
_PATH: Final = (("path", REQUIRED),)


def _read(run: Handler, params: tuple[tuple[str, Any], ...] = ()) -> Command:
    """A command a ``read`` member may run: it calls no action, or only the home file reads."""
    return Command(run, params, role="read")


def _shell(run: Handler, params: tuple[tuple[str, Any], ...] = ()) -> Command:
    """A shell or file command: offered only where the relay opts in."""
    return Command(run, params, needs_shell=True)


COMMANDS: Final[Mapping[str, Command]] = {
    "version": _read(version),
    "get_screen_size": Command(get_screen_size),
    "get_cursor_position": Command(get_cursor_position),
    "screenshot": Command(screenshot, (("format", "png"), ("quality", 95))),
    "left_click": Command(clicker("click", "left"), _XY),
    "right_click": Command(clicker("click", "right"), _XY),
    "double_click": Command(clicker("double_click", "left"), _XY),
    "move_cursor": Command(move_cursor, (("x", REQUIRED), ("y", REQUIRED))),
    "mouse_down": Command(mouse_down, (*_XY, ("button", "left"))),
    "mouse_up": Command(mouse_up, (*_XY, ("button", "left"))),
    "drag_to": Command(
        drag_to, (("x", REQUIRED), ("y", REQUIRED), ("button", "left"), ("duration", 0.5))
    ),
    "drag": Command(drag, (("path", REQUIRED), ("button", "left"), ("duration", 0.5))),
    "type_text": Command(passed_through("type", "text"), (("text", REQUIRED),)),
    "press_key": Command(passed_through("key", "key"), (("key", REQUIRED),)),
    "key_down": Command(passed_through("key_down", "key"), (("key", REQUIRED),)),
    "key_up": Command(passed_through("key_up", "key"), (("key", REQUIRED),)),
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
    "activate_window": Command(window_command("activate"), _WINDOW),
    "close_window": Command(window_command("close"), _WINDOW),
    "maximize_window": Command(window_command("maximize"), _WINDOW),
    "minimize_window": Command(window_command("minimize"), _WINDOW),
    "set_window_size": Command(
        window_command("resize", "width", "height"),
        (*_WINDOW, ("width", REQUIRED), ("height", REQUIRED)),
    ),
    "set_window_position": Command(
        window_command("move", "x", "y"), (*_WINDOW, ("x", REQUIRED), ("y", REQUIRED))
    ),
    "get_desktop_environment": _read(get_desktop_environment),
    "get_accessibility_tree": Command(get_accessibility_tree),
    "find_element": Command(find_element, (("role", None), ("title", None), ("value", None))),
    "run_command": _shell(run_command, (("command", REQUIRED), ("timeout", None))),
    # files in the desktop's home, on every relay (server.cua.file_commands, docs/files.md)
    "read_text": _read(files.read_text, _PATH),
    "write_text": Command(files.write_text, (*_PATH, ("content", REQUIRED), ("append", False))),
    "read_bytes": _read(files.read_bytes, (*_PATH, ("offset", 0), ("length", None))),
    "write_bytes": Command(
        files.write_bytes, (*_PATH, ("content_b64", REQUIRED), ("append", False))
    ),
    "get_file_size": _read(files.get_file_size, _PATH),
    "file_exists": _read(files.file_exists, _PATH),
    "directory_exists": _read(files.directory_exists, _PATH),
    "list_dir": _read(files.list_dir, _PATH),
    "create_dir": _shell(file_command("mkdir"), _PATH),
    "delete_file": Command(files.delete, _PATH),
    "delete_dir": Command(files.delete, _PATH),
}


def missing_params(command: Command, params: Mapping[str, Any]) -> str | None:
    """The first required parameter not given (Cua's server fails such a call too)."""
    for name, default in command.params:
        if default is REQUIRED and params.get(name) is None:
            return name
    return None


def listing(shell: bool, role: Role) -> dict[str, Any]:
    """``GET /commands``: every command this desktop offers to a member of ``role``, its
    parameters and aliases."""
    from server.cua.protocol import ALIASES

    offered = {
        name: c
        for name, c in COMMANDS.items()
        if (shell or not c.needs_shell) and role_allows(role, c.role)
    }
    commands: dict[str, Any] = {}
    for name, command in offered.items():
        params = [
            {"name": p, "required": d is REQUIRED, "default": None if d is REQUIRED else d}
            for p, d in command.params
        ]
        entry: dict[str, Any] = {"params": params}
        aliases = [alias for alias, target in ALIASES.items() if target == name]
        if aliases:
            entry["aliases"] = aliases
        commands[name] = entry
    offered_aliases = {alias: target for alias, target in ALIASES.items() if target in offered}
    return {"commands": commands, "aliases": offered_aliases}
