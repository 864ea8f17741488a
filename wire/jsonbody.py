"""The input boundary's pure rules: a request body or a text parameter is sane, or a named error.

Every HTTP body (server and host helper) and every text that reaches a store (ids in paths and
query strings, ``Last-Event-ID``) passes these checks before a handler sees it:

- JSON only, valid UTF-8, nested at most ``MAX_DEPTH`` arrays/objects deep;
- no lone surrogate (``"\\ud800"`` is valid JSON but no encoder can write it) and no NUL in any
  key or string (PostgreSQL cannot store one);
- integers of at most ``MAX_INT_DIGITS`` digits, finite floats, no ``NaN``/``Infinity``.

Each failure is ``InvalidInput`` naming the field (``text``, ``args.x``, ``items[3]``) or
``body``. The I/O (reading a capped stream, the ``Content-Type``) stays in each app.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final

from wire.errors import InvalidInput

MAX_DEPTH: Final = 32
MAX_INT_DIGITS: Final = 19  # every int64; far beyond any coordinate, port or id
MAX_FLOAT_CHARS: Final = 64
JSON_MEDIA_TYPE: Final = "application/json"
BODY_FIELD: Final = "body"
_BAD_TEXT: Final = re.compile("[\x00\ud800-\udfff]")


class _Absurd:
    """A number or constant the parser met; refused with its field name by ``_check``."""

    def __init__(self, problem: str) -> None:
        self.problem = problem


def _parse_int(text: str) -> int | _Absurd:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        return _Absurd(f"integer longer than {MAX_INT_DIGITS} digits")
    return int(text)


def _parse_float(text: str) -> float | _Absurd:
    value = float(text) if len(text) <= MAX_FLOAT_CHARS else math.inf
    return value if math.isfinite(value) else _Absurd("number out of range")


def _parse_constant(text: str) -> _Absurd:
    return _Absurd(f"{text} is not a JSON number")


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored as text (lone surrogate, NUL), or None."""
    found = _BAD_TEXT.search(value)
    if found is None:
        return None
    return "contains NUL" if found.group() == "\x00" else "contains a lone surrogate"


def check_text(field: str, value: str, max_chars: int) -> str:
    """``value`` when it is storable text of at most ``max_chars``, else ``InvalidInput``."""
    if len(value) > max_chars:
        raise InvalidInput(field, f"longer than {max_chars} characters")
    if (problem := text_problem(value)) is not None:
        raise InvalidInput(field, problem)
    return value


def _child(field: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{field or BODY_FIELD}[{key}]"
    return f"{field}.{key}" if field else key


def _check(value: Any) -> None:
    """Walk the parsed value (iteratively: depth is checked here, not by recursion)."""
    pending: list[tuple[Any, str, int]] = [(value, "", 0)]
    while pending:
        item, field, depth = pending.pop()
        if isinstance(item, dict | list) and depth >= MAX_DEPTH:
            raise InvalidInput(field or BODY_FIELD, f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(item, dict):
            for key, child in item.items():
                # A bad key cannot be its own field name: name its parent.
                if (problem := text_problem(key)) is not None:
                    raise InvalidInput(field or BODY_FIELD, f"a key {problem}")
                pending.append((child, _child(field, key), depth + 1))
        elif isinstance(item, list):
            pending.extend((child, _child(field, n), depth + 1) for n, child in enumerate(item))
        elif isinstance(item, str) and (problem := text_problem(item)) is not None:
            raise InvalidInput(field or BODY_FIELD, problem)
        elif isinstance(item, _Absurd):
            raise InvalidInput(field or BODY_FIELD, item.problem)


def parse_json(raw: bytes) -> Any:
    """``raw`` as checked JSON, or ``InvalidInput`` naming the field or ``body``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(BODY_FIELD, "is not valid UTF-8") from None
    try:
        value = json.loads(
            text,
            parse_int=_parse_int,
            parse_float=_parse_float,
            parse_constant=_parse_constant,
        )
    except RecursionError:
        raise InvalidInput(BODY_FIELD, f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError:
        raise InvalidInput(BODY_FIELD, "is not valid JSON") from None
    _check(value)
    return value


def parse_json_object(raw: bytes, *, empty_ok: bool = False) -> dict[str, Any]:
    """``raw`` as a checked JSON object (an empty body is ``{}`` when ``empty_ok``)."""
    if empty_ok and not raw.strip():
        return {}
    value = parse_json(raw)
    if not isinstance(value, dict):
        raise InvalidInput(BODY_FIELD, "must be a JSON object")
    return value


def is_json_media_type(content_type: str | None) -> bool:
    """``application/json`` (parameters such as ``charset=utf-8`` allowed)."""
    media_type = (content_type or "").partition(";")[0].strip().lower()
    return media_type == JSON_MEDIA_TYPE
