"""``RelaydeskClient``: relaydesk's HTTP API (docs/http-api.md), one method per call.

Thin by design: every method is one typed action (``POST /api/v1/actions/{name}``) or one
read, answered with the server's JSON; an error answer raises :class:`ApiError` with the
server's ``code``, ``message``, HTTP ``status`` and extra fields in ``details``. For the
one-call start of a desktop, see :class:`relaydesk_client.Desktop`.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypedDict

import httpx

from relaydesk_client.errors import ApiError, answer_of

__all__ = [
    "ApiError",
    "Conversation",
    "DesktopRow",
    "RelaydeskClient",
    "Screenshot",
    "StartedDesktop",
    "answer_of",
]

DEFAULT_TIMEOUT_S = 60.0


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
    """What ``desktop_start`` answers: the row and the viewer URL (a capability: keep it safe).

    ``already_running`` is true when the slot held a running desktop, which is then answered
    instead of a new one: this call did not start it."""

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
        self,
        conversation_id: str,
        relay: str | None = None,
        *,
        slot: str = "main",
        kind: str = "virtual",
        geometry: str | None = None,
        profile: str | None = None,
    ) -> StartedDesktop:
        """Start a desktop in ``slot``, or answer the one already running there."""
        body = self.action(
            "desktop_start",
            conversation_id,
            relay=relay,
            slot=slot,
            kind=kind,
            geometry=geometry,
            profile=profile,
        )
        return StartedDesktop(body["desktop"], body["viewer_url"], bool(body["already_running"]))

    def stop(self, conversation_id: str, desktop: DesktopRow | StartedDesktop) -> bool:
        """Compare-and-stop exactly this session; True when it was running and is stopped."""
        row = desktop.desktop if isinstance(desktop, StartedDesktop) else desktop
        body = self.action(
            "desktop_stop_confirm",
            conversation_id,
            relay=row["relay_id"],
            kind=row["kind"],
            slot=row["slot"],
            desktop_session_id=row["desktop_session_id"],
        )
        return bool(body.get("stopped"))

    # -- the screen tool ---------------------------------------------------------------------

    def screen(self, conversation_id: str, action: str, **args: Any) -> dict[str, Any]:
        return self.action("screen", conversation_id, action=action, **args)

    def screenshot(
        self,
        conversation_id: str,
        *,
        relay: str | None = None,
        desktop_session_id: str | None = None,
        format: str = "png",
    ) -> Screenshot:
        body = self.screen(
            conversation_id,
            "screenshot",
            relay=relay,
            desktop_session_id=desktop_session_id,
            format=format,
        )
        return Screenshot(
            image=base64.b64decode(body["image"]),
            format=body["format"],
            width=body["width"],
            height=body["height"],
            screen_revision=body["screen_revision"],
            desktop_session_id=body["desktop_session_id"],
        )

    def click(
        self,
        conversation_id: str,
        x: int,
        y: int,
        screen_revision: str | None,
        *,
        target_bbox: dict[str, int] | None = None,
        relay: str | None = None,
        desktop_session_id: str | None = None,
        button: str | None = None,
    ) -> dict[str, Any]:
        """A guarded click: refused with ``stale_screen`` (no input) if the target changed."""
        return self.screen(
            conversation_id,
            "click",
            x=x,
            y=y,
            expected_screen_revision=screen_revision,
            target_bbox=target_bbox,
            relay=relay,
            desktop_session_id=desktop_session_id,
            button=button,
        )

    def type_text(
        self,
        conversation_id: str,
        text: str,
        *,
        relay: str | None = None,
        desktop_session_id: str | None = None,
    ) -> dict[str, Any]:
        return self.screen(
            conversation_id, "type", text=text, relay=relay, desktop_session_id=desktop_session_id
        )

    def key(
        self,
        conversation_id: str,
        key: str,
        *,
        relay: str | None = None,
        desktop_session_id: str | None = None,
    ) -> dict[str, Any]:
        """A key or chord: ``Return``, ``ctrl+shift+t``, ``alt+F4``."""
        return self.screen(
            conversation_id, "key", key=key, relay=relay, desktop_session_id=desktop_session_id
        )
