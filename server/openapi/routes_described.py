"""What each HTTP route of the server does, for the OpenAPI document: ``(method, path) → op``.

Keys are the routes' own methods and path templates (``WEBSOCKET`` for a WebSocket route). The
typed actions are not here: the document makes one operation per registered action. A route
missing here still appears in the document, marked ``x-undocumented`` (a test keeps this table
complete).
"""

from __future__ import annotations

from typing import Final

from server.openapi.parts import (
    API_TOKEN,
    MEMBER_READ,
    MEMBER_WRITE,
    NONE,
    RELAY,
    Json,
    answer,
    header,
    media,
    operation,
    query,
    upgrade,
)
from server.openapi.recordings import RECORDINGS

ACTION_ROUTE: Final = ("POST", "/api/v1/actions/{name}")
WEBSOCKET: Final = "WEBSOCKET"
VIEWER_AUTH: Final = (
    "No credential header: the viewer token in the path is the capability (HMAC-signed, "
    "expiring, bound to the user, conversation, relay and desktop session). The holder must "
    "still have role write in the conversation."
)
STRING: Final[Json] = {"type": "string"}
INTEGER: Final[Json] = {"type": "integer"}

_SESSION: Final[dict[tuple[str, str], Json]] = {
    ("POST", "/api/v1/login"): operation(
        "login",
        "Sign in with a password",
        tag="auth",
        security=NONE,
        description="Sets the `relaydesk_session` cookie and answers the CSRF token. Rate "
        "limited per client address (429 with `Retry-After`); never per username.",
        body={
            "type": "object",
            "required": ["username", "password"],
            "properties": {"username": STRING, "password": STRING},
        },
        responses=answer("Signed in: `{ok, user, csrf_token}`."),
    ),
    ("POST", "/api/v1/logout"): operation(
        "logout",
        "End the cookie session",
        tag="auth",
        security=MEMBER_WRITE,
        responses=answer("Signed out; the cookie is cleared."),
    ),
    ("GET", "/api/v1/me"): operation(
        "me",
        "Who is calling",
        tag="auth",
        security=MEMBER_READ,
        responses=answer("`{ok, user, via, csrf_token}` (`csrf_token` for cookie sessions)."),
    ),
    ("GET", "/login/{token}"): operation(
        "login_link_page",
        "The page of a one-time login link",
        tag="auth",
        security=NONE,
        description="Spends nothing: an HTML page whose Sign in button posts the link.",
        responses=media("The page with the Sign in button.", "text/html", "200"),
    ),
    ("POST", "/login/{token}"): operation(
        "login_link",
        "Sign in with a one-time login link",
        tag="auth",
        security=NONE,
        description="Posted by the link's own page: refused (403) when `Sec-Fetch-Site` is "
        "not `same-origin` or `Origin` is another site's; the link stays unspent then.",
        responses=media(
            "Signed in: a redirect to `/` setting the session cookie.", "text/html", "303"
        ),
    ),
}

_CHAT: Final[dict[tuple[str, str], Json]] = {
    ("GET", "/api/v1/conversations"): operation(
        "list_conversations",
        "The caller's conversations",
        tag="chat",
        security=MEMBER_READ,
        responses=answer("`{ok, conversations: [{conversation_id, title, role, created_at}]}`."),
    ),
    ("GET", "/api/v1/conversations/{conversation_id}"): operation(
        "get_conversation",
        "One conversation: its relays and members",
        tag="chat",
        security=MEMBER_READ,
        description="Role read. Not a member: 404, as for no such conversation.",
        responses=answer("`{ok, conversation_id, title, role, relays, members}`."),
    ),
    ("GET", "/api/v1/conversations/{conversation_id}/messages"): operation(
        "list_messages",
        "A page of the transcript, oldest first",
        tag="chat",
        security=MEMBER_READ,
        description="Role read.",
        parameters=[
            query("before", "Messages before this message id.", INTEGER),
            query("limit", "Page size, 1..200 (default 50).", INTEGER),
        ],
        responses=answer("`{ok, messages, has_more}`."),
    ),
    ("POST", "/api/v1/conversations/{conversation_id}/messages"): operation(
        "post_message",
        "Post a message; `/desktop …` runs the command",
        tag="chat",
        security=MEMBER_WRITE,
        description="Role write to store a message (a read member may "
        "run read-only `/desktop` commands). At most 4,000 characters.",
        body={"type": "object", "required": ["text"], "properties": {"text": STRING}},
        responses={
            **answer("Not stored (a read member's command): `{ok, message: null, reply}`."),
            **answer("Stored: `{ok, message, reply, private}`.", status="201"),
        },
    ),
    ("POST", "/api/v1/conversations/{conversation_id}/mcp"): operation(
        "mcp",
        "MCP over Streamable HTTP, bound to the conversation",
        tag="agents",
        security=API_TOKEN,
        description="One JSON-RPC message per POST (stateless: no "
        "`Mcp-Session-Id`; JSON answers). Tools are the typed actions the caller's role allows, "
        "without `conversation_id`. API tokens only. docs/mcp.md.",
        body={"$ref": "#/components/schemas/JsonRpcMessage"},
        responses={
            **answer("The JSON-RPC answer.", {"$ref": "#/components/schemas/JsonRpcMessage"}),
            "202": {"description": "A notification, accepted."},
        },
    ),
}

_ACTIONS_AND_EVENTS: Final[dict[tuple[str, str], Json]] = {
    ("GET", "/api/v1/actions"): operation(
        "list_actions",
        "Every typed action with its JSON Schema",
        tag="actions",
        security=MEMBER_READ,
        responses=answer("`{ok, actions: [{name, description, input_schema, required_role}]}`."),
    ),
    ("GET", "/api/v1/events"): operation(
        "events",
        "The conversation's live events (Server-Sent Events)",
        tag="events",
        security=MEMBER_READ,
        description="`desktop_inventory_changed`, `message_created`, "
        "`stream_reset`; keep-alive comments every 15 s; resumes after `Last-Event-ID`.",
        parameters=[
            query("conversation_id", "The conversation (role read).", STRING, required=True),
            query("last_event_id", "Resume after this event id (as the header).", STRING),
            header("Last-Event-ID", "Resume after this event id (`<ms>-<seq>`)."),
        ],
        responses=media("The event stream.", "text/event-stream"),
    ),
    ("GET", "/api/v1/openapi.json"): operation(
        "openapi",
        "This document",
        tag="meta",
        security=NONE,
        responses=answer(
            "OpenAPI 3.1, generated from the routes and the action registry.", {"type": "object"}
        ),
    ),
}

_VIEWER: Final[dict[tuple[str, str], Json]] = {
    ("GET", "/vnc/{desktop_session_id}/{token}/"): operation(
        "viewer_page",
        "The viewer page of a desktop",
        tag="viewer",
        security=NONE,
        description=VIEWER_AUTH,
        responses=media("The page (never cached).", "text/html"),
    ),
    (WEBSOCKET, "/vnc/{desktop_session_id}/{token}/websockify"): operation(
        "viewer_stream",
        "The desktop's VNC byte stream (WebSocket)",
        tag="viewer",
        security=NONE,
        description=VIEWER_AUTH,
        responses=upgrade("Binary RFB frames both ways."),
    ),
    (WEBSOCKET, "/vnc/{desktop_session_id}/{token}/audio"): operation(
        "viewer_audio",
        "The desktop's sound (WebSocket)",
        tag="viewer",
        security=NONE,
        description=VIEWER_AUTH,
        responses=upgrade("One Opus packet (48 kHz, 20 ms) a message."),
    ),
    ("GET", "/vnc/{sid}/{token}/keyboard-state"): operation(
        "viewer_keyboard_state",
        "The desktop's lock keys",
        tag="viewer",
        security=NONE,
        description=VIEWER_AUTH,
        responses=answer("`{ok, known, num_lock, caps_lock, scroll_lock}` (null: unknown)."),
    ),
    ("GET", "/vnc/{sid}/{token}/clipboard"): operation(
        "viewer_clipboard",
        "The desktop's clipboard text (a person's viewer)",
        tag="viewer",
        security=NONE,
        description=VIEWER_AUTH,
        responses=answer("`{ok, known, text, truncated}`; read back before a paste's V press."),
    ),
    ("GET", "/vnc/{sid}/{token}/clipboard-image"): operation(
        "viewer_clipboard_image",
        "The desktop's clipboard image (a person's viewer)",
        tag="viewer",
        security=NONE,
        description=VIEWER_AUTH,
        responses={
            **media("The desktop's CLIPBOARD as a PNG image.", "image/png"),
            "204": {"description": "The desktop's clipboard holds no image."},
        },
    ),
    ("PUT", "/vnc/{sid}/{token}/clipboard-image"): {
        **operation(
            "viewer_set_clipboard_image",
            "Put a PNG image on the desktop's clipboard (a person's viewer)",
            tag="viewer",
            security=NONE,
            description=f"{VIEWER_AUTH} The body is a PNG image of at most 8 MiB (415 for "
            "another type, 400 not a PNG, 413 larger); it is set as the desktop's user.",
            responses=answer("`{ok, set}`."),
        ),
        "requestBody": {"required": True, "content": {"image/png": {}}},
    },
    ("GET", "/vnc/{sid}/{token}/control"): operation(
        "viewer_control",
        "Who is in control of the desktop (Server-Sent Events)",
        tag="viewer",
        security=NONE,
        description=VIEWER_AUTH,
        responses=media("`control` and `agent_action` events.", "text/event-stream"),
    ),
    ("GET", "/novnc/{path}"): operation(
        "novnc_file",
        "noVNC's files",
        tag="viewer",
        security=NONE,
        responses=media("The file.", "application/octet-stream"),
    ),
    ("GET", "/viewer/{name}"): operation(
        "viewer_file",
        "The viewer page's scripts and styles",
        tag="viewer",
        security=NONE,
        responses=media("The file.", "application/octet-stream"),
    ),
}

_SERVICE: Final[dict[tuple[str, str], Json]] = {
    ("GET", "/"): operation(
        "web_app",
        "The web app (chat and dock)",
        tag="web",
        security=NONE,
        responses=media("The page.", "text/html"),
    ),
    ("GET", "/favicon.ico"): operation(
        "favicon",
        "The icon",
        tag="web",
        security=NONE,
        responses=media("The icon.", "image/x-icon"),
    ),
    ("GET", "/app/{path}"): operation(
        "web_file",
        "The web app's files",
        tag="web",
        security=NONE,
        responses=media("The file.", "application/octet-stream"),
    ),
    ("GET", "/healthz"): operation(
        "healthz",
        "The process answers",
        tag="operations",
        security=NONE,
        responses=answer("`{ok: true}`."),
    ),
    ("GET", "/readyz"): operation(
        "readyz",
        "The database (and Redis when clustered) answer",
        tag="operations",
        security=NONE,
        responses=answer(
            "`{ok, database, redis?, relays_connected}`; 503 when not ready.", {"type": "object"}
        ),
    ),
    ("GET", "/metrics"): operation(
        "metrics",
        "This replica's figures (Prometheus text format)",
        tag="operations",
        security=NONE,
        description="Not an API credential: `Authorization: Bearer "
        "<RELAYDESK_METRICS_TOKEN>` from any address (else 401); without a token configured "
        "the metrics are off (403). docs/operations.md lists the figures.",
        responses=media("The figures.", "text/plain"),
    ),
    (WEBSOCKET, "/relay/v1/connect"): operation(
        "relay_connect",
        "A relay's connection (WebSocket, subprotocol relaydesk.v1)",
        tag="relays",
        security=RELAY,
        description="docs/protocol.md.",
        responses=upgrade("The wire protocol v1."),
    ),
}

CUA_BASE: Final = "/api/v1/conversations/{conversation_id}/cua/{relay}/{kind}/{slot}"
CUA_AUTH: Final = (
    "An API token as `Authorization: Bearer rdk_…` or in Cua's `X-API-Key` header; the caller "
    "must be a member of the conversation. `{kind}` is `virtual` or `local`, `{slot}` e.g. "
    "`main`. docs/cua.md."
)
_CUA_KEY: Final = header("X-API-Key", "An API token (instead of Authorization).")
_CUA_GUARD: Final = query(
    "guard",
    "`off` turns the session's click guard off (default on); "
    "`off/cmd`, `off/ws`… when a client appended the endpoint to a base "
    "URL that ends in `?guard=off`.",
    STRING,
)
_CUA_COMMAND: Final[Json] = {
    "type": "object",
    "required": ["command"],
    "properties": {"command": STRING, "params": {"type": "object"}},
}
_CUA_CMD: Final = operation(
    "cua_cmd",
    "One Cua computer-server command",
    tag="agents",
    security=API_TOKEN,
    description=f'{CUA_AUTH} Answers `text/plain` `data: {{"success": …}}` (failures too); an '
    "unknown command is 400 with a did-you-mean.",
    parameters=[_CUA_KEY, _CUA_GUARD],
    body=_CUA_COMMAND,
    responses=media("`data: {json}`.", "text/plain"),
)
_CUA_WS: Final = operation(
    "cua_ws",
    "Cua computer-server commands over a WebSocket",
    tag="agents",
    security=API_TOKEN,
    description=f"{CUA_AUTH} One JSON reply per command, in order.",
    parameters=[_CUA_KEY, _CUA_GUARD],
    responses=upgrade("JSON text messages both ways."),
)
_CUA: Final[dict[tuple[str, str], Json]] = {
    ("POST", f"{CUA_BASE}/cmd"): _CUA_CMD,
    (WEBSOCKET, f"{CUA_BASE}/ws"): _CUA_WS,
    ("GET", f"{CUA_BASE}/commands"): operation(
        "cua_commands",
        "The Cua commands this desktop offers",
        tag="agents",
        security=API_TOKEN,
        description=CUA_AUTH,
        parameters=[_CUA_KEY],
        responses=answer("`{commands: {name: {params, aliases?}}, aliases}`.", {"type": "object"}),
    ),
    ("GET", f"{CUA_BASE}/status"): operation(
        "cua_status",
        "Cua's status answer for this desktop",
        tag="agents",
        security=API_TOKEN,
        description=CUA_AUTH,
        parameters=[_CUA_KEY],
        responses=answer(
            "`{status: ok, os_type: linux, features, relaydesk: {…}}`.", {"type": "object"}
        ),
    ),
    ("POST", CUA_BASE): {
        **_CUA_CMD,
        "operationId": "cua_cmd_suffixed",
        "summary": "`/cmd` reached as `?guard=off/cmd`",
    },
    ("GET", CUA_BASE): operation(
        "cua_get_suffixed",
        "`/status` or `/commands` reached as `?guard=off/status`",
        tag="agents",
        security=API_TOKEN,
        description=CUA_AUTH,
        parameters=[_CUA_KEY, _CUA_GUARD],
        responses=answer("As `/status` or `/commands`.", {"type": "object"}),
    ),
    (WEBSOCKET, CUA_BASE): {
        **_CUA_WS,
        "operationId": "cua_ws_suffixed",
        "summary": "`/ws` reached as `?guard=off/ws`",
    },
}

CDP_BASE: Final = "/api/v1/conversations/{conversation_id}/cdp/{relay}/{kind}/{slot}"
CDP_AUTH: Final = (
    "An API token as `Authorization: Bearer rdk_…` of a member with role `write`; the desktop's "
    "browser, reached over its private DevTools pipe. docs/browser.md."
)
_CDP_VERSION: Final = operation(
    "cdp_version",
    "CDP discovery for connect_over_cdp",
    tag="agents",
    security=API_TOKEN,
    description=f"{CDP_AUTH} Answers `Browser`, `Protocol-Version` and `webSocketDebuggerUrl` "
    "(this server's own WebSocket for the desktop).",
    responses=answer("Chromium's `/json/version` answer.", {"type": "object"}),
)
_CDP: Final[dict[tuple[str, str], Json]] = {
    ("GET", f"{CDP_BASE}/json/version"): _CDP_VERSION,
    ("GET", f"{CDP_BASE}/json/version/"): {**_CDP_VERSION, "operationId": "cdp_version_slash"},
    (WEBSOCKET, CDP_BASE): operation(
        "cdp_socket",
        "The desktop's browser over the Chrome DevTools Protocol",
        tag="agents",
        security=API_TOKEN,
        description=f"{CDP_AUTH} Input, navigation and page writes pass the control gate (a "
        "takeover answers a CDP error; Stop closes the socket, 4430); methods that would end the "
        "browser are refused.",
        responses=upgrade("CDP JSON messages both ways."),
    ),
}

CU_ROOT: Final = "/api/v1/conversations/{conversation_id}/computer-use"
CU_TARGET: Final = "{relay}/{kind}/{slot}"
CU_AUTH: Final = (
    "An API token as `Authorization: Bearer rdk_…`; the caller must be a member of the "
    "conversation. `{kind}` is `virtual`, `docker` or `local`, `{slot}` e.g. `main`. "
    "docs/computer-use.md."
)
_CU_DISPLAY: Final = query(
    "display",
    "`WIDTHxHEIGHT`: the display the model is told about (screenshots are scaled to it, its "
    "points mapped back exactly); default the largest size with the screen's aspect ratio "
    "under Anthropic's image limits.",
    STRING,
)
_CU_OBJECT: Final[Json] = {"type": "object"}
_CU: Final[dict[tuple[str, str], Json]] = {
    ("GET", f"{CU_ROOT}/anthropic/{CU_TARGET}/tool"): operation(
        "computer_use_anthropic_tool",
        "Anthropic's computer tool definition for this desktop",
        tag="agents",
        security=API_TOKEN,
        description=CU_AUTH,
        parameters=[
            _CU_DISPLAY,
            query(
                "version",
                "`computer_20251124` (default, with zoom) or `computer_20250124`.",
                STRING,
            ),
        ],
        responses=answer(
            "`{type, name, display_width_px, display_height_px, enable_zoom?}`; "
            "the beta flag in `X-Anthropic-Beta`.",
            _CU_OBJECT,
        ),
    ),
    ("POST", f"{CU_ROOT}/anthropic/{CU_TARGET}"): operation(
        "computer_use_anthropic",
        "Run one Anthropic computer tool call",
        tag="agents",
        security=API_TOKEN,
        parameters=[_CU_DISPLAY],
        body=_CU_OBJECT,
        description=f"{CU_AUTH} The body is the `input` of the `tool_use` block, verbatim; "
        "the answer is `{content, is_error}` for the `tool_result`. Input that does not fit "
        "the tool is 400 naming the field (with `content` and `is_error` too).",
        responses=answer("`{content: [text | image blocks], is_error}`.", _CU_OBJECT),
    ),
    ("GET", f"{CU_ROOT}/openai/{CU_TARGET}/tool"): operation(
        "computer_use_openai_tool",
        "OpenAI's computer-use tool definition for this desktop",
        tag="agents",
        security=API_TOKEN,
        description=CU_AUTH,
        parameters=[_CU_DISPLAY],
        responses=answer(
            "`{type, display_width, display_height, environment: linux}`.", _CU_OBJECT
        ),
    ),
    ("POST", f"{CU_ROOT}/openai/{CU_TARGET}"): operation(
        "computer_use_openai",
        "Run one OpenAI computer_call",
        tag="agents",
        security=API_TOKEN,
        parameters=[_CU_DISPLAY],
        body=_CU_OBJECT,
        description=f"{CU_AUTH} The body is the `computer_call` item (or `{{action}}` / "
        "`{actions}`), verbatim; the answer is its `computer_call_output` item. Input that "
        "does not fit the tool is 400 naming the field.",
        responses=answer("`{type: computer_call_output, call_id, output}`.", _CU_OBJECT),
    ),
}

FILES_BASE: Final = "/api/v1/conversations/{conversation_id}/files/{relay}/{kind}/{slot}"
FILES_AUTH: Final = (
    "A member of the conversation (API token or cookie session). `{kind}` is `virtual`, "
    "`{slot}` e.g. `main`. Paths are in the desktop's home: `..`, symbolic links, FIFOs and "
    "devices are refused with 403 `path_outside_home`; files over RELAYDESK_FILE_MAX_MB with "
    "413 `file_too_large`. docs/files.md."
)
_FILE_PATH: Final = query(
    "path",
    "A path in the desktop's home (relative, `~/…`, or absolute inside it).",
    STRING,
    required=True,
)
_FILE_OFFSET: Final = query("offset", "Start at this byte (a resume); default 0.", INTEGER)
_FILE_SESSION: Final = query(
    "desktop_session_id", "The exact desktop instead of the relay's `{kind}/{slot}` one.", STRING
)
_FILES: Final[dict[tuple[str, str], Json]] = {
    ("POST", f"{FILES_BASE}/upload"): {
        **operation(
            "file_upload",
            "Upload a file into a desktop's home (a byte stream)",
            tag="files",
            security=MEMBER_WRITE,
            description=f"{FILES_AUTH} Role write; an agent passes the control gate (423 "
            "`takeover_active`, 409 `stopped_by_user`). The body is the file's bytes from "
            "`offset` (`Content-Length` required, else 411); the file is `offset + "
            "Content-Length` bytes. A cut upload keeps what arrived: `GET …/upload` answers "
            "how much, and a POST from there finishes it (409 `offset_mismatch` otherwise).",
            parameters=[
                _FILE_PATH,
                _FILE_OFFSET,
                _FILE_SESSION,
                query(
                    "exists",
                    "What to do when the file exists: `rename` (default: a copy "
                    "`name (1).ext`), `replace`, or `refuse` (400).",
                    STRING,
                ),
            ],
            responses=answer(
                "`{ok, path (where it landed, home-relative), size, desktop_session_id}`."
            ),
        ),
        "requestBody": {"required": True, "content": {"application/octet-stream": {}}},
    },
    ("GET", f"{FILES_BASE}/upload"): operation(
        "file_upload_offset",
        "How much of a cut upload the desktop holds",
        tag="files",
        security=MEMBER_WRITE,
        description=FILES_AUTH,
        parameters=[_FILE_PATH, _FILE_SESSION],
        responses=answer("`{ok, path, offset}` (0: nothing held)."),
    ),
    ("GET", f"{FILES_BASE}/download"): operation(
        "file_download",
        "Download a file from a desktop's home (a byte stream)",
        tag="files",
        security=MEMBER_READ,
        description=f"{FILES_AUTH} Role read. `X-Relaydesk-File-Size` "
        "carries the whole file's size.",
        parameters=[_FILE_PATH, _FILE_OFFSET, _FILE_SESSION],
        responses=media("The file's bytes from `offset`.", "application/octet-stream"),
    ),
}

DESCRIBED: Final[dict[tuple[str, str], Json]] = {
    **_SESSION,
    **_CHAT,
    **_ACTIONS_AND_EVENTS,
    **_VIEWER,
    **_SERVICE,
    **_CUA,
    **_CDP,
    **_CU,
    **_FILES,
    **RECORDINGS,
}
# Replica-to-replica routes (signed with the cluster secret): not part of the API.
INTERNAL_PREFIX: Final = "/internal/"
