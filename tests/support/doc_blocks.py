"""What the documentation shows, read from the markdown itself: its fenced code blocks and the
example answers of its actions, so the tests compare the docs with what really happens.

A block that is not meant to run as it stands (a fragment of the server's own code, an
illustration of a client's API) says so on its first line, visibly to readers too:
``# not runnable alone: <why>``. :func:`code_blocks` reports it as such, never silently.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

DOCS: Final = Path(__file__).resolve().parents[2] / "docs"
NOT_RUNNABLE: Final = "# not runnable alone:"
SHELL_LANGUAGES: Final = frozenset({"sh", "bash", "shell", "console"})
_FENCE: Final = re.compile(r"^```([A-Za-z0-9_+-]*)[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


@dataclass(frozen=True)
class CodeBlock:
    """One fenced block of a document: where it is, its language and its text."""

    doc: str
    line: int
    language: str
    text: str

    @property
    def runnable(self) -> bool:
        return not self.text.lstrip().startswith(NOT_RUNNABLE)

    @property
    def kind(self) -> str:
        """``shell``, ``python`` or the block's own language (``json``, ``""``)."""
        return "shell" if self.language in SHELL_LANGUAGES else self.language

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def code_blocks(doc: str) -> list[CodeBlock]:
    """Every fenced block of ``docs/<doc>`` in document order."""
    text = (DOCS / doc).read_text(encoding="utf-8")
    return [
        CodeBlock(doc, text.count("\n", 0, match.start()) + 1, match.group(1), match.group(2))
        for match in _FENCE.finditer(text)
    ]


def section(doc: str, heading: str) -> str:
    """The text under the heading line that contains ``heading``, up to the next heading of
    the same or a higher level (a ``#`` line inside a code block is no heading)."""
    lines = (DOCS / doc).read_text(encoding="utf-8").splitlines(keepends=True)
    level, kept, fenced = 0, [], False
    for line in lines:
        fenced ^= line.startswith("```")
        depth = len(line) - len(line.lstrip("#"))
        is_heading = not fenced and depth > 0 and line[depth : depth + 1] == " "
        if level and is_heading and depth <= level:
            break
        if level:
            kept.append(line)
        elif is_heading and heading in line:
            level = depth
    assert level, f"{doc} has no heading with {heading!r}"
    return "".join(kept)


def documented_answer(doc: str, heading: str, status: int = 200) -> dict[str, Any]:
    """The first ``→ <status> {…}`` example answer under ``heading``, as JSON: the ``…`` that
    stand for more items or elided values are dropped (inside strings they stay text)."""
    body = section(doc, heading)
    match = re.search(rf"→ {status} (\{{.*?)(?=\n→ |\n```)", body, re.S)
    assert match, f"{doc}, {heading!r}: no '→ {status}' answer"
    answer: dict[str, Any] = json.loads(_drop_ellipses(match.group(1)))
    return answer


def _drop_ellipses(text: str) -> str:
    """``[a, …]`` → ``[a]``, ``{…}`` → ``{}``, ``"x": …`` → ``"x": null``, outside strings."""
    parts = re.split(r'("(?:[^"\\]|\\.)*")', text)
    for index in range(0, len(parts), 2):
        part = re.sub(r",\s*…", "", parts[index])
        part = re.sub(r":\s*…", ": null", part)
        parts[index] = part.replace("…", "")
    return "".join(parts)


def key_paths(value: Any, prefix: str = "") -> set[str]:
    """Every key of a JSON value as a dotted path; a list contributes its first item's keys
    (``running[].windows[].id``)."""
    paths: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{prefix}.{key}" if prefix else key
            paths |= {path} | key_paths(item, path)
    elif isinstance(value, list) and value:
        paths |= key_paths(value[0], f"{prefix}[]")
    return paths
