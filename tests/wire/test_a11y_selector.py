"""Accessibility selectors: every construct and error, round trips, fuzzing, and evaluation on
small hand-built trees."""

from __future__ import annotations

import dataclasses
import json
import random
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.support.examples import examples
from tests.support.processes import scaled
from wire.a11y_match import compound_matches, match_path, select
from wire.a11y_selector import (
    ATTR_NAMES,
    MAX_ATTRS,
    MAX_COMPOUNDS,
    MAX_NTH,
    MAX_TEXT,
    OPS,
    PSEUDOS,
    ROLE_ALIASES,
    AttrTest,
    Compound,
    Selector,
    SelectorError,
    from_json,
    parse,
    role_token,
    to_json,
    unparse,
)

pytestmark = pytest.mark.unit

FUZZ = settings(
    max_examples=examples(500), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
# JSON values and whole selectors cost more to generate than text.
FUZZ_JSON = settings(FUZZ, max_examples=examples(300))
PROPERTY = settings(FUZZ, max_examples=examples(120))

C = Compound
SAVE = AttrTest("name", "=", "Save")


# --- parsing: every construct -------------------------------------------------------------

PARSES: list[tuple[str, tuple[Compound, ...]]] = [
    ("push_button", (C("push_button"),)),
    ("radio_button", (C("radio_button"),)),
    ("page_tab", (C("page_tab"),)),
    ("table_cell", (C("table_cell"),)),
    ("menu_item", (C("menu_item"),)),
    ("h1", (C("h1"),)),
    ("button", (C("push_button"),)),
    ("textbox", (C("text"),)),
    ("entry", (C("text"),)),
    ("text", (C("text"),)),
    ("checkbox", (C("check_box"),)),
    ("check_box", (C("check_box"),)),
    ("link", (C("link"),)),
    ("*", (C(),)),
    ('"Save"', (C(attrs=(SAVE,)),)),
    ("'Save'", (C(attrs=(SAVE,)),)),
    ('[name="Save"]', (C(attrs=(SAVE,)),)),
    ('*[name="Save"]', (C(attrs=(SAVE,)),)),
    ('button[name="Save"]', (C("push_button", (SAVE,)),)),
    ('button[ name = "Save" ]', (C("push_button", (SAVE,)),)),
    ('[name^="Sa"]', (C(attrs=(AttrTest("name", "^=", "Sa"),)),)),
    ('[name$="ve"]', (C(attrs=(AttrTest("name", "$=", "ve"),)),)),
    ('[name*="av"]', (C(attrs=(AttrTest("name", "*=", "av"),)),)),
    ('[name~="SAVE"]', (C(attrs=(AttrTest("name", "~=", "SAVE"),)),)),
    ('[value="42"]', (C(attrs=(AttrTest("value", "=", "42"),)),)),
    ('[description*="file"]', (C(attrs=(AttrTest("description", "*=", "file"),)),)),
    ('[id="save-btn"]', (C(attrs=(AttrTest("id", "=", "save-btn"),)),)),
    ('[role^="push"]', (C(attrs=(AttrTest("role", "^=", "push"),)),)),
    (":visible", (C(pseudos=("visible",)),)),
    ("button:enabled", (C("push_button", pseudos=("enabled",)),)),
    ("button:disabled:focused", (C("push_button", pseudos=("disabled", "focused")),)),
    ("[nth=0]", (C(nth=0),)),
    ("button[nth=12]", (C("push_button", nth=12),)),
    ("[ nth = 007 ]", (C(nth=7),)),
    (f"[nth={MAX_NTH}]", (C(nth=MAX_NTH),)),
    (
        '"Save":enabled[value="x"][nth=1]',
        (C(attrs=(SAVE, AttrTest("value", "=", "x")), pseudos=("enabled",), nth=1),),
    ),
    (
        'frame[name^="Widget"] > filler push_button[name="Save"]',
        (
            C("frame", (AttrTest("name", "^=", "Widget"),)),
            C("filler", combinator="child"),
            C("push_button", (SAVE,), combinator="descendant"),
        ),
    ),
    ("frame>filler", (C("frame"), C("filler", combinator="child"))),
    ("frame \t\n\r\f filler", (C("frame"), C("filler", combinator="descendant"))),
    ("  frame  ", (C("frame"),)),
    ('button "Save"', (C("push_button"), C(attrs=(SAVE,), combinator="descendant"))),
    ("frame :focused", (C("frame"), C(pseudos=("focused",), combinator="descendant"))),
    ('frame>"Save"', (C("frame"), C(attrs=(SAVE,), combinator="child"))),
    (r'"say \"hi\" \\ bye"', (C(attrs=(AttrTest("name", "=", 'say "hi" \\ bye'),)),)),
    (r"'it\'s'", (C(attrs=(AttrTest("name", "=", "it's"),)),)),
    ('"it\'s"', (C(attrs=(AttrTest("name", "=", "it's"),)),)),
    (r'"\'"', (C(attrs=(AttrTest("name", "=", "'"),)),)),
    ('"Speichern … 保存 🙂"', (C(attrs=(AttrTest("name", "=", "Speichern … 保存 🙂"),)),)),
    ('"a\nb\x00"', (C(attrs=(AttrTest("name", "=", "a\nb\x00"),)),)),
    ('[name=""]', (C(attrs=(AttrTest("name", "=", ""),)),)),
]


@pytest.mark.parametrize(("text", "compounds"), PARSES)
def test_constructs_parse_to_compounds(text: str, compounds: tuple[Compound, ...]) -> None:
    assert parse(text) == Selector(text, compounds)


def test_limits_are_inclusive() -> None:
    assert len(parse(" ".join(["a"] * MAX_COMPOUNDS)).compounds) == MAX_COMPOUNDS
    assert len(parse("a" + '[name="x"]' * MAX_ATTRS).compounds[0].attrs) == MAX_ATTRS
    assert parse("a" * MAX_TEXT).compounds == (C("a" * MAX_TEXT),)


# --- parsing: every error, with its column ------------------------------------------------

NTH_RANGE = f"nth takes an integer from 0 to {MAX_NTH}"
KNOWN_ATTRS = "(known: name, value, description, id, role)"
KNOWN_OPS = "(=, ^=, $=, *=, ~=)"
KNOWN_PSEUDOS = "(known: :visible, :enabled, :focused, :disabled)"
TOO_MANY_ATTRS = f"at most {MAX_ATTRS} attribute tests in a compound"
COMPOUND_START = "expected a role, '*', a quoted name, '[' or ':', found"
ATTACHED = (
    'a quoted name cannot be attached to a compound: write [name="…"], '
    "or put a space before the quote for a descendant"
)

ERRORS: list[tuple[str, str, int]] = [
    ("", "empty selector", 0),
    (" \t\n", "empty selector", 0),
    ('[colour="x"]', f"unknown attribute 'colour' {KNOWN_ATTRS}", 1),
    ('button[ Name = "x"]', f"unknown attribute 'Name' {KNOWN_ATTRS}", 8),
    ('[="x"]', "expected an attribute name after '['", 1),
    ("[", "expected an attribute name after '['", 1),
    ("a:hover", f"unknown pseudo-class ':hover' {KNOWN_PSEUDOS}", 1),
    ("a:showing", f"unknown pseudo-class ':showing' {KNOWN_PSEUDOS}", 1),
    ("a:", "expected a pseudo-class name after ':'", 2),
    ('[name="Save]', "unterminated string", 6),
    ("'Save", "unterminated string", 0),
    ('a "Save', "unterminated string", 2),
    ('"a\\n"', "a backslash in a string escapes only \\, \" and '", 2),
    ('"a\\', "a backslash in a string escapes only \\, \" and '", 2),
    ('[name!="x"]', f"unknown operator '!=' (known: {KNOWN_OPS[1:-1]})", 5),
    ('[name|="x"]', f"unknown operator '|=' (known: {KNOWN_OPS[1:-1]})", 5),
    ('[name=="x"]', f"unknown operator '==' (known: {KNOWN_OPS[1:-1]})", 5),
    ("[name]", f"expected an operator {KNOWN_OPS} after 'name'", 5),
    ("[name=Save]", "expected a quoted string after '='", 6),
    ("[name^=]", "expected a quoted string after '^='", 7),
    ('[name="x"', "expected ']'", 9),
    ('[name="x" y]', "expected ']'", 10),
    ("[nth=1", "expected ']'", 6),
    ("frame >", "expected a compound after '>'", 7),
    ("frame >  ", "expected a compound after '>'", 9),
    ("> frame", f"{COMPOUND_START} '>'", 0),
    ("a > > b", f"{COMPOUND_START} '>'", 4),
    ("a ]", f"{COMPOUND_START} ']'", 2),
    ("-", f"{COMPOUND_START} '-'", 0),
    ("#save", f"{COMPOUND_START} '#' (test the accessible id with [id=\"…\"])", 0),
    ("[nth=-1]", NTH_RANGE, 5),
    ('[nth="1"]', NTH_RANGE, 5),
    ("[nth=1.5]", NTH_RANGE, 5),
    ("[nth=]", NTH_RANGE, 5),
    ("[nth=x]", NTH_RANGE, 5),
    (f"[nth={MAX_NTH + 1}]", NTH_RANGE, 5),
    ("[nth=\u0661]", NTH_RANGE, 5),
    ("[nth]", "expected '=' after nth", 4),
    ("[nth^=1]", "expected '=' after nth", 4),
    ("a[nth=1][nth=2]", "nth given twice in one compound", 8),
    ("frame[nth=0] button", "nth is allowed on the last compound only", 5),
    (
        "frame:visible[nth=0]:focused > button[nth=1]",
        "nth is allowed on the last compound only",
        13,
    ),
    ('"Save"[nth=0]"x"', ATTACHED, 13),
    ('push_button"Save"', ATTACHED, 11),
    ('*"Save"', ATTACHED, 1),
    ('"a""b"', ATTACHED, 3),
    ("button[value=\"x\"]'Save'", ATTACHED, 17),
    ("Push_Button", "role names are lowercase letters, digits and '_': write 'push_button'", 0),
    ("a > push-button", "role names are lowercase letters, digits and '_': write 'push_button'", 4),
    ("a,b", "unexpected character ',' (one selector at a time: ',' lists are not supported)", 1),
    (
        "a.b",
        "unexpected character '.' (there are no classes: test name, value, description, id or "
        'role with [attr="…"])',
        1,
    ),
    ("a\x00", "unexpected character U+0000", 1),
    ("a\ud800", "unexpected character U+D800", 1),
    ("a\u00a0b", "unexpected character U+00A0", 1),
    ("*b", "unexpected character 'b'", 1),
    ("a" * (MAX_TEXT + 1), f"a selector is at most {MAX_TEXT} characters (this one has 513)", 512),
    (" ".join(["a"] * (MAX_COMPOUNDS + 1)), f"at most {MAX_COMPOUNDS} compounds in a selector", 32),
    ("a>" * MAX_COMPOUNDS + "a", f"at most {MAX_COMPOUNDS} compounds in a selector", 32),
    ("a" + '[name="x"]' * (MAX_ATTRS + 1), TOO_MANY_ATTRS, 81),
    ('"x"' + '[name="x"]' * MAX_ATTRS, TOO_MANY_ATTRS, 73),
]


@pytest.mark.parametrize(("text", "message", "column"), ERRORS)
def test_errors_name_the_problem_and_its_column(text: str, message: str, column: int) -> None:
    with pytest.raises(SelectorError) as caught:
        parse(text)
    assert (caught.value.message, caught.value.column) == (message, column)
    assert str(caught.value) == f"{message} at column {column}"
    assert caught.value.text == text


def test_the_pointer_shows_the_column_with_a_caret() -> None:
    with pytest.raises(SelectorError) as caught:
        parse('frame > button[colour="red"]')
    assert caught.value.pointer() == 'frame > button[colour="red"]\n               ^'


def test_the_pointer_shows_a_window_of_a_long_text_and_hides_control_characters() -> None:
    with pytest.raises(SelectorError) as caught:
        parse('[name="' + "x" * 70 + '"]\x07')
    assert caught.value.column == 79
    window, caret = caught.value.pointer().split("\n")
    assert window == "x" * 28 + '"]?'
    assert caret == " " * 30 + "^"


def test_role_tokens_are_atspi_role_names_with_underscores() -> None:
    assert role_token("push button") == "push_button"
    assert role_token("Check Box") == "check_box"
    assert role_token("push-button") == "push_button"
    assert role_token("table cell") == "table_cell"
    assert role_token("frame") == "frame"


# --- canonical text -----------------------------------------------------------------------

CANONICAL: list[tuple[str, str]] = [
    (
        'frame[name^="Widget"] > filler push_button[name="Save"]',
        'frame[name^="Widget"]>filler button[name="Save"]',
    ),
    ("  check_box  \n  textbox ", "checkbox text"),
    ("*[name='Save']", '"Save"'),
    ('*[value="1"][name="Save"]', '[value="1"][name="Save"]'),
    ('"Save":visible[nth=3][role="x"]', '"Save"[role="x"][nth=3]:visible'),
    ("*:focused", ":focused"),
    ("*", "*"),
    ("[ nth = 01 ]", "[nth=1]"),
    ("""'say "hi"'""", """'say "hi"'"""),
    (r'"it\'s"', '"it\'s"'),
    (r'"\\"', r'"\\"'),
    ("a >b", "a>b"),
]


@pytest.mark.parametrize(("text", "canonical"), CANONICAL)
def test_unparse_writes_the_canonical_text(text: str, canonical: str) -> None:
    assert unparse(parse(text)) == canonical
    assert parse(canonical).compounds == parse(text).compounds


# --- JSON form ----------------------------------------------------------------------------


def test_the_json_form_is_plain_data() -> None:
    sel = parse('frame > "Save":enabled[nth=0]')
    assert to_json(sel) == {
        "text": 'frame > "Save":enabled[nth=0]',
        "compounds": [
            {"role": "frame", "attrs": [], "pseudos": [], "nth": None, "combinator": None},
            {
                "role": None,
                "attrs": [{"name": "name", "op": "=", "value": "Save"}],
                "pseudos": ["enabled"],
                "nth": 0,
                "combinator": "child",
            },
        ],
    }
    assert from_json(json.loads(json.dumps(to_json(sel)))) == sel


def _valid_json() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(json.dumps(to_json(parse('frame > button[name="Save"]'))))
    return data


def _edit(path: tuple[str | int, ...], value: object) -> dict[str, Any]:
    data = _valid_json()
    target: Any = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


JSON_ERRORS: list[tuple[object, str]] = [
    (None, "selector: expected an object with the keys text, compounds"),
    ([], "selector: expected an object with the keys text, compounds"),
    ({"text": "a"}, "selector: expected an object with the keys text, compounds"),
    ({**_valid_json(), "extra": 1}, "selector: expected an object with the keys text, compounds"),
    (_edit(("text",), 1), "text: expected a string"),
    (_edit(("compounds",), {}), "compounds: expected a list"),
    (_edit(("compounds",), [None] * 17), "compounds: at most 16 items"),
    (_edit(("compounds", 0, "role"), 5), "compounds[0].role: expected a string"),
    (_edit(("compounds", 1, "attrs"), "x"), "compounds[1].attrs: expected a list"),
    (
        _edit(("compounds", 1, "attrs", 0, "op"), "!="),
        "compounds[1].attrs[0].op: expected one of =, ^=, $=, *=, ~=",
    ),
    (
        _edit(("compounds", 1, "attrs", 0, "name"), "colour"),
        "compounds[1].attrs[0].name: expected one of name, value, description, id, role",
    ),
    (
        _edit(("compounds", 1, "attrs", 0, "value"), None),
        "compounds[1].attrs[0].value: expected a string",
    ),
    (
        _edit(("compounds", 1, "pseudos"), ["hover"]),
        "compounds[1].pseudos[0]: expected one of visible, enabled, focused, disabled",
    ),
    (
        _edit(("compounds", 1, "nth"), True),
        f"compounds[1].nth: expected null or an integer from 0 to {MAX_NTH}",
    ),
    (
        _edit(("compounds", 1, "nth"), -1),
        f"compounds[1].nth: expected null or an integer from 0 to {MAX_NTH}",
    ),
    (
        _edit(("compounds", 1, "nth"), 1.0),
        f"compounds[1].nth: expected null or an integer from 0 to {MAX_NTH}",
    ),
    (
        _edit(("compounds", 1, "combinator"), ">"),
        "compounds[1].combinator: expected one of descendant, child",
    ),
    (_edit(("compounds", 1, "combinator"), "descendant"), "compounds: not what the text parses to"),
    (_edit(("compounds", 0, "combinator"), "child"), "compounds: not what the text parses to"),
    (_edit(("compounds", 1, "role"), "button"), "compounds: not what the text parses to"),
    (_edit(("compounds",), []), "compounds: not what the text parses to"),
    (_edit(("text",), 'frame > button[name="Open"]'), "compounds: not what the text parses to"),
]


@pytest.mark.parametrize(("data", "message"), JSON_ERRORS)
def test_from_json_refuses_anything_but_a_parsed_selector(data: object, message: str) -> None:
    with pytest.raises(SelectorError) as caught:
        from_json(data)
    assert (caught.value.message, caught.value.column) == (message, None)
    assert str(caught.value) == message


def test_from_json_reports_a_text_that_does_not_parse_at_its_column() -> None:
    with pytest.raises(SelectorError) as caught:
        from_json(_edit(("text",), "frame >"))
    assert (caught.value.message, caught.value.column) == ("expected a compound after '>'", 7)


# --- round trips (property tests) ---------------------------------------------------------

ANY_CHARACTER = st.characters(exclude_categories=())  # lone surrogates included
ROLES = st.one_of(
    st.sampled_from(["push_button", "text", "check_box", "frame", "filler", "link", "page_tab"]),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_", min_size=1, max_size=12).filter(
        lambda r: r not in ROLE_ALIASES
    ),
)
VALUES = st.text(alphabet=st.one_of(st.sampled_from("\"'\\ "), ANY_CHARACTER), max_size=10)
ATTRS = st.builds(AttrTest, st.sampled_from(ATTR_NAMES), st.sampled_from(OPS), VALUES)


def compounds(combinators: st.SearchStrategy[Any], max_attrs: int) -> st.SearchStrategy[Compound]:
    return st.builds(
        Compound,
        st.none() | ROLES,
        st.lists(ATTRS, max_size=max_attrs).map(tuple),
        st.lists(st.sampled_from(PSEUDOS), max_size=3).map(tuple),
        st.none(),
        combinators,
    )


def selectors(max_compounds: int, max_attrs: int) -> st.SearchStrategy[Selector]:
    """Selectors as the parser builds them: nth only on the last compound."""
    first = compounds(st.none(), max_attrs)
    rest = st.lists(
        compounds(st.sampled_from(["descendant", "child"]), max_attrs), max_size=max_compounds - 1
    )
    return st.builds(_with_nth, first, rest, st.none() | st.integers(0, MAX_NTH))


def _with_nth(head: Compound, tail: list[Compound], nth: int | None) -> Selector:
    chain = [head, *tail]
    chain[-1] = dataclasses.replace(chain[-1], nth=nth)
    return Selector("", tuple(chain))


@PROPERTY
@given(selectors(max_compounds=8, max_attrs=2))
def test_unparse_then_parse_gives_the_same_compounds(sel: Selector) -> None:
    text = unparse(sel)
    assume(len(text) <= MAX_TEXT)
    assert parse(text).compounds == sel.compounds
    assert unparse(parse(text)) == text


@PROPERTY
@given(selectors(max_compounds=4, max_attrs=MAX_ATTRS))
def test_to_json_then_from_json_gives_the_same_selector(generated: Selector) -> None:
    text = unparse(generated)
    assume(len(text) <= MAX_TEXT)
    sel = parse(text)
    assert from_json(json.loads(json.dumps(to_json(sel)))) == sel


class Speller:
    """Writes a selector in one of the many texts that parse to it: aliases, either quote,
    needless escapes, ``*`` or not, whitespace, leading zeros, qualifiers in any order."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def selector(self, sel: Selector) -> str:
        parts = [self.space(0)]
        for index, compound in enumerate(sel.compounds):
            if index and compound.combinator == "child":
                parts.append(self.space(0) + ">" + self.space(0))
            elif index:
                parts.append(self.space(1))
            parts.append(self.compound(compound))
        return "".join([*parts, self.space(0)])

    def compound(self, compound: Compound) -> str:
        attrs = list(compound.attrs)
        head = ""
        if compound.role is not None:
            head = self.rng.choice(
                [compound.role, *(a for a, r in ROLE_ALIASES.items() if r == compound.role)]
            )
        elif attrs and attrs[0].name == "name" and attrs[0].op == "=" and self.flip():
            head = self.string(attrs.pop(0).value)
        elif not (attrs or compound.pseudos or compound.nth is not None) or self.flip():
            head = "*"
        tests = [self.attr(test) for test in attrs]
        others = [f":{pseudo}" for pseudo in compound.pseudos]
        if compound.nth is not None:
            zeros = "0" * self.rng.randint(0, 2)
            nth = self.bracket("nth", "=", f"{zeros}{compound.nth}")
            others.insert(self.rng.randint(0, len(others)), nth)
        return head + "".join(self.interleave(tests, others))

    def attr(self, test: AttrTest) -> str:
        return self.bracket(test.name, test.op, self.string(test.value))

    def bracket(self, name: str, op: str, value: str) -> str:
        return f"[{self.space(0)}{name}{self.space(0)}{op}{self.space(0)}{value}{self.space(0)}]"

    def string(self, value: str) -> str:
        quote, other = self.rng.choice([('"', "'"), ("'", '"')])
        escaped = value.replace("\\", "\\\\").replace(quote, "\\" + quote)
        if self.flip():
            escaped = escaped.replace(other, "\\" + other)
        return quote + escaped + quote

    def interleave(self, left: list[str], right: list[str]) -> list[str]:
        """Both lists merged, each keeping its own order (attribute order matters)."""
        merged: list[str] = []
        while left and right:
            merged.append((left if self.flip() else right).pop(0))
        return merged + left + right

    def space(self, least: int) -> str:
        return "".join(self.rng.choice(" \t\n\r\f") for _ in range(self.rng.randint(least, 3)))

    def flip(self) -> bool:
        return self.rng.random() < 0.5


@PROPERTY
@given(selectors(max_compounds=4, max_attrs=3), st.randoms(use_true_random=False))
def test_every_spelling_parses_and_the_canonical_text_is_never_longer(
    sel: Selector, rng: random.Random
) -> None:
    text = Speller(rng).selector(sel)
    assume(len(text) <= MAX_TEXT)
    parsed = parse(text)
    assert parsed.compounds == sel.compounds
    assert len(unparse(parsed)) <= len(text)


# --- fuzzing ------------------------------------------------------------------------------


def check_error(err: SelectorError, length: int, *, from_text: bool) -> None:
    """The column lies inside the text; the message never carries a lone surrogate."""
    if from_text or err.column is not None:
        assert err.column is not None and 0 <= err.column <= length
    str(err).encode()
    err.pointer().encode()


def parse_or_error(text: str) -> None:
    """Parsing returns a selector or raises SelectorError with a column inside the text."""
    try:
        sel = parse(text)
    except SelectorError as err:
        check_error(err, len(text), from_text=True)
        return
    assert parse(unparse(sel)).compounds == sel.compounds
    assert from_json(to_json(sel)) == sel


@FUZZ
@given(st.text(alphabet=ANY_CHARACTER, max_size=MAX_TEXT + 40))
def test_any_text_parses_or_raises_selector_error(text: str) -> None:
    parse_or_error(text)


TOKENS = st.sampled_from(
    [
        "push_button",
        "button",
        "entry",
        "Frame",
        "*",
        '"Save"',
        "'x'",
        '"',
        "'",
        "\\",
        "[",
        "]",
        "name",
        "value",
        "role",
        "colour",
        "nth",
        "=",
        "^=",
        "~=",
        "!=",
        "0",
        "-1",
        "99",
        ":",
        "visible",
        "hover",
        ">",
        " ",
        "\t",
        ",",
        "#",
        "-",
        "\x00",
        "\ud800",
        "é",
    ]
)


@FUZZ
@given(st.lists(TOKENS, max_size=40))
def test_token_soup_parses_or_raises_selector_error(tokens: list[str]) -> None:
    parse_or_error("".join(tokens))


EXAMPLES = st.sampled_from([text for text, _ in PARSES] + [text for text, _ in CANONICAL])
EDITS = st.lists(
    st.tuples(st.integers(0, 100), st.sampled_from(["del", "ins", "sub"]), ANY_CHARACTER | TOKENS),
    max_size=4,
)


@FUZZ
@given(EXAMPLES, EDITS)
def test_mutated_selectors_parse_or_raise_selector_error(
    text: str, edits: list[tuple[int, str, str]]
) -> None:
    for position, kind, char in edits:
        at = position % (len(text) + 1)
        text = text[:at] + (char if kind != "del" else "") + text[at + (kind != "ins") :]
    parse_or_error(text)


ADVERSARIAL = [
    "[" * MAX_TEXT,
    '"' + "\\\\" * ((MAX_TEXT - 1) // 2),
    "a " * (MAX_TEXT // 2),
    " " * (MAX_TEXT - 1) + ">",
    "a:" * (MAX_TEXT // 2),
    '[name="' + "x" * (MAX_TEXT - 7),
    "a" + ":visible" * ((MAX_TEXT - 1) // 8),
    "[nth=" + "0" * (MAX_TEXT - 6) + "]",
    ">" * MAX_TEXT,
]


@pytest.mark.parametrize("text", ADVERSARIAL)
def test_the_longest_texts_parse_quickly(text: str) -> None:
    """The parser looks at each character a bounded number of times: no backtracking."""
    started = time.perf_counter()
    for _ in range(200):
        parse_or_error(text)
    assert time.perf_counter() - started < scaled(2.0)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(alphabet=ANY_CHARACTER, max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)


def from_json_or_error(data: object) -> None:
    try:
        sel = from_json(data)
    except SelectorError as err:
        check_error(err, MAX_TEXT, from_text=False)
        return
    assert sel.compounds == parse(sel.text).compounds


@FUZZ_JSON
@given(JSON_VALUES)
def test_any_json_value_is_a_selector_or_a_selector_error(data: object) -> None:
    from_json_or_error(data)


def _paths(data: Any, prefix: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """Every place in a JSON value that can be replaced."""
    if isinstance(data, dict):
        children: Any = data.items()
    else:
        children = enumerate(data) if isinstance(data, list) else []
    paths = [prefix] if prefix else []
    for key, child in children:
        paths.extend(_paths(child, (*prefix, key)))
    return paths


@FUZZ_JSON
@given(EXAMPLES, st.data())
def test_mutated_json_forms_are_a_selector_or_a_selector_error(
    text: str, data: st.DataObject
) -> None:
    form: Any = json.loads(json.dumps(to_json(parse(text))))
    path = data.draw(st.sampled_from(_paths(form)))
    target = form
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = data.draw(JSON_VALUES)
    from_json_or_error(form)


# --- evaluation ---------------------------------------------------------------------------


def node(
    role: str = "filler", name: str | None = None, states: Any = (), **fields: Any
) -> dict[str, Any]:
    return {"role": role, "name": name, "states": states, **fields}


BUTTON = node(
    "push_button",
    "Save",
    frozenset({"showing", "visible", "enabled", "sensitive", "focused", "focusable"}),
    value=None,
    description="Saves the file",
    id="save-btn",
)

MATCHES: list[tuple[str, dict[str, Any], bool]] = [
    ("push_button", BUTTON, True),
    ("button", BUTTON, True),
    ("*", BUTTON, True),
    ("frame", BUTTON, False),
    ("button", {**BUTTON, "role": "push button"}, True),
    ('"Save"', BUTTON, True),
    ('"save"', BUTTON, False),
    ('[name^="Sa"]', BUTTON, True),
    ('[name^="ve"]', BUTTON, False),
    ('[name$="ve"]', BUTTON, True),
    ('[name*="av"]', BUTTON, True),
    ('[name*="AV"]', BUTTON, False),
    ('[name~="AV"]', BUTTON, True),
    ('[description~="THE FILE"]', BUTTON, True),
    ('[name~="straße"]', {**BUTTON, "name": "STRASSE"}, True),
    ('[id="save-btn"]', BUTTON, True),
    ('[role="push_button"]', BUTTON, True),
    ('[role^="push"]', BUTTON, True),
    ('[role="button"]', BUTTON, False),
    ('[value=""]', BUTTON, True),
    ('[value^=""]', node(), True),
    ('[description=""]', node(), True),
    ('[name="Save"]', {**BUTTON, "name": 5}, False),
    ('button[name="Save"][id^="save"][description*="file"]', BUTTON, True),
    ('button[name="Save"][id^="open"]', BUTTON, False),
    (":visible", BUTTON, True),
    (":visible", node(states={"showing"}), False),
    (":visible", node(states={"visible"}), False),
    (":visible", node(states=["visible", "showing"]), True),
    (":enabled", BUTTON, True),
    (":enabled", node(states=("sensitive",)), True),
    (":enabled", node(states=("enabled",)), True),
    (":enabled", node(), False),
    (":disabled", node(), True),
    (":disabled", BUTTON, False),
    (":disabled", node(states="enabled"), True),
    (":disabled", node(states=None), True),
    (":focused", BUTTON, True),
    (":focused", node(states={"focusable"}), False),
    (":visible:enabled:focused", BUTTON, True),
    (":enabled:disabled", BUTTON, False),
    ("*", {}, True),
    ('[name=""]', {}, True),
]


@pytest.mark.parametrize(("text", "candidate", "expected"), MATCHES)
def test_compound_matches(text: str, candidate: dict[str, Any], expected: bool) -> None:
    assert compound_matches(parse(text).compounds[0], candidate) is expected


PATH = [
    node("frame", "Editor"),
    node("panel", "outer"),
    node("panel", "inner"),
    node("filler"),
    BUTTON,
]

PATHS: list[tuple[str, bool]] = [
    ("button", True),
    ("frame button", True),
    ("frame > button", False),
    ("filler > button", True),
    ("panel > filler > button", True),
    ('panel[name="inner"] > filler button', True),
    ('panel[name="outer"] > filler button', False),
    ('panel[name="outer"] panel > filler > button', True),
    ('panel[name="outer"] > panel[name="inner"] button', True),
    ('panel[name="inner"] > panel button', False),
    ("frame panel panel filler button", True),
    ("frame panel panel panel button", False),
    ("frame > panel > panel > filler > button:focused", True),
    ("button button", False),
    ("filler", False),
    ('frame "Save"', True),
    ("frame button[nth=9]", True),
]


@pytest.mark.parametrize(("text", "expected"), PATHS)
def test_match_path_follows_combinators(text: str, expected: bool) -> None:
    assert match_path(parse(text), PATH) is expected


def test_match_path_of_an_empty_path_is_false() -> None:
    assert match_path(parse("*"), []) is False


def tree(role: str, name: str | None = None, *kids: dict[str, Any]) -> dict[str, Any]:
    return {**node(role, name), "children": list(kids)}


def kids(parent: dict[str, Any]) -> list[dict[str, Any]]:
    children: list[dict[str, Any]] = parent["children"]
    return children


SAVE_1 = tree("push_button", "Save")
CANCEL = tree("push_button", "Cancel")
SAVE_2 = tree("push_button", "Save")
SAVE_3 = tree("push_button", "Save")
INNER = tree("filler", "inner", SAVE_2)
PANEL = tree("panel", None, INNER)
MAIN = tree("frame", "Main", tree("filler", "outer", SAVE_1, CANCEL, PANEL))
OTHER = tree("frame", "Other", SAVE_3)
ROOTS = [MAIN, OTHER]

SELECTIONS: list[tuple[str, list[dict[str, Any]]]] = [
    ("button", [SAVE_1, CANCEL, SAVE_2, SAVE_3]),
    ('"Save"', [SAVE_1, SAVE_2, SAVE_3]),
    ("button[nth=1]", [CANCEL]),
    ("button[nth=3]", [SAVE_3]),
    ("button[nth=4]", []),
    ('"Save"[nth=1]', [SAVE_2]),
    ("frame > button", [SAVE_3]),
    ("filler button", [SAVE_1, CANCEL, SAVE_2]),
    ("filler > button", [SAVE_1, CANCEL, SAVE_2]),
    ("filler button[nth=2]", [SAVE_2]),
    ("filler > button[nth=1]", [CANCEL]),
    ('frame > filler > "Save"[nth=0]', [SAVE_1]),
    ("filler *", [SAVE_1, CANCEL, PANEL, INNER, SAVE_2]),
    ("filler > *", [SAVE_1, CANCEL, PANEL, SAVE_2]),
    ("filler filler > button", [SAVE_2]),
    ("panel > button", []),
    ("link", []),
]


@pytest.mark.parametrize(("text", "expected"), SELECTIONS)
def test_select_finds_matches_in_document_order_and_applies_nth_to_them(
    text: str, expected: list[dict[str, Any]]
) -> None:
    assert [id(found) for found in select(parse(text), ROOTS, kids)] == [id(e) for e in expected]


def test_select_of_an_empty_forest_is_empty() -> None:
    assert select(parse("*"), [], kids) == []


def test_select_walks_deep_trees_without_recursion() -> None:
    leaf = tree("push_button", "deep")
    root = leaf
    for _ in range(5000):
        root = tree("filler", None, root)
    assert select(parse('filler > "deep"'), [root], kids) == [leaf]


SMALL_ROLES = st.sampled_from(["frame", "filler", "push_button"])
SMALL_NAMES = st.sampled_from([None, "a", "b"])
TREES = st.recursive(
    st.builds(tree, SMALL_ROLES, SMALL_NAMES),
    lambda inner: st.builds(
        lambda r, n, c: tree(r, n, *c), SMALL_ROLES, SMALL_NAMES, st.lists(inner, max_size=3)
    ),
    max_leaves=12,
)
SMALL_COMPOUNDS = st.builds(
    Compound,
    st.none() | SMALL_ROLES,
    st.lists(
        st.builds(AttrTest, st.just("name"), st.just("="), st.sampled_from(["a", "b"])), max_size=1
    ).map(tuple),
)


@st.composite
def small_selectors(draw: st.DrawFn) -> Selector:
    first = draw(SMALL_COMPOUNDS)
    rest = [
        Compound(c.role, c.attrs, combinator=draw(st.sampled_from(["descendant", "child"])))
        for c in draw(st.lists(SMALL_COMPOUNDS, max_size=3))
    ]
    return Selector("", (first, *rest))


def paths_in_document_order(roots: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    found: list[list[dict[str, Any]]] = []

    def visit(current: dict[str, Any], above: list[dict[str, Any]]) -> None:
        path = [*above, current]
        found.append(path)
        for child in kids(current):
            visit(child, path)

    for root in roots:
        visit(root, [])
    return found


@PROPERTY
@given(st.lists(TREES, min_size=1, max_size=2), small_selectors(), st.integers(0, 4))
def test_select_agrees_with_match_path_and_nth_on_the_last_compound(
    roots: list[dict[str, Any]], sel: Selector, nth: int
) -> None:
    expected = [path[-1] for path in paths_in_document_order(roots) if match_path(sel, path)]
    assert [id(n) for n in select(sel, roots, kids)] == [id(n) for n in expected]
    last = sel.compounds[-1]
    counted = Compound(last.role, last.attrs, nth=nth, combinator=last.combinator)
    with_nth = Selector("", (*sel.compounds[:-1], counted))
    found = [id(n) for n in select(with_nth, roots, kids)]
    assert found == [id(n) for n in expected][nth : nth + 1]
