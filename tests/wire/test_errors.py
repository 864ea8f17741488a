"""Error codes have one HTTP status each, and every exception of the project is a RelaydeskError."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from wire.errors import (
    HTTP_STATUS,
    BodyTooLarge,
    ChannelCloseCode,
    ChannelClosedError,
    ErrorCode,
    InvalidInput,
    OpError,
    RelaydeskError,
    UnsupportedMediaType,
    http_status,
)

pytestmark = pytest.mark.unit

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("wire", "server", "relay", "host_helper")


@pytest.mark.parametrize("code", list(ErrorCode))
def test_every_code_has_an_http_status(code: ErrorCode) -> None:
    assert 400 <= HTTP_STATUS[code] <= 599


def test_statuses_of_errors_follow_their_code_unless_they_carry_one() -> None:
    assert http_status(OpError(ErrorCode.SESSION_CONFLICT)) == 409
    assert http_status(OpError(ErrorCode.RELAY_TIMEOUT)) == 504
    assert http_status(OpError(ErrorCode.LIMIT_REACHED, "too long", status=413)) == 413
    assert http_status(BodyTooLarge(10)) == 413
    assert http_status(UnsupportedMediaType()) == 415
    assert http_status(InvalidInput("x", "bad")) == 400
    assert http_status(ChannelClosedError(ChannelCloseCode.RELAY_GONE, "gone")) == 503


def _exception_classes(root: Path) -> dict[str, set[str]]:
    """Every class defined under ``root``'s packages → the names of its bases."""
    found: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    bases = {ast.unparse(base).rsplit(".", 1)[-1] for base in node.bases}
                    found[f"{path.relative_to(root).as_posix()}:{node.name}"] = bases
    return found


def _is_relaydesk_error(name: str, classes: dict[str, set[str]], seen: set[str]) -> bool | None:
    """True/False for a class of ours by that name; None when no class of ours has it."""
    matches = [key for key in classes if key.rsplit(":", 1)[1] == name]
    if name == "RelaydeskError":
        return True
    if not matches or name in seen:
        return None
    seen.add(name)
    return all(
        any(_is_relaydesk_error(base, classes, seen) for base in classes[key]) for key in matches
    )


def test_every_exception_of_the_project_derives_from_relaydesk_error() -> None:
    classes = _exception_classes(REPO_ROOT)
    builtin_errors = {n for n in dir(__builtins__) if n.endswith(("Error", "Exception"))}
    builtin_errors |= {"Exception", "BaseException"}
    outside = sorted(
        key
        for key, bases in classes.items()
        if bases & builtin_errors and not _is_relaydesk_error(key.rsplit(":", 1)[1], classes, set())
    )
    assert outside == [], f"not under RelaydeskError: {outside}"


def test_relaydesk_error_is_the_root_of_the_wire_tree() -> None:
    for error in (OpError(ErrorCode.INTERNAL), ChannelClosedError(ChannelCloseCode.ERROR, "x")):
        assert isinstance(error, RelaydeskError)
