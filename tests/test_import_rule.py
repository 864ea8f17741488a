"""The import rule: ``wire`` is pure; desktop I/O has one implementation, in the relay.

``server``, ``relay`` and ``host_helper`` may import themselves, ``wire`` and third-party
packages, never each other (nor the CLI package or the tests), with two additions:

- ``server`` → ``migrations``: the Alembic history is the server's own schema (its ``env.py``
  builds on ``server.db``) and only the server runs it;
- ``host_helper`` → the relay's desktop I/O (:data:`DESKTOP_IO`: the screen service with its
  input backends, keys, capture and guard check; the accessibility worker; process groups;
  readiness probes). That is
  the one implementation for every display relaydesk touches, and it imports only ``wire``,
  third-party packages and itself, so the helper never loads the rest of the relay.

``wire`` imports nothing of ours and does no I/O: no event loop, sockets, processes, threads,
databases or files. One module, ``wire/link.py`` (the asyncio driver of the sans-I/O
connection that both ends share), may import ``asyncio`` and nothing else of that list: it
writes frames through a callable its caller gives it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO_ROOT = Path(__file__).resolve().parent.parent

FIRST_PARTY = frozenset(
    {"wire", "server", "relay", "host_helper", "relaydesk", "relaydesk_client", "migrations"}
    | {"tests", "benchmarks"}
)
CHECKED_PACKAGES = ("server", "relay", "host_helper", "wire")
ALLOWED_FIRST_PARTY = {
    "server": frozenset({"server", "wire", "migrations"}),
    "relay": frozenset({"relay", "wire"}),
    "host_helper": frozenset({"host_helper", "wire", "relay"}),
    "wire": frozenset({"wire"}),
}
# The relay's desktop I/O (a prefix covers its submodules): what the host helper may import of
# the relay, and all that these modules may import of it.
DESKTOP_IO = frozenset(
    {
        "relay.screen",
        "relay.desktops.process",
        "relay.desktops.probe",
        "relay.desktops.displays",
        "relay.a11y",
        "relay.policy",
    }
)
# Modules whose import means I/O or concurrency machinery; a prefix covers its submodules.
WIRE_FORBIDDEN_MODULES = frozenset(
    {
        "asyncio",
        "socket",
        "aiohttp",
        "starlette",
        "uvicorn",
        "subprocess",
        "os",
        "sqlalchemy",
        "threading",
        "selectors",
        "socketserver",
        "ssl",
        "multiprocessing",
        "concurrent",
        "shutil",
        "tempfile",
        "sqlite3",
        "aiosqlite",
        "asyncpg",
        "redis",
        "websockets",
        "websockify",
        "httpx",
        "http.client",
        "http.server",
        "urllib.request",
        "signal",
        "mss",
        "Xlib",
        "psutil",
    }
)
# The one asyncio driver of ``wire.connection.Connection``: asyncio, and no other I/O module.
WIRE_ASYNCIO_DRIVER = "wire/link.py"
WIRE_FORBIDDEN_CALLS = frozenset({"open", "io.open", "os.open", "__import__"})
WIRE_FORBIDDEN_METHODS = frozenset({"read_text", "write_text", "read_bytes", "write_bytes"})


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    problem: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.problem}"


def _module_parts(package: str, relative_path: str) -> list[str]:
    """Dotted module path of a file, e.g. ``relay/desktops/xvfb.py`` → relay.desktops.xvfb."""
    parts = list(Path(relative_path).with_suffix("").parts)
    # A package's own __init__ keeps its "__init__" part, so `from . import x` stays inside it.
    return parts if parts and parts[0] == package else [package, *parts]


def _imported_modules(tree: ast.AST, module_parts: list[str]) -> list[tuple[int, str | None]]:
    """(line, absolute module) for every import; None for a relative import escaping the root."""
    found: list[tuple[int, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.extend(_from_import_modules(node, module_parts))
        elif isinstance(node, ast.Call) and (target := _dynamic_import_target(node)):
            found.append((node.lineno, target))
    return found


def _from_import_modules(
    node: ast.ImportFrom, module_parts: list[str]
) -> list[tuple[int, str | None]]:
    if node.level:
        package_parts = module_parts[:-1]  # the package that contains this module
        keep = len(package_parts) - (node.level - 1)
        if keep < 1:
            return [(node.lineno, None)]
        base = ".".join([*package_parts[:keep], *([node.module] if node.module else [])])
    else:
        base = node.module or ""
    # `from http import client` imports http.client: report both spellings.
    found: list[tuple[int, str | None]] = [(node.lineno, base)]
    found.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names)
    return found


def _dynamic_import_target(node: ast.Call) -> str | None:
    name = _call_name(node.func)
    if name in {"__import__", "importlib.import_module", "import_module"} and node.args:
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            return first.value
    return None


def _call_name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        owner = _call_name(func.value)
        return f"{owner}.{func.attr}" if owner else func.attr
    return ""


def _matches(module: str, forbidden: frozenset[str]) -> bool:
    return any(module == bad or module.startswith(bad + ".") for bad in forbidden)


def _desktop_io_may_import(module: str) -> bool:
    """A module of the desktop I/O, or a package on the way to one (``relay.desktops``)."""
    return _matches(module, DESKTOP_IO) or any(io.startswith(module + ".") for io in DESKTOP_IO)


def _bound_to_desktop_io(package: str, module_parts: list[str]) -> bool:
    """Files whose imports of the relay must stay inside the desktop I/O."""
    return package == "host_helper" or _matches(".".join(module_parts), DESKTOP_IO)


def _type_checking_lines(tree: ast.AST) -> set[int]:
    """Lines of imports under ``if TYPE_CHECKING:`` (they name types and load nothing)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _call_name(node.test).endswith("TYPE_CHECKING"):
            lines.update(
                inner.lineno
                for child in node.body
                for inner in ast.walk(child)
                if isinstance(inner, ast.Import | ast.ImportFrom)
            )
    return lines


def check_source(package: str, relative_path: str, source: str) -> list[Violation]:
    """Every import-rule violation in one source file of ``package``."""
    tree = ast.parse(source, filename=relative_path)
    module_parts = _module_parts(package, relative_path)
    bound = _bound_to_desktop_io(package, module_parts)
    typing_only = _type_checking_lines(tree)
    violations = []
    reported: set[tuple[int, str]] = set()  # one finding per statement and top-level package
    for line, module in _imported_modules(tree, module_parts):
        if module is None:
            violations.append(Violation(relative_path, line, "relative import leaves the package"))
            continue
        top = module.split(".")[0]
        if (line, top) in reported:
            continue
        if top in FIRST_PARTY and top not in ALLOWED_FIRST_PARTY[package]:
            problem = f"{package} imports {module}"
        elif (
            top == "relay"
            and bound
            and line not in typing_only
            and not _desktop_io_may_import(module)
        ):
            problem = f"{relative_path} imports {module}, outside the relay's desktop I/O"
        elif package == "wire" and _matches(module, WIRE_FORBIDDEN_MODULES):
            if relative_path == WIRE_ASYNCIO_DRIVER and _matches(module, frozenset({"asyncio"})):
                continue
            problem = f"wire does I/O: imports {module}"
        else:
            continue
        reported.add((line, top))
        violations.append(Violation(relative_path, line, problem))
    if package == "wire":
        violations.extend(_wire_io_calls(tree, relative_path))
    return sorted(set(violations), key=lambda v: (v.line, v.problem))


def _wire_io_calls(tree: ast.AST, relative_path: str) -> list[Violation]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _call_name(node.func)
        method = name.rsplit(".", 1)[-1]
        if name in WIRE_FORBIDDEN_CALLS or (
            isinstance(node.func, ast.Attribute) and method in WIRE_FORBIDDEN_METHODS
        ):
            found.append(Violation(relative_path, node.lineno, f"wire does I/O: calls {name}()"))
    return found


def check_package(package: str, root: Path = REPO_ROOT) -> list[Violation]:
    """Violations in every ``.py`` file under ``root/package``."""
    violations: list[Violation] = []
    for path in sorted((root / package).rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        violations.extend(check_source(package, relative, path.read_text(encoding="utf-8")))
    return violations


@pytest.mark.parametrize("package", CHECKED_PACKAGES)
def test_package_follows_import_rule(package: str) -> None:
    assert (REPO_ROOT / package / "__init__.py").is_file(), f"{package}/ is not a package"
    violations = check_package(package)
    assert not violations, "import rule broken:\n" + "\n".join(map(str, violations))


PLANTED_VIOLATIONS = [
    ("relay", "relay/worker.py", "from server.inventory import Inventory\n"),
    ("relay", "relay/worker.py", "import host_helper.app\n"),
    ("server", "server/app.py", "import relay\n"),
    ("server", "server/app.py", "from relaydesk import cli\n"),
    ("relay", "relay/worker.py", "import migrations\n"),
    ("host_helper", "host_helper/app.py", "from server import config\n"),
    ("server", "server/app.py", "def f():\n    from relay.desktops import start\n"),
    ("server", "server/app.py", "import importlib\nimportlib.import_module('relay.worker')\n"),
    ("relay", "relay/desktops/xvfb.py", "from ...server import config\n"),
    ("relay", "relay/worker.py", "from .. import server\n"),
    ("wire", "wire/codec.py", "from server import config\n"),
    ("wire", "wire/codec.py", "import asyncio\n"),
    ("wire", "wire/codec.py", "from asyncio import Queue\n"),
    ("wire", "wire/codec.py", "import os.path\n"),
    ("wire", "wire/codec.py", "from concurrent.futures import ThreadPoolExecutor\n"),
    ("wire", "wire/codec.py", "from http import client\n"),
    ("wire", "wire/codec.py", "import sqlalchemy as sa\n"),
    ("wire", "wire/codec.py", "data = open('frames.bin', 'rb').read()\n"),
    ("wire", "wire/codec.py", "from pathlib import Path\nPath('x').read_bytes()\n"),
    ("wire", "wire/codec.py", "if TYPE_CHECKING:\n    from aiohttp import web\n"),
    ("wire", "wire/link.py", "import socket\n"),
    ("wire", "wire/link.py", "import aiohttp\n"),
    ("wire", "wire/link.py", "data = open('frames.bin', 'rb').read()\n"),
    ("host_helper", "host_helper/app.py", "from relay.link import ServerLink\n"),
    ("host_helper", "host_helper/app.py", "from relay import worker\n"),
    ("host_helper", "host_helper/desktop.py", "from relay.desktops import DesktopManager\n"),
    ("host_helper", "host_helper/desktop.py", "import relay.desktops.manager\n"),
    ("host_helper", "host_helper/screen.py", "from relay.screen_ops import ScreenOps\n"),
    ("relay", "relay/screen/service.py", "from relay.link import ServerLink\n"),
    ("relay", "relay/screen/xinput.py", "def f():\n    from relay.desktops import manager\n"),
    ("relay", "relay/desktops/probe.py", "from relay.desktops.state import StateFile\n"),
    ("relay", "relay/desktops/process.py", "from ..config import RelayConfig\n"),
]

CLEAN_SOURCES = [
    ("relay", "relay/worker.py", "from wire.frames import encode\nimport aiohttp\n"),
    ("relay", "relay/desktops/xvfb.py", "from . import procs\nfrom ..watchdog import Watchdog\n"),
    ("server", "server/app.py", "from server.auth import login\nimport starlette\nimport os\n"),
    ("server", "server/db/migrate.py", "import migrations\n"),
    ("host_helper", "host_helper/app.py", "from wire import errors\nimport subprocess\n"),
    ("host_helper", "host_helper/screen.py", "from relay.screen.service import ScreenService\n"),
    ("host_helper", "host_helper/desktop.py", "from relay.desktops import process\n"),
    ("host_helper", "host_helper/connect.py", "from relay.desktops.probe import LOOPBACK\n"),
    ("relay", "relay/screen/xinput.py", "from relay.screen.keys import parse_chord\n"),
    ("relay", "relay/screen/service.py", "from . import args\nfrom .capture import encode\n"),
    ("relay", "relay/desktops/manager.py", "from relay.desktops.state import StateFile\n"),
    (
        "relay",
        "relay/desktops/process.py",
        "if TYPE_CHECKING:\n    from relay.desktops.user import DesktopUser\n",
    ),
    ("wire", "wire/codec.py", "import struct\nimport json\nfrom .ids import ChannelId\n"),
    ("wire", "wire/guard.py", "import numpy as np\nfrom io import BytesIO\nimport http\n"),
    ("wire", "wire/codec.py", "def reopen(stream):\n    return stream.reopen()\n"),
    ("wire", "wire/link.py", "import asyncio\nfrom asyncio import Lock\n"),
]


@pytest.mark.parametrize(("package", "path", "source"), PLANTED_VIOLATIONS)
def test_checker_detects_planted_violation(package: str, path: str, source: str) -> None:
    assert check_source(package, path, source), f"not detected in {path}: {source!r}"


@pytest.mark.parametrize(("package", "path", "source"), CLEAN_SOURCES)
def test_checker_accepts_allowed_imports(package: str, path: str, source: str) -> None:
    assert check_source(package, path, source) == []


def test_checker_scans_files_on_disk(tmp_path: Path) -> None:
    (tmp_path / "relay" / "sub").mkdir(parents=True)
    (tmp_path / "relay" / "__init__.py").write_text("")
    (tmp_path / "relay" / "sub" / "mod.py").write_text("import wire\nfrom server import app\n")
    violations = check_package("relay", root=tmp_path)
    assert [(v.path, v.line) for v in violations] == [("relay/sub/mod.py", 2)]


def test_the_host_helper_loads_only_the_relays_desktop_io() -> None:
    # Package initialisers run too: ``relay/desktops/__init__.py`` must not load the manager.
    code = (
        "import sys, host_helper.app, relay.screen.xinput, relay.screen.pyautogui_input\n"
        "print('\\n'.join(m for m in sys.modules if m == 'relay' or m.startswith('relay.')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.split()
    assert any(_matches(m, DESKTOP_IO) for m in loaded)
    outside = [m for m in loaded if not _desktop_io_may_import(m)]
    assert not outside, f"the host helper loads more of the relay than its desktop I/O: {outside}"
