"""The one error the client raises for an answer of the API, and how an answer is read."""

from __future__ import annotations

from typing import Any

import httpx

__all__ = ["ApiError", "answer_of"]


class ApiError(Exception):
    """An error answer, ``{ok: false, error: {code, message, …}}``, with its HTTP status.

    ``code`` is the server's code as it sent it (``stale_screen``, ``not_running``, …; the
    list is in docs/http-api.md); ``details`` holds the error's other fields (``field``,
    ``hint``, ``current_session_id``, …). An answer that is not the API's (a proxy's error
    page, a wrong URL) is ``protocol_error`` with the start of its text as the message.
    """

    def __init__(self, status: int, code: str, message: str, details: dict[str, Any]) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.details = status, str(code), message, details

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}"


def answer_of(response: httpx.Response) -> dict[str, Any]:
    """The answer's JSON body; ``ApiError`` for an error answer or one that is not the API's."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):  # not the API answering (a proxy's page, a wrong URL)
        raise ApiError(response.status_code, "protocol_error", response.text[:200], {})
    if response.is_success and body.get("ok", True):
        return body
    raw = body.get("error")
    error: dict[str, Any] = raw if isinstance(raw, dict) else {}
    details = {k: v for k, v in error.items() if k not in {"code", "message"}}
    code = str(error.get("code") or "internal")
    raise ApiError(response.status_code, code, str(error.get("message", "")), details)
