"""Relay errors as a client of the actions sees them.

Statuses and bodies come from ``server.errors`` (one mapping for the whole server); this module
re-exports its two functions for the modules that read them from here.
"""

from __future__ import annotations

from server.errors import error_body, status_of
from wire.errors import ErrorCode, OpError

__all__ = ["error_body", "relay_error", "status_of"]


def relay_error(err: OpError) -> OpError:
    """A relay's answer as the client should see it: a timeout is ``relay_timeout``, except
    one the relay answered itself with advice (an app that did not answer, a wait not
    satisfied: ``docs/accessibility.md``)."""
    if err.code is ErrorCode.TIMEOUT and "suggestion" in err.details:
        return err
    if err.code in (ErrorCode.TIMEOUT, ErrorCode.CANCELLED):
        return OpError(ErrorCode.RELAY_TIMEOUT, "the relay did not answer in time")
    return err
