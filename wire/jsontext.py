"""Compact JSON output for the wire and the HTTP API, written by orjson.

The standard library's encoder scans every character of every string; a screenshot result
carries ~100 KB of base64, and that scan cost more than the rest of the message handling
(``docs/screen-tool.md``). orjson writes the same compact JSON ~50x faster, as UTF-8.

Anything orjson refuses that the standard library writes (a string with a lone surrogate, an
integer beyond 64 bits) falls back to ``json.dumps``, so nothing encodable becomes an error.
One difference remains: a non-finite float (NaN, ±Infinity) is written as ``null``, where
``json.dumps(..., allow_nan=False)`` raised. Parsing stays with the standard library
(``wire.messages.parse_message``), which rejects ``NaN``/``Infinity`` tokens from a peer.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

_OPTIONS = orjson.OPT_NON_STR_KEYS


def dumps(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON."""
    try:
        return orjson.dumps(value, option=_OPTIONS)
    except orjson.JSONEncodeError:
        return _standard(value).encode()


def dumps_text(value: Any) -> str:
    """``value`` as compact JSON text (for WebSocket text frames)."""
    try:
        return orjson.dumps(value, option=_OPTIONS).decode()
    except orjson.JSONEncodeError:
        return _standard(value)


def _standard(value: Any) -> str:
    # ASCII escapes keep lone surrogates representable; raises TypeError/ValueError as json does.
    return json.dumps(value, separators=(",", ":"), allow_nan=False)
