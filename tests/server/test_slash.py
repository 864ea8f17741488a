"""The ``/desktop`` grammar: a table of inputs, relay resolution, and a fuzzer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.chat.slash import (
    AttachDesktop,
    CloseViewer,
    Command,
    ControlDesktop,
    DesktopStatus,
    Help,
    ListDesktops,
    OpenDesktop,
    ParseError,
    PauseDesktop,
    RelayAmbiguous,
    RelayResolved,
    RelayUnknown,
    SnapshotDesktop,
    StopDesktop,
    describe,
    help_lines,
    is_desktop_command,
    parse,
    resolve_relay,
)
from tests.support.examples import examples

pytestmark = pytest.mark.unit

COMMANDS: list[tuple[str, Command]] = [
    ("/desktop", OpenDesktop("virtual", None)),
    ("  /desktop  ", OpenDesktop("virtual", None)),
    ("/desktop relay-1", OpenDesktop("virtual", "relay-1")),
    ("/DESKTOP Relay_2.lab", OpenDesktop("virtual", "Relay_2.lab")),
    ("/desktop virtual", OpenDesktop("virtual", None)),
    ("/desktop virtual relay-1", OpenDesktop("virtual", "relay-1")),
    ("/desktop docker", OpenDesktop("docker", None)),
    ("/desktop docker relay-1", OpenDesktop("docker", "relay-1")),
    ("/desktop virtual docker", OpenDesktop("virtual", "docker")),
    ("/desktop local", OpenDesktop("local", None)),
    ("/desktop LOCAL relay-1", OpenDesktop("local", "relay-1")),
    ("/desktop close", CloseViewer()),
    ("/desktop list", ListDesktops()),
    ("/desktop status", DesktopStatus(None)),
    ("/desktop status relay-1", DesktopStatus("relay-1")),
    ("/desktop attach relay-1", AttachDesktop("relay-1")),
    ("/desktop attach", AttachDesktop(None)),
    ("/desktop stop", StopDesktop(None)),
    ("/desktop stop relay-1", StopDesktop("relay-1")),
    ("/desktop help", Help()),
    ("/desktop help stop", Help("stop")),
    ("/desktop\tlist", ListDesktops()),
    ("/desktop take", ControlDesktop("take", None)),
    ("/desktop take relay-1", ControlDesktop("take", "relay-1")),
    ("/desktop HAND-BACK relay-1", ControlDesktop("hand-back", "relay-1")),
    ("/desktop stop-agent", ControlDesktop("stop-agent", None)),
    ("/desktop stop-agent relay-1", ControlDesktop("stop-agent", "relay-1")),
    ("/desktop pause", PauseDesktop("pause", None)),
    ("/desktop RESUME relay-1", PauseDesktop("resume", "relay-1")),
    ("/desktop snapshot base", SnapshotDesktop("snapshot", "base", None)),
    ("/desktop snapshot base relay-1", SnapshotDesktop("snapshot", "base", "relay-1")),
    ("/desktop reset", SnapshotDesktop("reset", None, None)),
    ("/desktop reset base", SnapshotDesktop("reset", "base", None)),
    ("/desktop reset base relay-1", SnapshotDesktop("reset", "base", "relay-1")),
]


@pytest.mark.parametrize(("text", "expected"), COMMANDS)
def test_commands_parse_to_typed_values(text: str, expected: Command) -> None:
    assert parse(text) == expected


ERRORS: list[tuple[str, str | None]] = [
    ("/desktop lsit relay-1", "/desktop list"),
    ("/desktop stpo relay-1", "/desktop stop relay-1"),
    ("/desktop list extra", "/desktop list"),
    ("/desktop close now", "/desktop close"),
    ("/desktop relay-1 relay-2", "/desktop relay-1"),
    ("/desktop status a b", "/desktop status"),
    ("/desktop stop <script>", None),
    ("/desktop help nonsense", "/desktop help"),
    ("/desktop help stpo", "/desktop help stop"),
    ("/dekstop list", "/desktop list"),
    ("/desktops", "/desktop"),
    ("/frobnicate", "/desktop help"),
    ("", "/desktop help"),
    ("/desktop " + "x" * 500, None),
    ("/desktop ../../etc", "/desktop help"),
    ("/desktop stop-agnet relay-1", "/desktop stop-agent relay-1"),
    ("/desktop take a b", "/desktop take"),
    ("/desktop snapshot", "/desktop snapshot NAME [relay]"),
    ("/desktop snapshot ../etc", "/desktop snapshot NAME [relay]"),
    ("/desktop reset a/b", "/desktop reset [NAME [relay]]"),
    ("/desktop reset base relay-1 more", "/desktop reset [NAME [relay]]"),
]


@pytest.mark.parametrize(("text", "suggestion"), ERRORS)
def test_bad_input_is_a_parse_error_with_a_suggestion(text: str, suggestion: str | None) -> None:
    result = parse(text)
    assert isinstance(result, ParseError), result
    assert result.message
    assert result.suggestion == suggestion


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/desktop", True),
        ("/desktop list", True),
        ("  /desktop", True),
        ("/dekstop", True),
        ("/desktops", True),
        ("/me waves", False),
        ("hello /desktop", False),
        ("desktop", False),
        ("", False),
    ],
)
def test_which_messages_are_commands(text: str, expected: bool) -> None:
    assert is_desktop_command(text) is expected


def test_relay_may_be_omitted_only_when_one_is_visible() -> None:
    assert resolve_relay(None, ["relay-1"]) == RelayResolved("relay-1")
    assert resolve_relay(None, ["a", "b"]) == RelayAmbiguous(("a", "b"))
    assert resolve_relay(None, []) == RelayUnknown(None, (), None)


def test_relay_names_resolve_exactly_then_case_insensitively() -> None:
    assert resolve_relay("relay-1", ["relay-1", "Relay-1"]) == RelayResolved("relay-1")
    assert resolve_relay("RELAY-2", ["relay-1", "relay-2"]) == RelayResolved("relay-2")


def test_unknown_relay_gets_the_closest_name_or_a_command_suggestion() -> None:
    assert resolve_relay("relya-1", ["relay-1", "lab"]) == RelayUnknown(
        "relya-1", ("relay-1", "lab"), "relay-1"
    )
    unknown = resolve_relay("lsit", ["relay-1"])
    assert isinstance(unknown, RelayUnknown)
    assert unknown.suggestion == "/desktop list"
    far = resolve_relay("zzzzzz", ["relay-1"])
    assert isinstance(far, RelayUnknown)
    assert far.suggestion is None


@pytest.mark.parametrize(("text", "command"), COMMANDS)
def test_describe_round_trips(text: str, command: Command) -> None:
    assert parse(describe(command)) == command


def test_help_covers_every_command() -> None:
    usages = [usage for usage, _ in help_lines()]
    words = (
        "virtual",
        "docker",
        "local",
        "close",
        "list",
        "status",
        "attach",
        "stop",
        "help",
        "take",
        "hand-back",
        "stop-agent",
        "pause",
        "resume",
        "snapshot",
        "reset",
    )
    for word in words:
        assert any(usage.startswith(f"/desktop {word}") for usage in usages)
    assert help_lines("stop") == [("/desktop stop [relay]", help_lines("stop")[0][1])]


COMMAND_TYPES = (
    OpenDesktop,
    CloseViewer,
    ListDesktops,
    DesktopStatus,
    AttachDesktop,
    StopDesktop,
    Help,
    ControlDesktop,
    PauseDesktop,
    SnapshotDesktop,
)
WORDS = st.sampled_from(
    [
        "/desktop",
        "virtual",
        "docker",
        "local",
        "list",
        "status",
        "attach",
        "stop",
        "close",
        "help",
        "relay-1",
        "<b>",
        "\u200b",
        "",
        "/",
        "x" * 70,
        "take",
        "hand-back",
        "stop-agent",
        "pause",
        "resume",
        "snapshot",
        "reset",
    ]
)


@settings(max_examples=examples(400), deadline=None)
@given(st.text(max_size=600))
def test_any_text_is_a_command_or_a_parse_error(text: str) -> None:
    assert isinstance(parse(text), (*COMMAND_TYPES, ParseError))
    is_desktop_command(text)


@settings(max_examples=examples(400), deadline=None)
@given(st.lists(WORDS, max_size=6), st.lists(st.sampled_from([" ", "\t", "\n", "  "]), min_size=6))
def test_word_soup_is_a_command_or_a_parse_error(words: list[str], gaps: list[str]) -> None:
    text = "".join(word + gap for word, gap in zip(words, gaps, strict=False))
    result = parse(text)
    assert isinstance(result, (*COMMAND_TYPES, ParseError))
    if not isinstance(result, ParseError):
        assert parse(describe(result)) == result


@settings(max_examples=examples(200), deadline=None)
@given(st.one_of(st.none(), st.text(max_size=80)), st.lists(st.text(max_size=20), max_size=5))
def test_relay_resolution_never_raises(name: str | None, visible: list[str]) -> None:
    result = resolve_relay(name, visible)
    if isinstance(result, RelayResolved):
        assert result.name in visible
