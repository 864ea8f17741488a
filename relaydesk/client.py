"""A small typed client for relaydesk's HTTP API (docs/http-api.md), for agents and scripts.

Thin by design: every method is one typed action (``POST /api/v1/actions/{name}``) or one
read, answered with the server's JSON; an error answer raises :class:`ApiError` (a
``wire.errors.RelaydeskError``) with the server's ``code``, ``message``, HTTP ``status`` and
extra fields in ``details`` (``field``, ``current_session_id``, …)::

    from relaydesk.client import RelaydeskClient

    with RelaydeskClient("http://127.0.0.1:8080", token="rdk_…") as desk:
        conversation = desk.conversations()[0]["conversation_id"]
        desktop = desk.start(conversation)
        shot = desk.screenshot(conversation)
        desk.click(conversation, 640, 400, shot.screen_revision)
        desk.type_text(conversation, "hello")
        desk.stop(conversation, desktop)
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypedDict

import httpx

from wire.errors import ErrorCode, RelaydeskError

__all__ = ["ApiError", "RelaydeskClient", "RelaydeskError"]

DEFAULT_TIMEOUT_S = 60.0


class ApiError(RelaydeskError):
    """An error answer: ``{ok: false, error: {code, message, …}}`` and its HTTP status."""

    status: int

    def __init__(self, status: int, code: ErrorCode, message: str, details: dict[str, Any]) -> None:
        self.status, self.code, self.details = status, code, details
        super().__init__(message)

    def __str__(self) -> str:
        return f"{self.status} {self.code.value}: {self.message}"


class Conversation(TypedDict):
    conversation_id: str
    title: str
    role: str
    created_at: str


class DesktopRow(TypedDict, total=False):
    relay_id: str
    relay_name: str
    desktop_session_id: str
    kind: str
    slot: str
    state: str
    started_at: str
    started_by: str
    updated_at: str
    reason: str | None
    geometry: str
    can_stop: bool


@dataclass(frozen=True)
class Screenshot:
    """A screenshot: the image, its size in physical pixels, and its revision for clicks."""

    image: bytes
    format: str
    width: int
    height: int
    screen_revision: str
    desktop_session_id: str


@dataclass(frozen=True)
class StartedDesktop:
    """What ``desktop_start`` answers: the row and the viewer URL (a capability: keep it safe)."""

    desktop: DesktopRow
    viewer_url: str
    already_running: bool


class RelaydeskClient:
    """Synchronous client over one kept-alive ``httpx.Client`` with a bearer API token."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout_s,
            transport=transport,
        )

    def __enter__(self) -> RelaydeskClient:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    @property
    def http(self) -> httpx.Client:
        """The kept-alive client itself, for byte streams (``relaydesk files``)."""
        return self._http

    # -- the two primitives ------------------------------------------------------------------

    def get(self, path: str) -> dict[str, Any]:
        return answer_of(self._http.get(path))

    def action(self, name: str, conversation_id: str, **args: Any) -> dict[str, Any]:
        """Any typed action; ``None`` arguments are left out (the server's defaults apply)."""
        body = {"conversation_id": conversation_id}
        body.update({key: value for key, value in args.items() if value is not None})
        return answer_of(self._http.post(f"/api/v1/actions/{name}", json=body))

    # -- conversations and desktops ----------------------------------------------------------

    def conversations(self) -> list[Conversation]:
        conversations: list[Conversation] = self.get("/api/v1/conversations")["conversations"]
        return conversations

    def desktops(self, conversation_id: str) -> list[DesktopRow]:
        rows: list[DesktopRow] = self.action("desktop_list_active", conversation_id)["desktops"]
        return rows

    def start(
        self, conversation_id: str, relay: str | None = None, *, slot: str = "main",
        kind: str = "virtual", geometry: str | None = None,
    ) -> StartedDesktop:  # fmt: skip
        body = self.action("desktop_start", conversation_id, relay=relay, slot=slot, kind=kind,
                           geometry=geometry)  # fmt: skip
        return StartedDesktop(body["desktop"], body["viewer_url"], bool(body["already_running"]))

    def stop(self, conversation_id: str, desktop: DesktopRow | StartedDesktop) -> bool:
        """Compare-and-stop exactly this session; True when it was running and is stopped."""
        row = desktop.desktop if isinstance(desktop, StartedDesktop) else desktop
        body = self.action(
            "desktop_stop_confirm", conversation_id, relay=row["relay_id"], kind=row["kind"],
            slot=row["slot"], desktop_session_id=row["desktop_session_id"],
        )  # fmt: skip
        return bool(body.get("stopped"))

    # -- the screen tool ---------------------------------------------------------------------

    def screen(self, conversation_id: str, action: str, **args: Any) -> dict[str, Any]:
        return self.action("screen", conversation_id, action=action, **args)

    def screenshot(
        self, conversation_id: str, *, relay: str | None = None,
        desktop_session_id: str | None = None, format: str = "png",
    ) -> Screenshot:  # fmt: skip
        body = self.screen(conversation_id, "screenshot", relay=relay,
                           desktop_session_id=desktop_session_id, format=format)  # fmt: skip
        return Screenshot(
            image=base64.b64decode(body["image"]), format=body["format"], width=body["width"],
            height=body["height"], screen_revision=body["screen_revision"],
            desktop_session_id=body["desktop_session_id"],
        )  # fmt: skip

    def click(
        self, conversation_id: str, x: int, y: int, screen_revision: str, *,
        target_bbox: dict[str, int] | None = None, relay: str | None = None,
        desktop_session_id: str | None = None, button: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """A guarded click: refused with ``stale_screen`` (no input) if the target changed."""
        return self.screen(
            conversation_id, "click", x=x, y=y, expected_screen_revision=screen_revision,
            target_bbox=target_bbox, relay=relay, desktop_session_id=desktop_session_id,
            button=button,
        )  # fmt: skip

    def type_text(
        self, conversation_id: str, text: str, *, relay: str | None = None,
        desktop_session_id: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        return self.screen(conversation_id, "type", text=text, relay=relay,
                           desktop_session_id=desktop_session_id)  # fmt: skip

    def key(
        self, conversation_id: str, key: str, *, relay: str | None = None,
        desktop_session_id: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """A key or chord: ``Return``, ``ctrl+shift+t``, ``alt+F4``."""
        return self.screen(conversation_id, "key", key=key, relay=relay,
                           desktop_session_id=desktop_session_id)  # fmt: skip


def answer_of(response: httpx.Response) -> dict[str, Any]:
    """The answer's JSON body; ``ApiError`` for an error answer or one that is not the API's."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):  # not the API answering (a proxy's page, a wrong URL)
        raise ApiError(response.status_code, ErrorCode.PROTOCOL_ERROR, response.text[:200], {})
    if response.is_success and body.get("ok", True):
        return body
    error = body.get("error") if isinstance(body.get("error"), dict) else {}
    assert isinstance(error, dict)
    details = {k: v for k, v in error.items() if k not in {"code", "message"}}
    raise ApiError(response.status_code, _code(error.get("code")), str(error.get("message", "")),
                   details)  # fmt: skip


def _code(raw: object) -> ErrorCode:
    """The answer's code; ``internal`` for one this client does not know."""
    try:
        return ErrorCode(str(raw))
    except ValueError:
        return ErrorCode.INTERNAL
