"""Bad input on every HTTP route and every WebSocket a stranger can reach: a clear 4xx, never 500.

The routes are enumerated from the real app, so a new route is covered without editing this
file. A real server runs in a background thread (uvicorn on a loopback port) so hypothesis can
drive it with a plain client; callers are authenticated for real (bearer token, or cookie plus
CSRF token) so each handler's own parsing is reached. Any ERROR log record or traceback during
a request fails the test, and the server must still answer afterwards.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute

from server.actions.registry import ActionRegistry
from server.computer_use import anthropic, openai
from tests.support.background import ErrorRecords, error_records, in_background_thread
from tests.support.examples import examples
from tests.support.processes import scaled
from tests.support.routes import routes_of_a_fresh_app
from tests.support.stack import Seed, inprocess_server, seed_database
from wire.errors import ErrorCode

pytestmark = pytest.mark.unit

CODES = {code.value for code in ErrorCode}
# Every status a bad request may get. 502/503/504 are the relay's (it is not connected here).
FINE = {200, 201, 303, 400, 401, 403, 404, 405, 409, 413, 415, 429, 502, 503, 504}


@dataclass
class Live:
    """The running server, its app and an authenticated identity of each kind."""

    base: str
    app: Starlette
    seed: Seed
    csrf: str
    cookie: str
    errors: ErrorRecords
    client: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.client = httpx.Client(base_url=self.base, timeout=scaled(10))

    def auth(self, how: str) -> dict[str, str]:
        if how == "bearer":
            return {"Authorization": f"Bearer {self.seed.api_token}"}
        if how == "cookie":
            return {"Cookie": f"relaydesk_session={self.cookie}", "X-CSRF-Token": self.csrf}
        return {}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    seed = asyncio.run(seed_database(tmp_path_factory.mktemp("bad-input") / "data"))
    with (
        in_background_thread(lambda: inprocess_server(seed)) as (app, base),
        error_records() as errors,
    ):
        login = httpx.post(
            f"{base}/api/v1/login",
            json={"username": "alice", "password": seed.user["password"]},
            timeout=scaled(10),
        )
        assert login.status_code == 200, login.text
        live = Live(
            base, app, seed, login.json()["csrf_token"], login.cookies["relaydesk_session"], errors
        )
        yield live
        live.client.close()


# -- the routes, as the app has them ------------------------------------------------------------


def http_routes(routes: Iterable[BaseRoute]) -> list[tuple[str, str]]:
    """(method, path template) of every HTTP endpoint; a mount gets one file path."""
    found: list[tuple[str, str]] = []
    for route in routes:
        if isinstance(route, Route):
            found += [(m, route.path) for m in sorted(route.methods or {"GET"}) if m != "HEAD"]
        elif isinstance(route, Mount):
            found.append(("GET", route.path + "/{path}"))
    return found


def websocket_routes(app: Starlette) -> list[str]:
    return [route.path for route in app.routes if isinstance(route, WebSocketRoute)]


ROUTES = http_routes(routes_of_a_fresh_app())

# -- inputs ------------------------------------------------------------------------------------

GARBAGE_TEXT = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=st.characters(min_codepoint=0x80, codec="utf-8"), min_size=1, max_size=40),
    st.sampled_from(["\x00", "%00", "a" * 5000, "é" * 300, "..", "%", "\ufeff", "1" * 5000]),
)
JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=30)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
RAW_BODIES = st.one_of(
    st.binary(max_size=200),
    st.integers(1, 100_000).map(lambda n: b"[" * n + b"]" * n),
    st.integers(1, 50_000).map(lambda n: b'{"a":' * n + b"1" + b"}" * n),
    st.sampled_from(
        [
            b'{"text": "\\ud800"}',
            b'{"\\udfff": 1}',
            b'{"username": "\\ud800", "password": "x"}',
            b'{"x": 1' + b"0" * 5000 + b"}",
            b'{"x": 1e999}',
            b'{"x": NaN}',
            b"\xff\xfe{}",
            b'{"text": "a\\u0000b"}',
            b"",
            b"null",
            b"[]",
            b'"str"',
            b"{" + b" " * 70_000 + b"}",
        ]
    ),
)
CONTENT_TYPES = st.sampled_from(
    [
        "application/json",
        "application/json; charset=utf-8",
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        None,
        "é/ü",
        "",
    ]
)


@st.composite
def requests(draw: st.DrawFn, live: Live, method: str, template: str) -> dict[str, Any]:
    """One request to ``template``: real or garbage path params, a body, a type, a caller."""
    names = ActionRegistry.names(live.app.state.parts.actions.registry)
    real = {
        "conversation_id": live.seed.conversation_id,
        "name": draw(st.sampled_from(names)),
        "desktop_session_id": "a" * 32,
        "token": "x",
        "path": "app.js",
    }
    path = template
    for param in ("conversation_id", "name", "desktop_session_id", "token", "path"):
        for holder in (f"{{{param}}}", f"{{{param}:path}}"):
            if holder in path:
                value = draw(st.one_of(st.just(real[param]), GARBAGE_TEXT))
                path = path.replace(holder, quote(value, safe="") or "x")
    obj = draw(st.dictionaries(st.text(max_size=12), JSON_VALUES, max_size=4))
    obj = {**obj, "conversation_id": draw(st.one_of(st.just(real["conversation_id"]), JSON_VALUES))}
    body = draw(st.one_of(st.builds(lambda o: httpx_json(o), st.just(obj)), RAW_BODIES))
    query = draw(
        st.dictionaries(
            st.sampled_from(["conversation_id", "before", "limit", "last_event_id", "x"]),
            GARBAGE_TEXT,
            max_size=3,
        )
    )
    # Logging out the shared cookie session would leave the later tests without one.
    callers = ["bearer", "none"] if template == "/api/v1/logout" else ["bearer", "cookie", "none"]
    headers = live.auth(draw(st.sampled_from(callers)))
    content_type = draw(CONTENT_TYPES)
    if content_type is not None:
        headers["Content-Type"] = content_type.encode()  # type: ignore[assignment]
    return {
        "method": method,
        "url": path,
        "params": query,
        "headers": headers,
        "content": body if method != "GET" else None,
    }


def httpx_json(value: Any) -> bytes:
    return json.dumps(value).encode()


def send(live: Live, request: dict[str, Any]) -> tuple[int, str, bytes]:
    """Status, content type and body (an event stream is closed after its headers)."""
    with live.client.stream(**request) as response:
        kind = response.headers.get("content-type", "")
        body = b"" if kind.startswith("text/event-stream") else response.read()
        return response.status_code, kind, body


def assert_clear_answer(live: Live, request: dict[str, Any], before: int) -> None:
    status, kind, body = send(live, request)
    assert status in FINE, (status, request["method"], request["url"], body[:300])
    if status >= 400 and kind.startswith("application/json"):
        answer = json.loads(body)
        if "jsonrpc" in answer:  # the MCP endpoint: the protocol's own error object
            assert isinstance(answer["error"]["code"], int) and answer["error"]["message"], answer
        else:
            error = answer["error"]
            assert error["code"] in CODES and error["message"], error
    if request["url"].startswith("/api/") and status >= 400:
        assert kind.startswith("application/json"), (status, request["url"], body[:200])
    assert live.errors.records[before:] == [], [r.getMessage() for r in live.errors.records]
    assert live.client.get("/healthz").status_code == 200


@pytest.mark.parametrize(("method", "template"), ROUTES, ids=[f"{m} {p}" for m, p in ROUTES])
def test_every_route_answers_bad_input_with_a_clear_4xx(
    live: Live, method: str, template: str
) -> None:
    @settings(
        max_examples=examples(40),
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(request=requests(live, method, template))
    def check(request: dict[str, Any]) -> None:
        assert_clear_answer(live, request, len(live.errors.records))

    check()


def test_the_route_list_is_the_apps() -> None:
    """The sweep above covers what the app serves (a new route joins it by itself)."""
    paths = {path for _, path in ROUTES}
    assert {
        "/api/v1/login",
        "/api/v1/actions/{name}",
        "/api/v1/events",
        "/api/v1/conversations/{conversation_id}/messages",
    } <= paths


# -- the regressions of the attack run, one by one ---------------------------------------------


def _post(
    live: Live,
    path: str,
    content: bytes,
    how: str = "bearer",
    content_type: str = "application/json",
) -> httpx.Response:
    headers = {**live.auth(how), "Content-Type": content_type}
    return live.client.post(path, content=content, headers=headers)


def _error(response: httpx.Response) -> dict[str, Any]:
    body: dict[str, Any] = response.json()
    assert body["ok"] is False
    error: dict[str, Any] = body["error"]
    return error


@pytest.mark.parametrize(
    ("content", "field"),
    [
        (b'{"username": "\\ud800", "password": "x"}', "username"),
        (b'{"username": "alice", "password": "\\udc00"}', "password"),
        (b"[" * 4000 + b"]" * 4000, "body"),
        (b'{"username": "a", "password": "b", "n": 1' + b"0" * 5000 + b"}", "n"),
    ],
)
def test_login_refuses_invalid_text_and_deep_bodies_with_400(
    live: Live, content: bytes, field: str
) -> None:
    headers = {"Content-Type": "application/json"}
    response = live.client.post("/api/v1/login", content=content, headers=headers)
    assert response.status_code == 400, response.text
    assert _error(response)["field"] == field


def test_a_lone_surrogate_in_an_action_or_a_message_is_400(live: Live) -> None:
    action = _post(live, "/api/v1/actions/desktop_list_active", b'{"conversation_id": "\\ud800"}')
    assert action.status_code == 400 and _error(action)["field"] == "conversation_id"
    url = f"/api/v1/conversations/{live.seed.conversation_id}/messages"
    for how in ("bearer", "cookie"):
        message = _post(live, url, b'{"text": "hi \\ud800"}', how)
        assert message.status_code == 400 and _error(message)["field"] == "text"


def test_bodies_need_the_json_content_type(live: Live) -> None:
    url = f"/api/v1/conversations/{live.seed.conversation_id}/messages"
    response = _post(live, url, b'{"text": "hi"}', content_type="text/plain")
    assert response.status_code == 415
    assert _error(response)["code"] == "unsupported_media_type"


def test_an_oversized_chunked_body_is_refused_without_reading_it_all(live: Live) -> None:
    sent = [0]

    def chunks() -> Iterator[bytes]:
        for _ in range(64):  # 64 MiB if the server kept reading
            sent[0] += 1
            yield b" " * (1024 * 1024)

    url = "/api/v1/actions/desktop_list_active"
    headers = {**live.auth("bearer"), "Content-Type": "application/json"}
    try:
        response = live.client.post(url, content=chunks(), headers=headers)
    except httpx.TransportError:
        return  # the server answered and closed while we were still sending: also refused
    assert response.status_code == 413 and _error(response)["code"] == "limit_reached"


def test_a_last_event_id_beyond_64_bits_is_400(live: Live) -> None:
    url = f"/api/v1/events?conversation_id={live.seed.conversation_id}"
    for bad in ("18446744073709551616-0", "1-18446744073709551616", "x" * 500):
        response = live.client.get(url, headers={**live.auth("bearer"), "Last-Event-ID": bad})
        assert response.status_code == 400, bad
        assert _error(response)["field"] == "Last-Event-ID"
    # Other scripts' digits (str.isdigit() accepts them) in the query form of the id.
    response = live.client.get(url + "&last_event_id=%D9%A1%D9%A2-3", headers=live.auth("bearer"))
    assert response.status_code == 400


def test_a_foreign_host_is_400_before_any_route(live: Live) -> None:
    """DNS rebinding: the browser sends the attacker's name as Host, with its own Origin."""
    rebinding = {"Host": "evil.example:8400", "Origin": "http://evil.example:8400"}
    response = live.client.get("/api/v1/me", headers={**live.auth("cookie"), **rebinding})
    assert response.status_code == 400 and _error(response)["field"] == "Host"
    login = live.client.post(
        "/api/v1/login", headers=rebinding, json={"username": "alice", "password": "x"}
    )
    assert login.status_code == 400 and "set-cookie" not in login.headers
    assert live.client.get("/healthz", headers={"Host": "localhost:1"}).status_code == 200


def test_a_cross_site_post_is_403(live: Live) -> None:
    url = f"/api/v1/conversations/{live.seed.conversation_id}/messages"
    headers = {**live.auth("cookie"), "Origin": "https://evil.example"}
    response = live.client.post(url, json={"text": "hi"}, headers=headers)
    assert response.status_code == 403 and _error(response)["field"] == "Origin"


# -- WebSockets a stranger can reach ------------------------------------------------------------

WS_GARBAGE = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=st.characters(min_codepoint=0x80, codec="utf-8"), min_size=1, max_size=40),
    st.sampled_from(["\x00", "%00", "a" * 1500, "é" * 200, "1" * 1500, "b" * 9000]),
)


@pytest.mark.parametrize(("line", "status"), [("path", 414), ("header", 431)])
async def test_an_oversized_upgrade_request_is_answered_at_once(
    live: Live, line: str, status: int
) -> None:
    # websockets refuses a request line or header over 8 KiB itself; the answer must reach the
    # client (it used to be dropped, leaving the client waiting until its own timeout).
    host, port = live.base.removeprefix("http://").split(":")
    path = "/vnc/" + "a" * (9000 if line == "path" else 10) + "/t/websockify"
    extra = f"X-Big: {'b' * 9000}\r\n" if line == "header" else ""
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        f"Sec-WebSocket-Version: 13\r\n{extra}\r\n"
    )
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(request.encode())
    answer = await asyncio.wait_for(reader.readline(), scaled(5))
    writer.close()
    assert answer.startswith(f"HTTP/1.1 {status} ".encode()), answer


def test_the_websocket_routes_are_the_apps(live: Live) -> None:
    assert {
        "/vnc/{desktop_session_id}/{token}/websockify",
        "/vnc/{desktop_session_id}/{token}/audio",
    } <= set(websocket_routes(live.app))


@pytest.mark.parametrize("suffix", ["websockify", "audio"])
def test_viewer_websockets_refuse_garbage_sessions_and_tokens(live: Live, suffix: str) -> None:
    @settings(
        max_examples=examples(25),
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(session=WS_GARBAGE, token=WS_GARBAGE)
    def check(session: str, token: str) -> None:
        before = len(live.errors.records)
        url = (
            f"{live.base.replace('http', 'ws')}/vnc/{quote(session, safe='') or 'x'}/"
            f"{quote(token, safe='') or 'x'}/{suffix}"
        )
        status = asyncio.run(_ws_outcome(url))
        # The viewer's own refusals (44xx) or a policy close; never an internal error (1011).
        assert status in {"refused", "404", "closed 1008"} or status.startswith("closed 44"), status
        assert live.errors.records[before:] == []
        assert live.client.get("/healthz").status_code == 200

    check()


async def _ws_outcome(url: str) -> str:
    """How the server ended a viewer handshake: a close code, refused, or not found."""
    import websockets
    from websockets.exceptions import ConnectionClosed, InvalidStatus

    subprotocols = [websockets.Subprotocol("binary")]
    try:
        async with websockets.connect(
            url, subprotocols=subprotocols, open_timeout=scaled(5)
        ) as socket:
            await asyncio.wait_for(socket.recv(), scaled(5))
    except ConnectionClosed as closed:
        return f"closed {closed.rcvd.code if closed.rcvd else None}"
    except InvalidStatus as invalid:
        return "404" if invalid.response.status_code == 404 else "refused"
    return "answered"


async def test_a_cross_site_viewer_websocket_is_refused(live: Live) -> None:
    import websockets
    from websockets.exceptions import InvalidStatus

    url = f"{live.base.replace('http', 'ws')}/vnc/a/b/websockify"
    with pytest.raises(InvalidStatus) as refused:
        async with websockets.connect(url, origin=websockets.Origin("https://evil.example")):
            pass
    assert refused.value.response.status_code == 403


def test_a_cross_site_login_form_logs_nobody_in(live: Live) -> None:
    """Login CSRF: another site's ``text/plain`` form carrying the attacker's credentials."""
    form = json.dumps({"username": "alice", "password": live.seed.user["password"]}).encode()
    cross_site = {"Content-Type": "text/plain", "Origin": "https://evil.example"}
    for headers in (cross_site, {"Content-Type": "text/plain"}):
        response = live.client.post("/api/v1/login", content=form, headers=headers)
        assert response.status_code in (403, 415), response.text
        assert "set-cookie" not in response.headers


def test_one_stream_over_the_cap_is_429_naming_it(live: Live) -> None:
    caps = live.app.state.parts.streams.limits
    url = f"/api/v1/events?conversation_id={live.seed.conversation_id}"
    saved, caps.per_principal = caps.per_principal, 1
    try:
        with live.client.stream("GET", url, headers=live.auth("bearer")) as held:
            assert held.status_code == 200
            response = live.client.get(url, headers=live.auth("cookie"))  # same user, other way
    finally:
        caps.per_principal = saved
    assert response.status_code == 429
    error = _error(response)
    assert (error["code"], error["limit"]) == ("limit_reached", 1)
    assert "RELAYDESK_MAX_STREAMS_PER_PRINCIPAL" in error["message"]
    assert "RELAYDESK_MAX_STREAMS_PER_PRINCIPAL" in error["hint"]


# -- the computer-use doors: tool calls as a model might garble them ------------------------------

TOOL_FIELDS = st.sampled_from(
    [
        "action",
        "coordinate",
        "start_coordinate",
        "text",
        "scroll_direction",
        "scroll_amount",
        "duration",
        "region",
        "actions",
        "call_id",
        "pending_safety_checks",
    ]
)
OPENAI_FIELDS = st.sampled_from(["type", "x", "y", "button", "keys", "path", "text", "scroll_y"])


def _door_url(live: Live, door: str) -> str:
    root = f"/api/v1/conversations/{live.seed.conversation_id}/computer-use"
    return f"{root}/{door}/relay-1/virtual/main"


@st.composite
def tool_calls(draw: st.DrawFn, door: str) -> dict[str, Any]:
    body = draw(st.dictionaries(TOOL_FIELDS, JSON_VALUES, max_size=5))
    if door == "anthropic" and draw(st.booleans()):
        body["action"] = draw(st.sampled_from(sorted(anthropic.ACTIONS)))
    if door == "openai" and draw(st.booleans()):
        action = draw(st.dictionaries(OPENAI_FIELDS, JSON_VALUES, max_size=4))
        action["type"] = draw(st.sampled_from([*sorted(openai.ACTIONS), "clik", ""]))
        body["action"] = action
    return body


@pytest.mark.parametrize("door", ["anthropic", "openai"])
def test_the_computer_use_doors_answer_garbled_tool_calls_clearly(live: Live, door: str) -> None:
    url = _door_url(live, door)
    headers = {**live.auth("bearer"), "Content-Type": "application/json"}

    @settings(
        max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
    )
    @given(body=tool_calls(door))
    def check(body: dict[str, Any]) -> None:
        request = {
            "method": "POST",
            "url": url,
            "params": {},
            "headers": headers,
            "content": httpx_json(body),
        }
        assert_clear_answer(live, request, len(live.errors.records))

    check()


@pytest.mark.parametrize(
    ("door", "body", "field", "words"),
    [
        ("anthropic", {"action": "screenshoot"}, "action", "Did you mean: screenshot"),
        ("anthropic", {"action": 3}, "action", "required"),
        ("anthropic", {}, "action", "required"),
        (
            "openai",
            {"action": {"type": "doubleclick", "x": 1, "y": 1}},
            "action.type",
            "Did you mean: double_click",
        ),
        ("openai", {"actions": "click"}, "actions", "list"),
        ("openai", {"action": {"type": "wait"}, "call_id": 7}, "call_id", "string"),
    ],
)
def test_computer_use_tool_calls_that_fit_no_action_are_400_naming_the_field(
    live: Live, door: str, body: dict[str, Any], field: str, words: str
) -> None:
    url = _door_url(live, door)
    response = _post(live, url, httpx_json(body))
    assert response.status_code == 400, response.text
    error = _error(response)
    assert error["field"] == field and words in error["message"], error
