"""Authentication errors and their JSON responses.

Tree (under ``wire.errors.RelaydeskError``)::

    AuthError           the request cannot proceed as this caller
    ├── Unauthorized    no valid credentials (401)
    │   └── TokenExpired  an API token past its expiry (401 token_expired)
    ├── Forbidden       valid credentials, but not allowed (missing CSRF token, …) (403)
    └── RateLimited     too many failed logins; carries ``retry_after_s`` (429)
"""

from __future__ import annotations

import math

from starlette.requests import Request
from starlette.responses import Response

from server import errors
from server.json_response import JSONResponse
from wire.errors import ErrorCode, RelaydeskError


class AuthError(RelaydeskError):
    """The request cannot proceed as this caller."""


class Unauthorized(AuthError):
    code = ErrorCode.UNAUTHORIZED

    def default_message(self) -> str:
        return "authentication required"


class TokenExpired(Unauthorized):
    code = ErrorCode.TOKEN_EXPIRED

    def default_message(self) -> str:
        return "this API token has expired"


class Forbidden(AuthError):
    code = ErrorCode.FORBIDDEN


class RateLimited(AuthError):
    code = ErrorCode.LIMIT_REACHED
    status = 429  # the code's own status is 409

    def __init__(self, retry_after_s: float) -> None:
        self.retry_after_s = max(1, math.ceil(retry_after_s))
        super().__init__(f"too many failed logins; retry in {self.retry_after_s} s")


def error_response(err: AuthError) -> JSONResponse:
    """The one error body (``server.errors``) with the headers an auth refusal needs."""
    headers = {"Retry-After": str(err.retry_after_s)} if isinstance(err, RateLimited) else None
    if isinstance(err, Unauthorized):
        headers = {"WWW-Authenticate": 'Bearer realm="relaydesk"'}
    return errors.error_response(err, headers)


async def auth_error_handler(_request: Request, exc: Exception) -> Response:
    """Starlette exception handler: ``exception_handlers={AuthError: auth_error_handler}``."""
    if not isinstance(exc, AuthError):
        raise exc
    return error_response(exc)
