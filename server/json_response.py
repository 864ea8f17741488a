"""The server's JSON responses, written by ``wire.jsontext`` (orjson) instead of ``json``."""

from __future__ import annotations

from typing import Any

from starlette import responses

from wire import jsontext


class JSONResponse(responses.JSONResponse):
    """Starlette's ``JSONResponse`` with a faster encoder (same compact output)."""

    def render(self, content: Any) -> bytes:
        return jsontext.dumps(content)
