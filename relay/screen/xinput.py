"""XTEST input on one X display through its own python-xlib connection.

One :class:`XTestInput` per display, used from a single thread (the display's screen
worker): python-xlib connections are not thread-safe, and a private connection per display
means several desktops never share a process-global ``DISPLAY``.

Every action ends with ``sync()``: when it returns, the server has generated all events,
so a guard capture, a result or a test's sentinel is ordered after them.

Buttons and keys pressed by ``mouse_down``/``key_down`` stay down in the X server until
released: this backend remembers them and releases them on ``release_held`` and ``close``
(XTEST's device state outlives the connection that pressed them).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from Xlib import XK, X
from Xlib import error as xerror
from Xlib.display import Display
from Xlib.ext import xtest

from relay.screen.args import is_display_name
from relay.screen.backends import (
    DOUBLE_CLICK_GAP_S,
    DRAG_DURATION_S,
    DRAG_STEPS,
    SCROLL_BUTTONS,
    KeyboardState,
    drag_path,
)
from relay.screen.keys import Chord, char_to_keysym, parse_chord, parse_key
from wire.errors import ErrorCode, OpError

logger = logging.getLogger(__name__)

# Clients re-read the keymap when they process MappingNotify, which can be after we restore
# a remapped spare keycode; this grace keeps the temporary keysym in place meanwhile.
REMAP_RESTORE_DELAY_S = 0.05
# LED bits in the core keyboard control's led_mask under XKB's default indicator map.
LED_CAPS_LOCK, LED_NUM_LOCK, LED_SCROLL_LOCK = 0x1, 0x2, 0x4

KeyStroke = tuple[int, bool]  # (keycode, needs shift)


@dataclass(frozen=True)
class HeldKey:
    """What ``key_down`` pressed for one keysym: its keycode, the Shift it added (0: none),
    and whether the keycode is a spare bound to the keysym while it is held."""

    code: int
    shift: int = 0
    bound: bool = False


class XTestInput:
    """Mouse and keyboard input for one display via the XTEST extension."""

    def __init__(self, display_name: str) -> None:
        if not is_display_name(display_name):
            # python-xlib would fall back to $DISPLAY for "": never guess which screen to drive.
            raise OpError(ErrorCode.UNAVAILABLE, f"no X display to drive at {display_name!r}")
        try:
            self._display = Display(display_name)
        except (xerror.DisplayError, OSError) as err:
            raise OpError(ErrorCode.UNAVAILABLE, f"cannot open display {display_name}") from err
        if not self._display.has_extension("XTEST"):
            self._display.close()
            raise OpError(ErrorCode.UNAVAILABLE, f"display {display_name} has no XTEST")
        self._root = self._display.screen().root
        # The root's size is read once and then follows its ConfigureNotify events (a RandR
        # resize), so no action pays an X round trip (~0.15 ms here) to learn it.
        self._root.change_attributes(event_mask=X.StructureNotifyMask)
        geometry = self._root.get_geometry()
        self._size = (int(geometry.width), int(geometry.height))
        self._keymap: dict[int, list[tuple[int, int]]] = {}
        self._spares: list[int] = []
        self._row_width = 2
        # Pressed by mouse_down/key_down and not released yet (in the order pressed).
        self._buttons: dict[int, None] = {}
        self._keys: dict[int, HeldKey] = {}

    # -- queries -------------------------------------------------------------------------

    def screen_size(self) -> tuple[int, int]:
        """Current root window size (follows RandR changes, unlike the connection info).

        Reads only events already received (no round trip). Synthetic events (``SendEvent``
        from any client of the display) are ignored: a program on the desktop cannot make
        the relay misjudge which coordinates are on the screen.
        """
        while self._display.pending_events():
            event = self._display.next_event()
            if (
                event.type == X.ConfigureNotify
                and not event.send_event
                and event.window.id == self._root.id
            ):
                self._size = (int(event.width), int(event.height))
        return self._size

    def mouse_position(self) -> tuple[int, int]:
        pointer = self._root.query_pointer()
        return int(pointer.root_x), int(pointer.root_y)

    def focus_bounds(self) -> tuple[int, int, int, int] | None:
        """The root-relative bounds of the showing top-level window that keys reach now (the
        focus window, or the one under the pointer when the focus follows it); ``None`` when
        keys reach no showing window."""
        focus = self._display.get_input_focus().focus
        if isinstance(focus, int) or focus.id == self._root.id:  # PointerRoot, None or root
            child = self._root.query_pointer().child
            if isinstance(child, int) or not child.id:
                return None
            focus = child
        window = focus
        while True:
            parent = window.query_tree().parent
            if isinstance(parent, int) or not parent.id or parent.id == self._root.id:
                break
            window = parent
        if window.get_attributes().map_state != X.IsViewable:
            return None
        geometry = window.get_geometry()
        return int(geometry.x), int(geometry.y), int(geometry.width), int(geometry.height)

    def keyboard_state(self) -> KeyboardState:
        """Lock states from the core keyboard LEDs (``get_keyboard_control().led_mask``)."""
        leds = int(self._display.get_keyboard_control().led_mask)
        return {
            "num_lock": bool(leds & LED_NUM_LOCK),
            "caps_lock": bool(leds & LED_CAPS_LOCK),
            "scroll_lock": bool(leds & LED_SCROLL_LOCK),
            "source": "led_mask",
        }

    # -- pointer ------------------------------------------------------------------------

    def _fake(self, event_type: int, detail: int = 0, x: int = 0, y: int = 0) -> None:
        if event_type == X.MotionNotify:
            xtest.fake_input(self._display, event_type, x=x, y=y)
        else:
            xtest.fake_input(self._display, event_type, detail)

    def move(self, x: int, y: int) -> None:
        self._fake(X.MotionNotify, x=x, y=y)
        self._display.sync()

    def click(self, x: int, y: int, button: int = 1, count: int = 1) -> None:
        """Move to (x, y) and click ``count`` times (2 = a double click)."""
        self._fake(X.MotionNotify, x=x, y=y)
        for index in range(count):
            if index:
                self._display.sync()
                time.sleep(DOUBLE_CLICK_GAP_S)
            self._fake(X.ButtonPress, button)
            self._fake(X.ButtonRelease, button)
        self._display.sync()

    def drag(self, start: tuple[int, int], end: tuple[int, int], button: int = 1) -> None:
        """Press at ``start``, move in interpolated steps, release at ``end``."""
        self._fake(X.MotionNotify, x=start[0], y=start[1])
        self._fake(X.ButtonPress, button)
        self._display.sync()
        for x, y in drag_path(start, end):
            self._fake(X.MotionNotify, x=x, y=y)
            self._display.sync()
            time.sleep(DRAG_DURATION_S / DRAG_STEPS)
        self._fake(X.ButtonRelease, button)
        self._display.sync()

    def scroll(self, direction: str, amount: int) -> None:
        """Wheel clicks: buttons 4/5 (up/down) and 6/7 (left/right)."""
        button = SCROLL_BUTTONS[direction]
        for _ in range(amount):
            self._fake(X.ButtonPress, button)
            self._fake(X.ButtonRelease, button)
        self._display.sync()

    def mouse_down(self, button: int = 1) -> None:
        """Press ``button`` where the pointer is and leave it pressed."""
        self._fake(X.ButtonPress, button)
        self._buttons[button] = None
        self._display.sync()

    def mouse_up(self, button: int = 1) -> None:
        """Release ``button`` (the X server ignores the release of a button that is up)."""
        self._fake(X.ButtonRelease, button)
        self._buttons.pop(button, None)
        self._display.sync()

    # -- keyboard -----------------------------------------------------------------------

    def _load_keymap(self) -> None:
        """Fetch the server's keymap (another client may have changed it since last time)."""
        info = self._display.display.info
        first, count = info.min_keycode, info.max_keycode - info.min_keycode + 1
        rows = self._display.get_keyboard_mapping(first, count)
        modifier_codes = {code for mod in self._display.get_modifier_mapping() for code in mod}
        self._keymap, self._spares = {}, []
        for offset, row in enumerate(rows):
            code = first + offset
            if not any(row) and code not in modifier_codes:
                self._spares.append(code)
            for index, keysym in enumerate(row[:2]):
                if keysym:
                    self._keymap.setdefault(keysym, []).append((code, index))
        self._spares.reverse()  # the highest codes are the least likely to be claimed
        self._row_width = len(rows[0]) if rows else 2

    def _stroke_for(self, keysym: int) -> KeyStroke | None:
        """A keycode typing ``keysym`` on level 0 or 1 (shift), or None when unmapped."""
        entries = self._keymap.get(keysym)
        if not entries:
            return None
        code, index = min(entries, key=lambda entry: entry[1])
        return code, index == 1

    def _held_codes(self) -> set[int]:
        """Keycodes down because of key_down: other actions neither press nor release them."""
        return {code for held in self._keys.values() for code in (held.code, held.shift) if code}

    def _tap(self, stroke: KeyStroke) -> None:
        code, shifted = stroke
        shift = self._shift_code() if shifted else 0
        if shift in self._held_codes():
            shift = 0
        if shift:
            self._fake(X.KeyPress, shift)
        self._fake(X.KeyPress, code)
        self._fake(X.KeyRelease, code)
        if shift:
            self._fake(X.KeyRelease, shift)

    def _shift_code(self) -> int:
        stroke = self._stroke_for(XK.XK_Shift_L) or self._stroke_for(XK.XK_Shift_R)
        return stroke[0] if stroke else 0

    @contextmanager
    def _remapped(self, keysyms: Sequence[int]) -> Iterator[dict[int, int]]:
        """Bind each keysym to a spare keycode for the duration of the block, then restore."""
        if len(keysyms) > len(self._spares):
            raise OpError(ErrorCode.UNAVAILABLE, "no spare keycode left to type a character")
        bound = dict(zip(keysyms, self._spares, strict=False))
        for keysym, code in bound.items():
            # Same keysym on both levels so Shift held elsewhere cannot change it.
            row = [keysym, keysym] + [X.NoSymbol] * (self._row_width - 2)
            self._display.change_keyboard_mapping(code, [row])
        self._display.sync()
        try:
            yield bound
        finally:
            self._display.sync()
            time.sleep(REMAP_RESTORE_DELAY_S)
            blank = [X.NoSymbol] * self._row_width
            for code in bound.values():
                self._display.change_keyboard_mapping(code, [blank])
            self._display.sync()

    def key(self, chord_text: str) -> None:
        """Press a chord like ``ctrl+shift+t``: modifiers down in order, key tap, modifiers up."""
        chord = parse_chord(chord_text)
        self._load_keymap()
        missing = [ks for ks in (*chord.modifiers, chord.key) if self._stroke_for(ks) is None]
        if missing:
            with self._remapped(list(dict.fromkeys(missing))) as bound:
                self._press_chord(chord, bound)
        else:
            self._press_chord(chord, {})
        self._display.sync()

    def _press_chord(self, chord: Chord, bound: dict[int, int]) -> None:
        def code_of(keysym: int) -> KeyStroke:
            if keysym in bound:
                return bound[keysym], False
            return self._stroke_for(keysym) or (0, False)

        modifier_codes = [code_of(ks)[0] for ks in chord.modifiers]
        key_code, shifted = code_of(chord.key)
        shift = self._shift_code() if shifted else 0
        held = [*modifier_codes, *([shift] if shift and shift not in modifier_codes else [])]
        already = self._held_codes()  # held by key_down: stays down after the chord
        held = [code for code in held if code not in already]
        for code in held:
            self._fake(X.KeyPress, code)
        self._fake(X.KeyPress, key_code)
        self._fake(X.KeyRelease, key_code)
        for code in reversed(held):
            self._fake(X.KeyRelease, code)

    def type_text(self, text: str) -> None:
        """Type ``text`` exactly, whatever the layout: unmapped characters use spare keycodes."""
        self._load_keymap()
        caps_on = self.keyboard_state()["caps_lock"]
        caps = self._stroke_for(XK.XK_Caps_Lock)
        if caps_on and caps:
            self._tap(caps)  # CapsLock would turn typed letters upper-case; off meanwhile
        try:
            for segment, missing in self._segments(text):
                self._type_segment(segment, missing)
        finally:
            if caps_on and caps:
                self._tap(caps)
            self._display.sync()

    def _segments(self, text: str) -> Iterator[tuple[str, list[int]]]:
        """Split text so each piece needs at most as many remaps as there are spare keycodes."""
        start, missing = 0, list[int]()
        for index, char in enumerate(text):
            keysym = char_to_keysym(char)
            if self._stroke_for(keysym) is not None or keysym in missing:
                continue
            if len(missing) == max(1, len(self._spares)):
                yield text[start:index], missing
                start, missing = index, []
            missing.append(keysym)
        yield text[start:], missing

    def _type_segment(self, segment: str, missing: list[int]) -> None:
        if not missing:
            for char in segment:
                self._tap(self._stroke_for(char_to_keysym(char)) or (0, False))
            self._display.sync()
            return
        with self._remapped(missing) as bound:
            for char in segment:
                keysym = char_to_keysym(char)
                stroke = (bound[keysym], False) if keysym in bound else self._stroke_for(keysym)
                self._tap(stroke or (0, False))

    # -- keys held down ------------------------------------------------------------------

    def key_down(self, key_name: str) -> None:
        """Press one key and leave it down; a key on the shifted level is held with Shift.

        A key no keycode types is bound to a spare keycode until it is released.
        """
        keysym = parse_key(key_name)
        held = self._keys.get(keysym)
        if held is not None:  # down already: pressed again, as a held key repeats
            self._fake(X.KeyPress, held.code)
            self._display.sync()
            return
        self._load_keymap()
        held, already = self._hold(keysym), self._held_codes()
        for code in (held.shift, held.code):
            if code and code not in already:
                self._fake(X.KeyPress, code)
        self._keys[keysym] = held
        self._display.sync()

    def _hold(self, keysym: int) -> HeldKey:
        """The keycode (and Shift) to press for ``keysym``, binding a spare when none types it."""
        stroke = self._stroke_for(keysym)
        if stroke is not None:
            code, shifted = stroke
            return HeldKey(code, self._shift_code() if shifted else 0)
        if not self._spares:
            raise OpError(ErrorCode.UNAVAILABLE, "no spare keycode left to hold this key")
        code = self._spares.pop(0)
        row = [keysym, keysym] + [X.NoSymbol] * (self._row_width - 2)
        self._display.change_keyboard_mapping(code, [row])
        self._display.sync()
        return HeldKey(code, bound=True)

    def key_up(self, key_name: str) -> None:
        """Release one key; a key this backend does not hold gets a release of its keycode
        (ignored by the X server when that key is up)."""
        keysym = parse_key(key_name)
        held = self._keys.pop(keysym, None)
        if held is not None:
            self._release(held)
            return
        self._load_keymap()
        stroke = self._stroke_for(keysym)
        if stroke is not None and stroke[0] not in self._held_codes():
            self._fake(X.KeyRelease, stroke[0])
        self._display.sync()

    def _release(self, held: HeldKey) -> None:
        """Release what ``held`` pressed, except keycodes another held key still holds."""
        still = self._held_codes()
        for code in (held.code, held.shift):
            if code and code not in still:
                self._fake(X.KeyRelease, code)
        self._display.sync()
        if held.bound:
            time.sleep(REMAP_RESTORE_DELAY_S)
            self._display.change_keyboard_mapping(held.code, [[X.NoSymbol] * self._row_width])
            self._display.sync()

    def release_held(self) -> None:
        """Release every key and button ``key_down``/``mouse_down`` left down, last first."""
        while self._keys:
            keysym = next(reversed(self._keys))
            self._release(self._keys.pop(keysym))
        for button in reversed(list(self._buttons)):
            self._fake(X.ButtonRelease, button)
        self._buttons.clear()
        self._display.sync()

    def close(self) -> None:
        if self._keys or self._buttons:
            try:
                self.release_held()
            except (xerror.ConnectionClosedError, xerror.XError, OSError):
                logger.debug("display gone before its held keys and buttons were released")
        try:
            self._display.close()
        except (xerror.ConnectionClosedError, OSError):
            logger.debug("display connection already closed")
