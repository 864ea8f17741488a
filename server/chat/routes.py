"""Chat HTTP routes: conversations, the transcript, and posting (with ``/desktop`` commands).

``POST /api/v1/conversations/{id}/messages {text}`` needs role ``write`` to store a message.
A ``/desktop`` command from a ``read`` member still runs (the actions check each command's own
role, exactly as over the HTTP API) but its reply goes to that member only and nothing is stored.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from server.auth.principal import Principal
from server.auth.routes import Endpoint, json_errors
from server.auth.scopes import scope_refusal, scoped_role
from server.boundary.body import path_param, read_json_object
from server.chat import slash
from server.chat.commands import CommandContext, CommandRunner, Reply
from server.chat.ports import ChatService, ChatStore
from server.db.records import MessageRecord, Role, role_allows
from server.json_response import JSONResponse
from wire.errors import ErrorCode, OpError

log = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 4000
MAX_BODY_BYTES = 64 * 1024
MAX_ID_CHARS = 64
DEFAULT_PAGE, MAX_PAGE = 50, 200
NO_STORE = {"Cache-Control": "no-store"}


def _refused(code: ErrorCode, message: str, field: str | None = None) -> OpError:
    return OpError(code, message, {"field": field} if field else None)


async def _role(chat: ChatService, request: Request, principal: Principal, needed: Role) -> Role:
    conversation_id = _conversation_id(request)
    if (why := scope_refusal(principal, conversation_id, needed)) is not None:
        raise _refused(ErrorCode.FORBIDDEN, why)
    held = await chat.store.get_role(conversation_id, principal.user_id)
    role = scoped_role(principal, conversation_id, held)
    if role is None:
        # Same answer for "no such conversation" and "not a member": existence is not leaked.
        raise _refused(ErrorCode.NOT_FOUND, "conversation not found")
    if not role_allows(role, needed):
        raise _refused(ErrorCode.FORBIDDEN, f"this needs role {needed}; yours is {role}")
    return role


def _conversation_id(request: Request) -> str:
    """The path's conversation id, refused (400) when it is no storable id."""
    return path_param(request, "conversation_id", MAX_ID_CHARS)


def message_json(record: MessageRecord, names: dict[str, str]) -> dict[str, Any]:
    author = None
    if record.author_id is not None:
        author = {"user_id": record.author_id, "username": names.get(record.author_id, "?")}
    return {
        "id": record.message_id,
        "conversation_id": record.conversation_id,
        "author": author,
        "kind": record.kind,
        "text": record.text,
        "payload": record.payload,
        "created_at": record.created_at.isoformat(),
    }


async def _names(store: ChatStore, conversation_id: str) -> dict[str, str]:
    return {str(m.user_id): m.username for m in await store.list_members(conversation_id)}


def _int_param(request: Request, name: str, low: int, high: int, default: int | None) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    # ASCII digits, and not thousands of them: int() reads other scripts' digits and "1_0".
    if not (len(raw) <= 20 and raw.isascii() and raw.lstrip("-").isdigit()):
        raise _refused(ErrorCode.INVALID_ARGS, f"{name} must be an integer", name)
    value = int(raw)
    if not low <= value <= high:
        raise _refused(ErrorCode.INVALID_ARGS, f"{name} must be in {low}..{high}", name)
    return value


async def list_conversations(chat: ChatService, request: Request) -> Response:
    """``GET /api/v1/conversations``: the caller's conversations with their role."""
    principal = await chat.auth.authenticate(request)
    memberships = await chat.store.list_conversations_for(principal.user_id)
    conversations = [
        {
            "conversation_id": m.conversation_id,
            "title": m.title,
            "role": role,
            "created_at": m.created_at.isoformat(),
        }
        for m in memberships
        if (role := scoped_role(principal, m.conversation_id, m.role)) is not None
    ]
    return JSONResponse({"ok": True, "conversations": conversations}, headers=NO_STORE)


async def get_conversation(chat: ChatService, request: Request) -> Response:
    """``GET /api/v1/conversations/{id}``: title, role, members and visible relays."""
    principal = await chat.auth.authenticate(request)
    role = await _role(chat, request, principal, "read")
    store, conversation_id = chat.store, _conversation_id(request)
    title = next(
        (
            m.title
            for m in await store.list_conversations_for(principal.user_id)
            if m.conversation_id == conversation_id
        ),
        "",
    )
    relays = [
        {"relay_id": r.relay_id, "name": r.name, "connected": r.connected}
        for r in await store.relays_visible_in(conversation_id)
    ]
    members = [
        {"username": m.username, "role": m.role} for m in await store.list_members(conversation_id)
    ]
    body = {
        "ok": True,
        "conversation_id": conversation_id,
        "title": title,
        "role": role,
        "relays": relays,
        "members": members,
    }
    return JSONResponse(body, headers=NO_STORE)


async def list_messages(chat: ChatService, request: Request) -> Response:
    """``GET …/messages?before=&limit=``: a page of the transcript, oldest first."""
    principal = await chat.auth.authenticate(request)
    await _role(chat, request, principal, "read")
    before = _int_param(request, "before", 1, 2**62, None)
    limit = _int_param(request, "limit", 1, MAX_PAGE, DEFAULT_PAGE)
    assert limit is not None
    store, conversation_id = chat.store, _conversation_id(request)
    records = await store.list_messages(conversation_id, before_id=before, limit=limit)
    names = await _names(store, conversation_id)
    messages = [message_json(r, names) for r in records]
    await _with_desktop_now(chat, messages)
    body = {"ok": True, "messages": messages, "has_more": len(records) == limit}
    return JSONResponse(body, headers=NO_STORE)


async def _with_desktop_now(chat: ChatService, messages: list[dict[str, Any]]) -> None:
    """Add ``desktop_now`` (state, reason, updated_at) to each result naming a desktop.

    A desktop card loaded later then tells how its session ended ("Stopped by alice at …")
    from the inventory row, which keeps ended sessions for a while (history pruning).
    """
    inventory = chat.inventory
    for message in messages:
        desktop = (message.get("payload") or {}).get("desktop")
        if not isinstance(desktop, dict):
            continue
        relay_id, session = desktop.get("relay_id"), desktop.get("desktop_session_id")
        if not (isinstance(relay_id, str) and isinstance(session, str)):
            continue
        row = await inventory.row(relay_id, session)
        message["desktop_now"] = (
            None
            if row is None
            else {
                "state": row.state,
                "reason": row.reason,
                "updated_at": row.updated_at,
            }
        )


async def _text_of(request: Request) -> str:
    body = await read_json_object(request, MAX_BODY_BYTES)
    text = body.get("text")
    if not isinstance(text, str):
        raise _refused(ErrorCode.INVALID_ARGS, "text: must be a string", "text")
    if not text.strip():
        raise _refused(ErrorCode.INVALID_ARGS, "text: must not be empty", "text")
    if len(text) > MAX_MESSAGE_CHARS:
        raise OpError(
            ErrorCode.LIMIT_REACHED, _too_long_message(len(text)), {"field": "text"}, status=413
        )
    return text


def _too_long_message(length: int) -> str:
    size = f" ({length:,} characters)"
    return f"message too long{size}: the limit is {MAX_MESSAGE_CHARS:,} characters"


async def post_message(chat: ChatService, request: Request) -> Response:
    """``POST …/messages {text}``: store and publish; ``/desktop …`` also runs the command."""
    principal = await chat.auth.authenticate(request)
    role = await _role(chat, request, principal, "read")
    text = await _text_of(request)
    command = slash.is_desktop_command(text)
    if not command and not role_allows(role, "write"):
        scoped = scope_refusal(principal, _conversation_id(request), "write")
        raise _refused(ErrorCode.FORBIDDEN, scoped or f"posting needs role write; yours is {role}")
    store, conversation_id = chat.store, _conversation_id(request)
    names = {str(principal.user_id): principal.username}
    stored = role_allows(role, "write")
    message = None
    if stored:
        record = await store.add_message(conversation_id, principal.user_id, text)
        message = message_json(record, names)
        await _publish(chat, conversation_id, message)
    reply = await _run_command(chat, request, principal, text) if command else None
    reply_json = await _reply_json(chat, request, reply, message, stored, principal)
    body = {
        "ok": True,
        "message": message,
        "reply": reply_json,
        "private": reply.private if reply else {},
    }
    return JSONResponse(body, status_code=201 if stored else 200, headers=NO_STORE)


async def _run_command(
    chat: ChatService, request: Request, principal: Principal, text: str
) -> Reply:
    conversation_id = _conversation_id(request)

    async def invoke(name: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return await chat.invoke(principal, name, body)

    ctx = CommandContext(conversation_id, principal.username, invoke, chat.store)
    return await CommandRunner(ctx).run(slash.parse(text.strip()))


async def _reply_json(
    chat: ChatService,
    request: Request,
    reply: Reply | None,
    message: dict[str, Any] | None,
    stored: bool,
    principal: Principal,
) -> dict[str, Any] | None:
    if reply is None:
        return None
    payload = {**reply.payload, "requested_by": principal.username}
    if message is not None:
        payload["reply_to"] = message["id"]
    conversation_id = _conversation_id(request)
    if not stored:
        return {
            "id": None,
            "conversation_id": conversation_id,
            "author": None,
            "kind": "result",
            "text": reply.text,
            "payload": {**payload, "ephemeral": True},
            "created_at": None,
        }
    store = chat.store
    record = await store.add_message(
        conversation_id, None, reply.text, kind="result", payload=payload
    )
    result = message_json(record, {})
    await _publish(chat, conversation_id, result)
    return result


async def _publish(chat: ChatService, conversation_id: str, message: dict[str, Any]) -> None:
    try:
        await chat.publish(conversation_id, "message_created", message)
    except Exception:
        # The message is stored; a live-update failure must not fail the post.
        log.exception("publishing message %s failed", message.get("id"))


def chat_routes(chat: ChatService) -> list[BaseRoute]:
    """The conversations and their transcripts, over ``chat``'s parts."""

    def bound(endpoint: Callable[[ChatService, Request], Awaitable[Response]]) -> Endpoint:
        return json_errors(functools.partial(endpoint, chat))

    page = "/api/v1/conversations/{conversation_id}"
    return [
        Route("/api/v1/conversations", bound(list_conversations), methods=["GET"]),
        Route(page, bound(get_conversation), methods=["GET"]),
        Route(f"{page}/messages", bound(list_messages), methods=["GET"]),
        Route(f"{page}/messages", bound(post_message), methods=["POST"]),
    ]
