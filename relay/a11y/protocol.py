"""The worker's protocol: JSON lines on its standard input and output, one call at a time,
and the errors it answers with.

In: ``{"id", "call", "params"}``; out: ``{"id", "ok": true, "result"}`` or ``{"id", "ok": false,
"error": {"code", "message", "suggestion", …}}``. The first line out is ``{"ready": true}`` or
``{"ready": false, "reason"}`` (``relay/a11y/worker.py``). The codes are ``wire.errors``'
``ErrorCode`` values; every error carries a suggestion of what to do next.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any, Final

from relay.a11y.bus import Bus
from relay.a11y.nodes import CallFailed
from wire.errors import ErrorCode, RelaydeskError

CALL_TIMEOUT_MS: Final = int(os.environ.get("RELAYDESK_A11Y_CALL_TIMEOUT_MS", "250"))
MAX_LINE: Final = 1 << 20
SUGGESTIONS: Final[dict[str, str]] = {
    "stale_ref": "the snapshot expired; call desktop_observe or desktop_find again for fresh refs",
    "snapshot_not_found": "use a ref from a recent desktop_observe or desktop_find answer",
    "element_not_found": "the element is gone (window closed or content changed); observe again",
    "app_not_found": "call desktop_apps to see the running apps and their windows",
    "policy_denied": "this relay does not let agents use that app; pick another app",
    "action_failed": "read the element with desktop_read, or fall back to a screenshot and a "
    "guarded click",
    "a11y_unavailable": "use the screen tool (screenshot, then a guarded click) instead",
    "timeout": "the app is busy or stopped; try again later or use the screen tool",
    "invalid_args": "fix the named argument and call again",
}

# One call: its params in, its result out.
Handler = Callable[[dict[str, Any]], dict[str, Any]]


class A11yError(RelaydeskError):
    """An answer the worker gives as ``{code, message, suggestion, …}``."""

    def __init__(self, code: str, message: str, **details: Any) -> None:
        self.code = ErrorCode(code)
        self.details = details
        super().__init__(message)

    def body(self) -> dict[str, Any]:
        suggestion = self.details.pop("suggestion", None) or SUGGESTIONS.get(self.code.value, "")
        return {
            "code": self.code.value,
            "message": self.message,
            "suggestion": suggestion,
            **self.details,
        }


def failed(err: CallFailed, what: str) -> A11yError:
    """A failed D-Bus call as the worker answers it; ``what`` says what was being done."""
    if err.kind == "closed":
        return A11yError(
            "a11y_unavailable",
            f"{what}: {err}; it is started again on the next call",
            suggestion="retry once",
        )
    if err.kind == "timeout":
        return A11yError(
            "timeout",
            f"{what}: the app did not answer within "
            f"{CALL_TIMEOUT_MS} ms; it is marked unresponsive for a while",
        )
    if err.kind == "gone":
        return A11yError("element_not_found", f"{what}: {err}")
    return A11yError("action_failed", f"{what}: {err}")


def reply(message: dict[str, Any]) -> None:
    """Write one line of the protocol."""
    sys.stdout.write(json.dumps(message, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


def serve(calls: Mapping[str, Handler], bus: Bus) -> None:
    """Answer the requests on standard input with ``calls``, one at a time, until the input
    ends or the accessibility bus goes away."""
    for line in sys.stdin.buffer:
        if len(line) > MAX_LINE:
            reply(
                {
                    "id": None,
                    "ok": False,
                    "error": {"code": "invalid_args", "message": "request too large"},
                }
            )
            continue
        _answer(line, calls)
        if bus.closed:
            return  # the next call starts a worker on the bus D-Bus starts again


def _answer(line: bytes, calls: Mapping[str, Handler]) -> None:
    """Run one request and write its answer."""
    request_id = None
    try:
        request = json.loads(line)
        request_id = request.get("id")
        handler = calls.get(request.get("call"))
        if handler is None:
            raise A11yError("invalid_args", f"unknown call {str(request.get('call'))[:32]!r}")
        reply({"id": request_id, "ok": True, "result": handler(dict(request.get("params") or {}))})
    except A11yError as err:
        reply({"id": request_id, "ok": False, "error": err.body()})
    except CallFailed as err:
        reply({"id": request_id, "ok": False, "error": failed(err, "accessibility").body()})
    except (ValueError, TypeError, KeyError, AttributeError) as err:
        reply(
            {
                "id": request_id,
                "ok": False,
                "error": {
                    "code": "action_failed",
                    "message": f"{type(err).__name__}: {err}",
                    "suggestion": SUGGESTIONS["action_failed"],
                },
            }
        )
