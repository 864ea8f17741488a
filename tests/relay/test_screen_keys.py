"""Screen-tool parsing without a display: key chords, argument checks, backend choice."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from Xlib import XK

from relay.screen import args as check
from relay.screen.backends import backend_factory
from relay.screen.capture import encode, preview
from relay.screen.keys import Chord, char_to_keysym, name_to_keysym, parse_chord
from relay.screen.pyautogui_input import PyAutoGuiInput, pyautogui_name
from relay.screen.xinput import XTestInput
from wire.capture import bgra_to_rgb
from wire.errors import InvalidArgs
from wire.guard import CropRect, encode_crop
from wire.screen_args import MAX_TEXT

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "chord"),
    [
        ("ctrl+shift+t", Chord((XK.XK_Control_L, XK.XK_Shift_L), XK.XK_t)),
        ("CTRL+T", Chord((XK.XK_Control_L,), XK.XK_T)),
        ("Return", Chord((), XK.XK_Return)),
        ("enter", Chord((), XK.XK_Return)),
        ("super", Chord((), XK.XK_Super_L)),
        ("alt+F4", Chord((XK.XK_Alt_L,), XK.XK_F4)),
        ("alt+f4", Chord((XK.XK_Alt_L,), XK.XK_F4)),
        ("ctrl++", Chord((XK.XK_Control_L,), XK.XK_plus)),
        ("+", Chord((), XK.XK_plus)),
        ("ctrl + c", Chord((XK.XK_Control_L,), XK.XK_c)),
        ("pagedown", Chord((), XK.XK_Next)),
        ("XF86AudioMute", Chord((), 0x1008FF12)),
        ("ö", Chord((), 0xF6)),
    ],
)
def test_parse_chord(text, chord):
    assert parse_chord(text) == chord


@pytest.mark.parametrize("text", ["ctrl+nosuchkey", "hyperdrive", "", "   ", "ctrl+", None, 5])
def test_parse_chord_rejects(text):
    with pytest.raises(InvalidArgs) as info:
        parse_chord(text)
    assert info.value.details == {"field": "keys"}


def test_unknown_key_is_named():
    with pytest.raises(InvalidArgs, match="'nosuchkey'"):
        parse_chord("ctrl+nosuchkey")


@pytest.mark.parametrize(
    ("char", "keysym"),
    [
        ("a", XK.XK_a),
        ("A", XK.XK_A),
        ("\n", XK.XK_Return),
        ("\t", XK.XK_Tab),
        ("é", 0xE9),
        ("☃", 0x1002603),
        ("€", 0x10020AC),
    ],
)
def test_char_to_keysym(char, keysym):
    assert char_to_keysym(char) == keysym


@given(st.text(max_size=20))
def test_every_character_has_a_keysym(text):
    for char in text:
        assert char_to_keysym(char) > 0


def test_name_to_keysym_unknown():
    assert name_to_keysym("definitely_not_a_key") is None


SIZE = (1280, 800)


def test_point_checks_bounds():
    assert check.point({"x": 0, "y": 799}, SIZE) == (0, 799)
    for bad in ({"x": 1280, "y": 0}, {"x": -1, "y": 0}, {"x": 1.5, "y": 0}, {"x": True, "y": 0}):
        with pytest.raises(InvalidArgs):
            check.point(bad, SIZE)


def test_button_names():
    assert check.button({}) == 1
    assert check.button({"button": "RIGHT"}) == 3
    assert check.button({"button": 2}) == 2
    with pytest.raises(InvalidArgs):
        check.button({"button": True})


def test_text_limit():
    assert check.text({"text": "abc"}) == "abc"
    with pytest.raises(InvalidArgs, match="limit"):
        check.text({"text": "x" * (MAX_TEXT + 1)})
    with pytest.raises(InvalidArgs):
        check.text({"text": None})


def test_guard_parsing():
    assert check.guard({}) is None
    crop = np.zeros((4, 5, 3), np.uint8)
    rect = CropRect(1, 2, 5, 4).to_dict()
    parsed = check.guard({"guard": {"crop": encode_crop(crop), "rect": rect}})
    assert parsed is not None
    assert parsed.rect == CropRect(1, 2, 5, 4)
    with pytest.raises(InvalidArgs, match="differs"):
        check.guard({"guard": {"crop": encode_crop(crop), "rect": CropRect(1, 2, 4, 5).to_dict()}})
    with pytest.raises(InvalidArgs):
        check.guard({"guard": "yes"})


@pytest.mark.parametrize("name", [":1", ":12.0", "localhost:3", "host-a.example:0"])
def test_display_names(name):
    assert check.display_name(name) == name


@pytest.mark.parametrize("name", ["", "1", ":a", None, ":1;rm"])
def test_display_names_rejected(name):
    with pytest.raises(InvalidArgs):
        check.display_name(name)


def test_backend_table():
    # One table for every display: the host helper chooses pyautogui from it by name.
    assert backend_factory("xtest") is XTestInput
    assert backend_factory("pyautogui") is PyAutoGuiInput
    with pytest.raises(InvalidArgs):
        backend_factory("telepathy")


@pytest.mark.parametrize(
    ("chord", "names"),
    [
        ("pgup", ["pageup"]),
        ("rctrl", ["ctrlright"]),
        ("XF86AudioMute", ["volumemute"]),
        ("super+e", ["win", "e"]),
        ("ctrl+shift+t", ["ctrl", "shift", "t"]),
        ("ctrl++", ["ctrl", "+"]),
        ("alt+F4", ["alt", "f4"]),
        ("KP_7", ["num7"]),
        ("Return", ["enter"]),
    ],
)
def test_pyautogui_names_come_from_the_one_keys_table(chord, names):
    parsed = parse_chord(chord)
    assert [pyautogui_name(k) for k in (*parsed.modifiers, parsed.key)] == names


def test_bgra_to_rgb_and_preview():
    bgra = np.zeros((2, 3, 4), np.uint8)
    bgra[..., 0], bgra[..., 1], bgra[..., 2] = 10, 20, 30
    rgb = bgra_to_rgb(bgra)
    assert rgb.flags["C_CONTIGUOUS"]
    assert rgb[0, 0].tolist() == [30, 20, 10]
    big = np.zeros((400, 1000, 3), np.uint8)
    assert preview(big, 500).shape == (200, 500, 3)
    assert preview(big, 2000) is big


@pytest.mark.parametrize("fmt", ["png", "jpeg", "webp"])
def test_encode_formats(fmt):
    rgb = np.random.default_rng(0).integers(0, 256, (30, 40, 3), dtype=np.uint8)
    encoded = encode(rgb, fmt)
    assert (encoded.width, encoded.height, encoded.format) == (40, 30, fmt)
    assert encoded.to_dict()["image"]
