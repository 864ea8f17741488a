"""The relay's side of its host helper: ``local`` desktops (the relay host's real screen).

Set up when ``RELAYDESK_HOST_HELPER`` names the helper (``http://H:P``); every call carries
``RELAYDESK_HOST_HELPER_TOKEN``. The relay talks to the helper at exactly that address and
nothing else: a viewer channel carries the helper's connect stream (a WebSocket the helper bridges
to its own loopback websockify) as its byte stream (:class:`HelperStream`).

At most one local desktop per relay (slot ``main``); its ``desktop_session_id`` is the helper's
``local_screen_session_id``; its row's ``display`` is the helper's display. When the helper does
not answer, ops fail with ``unavailable`` and status reports the last known row as ``unknown``
until the helper answers again. A small poll loop turns a helper-side failure or stop into
``desktop.changed``, and a long poll of the helper's XInput2 watch turns a person's input on
the real screen into ``desktop.person_input`` (docs/control.md). :class:`LocalDesktop` is the
``DesktopBackend`` of kind ``local``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, cast

import aiohttp

from relay.a11y.client import A11yCaller
from relay.backend import not_offered
from relay.channels import ByteStream, Chunk
from relay.config import HOST_HELPER_TOKEN_ENV
from relay.policy import DENY_APPS_HEADER, DeniedApps
from relay.wsframes import HEADROOM
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.frames import Payload
from wire.ops import (
    DesktopAppsResult,
    DesktopKind,
    DesktopLaunchResult,
    DesktopPauseArgs,
    DesktopResetHomeResult,
    DesktopStartArgs,
    DesktopStartResult,
    DesktopStopArgs,
    DesktopStopResult,
    KeyboardState,
    ProfileInfo,
    RelayRow,
    ScreenResult,
    VncDirectResult,
)
from wire.screen_actions import ScreenAction

log = logging.getLogger(__name__)

HELPER_URL_ENV: Final = "RELAYDESK_HOST_HELPER"
LOCAL_KIND: Final = "local"
LOCAL_SLOT: Final = "main"
UNREACHABLE: Final = "host_helper_unreachable"
REQUEST_TIMEOUT_S = 20.0
POLL_INTERVAL_S = 2.0
# A person's input on the real screen: each poll waits this long at the helper, and after a
# report the next comes no sooner than the interval (the server's lock lasts seconds).
INPUT_WAIT_S = 10.0
INPUT_REPORT_INTERVAL_S = 0.25
MAX_MESSAGE = 4 * 1024 * 1024


def deny_apps_header(denied: DeniedApps) -> dict[str, str]:
    """The header telling the helper the relay's denied apps."""
    return {DENY_APPS_HEADER: json.dumps(sorted(denied.names), ensure_ascii=True)}


# Not for the real screen: geometry and depth are the screen's own and are ignored.
_START_REFUSED = ("profile", "persist_home")

OnChange = Callable[[dict[str, Any]], Awaitable[None]]


class HostHelperClient:
    """HTTP calls to the helper at its one advertised address, with the shared token."""

    def __init__(self, url: str, token: str, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.url = url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"}
        self._timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # trust_env=False: a proxy from the environment must never see the helper's token.
            self._session = aiohttp.ClientSession(trust_env=False)
        return self._session

    def unreachable_error(self, reason: str = "unreachable") -> OpError:
        return OpError(
            ErrorCode.UNAVAILABLE,
            f"the host helper at {self.url} does not answer ({reason}): is `relaydesk "
            "host-helper` running in the screen's session on this relay's host?",
            {"reason": UNREACHABLE},
        )

    def _unreachable(self, err: BaseException) -> OpError:
        reason = "timed out" if isinstance(err, TimeoutError) else type(err).__name__
        return self.unreachable_error(reason)

    async def call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        timeout_s: float | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """One request; the helper's error body becomes the same ``OpError``."""
        sent = {**self._headers, **(headers or {})}
        try:
            async with (
                asyncio.timeout(timeout_s or self._timeout_s),
                self.session.request(method, f"{self.url}{path}", json=body, headers=sent) as resp,
            ):
                data = await resp.json(content_type=None)
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as err:
            raise self._unreachable(err) from err
        if resp.status == 401:
            raise OpError(
                ErrorCode.UNAVAILABLE,
                f"the host helper refused this relay's token; check {HOST_HELPER_TOKEN_ENV}",
            )
        if not isinstance(data, dict):
            raise OpError(ErrorCode.UNAVAILABLE, "the host helper answered without an object")
        if not data.get("ok"):
            raise OpError.from_dict(data.get("error") or {})
        return data

    async def connect(self, port: int) -> aiohttp.ClientWebSocketResponse:
        """The helper's connect stream for the local desktop's port."""
        try:
            async with asyncio.timeout(self._timeout_s):
                return await self.session.ws_connect(
                    f"{self.url}/v1/local/connect?port={port}",
                    headers=self._headers,
                    max_msg_size=MAX_MESSAGE,
                )
        except aiohttp.WSServerHandshakeError as err:
            raise OpError(
                ErrorCode.UNAVAILABLE, f"the host helper refused the stream (HTTP {err.status})"
            ) from err
        except (aiohttp.ClientError, OSError, TimeoutError) as err:
            raise self._unreachable(err) from err

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


def _row(desktop: dict[str, Any]) -> RelayRow:
    """A helper session → the relay's status row (``display``: the helper's display)."""
    return {
        "desktop_session_id": desktop["local_screen_session_id"],
        "kind": LOCAL_KIND,
        "slot": LOCAL_SLOT,
        "state": "running",
        "started_at": desktop.get("started_at"),
        "started_by": desktop.get("started_by"),
        "display": desktop.get("display"),
        "websockify_port": int(desktop["websockify_port"]),
    }


class HelperStream:
    """The helper's connect stream as a channel's :class:`~relay.channels.ByteStream`: one
    binary WebSocket message per chunk each way. A message is read only when the channel asks
    for the next chunk, so a viewer without credit stops the reads (and the helper's sends)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws

    async def read(self) -> Chunk:
        message = await self._ws.receive()
        if message.type != aiohttp.WSMsgType.BINARY or not message.data:
            return bytearray()
        chunk = bytearray(HEADROOM + len(message.data))
        chunk[HEADROOM:] = message.data
        return chunk

    async def write(self, data: Payload) -> None:
        if self._ws.closed:
            raise ConnectionResetError("the host helper's stream is closed")
        await self._ws.send_bytes(bytes(data))

    async def aclose(self) -> None:
        await self._ws.close()


class LocalDesktop:
    """The ``DesktopBackend`` of the relay host's real screen, run by the host helper."""

    kind: DesktopKind = LOCAL_KIND

    def __init__(
        self,
        client: HostHelperClient,
        on_change: OnChange | None = None,
        poll_interval_s: float = POLL_INTERVAL_S,
        on_input: OnChange | None = None,
    ) -> None:
        self.client = client
        # The relay's accessibility policy, sent with each call (the helper's worker applies it).
        self.a11y_policy: dict[str, str] = {}
        # The relay's denied apps, sent with each screen action (the helper's screen adds
        # them to its own; docs/host-helper.md).
        self.denied_apps = DeniedApps()
        self.on_change = on_change
        self.on_input = on_input
        self.poll_interval_s = poll_interval_s
        self._last: RelayRow | None = None  # the last row the helper confirmed
        self._poll: asyncio.Task[None] | None = None
        self._input: asyncio.Task[None] | None = None

    def capabilities(self) -> list[str]:
        return ["local_desktop"]

    # -- desktop ops --------------------------------------------------------------------

    async def start(self, args: DesktopStartArgs) -> DesktopStartResult:
        """Start (or return) the local desktop; the slot is always ``main``."""
        if refused := next((name for name in _START_REFUSED if args.get(name)), None):
            raise InvalidArgs(refused, "the real screen has no profile or kept home")
        if args.get("slot", LOCAL_SLOT) != LOCAL_SLOT:
            raise InvalidArgs("slot", "a relay has one local desktop, in slot 'main'")
        if args.get("audio"):
            raise OpError(ErrorCode.UNAVAILABLE, "local desktops have no audio")
        body = {"started_by": args.get("started_by")}
        result = await self.client.call("POST", "/v1/local/start", body)
        self._last = _row(result)
        already = bool(result.get("already_running"))
        return {**self._last, "already_running": already, "from_pool": False}

    async def stop(self, args: DesktopStopArgs) -> DesktopStopResult:
        """Compare-and-stop at the helper (under its lock)."""
        body = {"local_screen_session_id": args["desktop_session_id"]}
        result = dict(await self.client.call("POST", "/v1/local/stop", body))
        result.pop("ok", None)
        if result.get("stopped"):
            self._last = None
        return cast(DesktopStopResult, result)

    async def pause(self, args: DesktopPauseArgs, paused: bool) -> RelayRow:
        """The real screen is a person's session: the relay never freezes it."""
        raise not_offered(self.kind, "pause (a host's real screen is never frozen)")

    async def rows(self) -> list[RelayRow]:
        """The local row; the last known one as ``unknown`` while the helper is unreachable."""
        try:
            status = await self.client.call("GET", "/v1/local/status")
        except OpError as err:
            if self._last is None:
                return []
            log.info("host helper unavailable: %s", err.message)
            return [{**self._last, "state": "unknown", "reason": UNREACHABLE}]
        desktop = status.get("desktop")
        self._last = _row(desktop) if isinstance(desktop, dict) else None
        return [self._last] if self._last else []

    async def holds(self, desktop_session_id: str) -> bool:
        return any(r["desktop_session_id"] == desktop_session_id for r in await self.rows())

    async def find(self, desktop_session_id: str | None, slot: str) -> RelayRow | None:
        rows = await self.rows()
        if desktop_session_id is None:
            return next((r for r in rows if r["slot"] == slot), None)
        return next((r for r in rows if r["desktop_session_id"] == desktop_session_id), None)

    def _confirmed(self, row: RelayRow) -> None:
        """A row the helper cannot confirm now is never acted on (nor guessed)."""
        if row["state"] != "running":
            raise self.client.unreachable_error()

    async def open_stream(self, row: RelayRow) -> ByteStream:
        """The helper's connect stream to the local desktop's websockify."""
        port = row.get("websockify_port")
        if row["state"] != "running" or not isinstance(port, int):
            raise OpError(ErrorCode.UNAVAILABLE, "the host helper does not answer")
        return HelperStream(await self.client.connect(port))

    # -- screen ---------------------------------------------------------------------------

    async def screen(
        self, row: RelayRow, action: ScreenAction, args: dict[str, Any]
    ) -> ScreenResult:
        """A screen action on the host display, run by the helper's screen service."""
        self._confirmed(row)
        denied = deny_apps_header(self.denied_apps)
        result = dict(await self.client.call("POST", f"/v1/screen/{action}", args, headers=denied))
        result.pop("ok", None)
        result["desktop_session_id"] = row["desktop_session_id"]
        result["display"] = row.get("display")
        return cast(ScreenResult, result)

    async def keyboard_state(self, row: RelayRow) -> KeyboardState:
        """The host display's LEDs."""
        self._confirmed(row)
        denied = deny_apps_header(self.denied_apps)
        state = await self.client.call("POST", "/v1/screen/keyboard_state", {}, headers=denied)
        return cast(KeyboardState, state)

    async def release_held(self, row: RelayRow) -> bool:
        """The host helper keeps what its screen holds and releases it when its display's
        connection closes; the relay has nothing to release here."""
        return False

    # -- what the real screen does not have ------------------------------------------------

    def profiles(self) -> list[ProfileInfo]:
        return []

    async def apps(self, desktop_session_id: str | None, slot: str) -> DesktopAppsResult:
        raise not_offered(self.kind, "profile apps")

    async def launch(
        self, desktop_session_id: str | None, slot: str, app: str
    ) -> DesktopLaunchResult:
        raise not_offered(self.kind, "profile apps")

    async def reset_home(self, slot: str) -> DesktopResetHomeResult:
        raise not_offered(self.kind, "kept home")

    async def a11y_worker(self, row: RelayRow) -> A11yCaller:
        """The host helper's worker, on the real screen's session bus (host_helper/a11y.py)."""
        self._confirmed(row)
        return HelperA11y(self.client, self.a11y_policy)

    def direct(self, desktop_session_id: str) -> VncDirectResult | None:
        return None

    # -- watch ----------------------------------------------------------------------------

    def start_watch(self) -> None:
        """Poll the helper so its failures and stops reach the server as ``desktop.changed``."""
        if self._poll is None or self._poll.done():
            self._poll = asyncio.create_task(self._watch(), name="local-desktop-watch")
        if self.on_input is not None and (self._input is None or self._input.done()):
            self._input = asyncio.create_task(self._follow_input(), name="local-desktop-input")

    async def _follow_input(self) -> None:
        """Report each new person input on the real screen of the running local desktop."""
        seq: int | None = None
        while True:
            wait = 0.0 if seq is None else INPUT_WAIT_S  # the first poll only learns the count
            path = f"/v1/local/input?after={seq or 0}&wait={wait:g}"
            try:
                answer = await self.client.call("GET", path)
            except OpError:
                await asyncio.sleep(self.poll_interval_s)
                continue
            fresh, session = answer.get("seq"), answer.get("local_screen_session_id")
            if not isinstance(fresh, int):
                await asyncio.sleep(self.poll_interval_s)
                continue
            if seq is not None and fresh > seq and isinstance(session, str) and self.on_input:
                await self.on_input(
                    {"desktop_session_id": session, "kind": LOCAL_KIND, "slot": LOCAL_SLOT}
                )
            seq = fresh
            await asyncio.sleep(INPUT_REPORT_INTERVAL_S)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval_s)
            try:
                await self.check()
            except Exception:
                log.exception("local desktop poll failed")

    async def check(self) -> None:
        """One poll: a session the helper no longer runs is reported ended, with its reason."""
        before = self._last
        try:
            status = await self.client.call("GET", "/v1/local/status")
        except OpError:
            return  # unknown, not ended: the next answer decides
        desktop = status.get("desktop")
        self._last = _row(desktop) if isinstance(desktop, dict) else None
        now = self._last["desktop_session_id"] if self._last is not None else None
        if before is None or now == before["desktop_session_id"]:
            return
        failure: dict[str, Any] = status.get("last_failure") or {}
        failed = failure.get("local_screen_session_id") == before["desktop_session_id"]
        event = {
            **before,
            "state": "failed" if failed else "stopped",
            "reason": failure.get("reason") if failed else "stopped on the host helper",
        }
        if self.on_change is not None:
            await self.on_change(event)

    async def aclose(self) -> None:
        """Stop polling and close the HTTP session (the desktop keeps running)."""
        for task in (self._poll, self._input):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self.client.aclose()


class HelperA11y:
    """Accessibility calls answered by the host helper's worker."""

    def __init__(self, client: HostHelperClient, policy: dict[str, str]) -> None:
        self.client = client
        self.policy = policy

    async def call(self, call: str, params: Mapping[str, Any], timeout_s: float) -> dict[str, Any]:
        body = {"call": call, "params": dict(params), "policy": self.policy, "timeout_s": timeout_s}
        answer = dict(await self.client.call("POST", "/v1/local/a11y", body, timeout_s + 10))
        answer.pop("ok", None)
        return answer
