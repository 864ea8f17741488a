"""What a model reads of an action besides pixels (both doors): a refused or failed action, an
unknown one, and whether an input action visibly took effect."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Final

from wire.errors import ErrorCode, OpError

_ADVICE: Final[dict[ErrorCode, str]] = {
    ErrorCode.STALE_SCREEN: "the screen changed since your last screenshot, so nothing was "
    "done: take a screenshot, then choose the point again",
    ErrorCode.TAKEOVER_ACTIVE: "a person has taken over this desktop, so nothing was done: "
    "wait a while, then take a screenshot before acting again",
    ErrorCode.STOPPED_BY_USER: "a person pressed Stop for this desktop, so nothing was done: "
    "stop acting and tell the user",
    ErrorCode.NOT_RUNNING: "the desktop is not running: ask the user to start it",
    ErrorCode.FORBIDDEN: "this token may not drive this desktop: ask the user for access",
}


def for_model(err: OpError) -> str:
    """``err`` as one sentence for the model, beginning with relaydesk's code."""
    advice = _ADVICE.get(err.code)
    text = f"{err.code.value}: {advice}" if advice else f"{err.code.value}: {err.message}"
    if advice and err.code is not ErrorCode.STALE_SCREEN and err.message:
        text += f" ({err.message})"
    return text


def did_you_mean(name: str, known: Iterable[str]) -> str:
    near = difflib.get_close_matches(name.lower()[:64], sorted(known), n=3, cutoff=0.5)
    hint = f" Did you mean: {', '.join(near)}?" if near else ""
    return f"unknown action {name[:64]!r}; one of {', '.join(sorted(known))}.{hint}"


def effect_text(effect: str | None, effect_ms: int | None) -> str | None:
    """An input action's ``effect`` as the line the model reads (``None``: no verdict)."""
    if effect == "changed":
        after = f" after {effect_ms} ms" if effect_ms is not None else ""
        return f"effect: changed (the screen changed where you acted{after})"
    if effect == "no_visible_change":
        return (
            "effect: no_visible_change (nothing changed where you acted within 150 ms: "
            "take a screenshot to see whether it worked)"
        )
    if effect == "unverifiable":
        return (
            "effect: unverifiable (nothing to judge it by, e.g. no window that is showing "
            "has the keyboard focus: take a screenshot to check)"
        )
    return None
