"""The server's floor plan: each of its rooms imports only the rooms on the floors below.

A room is a subpackage of ``server`` (``server/db/``) or one of its top-level modules
(``server/app.py``). docs/architecture.md ("The server's floor plan") explains the order; the
composition root (``server.assembly`` builds the parts, ``server.app`` the routes) is the top
floor, and nothing below it reaches for parts it was not given.

An import under ``if TYPE_CHECKING:`` loads nothing and may name a type of a higher floor; the
few that do are listed in :data:`TYPE_ONLY_UPWARD`, so a new one is a decision, not an
accident.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.test_import_rule import REPO_ROOT, _imported_modules, _module_parts, _type_checking_lines

pytestmark = pytest.mark.unit

# Bottom first. A room may import its own modules and those of any lower floor.
FLOORS: tuple[frozenset[str], ...] = (
    # the foundation; the two protocol modules are uvicorn's, chosen by relaydesk/run.py
    frozenset(
        {"json_response", "version", "csp", "config", "instruments", "secrets", "tasks"}
        | {"http_protocol", "websocket_protocol"}
    ),
    frozenset({"errors"}),
    frozenset({"boundary"}),
    frozenset({"db"}),
    frozenset({"relays"}),
    frozenset({"auth"}),
    frozenset({"events", "inventory"}),
    frozenset({"control"}),
    frozenset({"actions"}),
    frozenset({"screen", "viewer", "recordings"}),
    frozenset({"cluster", "doors"}),
    frozenset(
        {"chat", "mcp", "cua", "cdp", "computer_use", "openapi", "health", "metrics", "files"}
    ),
    frozenset({"assembly", "admin"}),
    frozenset({"app"}),
)
FLOOR_OF = {room: level for level, rooms in enumerate(FLOORS) for room in rooms}
# (importing file, imported room): type names only, under ``if TYPE_CHECKING:``.
TYPE_ONLY_UPWARD: frozenset[tuple[str, str]] = frozenset()


def room_of(relative_path: str) -> str:
    """``server/db/store.py`` → ``db``; ``server/app.py`` → ``app``."""
    parts = Path(relative_path).parts
    return Path(parts[1]).stem if len(parts) > 1 else ""


def floor_violations(relative_path: str, source: str) -> list[str]:
    """Every import of ``source`` that runs back up the floors (or into an unplaced room)."""
    room = room_of(relative_path)
    if room == "__init__":
        return []
    tree = ast.parse(source, filename=relative_path)
    typing_only = _type_checking_lines(tree)
    found: list[str] = []
    for line, module in _imported_modules(tree, _module_parts("server", relative_path)):
        if module is None or not module.startswith("server."):
            continue
        target = module.split(".")[1]
        if target == room or (f"server.{target}" == module and target not in FLOOR_OF):
            continue  # the room itself, or `from server import x` (reported as server.x)
        where = f"{relative_path}:{line}"
        if room not in FLOOR_OF:
            found.append(f"{where}: the room {room!r} has no floor (add it to FLOORS)")
        elif target not in FLOOR_OF:
            found.append(f"{where}: imports {module}, a room with no floor")
        elif FLOOR_OF[target] >= FLOOR_OF[room]:
            if line in typing_only and (relative_path, target) in TYPE_ONLY_UPWARD:
                continue
            found.append(
                f"{where}: {room} (floor {FLOOR_OF[room]}) imports {module} "
                f"(floor {FLOOR_OF[target]})"
            )
    return found


def _server_sources() -> list[tuple[str, str]]:
    return [
        (path.relative_to(REPO_ROOT).as_posix(), path.read_text(encoding="utf-8"))
        for path in sorted((REPO_ROOT / "server").rglob("*.py"))
    ]


def test_every_server_room_has_a_floor() -> None:
    rooms = {room_of(path) for path, _ in _server_sources()} - {"__init__"}
    assert rooms - set(FLOOR_OF) == set(), "rooms with no floor"
    assert set(FLOOR_OF) - rooms == set(), "floors name rooms that do not exist"


def test_no_server_import_runs_back_up_the_floors() -> None:
    found = [v for path, source in _server_sources() for v in floor_violations(path, source)]
    assert not found, "imports against the floor plan:\n" + "\n".join(found)


def test_the_listed_type_only_imports_are_still_needed() -> None:
    seen: set[tuple[str, str]] = set()
    for path, source in _server_sources():
        tree = ast.parse(source)
        typing_only = _type_checking_lines(tree)
        for line, module in _imported_modules(tree, _module_parts("server", path)):
            if module and module.startswith("server.") and line in typing_only:
                seen.add((path, module.split(".")[1]))
    assert seen >= TYPE_ONLY_UPWARD, f"listed but gone: {sorted(TYPE_ONLY_UPWARD - seen)}"


@pytest.mark.parametrize(
    ("path", "source"),
    [
        ("server/db/store.py", "from server.auth.routes import AuthRoutes\n"),
        ("server/auth/routes.py", "def f():\n    from server.app import create_app\n"),
        ("server/control/service.py", "from server.actions.context import ActionContext\n"),
        ("server/relays/hub.py", "import server.inventory.service\n"),
        ("server/events/bus.py", "from server.inventory.service import Inventory\n"),
        (
            "server/db/store.py",
            "if TYPE_CHECKING:\n    from server.auth.routes import AuthRoutes\n",
        ),
        ("server/newroom.py", "from server.db.store import Store\n"),
        ("server/control/gate.py", "if TYPE_CHECKING:\n    from server.actions.context import X\n"),
    ],
)
def test_a_planted_back_arrow_is_reported(path: str, source: str) -> None:
    assert floor_violations(path, source), f"not reported: {path}: {source!r}"


@pytest.mark.parametrize(
    ("path", "source"),
    [
        ("server/app.py", "from server.db.store import Store\nfrom server.auth import errors\n"),
        ("server/db/store.py", "from server.db.base import StoreBase\nimport wire.ids\n"),
    ],
)
def test_imports_down_the_floors_are_accepted(path: str, source: str) -> None:
    assert floor_violations(path, source) == []
