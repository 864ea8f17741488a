"""The home files' rules in-process: which paths name a place in the home, the argument checks
both ends run, ``RELAYDESK_FILE_MAX_MB``, and the child's answers on a real directory of this
process's own user (``tests/integration/test_home_files.py`` runs them in real desktops)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import pytest

from relay.desktop_tools import home_child
from relay.desktop_tools.home_files import (
    CHILD_FLAGS,
    MIB,
    FileSettingsError,
    HomeFileSettings,
    child_source,
)
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


def _upload_child(home: Path, path: str, length: int) -> subprocess.Popen[bytes]:
    """The upload stream's child, as the relay starts it, its input left open."""
    child = subprocess.Popen(
        [sys.executable, *CHILD_FLAGS, "-c", child_source()],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert child.stdin is not None and child.stdout is not None
    request = _request(home, op="upload", path=path, offset=0, length=length, file_max=length)
    child.stdin.write(json.dumps(request).encode() + b"\n")
    child.stdin.flush()
    assert json.loads(child.stdout.readline())["ok"] is True
    return child


def _wait_for_size(part: Path, size: int) -> None:
    while not (part.exists() and part.stat().st_size == size):
        time.sleep(0.01)


def test_a_resume_asks_where_to_start_only_once_the_cut_upload_let_go(tmp_path: Path) -> None:
    child = _upload_child(tmp_path, "big.bin", 3000)
    assert child.stdin is not None
    part = tmp_path / ".big.bin.relaydesk-part"
    child.stdin.write(b"a" * 1000)
    child.stdin.flush()
    _wait_for_size(part, 1000)
    with ThreadPoolExecutor(1) as pool:
        asked = pool.submit(_answer, _request(tmp_path, op="partial", path="big.bin"))
        # Bytes that were on their way when the upload was cut still land, and the
        # question waits for them.
        child.stdin.write(b"b" * 500)
        child.stdin.flush()
        _wait_for_size(part, 1500)
        assert wait([asked], timeout=0.5).not_done == {asked}
        child.stdin.close()
        assert child.wait(timeout=30) == 0
        assert asked.result(timeout=30) == {
            "ok": True,
            "result": {"path": "big.bin", "offset": 1500},
        }


def test_a_second_upload_of_a_file_being_written_is_busy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    child = _upload_child(tmp_path, "big.bin", 3000)
    assert child.stdin is not None
    try:
        monkeypatch.setattr(home_child, "PART_LOCK_WAIT_S", 0.2)
        second = home_child.answer(
            _request(tmp_path, op="upload", path="big.bin", offset=0, length=10, file_max=10)
        )
        assert second is not None
        assert (second["ok"], second["code"]) == (False, "busy")
        child.stdin.write(b"c" * 3000)
        child.stdin.close()
        assert child.wait(timeout=30) == 0
    finally:
        child.kill()
    assert (tmp_path / "big.bin").read_bytes() == b"c" * 3000
    gone = _answer(_request(tmp_path, op="partial", path="big.bin"))
    assert gone["result"]["offset"] == 0
