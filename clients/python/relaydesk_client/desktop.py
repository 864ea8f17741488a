"""``Desktop``: one desktop in one call, and stopped at the end only if this call started it.

::

    from relaydesk_client import Desktop

    with Desktop.create(profile="standard") as desktop:
        shot = desktop.screenshot()
        desktop.click(shot.width // 2, shot.height // 2)  # guarded by that screenshot
        desktop.type_text("hello")
        print(desktop.observe()["text"])

``create`` starts a desktop in the slot, or takes the one already running there (a person's,
another agent's). Leaving the ``with`` block stops the desktop only when ``create`` started it:
a desktop it found running keeps running. ``stop()`` stops it either way, when you ask.
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import Any, TypedDict

from relaydesk_client.client import (
    DEFAULT_TIMEOUT_S,
    DesktopRow,
    RelaydeskClient,
    Screenshot,
    StartedDesktop,
)
from relaydesk_client.settings import CONVERSATION_ENV, TOKEN_ENV, URL_ENV, env_setting

__all__ = ["CONVERSATION_ENV", "TOKEN_ENV", "URL_ENV", "Desktop"]


class _Target(TypedDict):
    """Which desktop a screen call acts on: this one, named by its relay and session."""

    relay: str
    desktop_session_id: str


class Desktop:
    """A running desktop of a conversation: look (``screenshot``, ``observe``), act (``click``,
    ``type_text``, ``key``, or any action through ``client``), ``stop``."""

    def __init__(
        self,
        client: RelaydeskClient,
        conversation_id: str,
        answer: StartedDesktop,
        *,
        owns_client: bool = False,
    ) -> None:
        self.client = client
        self.conversation_id = conversation_id
        self.row: DesktopRow = answer.desktop
        self.viewer_url = answer.viewer_url
        # True when this call started the desktop; false when it was running already.
        self.started = not answer.already_running
        self.stopped = False
        self.last_screenshot: Screenshot | None = None
        self._owns_client = owns_client

    @classmethod
    def create(
        cls,
        *,
        profile: str | None = None,
        relay: str | None = None,
        slot: str = "main",
        kind: str = "virtual",
        geometry: str | None = None,
        conversation: str | None = None,
        url: str | None = None,
        token: str | None = None,
        client: RelaydeskClient | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> Desktop:
        """Start a desktop in ``slot`` (``profile``: ``standard``, ``minimal``; absent: the
        relay's default), or take the one running there.

        The server is ``url`` (else ``$RELAYDESK_SERVER_URL``) with ``token`` (else
        ``$RELAYDESK_API_TOKEN``), or the ``client`` given (left open at the end). The conversation
        is ``conversation``, else ``$RELAYDESK_CONVERSATION_ID``, else the token's only one.
        ``relay`` names one relay when the conversation has several."""
        owns = client is None
        if client is None:
            base_url, secret = _setting(url, URL_ENV), _setting(token, TOKEN_ENV)
            client = RelaydeskClient(base_url, secret, timeout_s=timeout_s)
        try:
            conversation_id = conversation or os.environ.get(CONVERSATION_ENV) or _only(client)
            answer = client.start(
                conversation_id, relay, slot=slot, kind=kind, geometry=geometry, profile=profile
            )
        except BaseException:
            if owns:
                client.close()
            raise
        return cls(client, conversation_id, answer, owns_client=owns)

    # -- what it is --------------------------------------------------------------------------

    @property
    def desktop_session_id(self) -> str:
        return self.row["desktop_session_id"]

    @property
    def relay_id(self) -> str:
        return self.row["relay_id"]

    def _target(self) -> _Target:
        return {"relay": self.relay_id, "desktop_session_id": self.desktop_session_id}

    def __repr__(self) -> str:
        how = "started" if self.started else "attached"
        return f"<Desktop {self.row.get('slot')} {self.desktop_session_id} ({how})>"

    # -- look ----------------------------------------------------------------------------------

    def screenshot(self, *, format: str = "png") -> Screenshot:
        """The screen; its ``screen_revision`` guards the clicks that follow."""
        shot = self.client.screenshot(self.conversation_id, format=format, **self._target())
        self.last_screenshot = shot
        return shot

    def observe(self, **options: Any) -> dict[str, Any]:
        """The accessibility tree of a window (the focused one unless ``app`` or ``window``),
        as ``desktop_observe`` answers it; ``options``: ``app``, ``window``, ``depth``,
        ``max_nodes``, ``view``, ``format``."""
        return self.action("desktop_observe", **options)

    # -- act -----------------------------------------------------------------------------------

    def click(
        self,
        x: int,
        y: int,
        *,
        screen_revision: str | None = None,
        button: str | None = None,
        target_bbox: dict[str, int] | None = None,
    ) -> dict[str, Any]:
        """A click at ``x, y`` of a screenshot, guarded by that screenshot's revision (by
        default the last one this desktop took): refused with ``stale_screen`` if the screen
        changed there since, and with ``missing_screen_revision`` before any screenshot."""
        if screen_revision is None and self.last_screenshot is not None:
            screen_revision = self.last_screenshot.screen_revision
        return self.client.click(
            self.conversation_id,
            x,
            y,
            screen_revision,
            target_bbox=target_bbox,
            button=button,
            **self._target(),
        )

    def type_text(self, text: str) -> dict[str, Any]:
        return self.client.type_text(self.conversation_id, text, **self._target())

    def key(self, key: str) -> dict[str, Any]:
        """A key or chord: ``Return``, ``ctrl+shift+t``, ``alt+F4``."""
        return self.client.key(self.conversation_id, key, **self._target())

    def action(self, name: str, **args: Any) -> dict[str, Any]:
        """Any typed action on this desktop (``desktop_find``, ``desktop_apps``, …)."""
        target = {**self._target(), "kind": self.row["kind"], "slot": self.row["slot"]}
        return self.client.action(name, self.conversation_id, **{**target, **args})

    # -- end -----------------------------------------------------------------------------------

    def stop(self) -> bool:
        """Stop this desktop (compare-and-stop: exactly this session, never a newer one in its
        slot), whoever started it; True when it was running and is stopped."""
        stopped = self.client.stop(self.conversation_id, self.row)
        self.stopped = True
        return stopped

    def close(self) -> None:
        """Let go of the desktop without stopping it (and close the client ``create`` made)."""
        if self._owns_client:
            self.client.close()

    def __enter__(self) -> Desktop:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the desktop if ``create`` started it (and ``stop`` has not); leave it running
        if it was running before."""
        try:
            if self.started and not self.stopped:
                self.stop()
        finally:
            self.close()


def _setting(given: str | None, env: str) -> str:
    value = given or env_setting(env)
    if not value:
        raise ValueError(f"no {env}: pass it as an argument or set ${env}")
    return value


def _only(client: RelaydeskClient) -> str:
    """The token's conversation, when it has exactly one."""
    conversations = client.conversations()
    if len(conversations) == 1:
        return conversations[0]["conversation_id"]
    names = ", ".join(f"{c['conversation_id']} ({c['title']})" for c in conversations)
    raise ValueError(
        f"name a conversation (conversation= or ${CONVERSATION_ENV}): {names or 'none visible'}"
    )
