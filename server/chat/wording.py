"""How chat replies word action errors: what happened and the next step, never internal text.

The typed actions answer ``{code, message}`` written for programs (``unavailable: local
desktops are not run by the virtual desktop manager``). A person in the chat needs to know
what to do next, so each code a chat command can meet has a sentence here; the original code
and message stay in the result payload for anyone who needs them.
"""

from __future__ import annotations

from collections.abc import Callable

from server.chat import slash
from wire.errors import ErrorCode

# (relay, kind, message) -> the sentence shown in the chat.
Wording = Callable[[str, str, str], str]


def sentence(text: str) -> str:
    """``text`` with a capital first letter and a final full stop."""
    text = text.strip()
    if not text:
        return text
    text = text[0].upper() + text[1:]
    return text if text[-1] in ".?!" else text + "."


def _unavailable(relay: str, kind: str, message: str) -> str:
    virtual = slash.describe(slash.OpenDesktop("virtual", relay))
    if kind == "local":
        return (
            f"Relay {relay} does not share its real screen. To share it, run "
            f"`relaydesk host-helper` on that relay's host, or use its virtual desktop: "
            f"{virtual}."
        )
    if kind == "docker":
        # "/desktop docker" once opened the virtual desktop: say where that one is now.
        return (
            f"Relay {relay} cannot run desktops in containers ({message.rstrip('.')}). "
            f"/desktop docker opens a desktop in a container of its own; the relay's virtual "
            f"desktop is {virtual}."
        )
    return f"Relay {relay} cannot run this desktop now ({message.rstrip('.')})."


def _unreachable(relay: str, kind: str, message: str) -> str:
    return f"Relay {relay} is not connected. Try again when it is back; /desktop list shows it."


def _timeout(relay: str, kind: str, message: str) -> str:
    return f"Relay {relay} did not answer in time. Try again in a moment."


def _forbidden(relay: str, kind: str, message: str) -> str:
    return (
        "Your role in this conversation does not allow this. "
        "A conversation owner can give you the write role."
    )


def _start_failed(relay: str, kind: str, message: str) -> str:
    return f"The desktop on {relay} did not start ({message.rstrip('.')}). Try again."


def _limit(relay: str, kind: str, message: str) -> str:
    return f"Relay {relay} has reached a limit: {message.rstrip('.')}."


def _not_found(relay: str, kind: str, message: str) -> str:
    return f"No relay named {relay} is shared with this conversation. /desktop list shows them."


WORDING: dict[str, Wording] = {
    ErrorCode.UNAVAILABLE.value: _unavailable,
    ErrorCode.RELAY_UNREACHABLE.value: _unreachable,
    ErrorCode.RELAY_TIMEOUT.value: _timeout,
    ErrorCode.TIMEOUT.value: _timeout,
    ErrorCode.FORBIDDEN.value: _forbidden,
    ErrorCode.START_FAILED.value: _start_failed,
    ErrorCode.LIMIT_REACHED.value: _limit,
    ErrorCode.RELAY_NOT_FOUND.value: _not_found,
}


def explain(code: str, message: str, *, relay: str | None, kind: str) -> str:
    """The chat's sentence for an action error: the next step where one is known."""
    wording = WORDING.get(code)
    if wording is None or relay is None:
        return sentence(message)
    return wording(relay, kind, message)
