"""The client distribution stands alone: its package imports the standard library, ``httpx``
(its one declared dependency) and itself, nothing of the server's packages."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

CLIENT = Path(__file__).resolve().parents[2] / "clients" / "python"


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_the_package_imports_only_the_standard_library_httpx_and_itself() -> None:
    modules = sorted((CLIENT / "relaydesk_client").glob("*.py"))
    assert modules, CLIENT
    allowed = set(sys.stdlib_module_names) | {"__future__", "httpx", "relaydesk_client"}
    wrong = {f"{m.name}: {root}" for m in modules for root in imported_roots(m) - allowed}
    assert not wrong, sorted(wrong)


def test_its_one_dependency_is_httpx() -> None:
    project = tomllib.loads((CLIENT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert [d.split(">")[0] for d in project["dependencies"]] == ["httpx"]
    assert project["name"] == "relaydesk-client"
