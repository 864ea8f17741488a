"""The home files' rules in-process: which paths name a place in the home, the argument checks
both ends run, ``RELAYDESK_FILE_MAX_MB``, and the child's answers on a real directory of this
process's own user (``tests/integration/test_home_files.py`` runs them in real desktops)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from relay.desktop_tools import home_child
from relay.desktop_tools.home_files import MIB, FileSettingsError, HomeFileSettings
from wire.errors import InvalidArgs
from wire.home_files import FILE_MAX_MB_DEFAULT, READ_MAX, check_home_file_args

pytestmark = pytest.mark.unit

HOME = "/home/desk"


@pytest.mark.parametrize(
    ("path", "names"),
    [
        ("a.txt", ["a.txt"]),
        ("./Downloads//a.txt", ["Downloads", "a.txt"]),
        ("~", []),
        ("~/Downloads/", ["Downloads"]),
        ("/home/desk", []),
        ("/home/desk/x/y", ["x", "y"]),
        ("..a/b..", ["..a", "b.."]),
    ],
)
def test_paths_in_the_home_become_names_below_it(path: str, names: list[str]) -> None:
    assert home_child.names(path, HOME) == names


@pytest.mark.parametrize(
    "path",
    [
        "..",
        "a/../../b",
        "a/..",
        "/home/desktop2/x",
        "/home/desk2",
        "/etc/passwd",
        "~root",
        "~other/x",
    ],
)
def test_paths_that_leave_the_home_are_refused_before_anything_opens(path: str) -> None:
    with pytest.raises(OSError, match="refused: ") as refused:
        home_child.names(path, HOME)
    assert home_child.ERRNO_CODES[refused.value.errno or 0][0] == "path_outside_home"


def _request(home: Path, **fields: Any) -> dict[str, Any]:
    return {"home": str(home), "file_max": 100, "read_max": READ_MAX, "list_max": 3, **fields}


def _answer(request: dict[str, Any]) -> dict[str, Any]:
    """The child's answer to a request that expects one."""
    answer = home_child.answer(request)
    assert answer is not None
    return answer


def test_the_child_answers_on_a_real_folder(tmp_path: Path) -> None:
    written = _answer(_request(tmp_path, op="write", path="d/a.txt", content="hi"))
    assert written == {"ok": True, "result": {"path": "d/a.txt", "size": 2}}
    assert (tmp_path / "d" / "a.txt").read_bytes() == b"hi"
    (tmp_path / "link").symlink_to(tmp_path / "d")
    for name in ("b", "c", "e"):
        (tmp_path / name).write_text(name)
    listed = _answer(_request(tmp_path, op="list", path="~"))["result"]
    assert listed["truncated"] is True and len(listed["entries"]) == 3
    via_link = _answer(_request(tmp_path, op="read", path="link/a.txt"))
    assert (via_link["ok"], via_link["code"]) == (False, "path_outside_home")
    big = _answer(_request(tmp_path, op="write", path="big", content="x" * 101))
    assert (big["ok"], big["code"]) == (False, "file_too_large")
    assert not (tmp_path / "big").exists()
    assert not [p for p in os.listdir(tmp_path / "d") if p.startswith(".relaydesk-")]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"op": "move", "path": "a"}, "op"),
        ({"op": "write", "path": "a"}, "content"),
        ({"op": "list", "path": "a", "offset": 1}, "offset"),
        ({"op": "read", "path": "a", "length": READ_MAX + 1}, "length"),
        ({"op": "read", "path": "a", "offset": True}, "offset"),
        ({"op": "read", "path": "a", "encoding": "latin-1"}, "encoding"),
        ({"op": "delete", "path": "a\x00b"}, "path"),
        ({"op": "delete", "path": ""}, "path"),
    ],
)
def test_bad_arguments_name_the_field(args: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidArgs) as refused:
        check_home_file_args(args)
    assert refused.value.details == {"field": field}


def test_the_file_limit_comes_from_the_environment() -> None:
    assert HomeFileSettings.from_env({}).file_max == FILE_MAX_MB_DEFAULT * MIB
    assert HomeFileSettings.from_env({"RELAYDESK_FILE_MAX_MB": "0.5"}).file_max == MIB // 2
    for bad in ("0", "-1", "many", "nan", "inf"):
        with pytest.raises(FileSettingsError, match="RELAYDESK_FILE_MAX_MB"):
            HomeFileSettings.from_env({"RELAYDESK_FILE_MAX_MB": bad})
