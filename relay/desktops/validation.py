"""Checks of start/stop arguments; every failure names its field (``InvalidArgs``)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from wire.desktop_rows import SLOT_RE as SLOT_RE  # the one slot rule, re-exported
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.ids import DesktopSessionId

VIRTUAL = "virtual"
MIN_GEOMETRY = (640, 480)
MAX_GEOMETRY = (7680, 4320)
# Common screens by name; any WxH within the limits and these proportions is accepted too.
GEOMETRY_PRESETS = {
    "vga": (640, 480),
    "svga": (800, 600),
    "xga": (1024, 768),
    "hd": (1280, 720),
    "wxga": (1280, 800),
    "sxga": (1280, 1024),
    "hd+": (1600, 900),
    "fhd": (1920, 1080),
    "wuxga": (1920, 1200),
    "qhd": (2560, 1440),
    "4k": (3840, 2160),
}
MIN_ASPECT, MAX_ASPECT = 0.5, 4.0
PROFILE_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
DEPTHS = frozenset({16, 24})
GEOMETRY_RE = re.compile(r"^([0-9]{1,5})x([0-9]{1,5})$")
# Minted with secrets.token_hex(16) or longer; anything else cannot name a session of ours.
SESSION_ID_RE = re.compile(r"^[0-9a-f]{32,128}$")
MAX_STARTED_BY = 200

# kind → the kind the process launcher runs it as; None = run elsewhere (``docker``:
# relay/desktops/docker/launcher.py; ``local``: the host helper).
_KINDS: dict[str, str | None] = {VIRTUAL: VIRTUAL, "docker": None, "local": None}


@dataclass(frozen=True)
class StartRequest:
    """A validated ``start``."""

    kind: str
    slot: str
    width: int
    height: int
    depth: int
    audio: bool
    started_by: str | None
    apps: tuple[tuple[str, ...], ...]
    profile: str | None = None
    persist_home: bool = False
    # A snapshot's home the new home starts as a copy of (forks and resets).
    seed_home: str | None = None

    @property
    def geometry(self) -> str:
        return f"{self.width}x{self.height}"


def normalise_kind(kind: object) -> str:
    """``virtual``; ``docker`` and ``local`` desktops are run by other components."""
    if not isinstance(kind, str) or kind not in _KINDS:
        raise InvalidArgs("kind", f"unknown kind {kind!r}; expected one of {sorted(_KINDS)}")
    normalised = _KINDS[kind]
    if normalised is None:
        raise OpError(
            ErrorCode.UNAVAILABLE,
            f"{kind} desktops are not run by the virtual desktop manager",
            {"field": "kind"},
        )
    return normalised


def check_slot(slot: object) -> str:
    if not isinstance(slot, str) or not SLOT_RE.fullmatch(slot):
        raise InvalidArgs("slot", f"must match ^{SLOT_RE.pattern}$")
    return slot


def parse_geometry(geometry: object) -> tuple[int, int]:
    """``WIDTHxHEIGHT`` or a preset name (``fhd``); sizes outside the limits, odd sizes and
    strange proportions are refused with the accepted range in the message."""
    if isinstance(geometry, str) and geometry.lower() in GEOMETRY_PRESETS:
        return GEOMETRY_PRESETS[geometry.lower()]
    match = GEOMETRY_RE.fullmatch(geometry) if isinstance(geometry, str) else None
    names = ", ".join(GEOMETRY_PRESETS)
    if match is None:
        raise InvalidArgs("geometry", f"expected WIDTHxHEIGHT (e.g. 1280x800) or one of {names}")
    width, height = int(match[1]), int(match[2])
    (min_w, min_h), (max_w, max_h) = MIN_GEOMETRY, MAX_GEOMETRY
    if not (min_w <= width <= max_w and min_h <= height <= max_h):
        raise InvalidArgs(
            "geometry", f"{width}x{height} outside {min_w}x{min_h} .. {max_w}x{max_h}"
        )
    if width % 2 or height % 2:
        raise InvalidArgs("geometry", f"{width}x{height}: width and height must be even")
    if not MIN_ASPECT <= width / height <= MAX_ASPECT:
        raise InvalidArgs("geometry", f"{width}x{height}: width/height must be between 1:2 and 4:1")
    return width, height


def check_profile(profile: object) -> str | None:
    """A profile name (whether this relay has it is the launcher's to say)."""
    if profile is None:
        return None
    if not isinstance(profile, str) or not PROFILE_RE.fullmatch(profile):
        raise InvalidArgs("profile", f"must match {PROFILE_RE.pattern}")
    return profile


def check_depth(depth: object) -> int:
    if isinstance(depth, bool) or not isinstance(depth, int) or depth not in DEPTHS:
        raise InvalidArgs("depth", f"must be one of {sorted(DEPTHS)}")
    return depth


def check_session_id(value: object) -> DesktopSessionId:
    if not isinstance(value, str) or not SESSION_ID_RE.fullmatch(value):
        raise InvalidArgs("desktop_session_id", "malformed desktop session id")
    return DesktopSessionId(value)


def check_started_by(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_STARTED_BY:
        raise InvalidArgs("started_by", f"must be a string of at most {MAX_STARTED_BY} chars")
    return value


def check_apps(
    apps: object, default: tuple[str, ...], allowed: frozenset[str] = frozenset()
) -> tuple[tuple[str, ...], ...]:
    """Parse start-up commands (shell-like words, never run through a shell).

    A caller-chosen list may only name command lines the relay's operator allowed (the
    default list, plus ``allowed``): ``apps`` must never become remote command execution.
    """
    if apps is None:
        apps = default
    if isinstance(apps, str) or not isinstance(apps, list | tuple):
        raise InvalidArgs("apps", "must be a list of command lines")
    if any(app not in default and app not in allowed for app in apps):
        raise InvalidArgs("apps", "not among this relay's allowed apps")
    try:
        parsed = tuple(tuple(shlex.split(app)) for app in apps if isinstance(app, str))
    except ValueError as err:
        raise InvalidArgs("apps", "unparsable command line") from err
    if len(parsed) != len(apps) or any(not words for words in parsed):
        raise InvalidArgs("apps", "every entry must be a non-empty command line")
    return parsed


def check_audio(audio: object) -> bool:
    if not isinstance(audio, bool):
        raise InvalidArgs("audio", "must be true or false")
    return audio


def parse_start(
    *,
    kind: object,
    slot: object,
    geometry: object,
    depth: object,
    audio: object,
    started_by: object,
    apps: object,
    default_apps: tuple[str, ...],
    allowed_apps: frozenset[str] = frozenset(),
    profile: object = None,
    persist_home: object = False,
) -> StartRequest:
    """Validate every start argument, kind first (it decides who handles the rest)."""
    normalised = normalise_kind(kind)
    width, height = parse_geometry(geometry)
    return StartRequest(
        kind=normalised,
        slot=check_slot(slot),
        width=width,
        height=height,
        depth=check_depth(depth),
        audio=check_audio(audio),
        started_by=check_started_by(started_by),
        apps=check_apps(apps, default_apps, allowed_apps),
        profile=check_profile(profile),
        persist_home=_check_bool("persist_home", persist_home),
    )


def _check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgs(name, "must be true or false")
    return value
