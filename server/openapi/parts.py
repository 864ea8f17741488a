"""Small builders of OpenAPI 3.1 objects, and the components every operation refers to."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from wire.errors import ErrorCode

Json = dict[str, Any]

# Who may call an operation: an OpenAPI security requirement list per kind of caller.
API_TOKEN: Final[list[Json]] = [{"apiToken": []}]
MEMBER_READ: Final[list[Json]] = [{"apiToken": []}, {"sessionCookie": []}]
MEMBER_WRITE: Final[list[Json]] = [{"apiToken": []}, {"sessionCookie": [], "csrfToken": []}]
RELAY: Final[list[Json]] = [{"relayToken": []}]
# No credential: public, or a capability in the path (described on the operation).
NONE: Final[list[Json]] = []

SECURITY_SCHEMES: Final[Json] = {
    "apiToken": {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "rdk_…",
        "description": "An API token (`relaydesk admin create-token USER`). A request with an "
        "`Authorization` header is judged by it alone.",
    },
    "sessionCookie": {
        "type": "apiKey",
        "in": "cookie",
        "name": "relaydesk_session",
        "description": "The browser's session (`POST /api/v1/login`).",
    },
    "csrfToken": {
        "type": "apiKey",
        "in": "header",
        "name": "X-CSRF-Token",
        "description": "With the session cookie, every unsafe request carries the session's CSRF "
        "token (`GET /api/v1/me` hands it out).",
    },
    "relayToken": {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "rdr_…",
        "description": "A relay's token (`relaydesk admin add-relay`).",
    },
}

ERROR_SCHEMA: Final[Json] = {
    "type": "object",
    "required": ["ok", "error"],
    "properties": {
        "ok": {"const": False},
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "string", "enum": [code.value for code in ErrorCode]},
                "message": {"type": "string"},
                "field": {"type": "string", "description": "The argument or part at fault."},
                "hint": {"type": "string"},
                "suggestion": {"type": "string", "description": "What to do next."},
            },
            "additionalProperties": True,
        },
    },
}
ANSWER_SCHEMA: Final[Json] = {
    "type": "object",
    "required": ["ok"],
    "properties": {"ok": {"const": True}},
    "additionalProperties": True,
}
JSON_RPC_SCHEMA: Final[Json] = {
    "type": "object",
    "required": ["jsonrpc"],
    "properties": {
        "jsonrpc": {"const": "2.0"},
        "id": {"type": ["string", "integer"]},
        "method": {"type": "string"},
        "params": {"type": "object"},
        "result": {"type": "object"},
        "error": {"type": "object"},
    },
}

COMPONENTS: Final[Json] = {
    "securitySchemes": SECURITY_SCHEMES,
    "schemas": {"Error": ERROR_SCHEMA, "Answer": ANSWER_SCHEMA, "JsonRpcMessage": JSON_RPC_SCHEMA},
    "responses": {
        "Error": {
            "description": "The one error body; the status follows its code (docs/http-api.md).",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
        },
    },
}
ERRORS: Final[Json] = {
    "4XX": {"$ref": "#/components/responses/Error"},
    "5XX": {"$ref": "#/components/responses/Error"},
}

# What a path parameter is, by its name in the route.
PATH_PARAMETERS: Final[Mapping[str, str]] = {
    "conversation_id": "A conversation the caller is a member of.",
    "desktop_session_id": "The desktop session the viewer capability was issued for.",
    "sid": "The desktop session the viewer capability was issued for.",
    "token": "A capability: the viewer token of a viewer URL, or a one-time login link. Treat "
    "the whole URL like a password.",
    "path": "A file path under the mount.",
    "name": "A file name.",
}


def json_content(schema: Json) -> Json:
    return {"application/json": {"schema": schema}}


def answer(description: str, schema: Json | None = None, status: str = "200") -> Json:
    """A JSON success response (the ``Answer`` schema unless one is given), plus the errors."""
    body = schema if schema is not None else {"$ref": "#/components/schemas/Answer"}
    return {status: {"description": description, "content": json_content(body)}, **ERRORS}


def media(description: str, media_type: str, status: str = "200") -> Json:
    """A non-JSON success response (a page, a stream, a file), plus the errors."""
    return {status: {"description": description, "content": {media_type: {}}}, **ERRORS}


def upgrade(description: str) -> Json:
    """A WebSocket handshake's answer."""
    return {"101": {"description": description}, **ERRORS}


def query(name: str, description: str, schema: Json, *, required: bool = False) -> Json:
    return {
        "name": name,
        "in": "query",
        "required": required,
        "description": description,
        "schema": schema,
    }


def header(name: str, description: str) -> Json:
    return {
        "name": name,
        "in": "header",
        "required": False,
        "description": description,
        "schema": {"type": "string"},
    }


def path_parameters(names: Iterable[str]) -> list[Json]:
    return [
        {
            "name": name,
            "in": "path",
            "required": True,
            "schema": {"type": "string"},
            "description": PATH_PARAMETERS.get(name, name),
        }
        for name in names
    ]


def operation(
    operation_id: str,
    summary: str,
    *,
    tag: str,
    security: list[Json],
    responses: Json,
    description: str = "",
    parameters: Iterable[Json] = (),
    body: Json | None = None,
) -> Json:
    """One OpenAPI operation object (path parameters are added where the path is known)."""
    op: Json = {
        "operationId": operation_id,
        "summary": summary,
        "tags": [tag],
        "security": security,
        "responses": responses,
    }
    if description:
        op["description"] = description
    if parameters:
        op["parameters"] = list(parameters)
    if body is not None:
        op["requestBody"] = {"required": True, "content": json_content(body)}
    return op
