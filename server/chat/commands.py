"""Run a parsed ``/desktop`` command through the typed actions and shape its result message.

Every command goes through the same actions as the HTTP API (``invoke``), so chat can never do
what the caller could not do directly. The result is a :class:`Reply`: a one-line ``text`` for
any chat front end, a structured ``payload`` the web UI renders (stored in the transcript,
never holding a secret), and ``private`` data for the sender only (the viewer URL: it carries
a capability bound to the sender, so it is never stored or broadcast).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, assert_never

from server.chat import slash
from server.chat.ports import ActionResult, ChatStore
from server.chat.wording import explain, sentence
from server.db.audit import AuditRow
from wire.errors import ErrorCode

log = logging.getLogger(__name__)

CHAT_SLOT = "main"
# Bound invoke: (action name, body) -> (status, body), already knowing app and principal.
Invoke = Callable[[str, dict[str, Any]], Awaitable[ActionResult]]


@dataclass
class Reply:
    """What a command answers: ``text`` + ``payload`` (stored), ``private`` (sender only)."""

    text: str
    payload: dict[str, Any]
    private: dict[str, Any] = field(default_factory=dict)


@dataclass
class CommandContext:
    """Who runs the command, where, and how to reach the actions and the store."""

    conversation_id: str
    username: str
    invoke: Invoke
    store: ChatStore


def _payload(command: str, outcome: str, **extra: Any) -> dict[str, Any]:
    return {"command": command, "outcome": outcome, **extra}


def _error_reply(command: str, status: int, body: dict[str, Any], **extra: Any) -> Reply:
    """One sentence with the next step; the action's own code and message stay in the payload."""
    error = body.get("error") if isinstance(body.get("error"), dict) else {}
    assert isinstance(error, dict)
    code = str(error.get("code") or ErrorCode.INTERNAL.value)
    message = str(error.get("message") or "the action failed")
    details = {k: v for k, v in error.items() if k not in {"code", "message"}}
    payload = _payload(
        command,
        "error",
        error={"code": code, "message": message, "status": status, **details},
        **extra,
    )
    relay = extra.get("relay")
    text = explain(
        code,
        message,
        relay=relay if isinstance(relay, str) else None,
        kind=str(extra.get("kind") or "virtual"),
    )
    return Reply(text, payload)


def open_command(relay: str, kind: str) -> str:
    """The exact command that opens ``relay``'s desktop of ``kind`` (never ambiguous)."""
    return slash.describe(slash.OpenDesktop(slash.open_kind(kind), relay))


def command_for(command: str, relay: str, kind: str) -> str:
    """The command ``command`` aimed at ``relay`` (``/desktop virtual NAME`` for keyword names)."""
    if command == "open":
        return open_command(relay, kind)
    return f"/desktop {command} {relay}"


# What a start opened, by kind, as the chat's replies say it.
WHAT_OPENS = {"local": "local screen", "docker": "container desktop"}


def _row_of(body: dict[str, Any]) -> dict[str, Any] | None:
    for key in ("desktop", "row"):
        value = body.get(key)
        if isinstance(value, dict):
            return value
    return None


def _rows_of(body: dict[str, Any]) -> list[dict[str, Any]]:
    rows = body.get("desktops", body.get("rows", []))
    return [row for row in rows if isinstance(row, dict)] if isinstance(rows, list) else []


def _viewer_url(body: dict[str, Any]) -> str | None:
    url = body.get("viewer_url")
    if isinstance(url, str):
        return url
    row = _row_of(body)
    url = row.get("viewer_url") if row else None
    return url if isinstance(url, str) else None


def _public_row(row: dict[str, Any] | None) -> dict[str, Any] | None:
    """A row as stored in the transcript: no viewer URL (it is a capability)."""
    if row is None:
        return None
    return {key: value for key, value in row.items() if key not in {"viewer_url", "token"}}


def _relay_matches(row: dict[str, Any], relay: str) -> bool:
    return relay in {row.get("relay_name"), row.get("relay"), row.get("relay_id")}


def _chat_row(rows: list[dict[str, Any]], relay: str, kind: str) -> dict[str, Any] | None:
    for row in rows:
        same_slot = row.get("slot", CHAT_SLOT) == CHAT_SLOT
        if _relay_matches(row, relay) and row.get("kind") == kind and same_slot:
            return row
    return None


def _count(n: int) -> str:
    return "1 desktop" if n == 1 else f"{n} desktops"


def _short(session_id: object) -> str:
    return str(session_id or "")[:8]


class CommandRunner:
    """Executes one parsed command in one conversation for one caller."""

    def __init__(self, ctx: CommandContext) -> None:
        self.ctx = ctx

    async def run(self, command: slash.Command | slash.ParseError) -> Reply:
        if isinstance(command, slash.ParseError):
            return self._parse_error(command)
        if isinstance(command, slash.OpenDesktop):
            return await self._with_relay(command.relay, "open", self._open, command.kind)
        if isinstance(command, slash.AttachDesktop):
            return await self._with_relay(command.relay, "attach", self._attach, command.kind)
        if isinstance(command, slash.StopDesktop):
            return await self._with_relay(command.relay, "stop", self._stop, command.kind)
        if isinstance(command, slash.DesktopStatus):
            return await self._with_relay(command.relay, "status", self._status, "virtual")
        if isinstance(command, slash.DesktopApps):
            return await self._with_relay(command.relay, "apps", self._apps, command.kind)
        if isinstance(command, slash.ControlDesktop):
            control = ControlCommand(self, command.verb)
            return await self._with_relay(command.relay, command.verb, control.run, command.kind)
        if isinstance(command, slash.PauseDesktop):
            pause = PauseCommand(self, command.verb)
            return await self._with_relay(command.relay, command.verb, pause.run, command.kind)
        if isinstance(command, slash.SnapshotDesktop):
            snap = SnapshotCommand(self, command)
            return await self._with_relay(command.relay, command.verb, snap.run, command.kind)
        if isinstance(command, slash.ListDesktops):
            return await self._list()
        if isinstance(command, slash.CloseViewer):
            return await self._close()
        if isinstance(command, slash.Help):
            return self._help(command.topic)
        assert_never(command)

    # -- shared steps ----------------------------------------------------------------------

    async def _call(self, name: str, /, **args: Any) -> ActionResult:
        body = {"conversation_id": self.ctx.conversation_id, **args}
        return await self.ctx.invoke(name, body)

    async def _with_relay(
        self,
        name: str | None,
        command: str,
        then: Callable[[str, str], Awaitable[Reply]],
        kind: str,
    ) -> Reply:
        relays = await self.ctx.store.relays_visible_in(self.ctx.conversation_id)
        resolved = slash.resolve_relay(name, [relay.name for relay in relays])
        if isinstance(resolved, slash.RelayResolved):
            return await then(resolved.name, kind)
        choices = list(resolved.choices)
        if isinstance(resolved, slash.RelayAmbiguous):
            text = f"Several relays are shared here; choose one: {', '.join(choices)}."
            commands = [command_for(command, relay, kind) for relay in choices]
            payload = _payload(
                command, "choose_relay", relays=choices, kind=kind, commands=commands
            )
            return Reply(text, payload)
        if resolved.name is None:
            text = (
                "No relay is shared with this conversation. "
                "A relay owner shares one with `relaydesk admin share-relay`."
            )
            return Reply(text, _payload(command, "no_relay", relays=choices))
        suggestion = self._suggested_command(resolved, command, kind)
        hint = f" Did you mean {suggestion}?" if suggestion else ""
        usable = f" This conversation can use: {', '.join(choices)}." if choices else ""
        text = f"No relay named {resolved.name!r} is shared here.{hint}{usable}"
        payload = _payload(
            command,
            "unknown_relay",
            relay=resolved.name,
            relays=choices,
            suggestion=suggestion,
        )
        return Reply(text, payload)

    @staticmethod
    def _suggested_command(resolved: slash.RelayUnknown, command: str, kind: str) -> str | None:
        """A whole command to try: the closest relay in this command, or a keyword command."""
        near = resolved.suggestion
        if near is None or near.startswith("/"):
            return near
        return command_for(command, near, kind)

    def _parse_error(self, error: slash.ParseError) -> Reply:
        hint = f" Try {error.suggestion}." if error.suggestion else ""
        payload = _payload("parse", "parse_error", message=error.message)
        payload["suggestion"] = error.suggestion
        return Reply(f"{sentence(error.message)}{hint}", payload)

    # -- commands --------------------------------------------------------------------------

    async def _open(self, relay: str, kind: str) -> Reply:
        recorded = await self._recorded_running(relay, kind)
        if recorded is not None:
            status, body = await self._call("desktop_status", relay=relay)
            probed = _chat_row(_rows_of(body), relay, kind) if status == 200 else None
            same = probed is not None and probed.get("desktop_session_id") == recorded.get(
                "desktop_session_id"
            )
            if same and probed is not None and probed.get("state") == "running":
                return await self._attach(relay, kind)
            await self._audit_replacement(relay, recorded, status)
            return await self._start(relay, kind, replaced=recorded)
        return await self._start(relay, kind)

    async def _recorded_running(self, relay: str, kind: str) -> dict[str, Any] | None:
        status, body = await self._call("desktop_list_active")
        if status != 200:
            return None
        row = _chat_row(_rows_of(body), relay, kind)
        return row if row is not None and row.get("state") == "running" else None

    async def _audit_replacement(self, relay: str, row: dict[str, Any], status: int) -> None:
        session = str(row.get("desktop_session_id") or "")
        await self.ctx.store.write_audit(
            AuditRow(
                op="chat_open_replace",
                actor=self.ctx.username,
                outcome="not_answering",
                conversation_id=self.ctx.conversation_id,
                relay_id=str(row.get("relay_id") or "") or None,
                desktop_session_id=session or None,
                reason="recorded running but the probe did not confirm it",
                source="chat",
                details={"relay": relay, "status_http": status},
            )
        )
        log.info(
            "[desktop-audit] op=chat_open_replace actor=%s relay=%s session=%s "
            "outcome=not_answering reason=probe_failed",
            self.ctx.username,
            relay,
            session,
        )

    async def _start(self, relay: str, kind: str, replaced: dict[str, Any] | None = None) -> Reply:
        status, body = await self._call("desktop_start", relay=relay, kind=kind, slot=CHAT_SLOT)
        if status >= 400:
            return _error_reply("open", status, body, relay=relay, kind=kind)
        row = _row_of(body)
        reused = bool(body.get("already_running") or (row or {}).get("already_running"))
        outcome = "restarted" if replaced else ("attached" if reused else "started")
        old = _short(replaced.get("desktop_session_id")) if replaced else ""
        what = WHAT_OPENS.get(kind, "desktop")
        text = {
            "started": f"Started the {what} on {relay}.",
            "attached": f"Opened the running {what} on {relay}.",
            "restarted": (
                f"The {what} on {relay} (session {old})"
                " was recorded as running but did not answer; started a new session."
            ),
        }[outcome]
        payload = _payload("open", outcome, relay=relay, kind=kind, desktop=_public_row(row))
        if replaced:
            payload["replaced_session_id"] = replaced.get("desktop_session_id")
        return self._with_viewer(Reply(text, payload), body)

    def _with_viewer(self, reply: Reply, body: dict[str, Any]) -> Reply:
        url = _viewer_url(body)
        reply.payload["open_viewer"] = url is not None
        if url is not None:
            reply.private["viewer_url"] = url
        return reply

    async def _attach(self, relay: str, kind: str) -> Reply:
        status, body = await self._call("desktop_attach", relay=relay, kind=kind, slot=CHAT_SLOT)
        if status == 409:
            return self._not_running("attach", relay, kind, "nothing to open")
        if status >= 400:
            return _error_reply("attach", status, body, relay=relay, kind=kind)
        row = _public_row(_row_of(body))
        payload = _payload("attach", "attached", relay=relay, kind=kind, desktop=row)
        return self._with_viewer(Reply(f"Opened the running desktop on {relay}.", payload), body)

    async def _stop(self, relay: str, kind: str) -> Reply:
        status, body = await self._call(
            "desktop_stop_request", relay=relay, kind=kind, slot=CHAT_SLOT
        )
        row = _row_of(body) if status < 400 else None
        if status == 409 or (status < 400 and row is None):
            return self._not_running("stop", relay, kind, "nothing to stop")
        if status >= 400:
            return _error_reply("stop", status, body, relay=relay, kind=kind)
        assert row is not None
        text = (
            f"Stopping the desktop on {relay} (session {_short(row.get('desktop_session_id'))})"
            " needs confirmation."
        )
        payload = _payload(
            "stop",
            "confirm_required",
            relay=relay,
            kind=kind,
            desktop=_public_row(row),
            confirm_required=True,
        )
        return Reply(text, payload)

    @staticmethod
    def _not_running(command: str, relay: str, kind: str, consequence: str) -> Reply:
        """Nothing runs there: say so, and offer the exact command that starts it."""
        start = open_command(relay, kind)
        if kind == "local":
            text = f"The real screen of {relay} is not open; {consequence}. {start} opens it."
        else:
            text = f"No desktop is running on {relay}; {consequence}. {start} starts one."
        payload = _payload(command, "not_running", relay=relay, kind=kind, suggestion=start)
        return Reply(text, payload)

    async def _status(self, relay: str, kind: str) -> Reply:
        status, body = await self._call("desktop_status", relay=relay)
        if status >= 400:
            return _error_reply("status", status, body, relay=relay)
        rows = [_public_row(row) for row in _rows_of(body)]
        text = f"{_count(len(rows))} on {relay}." if rows else f"No desktop is running on {relay}."
        return Reply(text, _payload("status", "status", relay=relay, desktops=rows))

    async def _apps(self, relay: str, kind: str) -> Reply:
        status, body = await self._call("desktop_apps", relay=relay, kind=kind, slot=CHAT_SLOT)
        if status == 409:
            return self._not_running("apps", relay, kind, "no apps to list")
        if status >= 400:
            return _error_reply("apps", status, body, relay=relay, kind=kind)
        apps = [a for a in body.get("launchable", []) if isinstance(a, dict)]
        names = ", ".join(f"{a.get('name')} ({a.get('id')})" for a in apps)
        where = f"The desktop on {relay} (profile {body.get('profile') or 'unknown'})"
        text = f"{where} can start: {names}." if apps else f"{where} has no launchable apps."
        payload = _payload(
            "apps", "apps", relay=relay, kind=kind, profile=body.get("profile"), launchable=apps
        )
        return Reply(text, payload)

    async def _list(self) -> Reply:
        status, body = await self._call("desktop_list_active")
        if status >= 400:
            return _error_reply("list", status, body)
        rows = [_public_row(row) for row in _rows_of(body)]
        text = f"{_count(len(rows))} active here." if rows else "No desktop is active here."
        return Reply(text, _payload("list", "listed", desktops=rows))

    async def _close(self) -> Reply:
        status, body = await self._call("desktop_list_active")
        running = status == 200 and any(
            row.get("state") in {"starting", "running"} for row in _rows_of(body)
        )
        if not running:
            text = "No desktop is running in this conversation, so there is no viewer to close."
            return Reply(text, _payload("close", "close_viewer", nothing_running=True))
        text = "Closed this browser's viewer tabs. The desktops keep running."
        return Reply(text, _payload("close", "close_viewer", nothing_running=False))

    def _help(self, topic: str | None) -> Reply:
        lines = slash.help_lines(topic)
        text = "\n".join(f"{usage} — {description}" for usage, description in lines)
        rows = [{"usage": usage, "description": description} for usage, description in lines]
        return Reply(text, _payload("help", "help", lines=rows))


# verb → the typed action it runs
class PauseCommand:
    """``/desktop pause|resume [relay]`` on the relay's main desktop."""

    def __init__(self, runner: CommandRunner, verb: slash.PauseVerb) -> None:
        self.runner = runner
        self.verb = verb

    async def run(self, relay: str, kind: str) -> Reply:
        status, body = await self.runner._call(
            f"desktop_{self.verb}", relay=relay, kind=kind, slot=CHAT_SLOT
        )
        error = body.get("error") if isinstance(body.get("error"), dict) else None
        if error is not None and error.get("code") == ErrorCode.NOT_RUNNING.value:
            return CommandRunner._not_running(self.verb, relay, kind, f"nothing to {self.verb}")
        if status >= 400:
            return _error_reply(self.verb, status, body, relay=relay, kind=kind)
        row = _public_row(_row_of(body))
        if self.verb == "pause":
            text = f"Paused the desktop on {relay}: /desktop resume {relay} brings it back."
        else:
            text = f"Resumed the desktop on {relay}."
        outcome = "paused" if self.verb == "pause" else "resumed"
        return Reply(text, _payload(self.verb, outcome, relay=relay, kind=kind, desktop=row))


class SnapshotCommand:
    """``/desktop snapshot NAME [relay]`` and ``/desktop reset [NAME [relay]]`` on the relay's
    main desktop (docs/desktops.md, "Snapshots and forks", "Reset")."""

    def __init__(self, runner: CommandRunner, command: slash.SnapshotDesktop) -> None:
        self.runner = runner
        self.command = command

    async def run(self, relay: str, kind: str) -> Reply:
        verb, name = self.command.verb, self.command.name
        args: dict[str, Any] = {"relay": relay, "kind": kind, "slot": CHAT_SLOT}
        if verb == "snapshot":
            args["name"] = name
            status, body = await self.runner._call("desktop_snapshot", **args)
        else:
            if name is not None:
                args["snapshot"] = name
            status, body = await self.runner._call("desktop_reset", **args)
        error = body.get("error") if isinstance(body.get("error"), dict) else None
        if error is not None and error.get("code") == ErrorCode.NOT_RUNNING.value:
            return CommandRunner._not_running(verb, relay, kind, f"nothing to {verb}")
        if status >= 400:
            return _error_reply(verb, status, body, relay=relay, kind=kind)
        if verb == "snapshot":
            text = (
                f"Saved the desktop on {relay} as snapshot {name}: /desktop reset {name} "
                f"{relay} puts a desktop back to it."
            )
            return Reply(
                text, _payload(verb, "saved", relay=relay, kind=kind, snapshot=body["snapshot"])
            )
        to = f"snapshot {name}" if name is not None else "a fresh start"
        row = _public_row(_row_of(body))
        text = f"Reset the desktop on {relay} to {to}; its viewers follow."
        return Reply(text, _payload(verb, "reset", relay=relay, kind=kind, desktop=row))


CONTROL_ACTIONS: dict[slash.ControlVerb, str] = {
    "take": "desktop_take_control",
    "hand-back": "desktop_hand_back",
    "stop-agent": "agent_stop",
}


class ControlCommand:
    """``/desktop take|hand-back|stop-agent [relay]`` on the relay's main desktop."""

    def __init__(self, runner: CommandRunner, verb: slash.ControlVerb) -> None:
        self.runner = runner
        self.verb = verb

    async def run(self, relay: str, kind: str) -> Reply:
        status, body = await self.runner._call(
            CONTROL_ACTIONS[self.verb], relay=relay, kind=kind, slot=CHAT_SLOT
        )
        error = body.get("error") if isinstance(body.get("error"), dict) else None
        if error is not None and error.get("code") == ErrorCode.NOT_RUNNING.value:
            return CommandRunner._not_running(self.verb, relay, kind, "nothing to control")
        if status >= 400:
            return _error_reply(self.verb, status, body, relay=relay, kind=kind)
        outcome, text = self._said(relay, body)
        payload = _payload(
            self.verb,
            outcome,
            relay=relay,
            kind=kind,
            control=body.get("control"),
            stopped=body.get("stopped"),
        )
        return Reply(text, payload)

    def _said(self, relay: str, body: dict[str, Any]) -> tuple[str, str]:
        if self.verb == "take":
            return "took_control", (
                f"You have control of the desktop on {relay}: agent input is refused until you "
                f"hand it back with /desktop hand-back {relay}."
            )
        if self.verb == "hand-back":
            return "handed_back", f"Handed the desktop on {relay} back: agents may act on it."
        names = [str(name) for name in body.get("stopped") or []]
        if not names and not body.get("cancelled"):
            return "no_agent", f"No agent is acting on the desktop on {relay}."
        who = ", ".join(names) or "The agent"
        wait = body.get("regrant_after_s")
        after = f" for {wait:g} s" if isinstance(wait, int | float) else ""
        return "agent_stopped", (
            f"Stopped {who} on {relay}: its run ended and its input is refused{after}."
        )
