"""The ``/desktop`` slash-command grammar: text in, a typed command or a ``ParseError`` out.

Pure (no I/O, no knowledge of which relays exist): relay names are resolved afterwards by
:func:`resolve_relay` against the relays visible in the conversation. The grammar and the
behaviour of each command are documented in ``docs/web-ui.md``::

    /desktop [relay]            open the relay's main virtual desktop (attach, else start)
    /desktop virtual [relay]    the same (the explicit form, for relays named like a keyword)
    /desktop docker [relay]     open the relay's main container desktop (kind ``docker``)
    /desktop local [relay]      open the relay host's real screen
    /desktop close              close this browser's viewer tab (the desktop keeps running)
    /desktop list               the active desktops in this conversation
    /desktop status [relay]     one relay's desktops, probed
    /desktop attach [relay]     a viewer on the running desktop; never starts one
    /desktop stop [relay]       the stop confirmation for the exact running session
    /desktop take [relay]       take control of the running desktop (agents wait)
    /desktop hand-back [relay]  hand it back: agents may act again
    /desktop stop-agent [relay] stop the agent acting on it (no new grant for a while)
    /desktop help [command]     this list
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, assert_never

from wire.snapshots import SNAPSHOT_NAME_RE

COMMAND = "/desktop"
MAX_COMMAND_LEN = 400
RELAY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# The first word of a message counts as a mistyped "/desktop" above this difflib ratio.
COMMAND_CUTOFF = 0.75
WORD_CUTOFF = 0.6

# The kinds of desktop the typed actions know: "docker" is a desktop in a container of its
# own, in the chat as in the API (docs/desktops.md).
DesktopKind = Literal["virtual", "docker", "local"]


@dataclass(frozen=True)
class OpenDesktop:
    """``/desktop [relay]``, ``/desktop virtual|docker|local [relay]``: attach, else start."""

    kind: DesktopKind
    relay: str | None
    tag: Literal["open"] = "open"


@dataclass(frozen=True)
class CloseViewer:
    """``/desktop close``: only the browser's viewer tab closes."""

    tag: Literal["close"] = "close"


@dataclass(frozen=True)
class ListDesktops:
    tag: Literal["list"] = "list"


@dataclass(frozen=True)
class DesktopStatus:
    relay: str | None
    tag: Literal["status"] = "status"


@dataclass(frozen=True)
class AttachDesktop:
    relay: str | None
    kind: DesktopKind = "virtual"
    tag: Literal["attach"] = "attach"


@dataclass(frozen=True)
class StopDesktop:
    """``/desktop stop [relay]``: yields the confirmation, never a stop."""

    relay: str | None
    kind: DesktopKind = "virtual"
    tag: Literal["stop"] = "stop"


@dataclass(frozen=True)
class DesktopApps:
    """``/desktop apps [relay]``: the running desktop's launchable apps."""

    relay: str | None
    kind: DesktopKind = "virtual"
    tag: Literal["apps"] = "apps"


PauseVerb = Literal["pause", "resume"]


@dataclass(frozen=True)
class PauseDesktop:
    """``/desktop pause|resume [relay]``: freeze or thaw the running desktop."""

    verb: PauseVerb
    relay: str | None
    kind: DesktopKind = "virtual"
    tag: Literal["pause"] = "pause"


SnapshotVerb = Literal["snapshot", "reset"]


@dataclass(frozen=True)
class SnapshotDesktop:
    """``/desktop snapshot NAME [relay]`` saves the running desktop as a snapshot;
    ``/desktop reset [NAME [relay]]`` puts it back to one (or to a fresh start)."""

    verb: SnapshotVerb
    name: str | None
    relay: str | None
    kind: DesktopKind = "virtual"
    tag: Literal["snapshot"] = "snapshot"


ControlVerb = Literal["take", "hand-back", "stop-agent"]
CONTROL_VERBS: tuple[ControlVerb, ...] = ("take", "hand-back", "stop-agent")


@dataclass(frozen=True)
class ControlDesktop:
    """``/desktop take|hand-back|stop-agent [relay]``: who is in control of the desktop."""

    verb: ControlVerb
    relay: str | None
    kind: DesktopKind = "virtual"
    tag: Literal["control"] = "control"


@dataclass(frozen=True)
class Help:
    topic: str | None = None
    tag: Literal["help"] = "help"


Command = (
    OpenDesktop
    | CloseViewer
    | ListDesktops
    | DesktopStatus
    | AttachDesktop
    | StopDesktop
    | DesktopApps
    | ControlDesktop
    | PauseDesktop
    | SnapshotDesktop
    | Help
)


@dataclass(frozen=True)
class ParseError:
    """Why the text is not a valid command, and what was probably meant."""

    message: str
    suggestion: str | None = None
    tag: Literal["error"] = "error"


# word → (usage, one-line description); the order is the order of the help text.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "virtual": ("/desktop virtual [relay]", "open the relay's virtual desktop (as /desktop)"),
    "docker": ("/desktop docker [relay]", "open the relay's desktop in a container of its own"),
    "local": ("/desktop local [relay]", "open the relay host's real screen"),
    "list": ("/desktop list", "list the active desktops in this conversation"),
    "status": ("/desktop status [relay]", "show one relay's desktops, checked now"),
    "attach": ("/desktop attach [relay]", "open a viewer on the running desktop; never starts"),
    "stop": ("/desktop stop [relay]", "stop the running desktop (asks for confirmation)"),
    "apps": ("/desktop apps [relay]", "list the apps the running desktop can start"),
    "pause": ("/desktop pause [relay]", "pause the running desktop: frozen as it is, no CPU"),
    "resume": ("/desktop resume [relay]", "resume the paused desktop exactly as it was"),
    "snapshot": (
        "/desktop snapshot NAME [relay]",
        "save the running desktop (home, apps, windows) as snapshot NAME",
    ),
    "reset": (
        "/desktop reset [NAME [relay]]",
        "put the running desktop back to snapshot NAME, or to a fresh start",
    ),
    "take": ("/desktop take [relay]", "take control of the running desktop: agents wait"),
    "hand-back": ("/desktop hand-back [relay]", "hand the desktop back: agents may act again"),
    "stop-agent": ("/desktop stop-agent [relay]", "stop the agent acting on the desktop"),
    "close": ("/desktop close", "close this browser's viewer tab; the desktop keeps running"),
    "help": ("/desktop help [command]", "show this help"),
}
OPEN_USAGE = ("/desktop [relay]", "open the relay's desktop: attach if running, else start")


def help_lines(topic: str | None = None) -> list[tuple[str, str]]:
    """``(usage, description)`` pairs, all of them or the one for ``topic``."""
    if topic is not None and topic in SUBCOMMANDS:
        return [SUBCOMMANDS[topic]]
    return [OPEN_USAGE, *SUBCOMMANDS.values()]


def suggest(word: str, choices: Sequence[str], cutoff: float = WORD_CUTOFF) -> str | None:
    """The closest of ``choices`` to ``word`` (difflib), or None when none is close."""
    matches = difflib.get_close_matches(word.lower(), list(choices), n=1, cutoff=cutoff)
    return matches[0] if matches else None


def is_desktop_command(text: str) -> bool:
    """True when the message is meant as a ``/desktop`` command (or a near miss of one)."""
    words = text.strip().split(maxsplit=1)
    if not words or not words[0].startswith("/"):
        return False
    first = words[0].lower()
    return first == COMMAND or suggest(first, [COMMAND], COMMAND_CUTOFF) is not None


def parse(text: str) -> Command | ParseError:
    """Parse one command line; never raises."""
    if len(text) > MAX_COMMAND_LEN:
        return ParseError(f"a command is at most {MAX_COMMAND_LEN} characters")
    words = text.split()
    if not words:
        return ParseError("empty command", "/desktop help")
    first = words[0].lower()
    if first != COMMAND:
        return ParseError(f"unknown command {_quote(words[0])}", _near_command(first, words[1:]))
    return _parse_args(words[1:])


def _parse_args(args: list[str]) -> Command | ParseError:
    if not args:
        return OpenDesktop("virtual", None)
    word, rest = args[0].lower(), args[1:]
    if word in _KEYWORD_PARSERS:
        return _KEYWORD_PARSERS[word](word, rest)
    if not RELAY_NAME.fullmatch(args[0]):
        return _bad_word(args[0])
    if rest:
        near = suggest(word, list(SUBCOMMANDS))
        if near is None:
            return _too_many(f"/desktop {args[0]}", rest)
        relay = f" {rest[0]}" if near in _TAKES_RELAY and len(rest) == 1 else ""
        return ParseError(f"unknown /desktop command {_quote(args[0])}", f"/desktop {near}{relay}")
    return OpenDesktop("virtual", args[0])


def _optional_relay(usage: str, rest: list[str]) -> tuple[str | None, ParseError | None]:
    if not rest:
        return None, None
    if len(rest) > 1:
        return None, _too_many(usage, rest[1:])
    if not RELAY_NAME.fullmatch(rest[0]):
        return None, ParseError(
            f"{_quote(rest[0])} is not a relay name (letters, digits, '.', '_', '-')"
        )
    return rest[0], None


_OPEN_KINDS: dict[str, DesktopKind] = {"virtual": "virtual", "docker": "docker", "local": "local"}


def _open(word: str, rest: list[str]) -> Command | ParseError:
    relay, error = _optional_relay(f"/desktop {word}", rest)
    return error or OpenDesktop(_OPEN_KINDS[word], relay)


def open_kind(kind: str) -> DesktopKind:
    """The chat's name of a desktop kind (an unknown one is the virtual desktop)."""
    return _OPEN_KINDS.get(kind, "virtual")


def _bare(word: str, rest: list[str]) -> Command | ParseError:
    if rest:
        return _too_many(f"/desktop {word}", rest)
    return CloseViewer() if word == "close" else ListDesktops()


def _with_relay(word: str, rest: list[str]) -> Command | ParseError:
    relay, error = _optional_relay(f"/desktop {word}", rest)
    if error is not None:
        return error
    if word == "status":
        return DesktopStatus(relay)
    if word == "attach":
        return AttachDesktop(relay)
    if word == "apps":
        return DesktopApps(relay)
    if word in CONTROL_VERBS:
        return ControlDesktop(_control_verb(word), relay)
    if word in ("pause", "resume"):
        return PauseDesktop("pause" if word == "pause" else "resume", relay)
    return StopDesktop(relay)


def _snapshot(word: str, rest: list[str]) -> Command | ParseError:
    usage = SUBCOMMANDS[word][0]
    if not rest:
        if word == "reset":
            return SnapshotDesktop("reset", None, None)
        return ParseError("a snapshot needs a name", usage)
    name, relay_words = rest[0], rest[1:]
    if not SNAPSHOT_NAME_RE.fullmatch(name):
        return ParseError(
            f"{_quote(name)} is not a snapshot name (lower-case letters, digits, '-', '_')",
            usage,
        )
    relay, error = _optional_relay(usage, relay_words)
    if error is not None:
        return error
    return SnapshotDesktop("snapshot" if word == "snapshot" else "reset", name, relay)


def _control_verb(word: str) -> ControlVerb:
    for verb in CONTROL_VERBS:
        if word == verb:
            return verb
    raise ValueError(word)


def _help(word: str, rest: list[str]) -> Command | ParseError:
    if len(rest) > 1:
        return _too_many("/desktop help", rest[1:])
    topic = rest[0].lower() if rest else None
    if topic is not None and topic not in SUBCOMMANDS:
        near = suggest(topic, list(SUBCOMMANDS))
        return ParseError(
            f"no help for {_quote(rest[0])}", f"/desktop help {near}" if near else "/desktop help"
        )
    return Help(topic)


_KEYWORD_PARSERS: dict[str, Callable[[str, list[str]], Command | ParseError]] = {
    "virtual": _open,
    "docker": _open,
    "local": _open,
    "close": _bare,
    "list": _bare,
    "status": _with_relay,
    "attach": _with_relay,
    "stop": _with_relay,
    "apps": _with_relay,
    "pause": _with_relay,
    "resume": _with_relay,
    "snapshot": _snapshot,
    "reset": _snapshot,
    "take": _with_relay,
    "hand-back": _with_relay,
    "stop-agent": _with_relay,
    "help": _help,
}


_TAKES_RELAY = frozenset(
    {
        "virtual",
        "docker",
        "local",
        "status",
        "attach",
        "stop",
        "apps",
        "pause",
        "resume",
        "take",
        "hand-back",
        "stop-agent",
    }
)


def _bad_word(word: str) -> ParseError:
    near = suggest(word, list(SUBCOMMANDS))
    return ParseError(
        f"unknown /desktop command {_quote(word)}",
        f"/desktop {near}" if near else "/desktop help",
    )


def _too_many(usage: str, extra: list[str]) -> ParseError:
    return ParseError(f"unexpected {_quote(extra[0])} after {usage}", usage)


def _near_command(first: str, rest: list[str]) -> str | None:
    if suggest(first, [COMMAND], COMMAND_CUTOFF) is None:
        return "/desktop help"
    return " ".join([COMMAND, *rest])[:MAX_COMMAND_LEN]


def _quote(word: str) -> str:
    shown = word if len(word) <= 40 else word[:37] + "..."
    return repr(shown)


# -- relay resolution (pure: the caller passes the visible relay names) ----------------------


@dataclass(frozen=True)
class RelayResolved:
    name: str
    tag: Literal["resolved"] = "resolved"


@dataclass(frozen=True)
class RelayAmbiguous:
    """No name given and several relays are visible: the reply lists them."""

    choices: tuple[str, ...]
    tag: Literal["ambiguous"] = "ambiguous"


@dataclass(frozen=True)
class RelayUnknown:
    """The name is not a visible relay (or none is visible)."""

    name: str | None
    choices: tuple[str, ...]
    suggestion: str | None
    tag: Literal["unknown"] = "unknown"


RelayResolution = RelayResolved | RelayAmbiguous | RelayUnknown


def resolve_relay(name: str | None, visible: Sequence[str]) -> RelayResolution:
    """Which visible relay ``name`` means; with exactly one visible relay it may be omitted."""
    choices = tuple(visible)
    if name is None:
        if len(choices) == 1:
            return RelayResolved(choices[0])
        if not choices:
            return RelayUnknown(None, choices, None)
        return RelayAmbiguous(choices)
    exact = [relay for relay in choices if relay == name]
    folded = [relay for relay in choices if relay.lower() == name.lower()]
    if exact or len(folded) == 1:
        return RelayResolved((exact or folded)[0])
    near = difflib.get_close_matches(name, list(choices), n=1, cutoff=WORD_CUTOFF)
    keyword = suggest(name, list(SUBCOMMANDS))
    suggestion = near[0] if near else (f"/desktop {keyword}" if keyword else None)
    return RelayUnknown(name, choices, suggestion)


def describe(command: Command) -> str:
    """The canonical text of a command (what the help and the result message show)."""
    if isinstance(command, OpenDesktop):
        base = "/desktop" if command.kind == "virtual" else f"/desktop {command.kind}"
        if command.relay and command.kind == "virtual" and command.relay.lower() in SUBCOMMANDS:
            base = "/desktop virtual"  # a relay named like a keyword needs the explicit form
        return f"{base} {command.relay}" if command.relay else base
    if isinstance(command, CloseViewer | ListDesktops):
        return f"/desktop {command.tag}"
    if isinstance(command, DesktopStatus | AttachDesktop | StopDesktop | DesktopApps):
        return f"/desktop {command.tag}" + (f" {command.relay}" if command.relay else "")
    if isinstance(command, ControlDesktop | PauseDesktop):
        return f"/desktop {command.verb}" + (f" {command.relay}" if command.relay else "")
    if isinstance(command, SnapshotDesktop):
        words = [w for w in ("/desktop", command.verb, command.name, command.relay) if w]
        return " ".join(words)
    if isinstance(command, Help):
        return "/desktop help" + (f" {command.topic}" if command.topic else "")
    assert_never(command)
