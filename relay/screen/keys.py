"""Key names → X keysyms: xdotool-like chords (``ctrl+shift+t``, ``alt+F4``, ``Return``).

Pure lookups (python-xlib's keysym tables, no display connection): every input backend
(XTEST, pyautogui) and their tests share this one table, so a key name means the same key on
every display. Modifier and key names are case-insensitive; an exact X keysym
name (``XF86AudioMute``, ``odiaeresis``) always wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from Xlib import XK

from wire.errors import InvalidArgs

# Groups beyond python-xlib's default latin1+miscellany, so names like ``XF86AudioMute``,
# ``ISO_Left_Tab`` or ``Greek_alpha`` resolve.
_KEYSYM_GROUPS = (
    "xkb",
    "xf86",
    "latin2",
    "latin3",
    "latin4",
    "greek",
    "cyrillic",
    "technical",
    "special",
    "publishing",
)

MODIFIER_ALIASES: dict[str, str] = {
    "ctrl": "Control_L",
    "control": "Control_L",
    "lctrl": "Control_L",
    "rctrl": "Control_R",
    "shift": "Shift_L",
    "lshift": "Shift_L",
    "rshift": "Shift_R",
    "alt": "Alt_L",
    "lalt": "Alt_L",
    "ralt": "Alt_R",
    "option": "Alt_L",
    "super": "Super_L",
    "win": "Super_L",
    "windows": "Super_L",
    "cmd": "Super_L",
    "command": "Super_L",
    "meta": "Meta_L",
}

KEY_ALIASES: dict[str, str] = {
    "enter": "Return",
    "return": "Return",
    "esc": "Escape",
    "escape": "Escape",
    "tab": "Tab",
    "backspace": "BackSpace",
    "bksp": "BackSpace",
    "del": "Delete",
    "delete": "Delete",
    "ins": "Insert",
    "insert": "Insert",
    "space": "space",
    "spacebar": "space",
    "pageup": "Prior",
    "page_up": "Prior",
    "pgup": "Prior",
    "pagedown": "Next",
    "page_down": "Next",
    "pgdn": "Next",
    "home": "Home",
    "end": "End",
    "up": "Up",
    "down": "Down",
    "left": "Left",
    "right": "Right",
    "menu": "Menu",
    "print": "Print",
    "printscreen": "Print",
    "prtsc": "Print",
    "pause": "Pause",
    "capslock": "Caps_Lock",
    "caps_lock": "Caps_Lock",
    "numlock": "Num_Lock",
    "num_lock": "Num_Lock",
    "scrolllock": "Scroll_Lock",
    "plus": "plus",
    "minus": "minus",
}

# Characters whose X keysym is not simply their code point.
_CHAR_KEYSYMS: dict[str, str] = {"\n": "Return", "\r": "Return", "\t": "Tab", "\b": "BackSpace"}

UNICODE_KEYSYM_OFFSET = 0x01000000


@dataclass(frozen=True)
class Chord:
    """Modifier keysyms held (in order) around one final key keysym."""

    modifiers: tuple[int, ...]
    key: int


@cache
def _keysym_names_casefolded() -> dict[str, int]:
    for group in _KEYSYM_GROUPS:
        XK.load_keysym_group(group)
    names: dict[str, int] = {}
    for attr, value in vars(XK).items():
        if attr.startswith("XK_") and isinstance(value, int):
            names.setdefault(attr[3:].casefold(), value)
            if attr.startswith("XK_XF86_"):
                # python-xlib spells XF86AudioMute as XF86_AudioMute; accept the X name.
                names.setdefault("xf86" + attr[8:].casefold(), value)
    return names


@cache
def _keysym_names() -> dict[int, str]:
    _keysym_names_casefolded()  # loads the extra groups
    names: dict[int, str] = {}
    for attr, value in vars(XK).items():
        if attr.startswith("XK_") and isinstance(value, int):
            name = attr[3:]
            # python-xlib spells XF86AudioMute as XF86_AudioMute; the X name has no underscore.
            names.setdefault(value, "XF86" + name[5:] if name.startswith("XF86_") else name)
    return names


def keysym_name(keysym: int) -> str | None:
    """The X name of ``keysym`` (``Prior``, ``Control_R``, ``XF86AudioMute``), if it has one."""
    return _keysym_names().get(keysym)


def char_to_keysym(char: str) -> int:
    """The keysym that types ``char`` (Latin-1 by code point, others as Unicode keysyms)."""
    if char in _CHAR_KEYSYMS:
        return int(XK.string_to_keysym(_CHAR_KEYSYMS[char]))
    code = ord(char)
    if 0x20 <= code <= 0x7E or 0xA0 <= code <= 0xFF:
        return code
    return UNICODE_KEYSYM_OFFSET | code


def name_to_keysym(name: str) -> int | None:
    """Resolve one key name; ``None`` when it names no key."""
    names = _keysym_names_casefolded()  # loads the extra groups before the exact lookup
    exact: int = XK.string_to_keysym(name)
    if exact:
        return exact
    if len(name) == 1:
        return char_to_keysym(name)
    folded = name.casefold()
    alias = MODIFIER_ALIASES.get(folded) or KEY_ALIASES.get(folded)
    if alias is not None:
        return int(XK.string_to_keysym(alias))
    return names.get(folded)


def _split_chord(text: str) -> list[str]:
    # "ctrl++" and "ctrl+plus" both mean the plus key; a lone "+" is the plus key too.
    if text == "+":
        return ["+"]
    parts = text.split("+")
    if text.endswith("++"):
        parts = [*parts[:-2], "+"]
    return [part.strip() for part in parts]


def parse_chord(text: object, field: str = "keys") -> Chord:
    """Parse ``ctrl+shift+t`` into keysyms; unknown names raise ``InvalidArgs`` naming them."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgs(field, "must be a non-empty key chord like 'ctrl+shift+t'")
    keysyms: list[int] = []
    for part in _split_chord(text.strip()):
        if not part:
            raise InvalidArgs(field, f"empty key name in {text!r}")
        keysym = name_to_keysym(part)
        if keysym is None:
            raise InvalidArgs(field, f"unknown key {part!r}")
        keysyms.append(keysym)
    return Chord(tuple(keysyms[:-1]), keysyms[-1])


def parse_key(text: object, field: str = "keys") -> int:
    """One key name (``shift``, ``a``, ``Return``) for a key held down; a chord is refused."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgs(field, "must be one key name like 'shift', 'a' or 'Return'")
    chord = parse_chord(text, field)
    if chord.modifiers:
        raise InvalidArgs(
            field,
            f"names one key, not a chord like {text.strip()!r}: hold each key of a "
            "chord with its own key_down",
        )
    return chord.key
