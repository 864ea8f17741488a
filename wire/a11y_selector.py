"""Accessibility selectors: text in, a typed :class:`Selector` or a :class:`SelectorError` out.

A selector names elements of an accessibility tree the way a CSS selector names elements of a
page::

    frame[name^="Widget"] > filler button[name="Save"]:enabled

Pure and standard-library only: the AT-SPI worker imports this module under the system Python
with nothing else installed. :func:`parse`, :func:`unparse`, :func:`to_json` and
:func:`from_json` convert; ``wire.a11y_match`` evaluates a selector against plain node
mappings. The grammar, the meaning of each part, the canonical
form and every error are documented in ``docs/accessibility-selectors.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal, TypeVar, get_args

AttrName = Literal["name", "value", "description", "id", "role"]
Op = Literal["=", "^=", "$=", "*=", "~="]
Pseudo = Literal["visible", "enabled", "focused", "disabled"]
Combinator = Literal["descendant", "child"]

ATTR_NAMES: Final[tuple[AttrName, ...]] = get_args(AttrName)
OPS: Final[tuple[Op, ...]] = get_args(Op)
PSEUDOS: Final[tuple[Pseudo, ...]] = get_args(Pseudo)
COMBINATORS: Final[tuple[Combinator, ...]] = get_args(Combinator)

MAX_TEXT: Final = 512
MAX_COMPOUNDS: Final = 16
MAX_ATTRS: Final = 8
# Far above any tree's size, and exact in every JSON reader.
MAX_NTH: Final = 1_000_000

# Short names for common roles; the canonical text writes each role in its shortest spelling.
ROLE_ALIASES: Final[Mapping[str, str]] = MappingProxyType(
    {"button": "push_button", "textbox": "text", "entry": "text", "checkbox": "check_box"}
)

# Roles a role token also matches: toolkits name a one-line text field "text" (GTK) or
# "entry" (Chromium, Qt), so ``text`` (and its aliases) finds both.
ROLE_FAMILIES: Final[Mapping[str, frozenset[str]]] = MappingProxyType(
    {"text": frozenset({"entry"})}
)
_T = TypeVar("_T")

_WS: Final = frozenset(" \t\n\r\f")
_QUOTES: Final = frozenset("\"'")
_ESCAPABLE: Final = frozenset("\"'\\")
_DIGITS: Final = frozenset("0123456789")
_WORD: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_OP_CHARS: Final = frozenset("=^$*~!|<>")
_ATTR_BY_NAME: Final[Mapping[str, AttrName]] = {name: name for name in ATTR_NAMES}
_OP_BY_SYMBOL: Final[Mapping[str, Op]] = {op: op for op in OPS}
_PSEUDO_BY_NAME: Final[Mapping[str, Pseudo]] = {pseudo: pseudo for pseudo in PSEUDOS}
_COMBINATOR_BY_NAME: Final[Mapping[str, Combinator]] = {name: name for name in COMBINATORS}
_KNOWN_OPS: Final = ", ".join(OPS)
_KNOWN_PSEUDOS: Final = ", ".join(f":{pseudo}" for pseudo in PSEUDOS)
_COMPOUND_START: Final = "a role, '*', a quoted name, '[' or ':'"
# What a CSS habit probably meant, for characters the grammar does not have.
_HINTS: Final[Mapping[str, str]] = {
    ",": "one selector at a time: ',' lists are not supported",
    "#": 'test the accessible id with [id="…"]',
    ".": 'there are no classes: test name, value, description, id or role with [attr="…"]',
}
# How far either side of the column SelectorError.pointer shows the text.
POINTER_CONTEXT: Final = 30


class SelectorError(ValueError):
    """Selector text that does not parse, or a JSON form that is not a parsed selector.

    ``column`` is the 0-based index into ``text`` where the problem is; it is None for a JSON
    form whose structure is wrong (the message then names the field).
    """

    def __init__(self, message: str, column: int | None = None, text: str | None = None) -> None:
        self.message = message
        self.column = column
        self.text = text
        super().__init__(message if column is None else f"{message} at column {column}")

    def pointer(self) -> str:
        """Two lines: the text around the column, and a caret under the column."""
        if self.column is None or self.text is None:
            return ""
        start = max(0, self.column - POINTER_CONTEXT)
        window = self.text[start : self.column + POINTER_CONTEXT]
        shown = "".join(ch if ch.isprintable() else "?" for ch in window)
        return f"{shown}\n{' ' * (self.column - start)}^"


@dataclass(frozen=True)
class AttrTest:
    """``[name op "value"]``: one string property of the element against a value."""

    name: AttrName
    op: Op
    value: str


@dataclass(frozen=True)
class Compound:
    """One step of a selector: a role (None for any) and the tests its element passes.

    ``combinator`` relates it to the previous compound: None for the first one, ``descendant``
    (written as whitespace) or ``child`` (``>``). ``nth``, allowed on the last compound only,
    keeps only the nth (0-based) of the elements the whole selector matches, in document order.
    """

    role: str | None = None
    attrs: tuple[AttrTest, ...] = ()
    pseudos: tuple[Pseudo, ...] = ()
    nth: int | None = None
    combinator: Combinator | None = None


@dataclass(frozen=True)
class Selector:
    """A parsed selector and the text it came from."""

    text: str
    compounds: tuple[Compound, ...]


def role_token(atspi_role_name: str) -> str:
    """An AT-SPI role name as a selector token: ``"push button"`` → ``push_button``."""
    return "_".join(atspi_role_name.lower().replace("-", " ").split())


# --- parsing ------------------------------------------------------------------------------


def parse(text: str) -> Selector:
    """Parse selector text; raise :class:`SelectorError` pointing at the offending column."""
    if len(text) > MAX_TEXT:
        message = f"a selector is at most {MAX_TEXT} characters (this one has {len(text)})"
        raise SelectorError(message, MAX_TEXT, text)
    return Selector(text, _Parser(text).selector())


class _Parser:
    """A single left-to-right pass over the text; every character is looked at a bounded
    number of times, so parsing is linear in the length of the text."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        # Where the last compound's [nth=…] began: another compound after it is an error.
        self.nth_column: int | None = None

    def selector(self) -> tuple[Compound, ...]:
        self.skip_ws()
        if self.pos == len(self.text):
            raise self.error("empty selector", 0)
        compounds = [self.compound(None)]
        while (combinator := self.combinator()) is not None:
            if self.nth_column is not None:
                raise self.error("nth is allowed on the last compound only", self.nth_column)
            if len(compounds) == MAX_COMPOUNDS:
                raise self.error(f"at most {MAX_COMPOUNDS} compounds in a selector")
            compounds.append(self.compound(combinator))
        return tuple(compounds)

    def combinator(self) -> Combinator | None:
        """The relation to the next compound, or None at the end of the text."""
        spaced = self.skip_ws()
        if self.pos == len(self.text):
            return None
        if self.peek() == ">":
            self.pos += 1
            self.skip_ws()
            if self.pos == len(self.text):
                raise self.error("expected a compound after '>'")
            return "child"
        if spaced:
            return "descendant"
        raise self.error(self.unexpected_after_compound())

    def unexpected_after_compound(self) -> str:
        if self.peek() in _QUOTES:
            return (
                'a quoted name cannot be attached to a compound: write [name="…"], '
                "or put a space before the quote for a descendant"
            )
        return _unexpected(self.peek())

    def compound(self, combinator: Combinator | None) -> Compound:
        head = self.peek()
        role: str | None = None
        attrs: list[AttrTest] = []
        if head == "*":
            self.pos += 1
        elif head in _QUOTES:
            attrs.append(AttrTest("name", "=", self.string()))
        elif head in _WORD:
            role = self.role()
        elif head not in ("[", ":"):
            raise self.error(f"expected {_COMPOUND_START}, found {_found(head)}")
        return self.qualifiers(role, attrs, combinator)

    def role(self) -> str:
        start = self.pos
        word = self.word()
        token = role_token(word)
        if not token:
            raise self.error(f"expected {_COMPOUND_START}, found {_found(word[0])}", start)
        if word != token:
            message = f"role names are lowercase letters, digits and '_': write {token!r}"
            raise self.error(message, start)
        return ROLE_ALIASES.get(word, word)

    def qualifiers(
        self, role: str | None, attrs: list[AttrTest], combinator: Combinator | None
    ) -> Compound:
        pseudos: list[Pseudo] = []
        nth: int | None = None
        while (char := self.peek()) in ("[", ":"):
            start = self.pos
            if char == ":":
                pseudos.append(self.pseudo())
                continue
            test = self.bracket()
            if isinstance(test, AttrTest):
                if len(attrs) == MAX_ATTRS:
                    raise self.error(f"at most {MAX_ATTRS} attribute tests in a compound", start)
                attrs.append(test)
            elif nth is not None:
                raise self.error("nth given twice in one compound", start)
            else:
                nth, self.nth_column = test, start
        return Compound(role, tuple(attrs), tuple(pseudos), nth, combinator)

    def bracket(self) -> AttrTest | int:
        """``[attr op "value"]`` or ``[nth=N]``."""
        self.pos += 1
        self.skip_ws()
        start = self.pos
        word = self.word()
        self.skip_ws()
        result = self.nth() if word == "nth" else self.attr_test(word, start)
        self.skip_ws()
        if self.peek() != "]":
            raise self.error("expected ']'")
        self.pos += 1
        return result

    def attr_test(self, word: str, start: int) -> AttrTest:
        name = _ATTR_BY_NAME.get(word)
        if not word:
            raise self.error("expected an attribute name after '['", start)
        if name is None:
            known = ", ".join(ATTR_NAMES)
            raise self.error(f"unknown attribute {word!r} (known: {known})", start)
        op = self.op(word)
        self.skip_ws()
        if self.peek() not in _QUOTES:
            raise self.error(f"expected a quoted string after '{op}'")
        return AttrTest(name, op, self.string())

    def op(self, attr: str) -> Op:
        start = self.pos
        while self.peek() in _OP_CHARS:
            self.pos += 1
        symbol = self.text[start : self.pos]
        op = _OP_BY_SYMBOL.get(symbol)
        if not symbol:
            raise self.error(f"expected an operator ({_KNOWN_OPS}) after {attr!r}")
        if op is None:
            raise self.error(f"unknown operator {symbol!r} (known: {_KNOWN_OPS})", start)
        return op

    def nth(self) -> int:
        if self.peek() != "=":
            raise self.error("expected '=' after nth")
        self.pos += 1
        self.skip_ws()
        start = self.pos
        while self.peek() in _DIGITS:
            self.pos += 1
        digits = self.text[start : self.pos]
        ends = self.peek() in _WS or self.peek() in ("]", "")
        if not digits or not ends or int(digits) > MAX_NTH:
            raise self.error(f"nth takes an integer from 0 to {MAX_NTH}", start)
        return int(digits)

    def pseudo(self) -> Pseudo:
        start = self.pos
        self.pos += 1
        word = self.word()
        pseudo = _PSEUDO_BY_NAME.get(word)
        if not word:
            raise self.error("expected a pseudo-class name after ':'")
        if pseudo is None:
            message = f"unknown pseudo-class ':{word}' (known: {_KNOWN_PSEUDOS})"
            raise self.error(message, start)
        return pseudo

    def string(self) -> str:
        """A quoted string at the current position (the caller saw the quote)."""
        text, start, quote = self.text, self.pos, self.text[self.pos]
        parts: list[str] = []
        run = self.pos = start + 1
        while self.pos < len(text):
            char = text[self.pos]
            if char == quote:
                parts.append(text[run : self.pos])
                self.pos += 1
                return "".join(parts)
            if char == "\\":
                parts.append(text[run : self.pos])
                parts.append(self.escape())
                run = self.pos
            else:
                self.pos += 1
        raise self.error("unterminated string", start)

    def escape(self) -> str:
        escaped = self.text[self.pos + 1 : self.pos + 2]
        if escaped not in _ESCAPABLE:
            raise self.error("a backslash in a string escapes only \\, \" and '")
        self.pos += 2
        return escaped

    def word(self) -> str:
        start = self.pos
        while self.peek() in _WORD:
            self.pos += 1
        return self.text[start : self.pos]

    def skip_ws(self) -> bool:
        """Skip whitespace; True when there was some."""
        start = self.pos
        while self.peek() in _WS:
            self.pos += 1
        return self.pos > start

    def peek(self) -> str:
        return self.text[self.pos : self.pos + 1]

    def error(self, message: str, column: int | None = None) -> SelectorError:
        return SelectorError(message, self.pos if column is None else column, self.text)


def _unexpected(char: str) -> str:
    return f"unexpected character {_found(char)}"


def _found(char: str) -> str:
    """A character for a message (never the character itself when it is not printable)."""
    if not char:
        return "the end"
    shown = repr(char) if char.isprintable() else f"U+{ord(char):04X}"
    hint = _HINTS.get(char)
    return f"{shown} ({hint})" if hint else shown


# --- canonical text -----------------------------------------------------------------------


def _shortest_spellings() -> dict[str, str]:
    spellings: dict[str, str] = {}
    for alias, role in ROLE_ALIASES.items():
        if len(alias) < len(spellings.get(role, role)):
            spellings[role] = alias
    return spellings


_ROLE_SPELLING: Final[Mapping[str, str]] = MappingProxyType(_shortest_spellings())


def unparse(sel: Selector) -> str:
    """The canonical text of ``sel``: never longer than any text that parses to it."""
    parts: list[str] = []
    for index, compound in enumerate(sel.compounds):
        if index:
            parts.append(">" if compound.combinator == "child" else " ")
        parts.append(_unparse_compound(compound))
    return "".join(parts)


def _unparse_compound(compound: Compound) -> str:
    attrs = compound.attrs
    if compound.role is not None:
        head = _ROLE_SPELLING.get(compound.role, compound.role)
    elif attrs and attrs[0].name == "name" and attrs[0].op == "=":
        head, attrs = _quote(attrs[0].value), attrs[1:]
    elif attrs or compound.pseudos or compound.nth is not None:
        head = ""
    else:
        head = "*"
    tests = "".join(f"[{test.name}{test.op}{_quote(test.value)}]" for test in attrs)
    nth = "" if compound.nth is None else f"[nth={compound.nth}]"
    return head + tests + nth + "".join(f":{pseudo}" for pseudo in compound.pseudos)


def _quote(value: str) -> str:
    """``value`` in whichever quotes need fewer escapes (double quotes on a tie)."""
    quote = "'" if value.count('"') > value.count("'") else '"'
    return quote + value.replace("\\", "\\\\").replace(quote, "\\" + quote) + quote


# --- JSON form ----------------------------------------------------------------------------


def to_json(sel: Selector) -> dict[str, object]:
    """A plain JSON-able form of ``sel`` (for a process that runs it)."""
    return {"text": sel.text, "compounds": [_compound_json(c) for c in sel.compounds]}


def _compound_json(compound: Compound) -> dict[str, object]:
    return {
        "role": compound.role,
        "attrs": [{"name": t.name, "op": t.op, "value": t.value} for t in compound.attrs],
        "pseudos": list(compound.pseudos),
        "nth": compound.nth,
        "combinator": compound.combinator,
    }


def from_json(data: object) -> Selector:
    """The selector :func:`to_json` gave; anything else raises :class:`SelectorError`.

    Strict: exact keys, exact types, and the compounds must be what the text parses to.
    """
    fields = _object(data, ("text", "compounds"), "selector")
    text = _string_field(fields["text"], "text")
    items = _list(fields["compounds"], "compounds", MAX_COMPOUNDS)
    compounds = tuple(_compound_from_json(item, f"compounds[{i}]") for i, item in enumerate(items))
    parsed = parse(text)
    if parsed.compounds != compounds:
        raise SelectorError("compounds: not what the text parses to")
    return parsed


def _compound_from_json(data: object, where: str) -> Compound:
    keys = ("role", "attrs", "pseudos", "nth", "combinator")
    fields = _object(data, keys, where)
    role = None if fields["role"] is None else _string_field(fields["role"], f"{where}.role")
    attrs = _list(fields["attrs"], f"{where}.attrs", MAX_ATTRS)
    pseudos = _list(fields["pseudos"], f"{where}.pseudos", MAX_TEXT)
    return Compound(
        role,
        tuple(_attr_from_json(item, f"{where}.attrs[{i}]") for i, item in enumerate(attrs)),
        tuple(_pick(p, _PSEUDO_BY_NAME, f"{where}.pseudos[{i}]") for i, p in enumerate(pseudos)),
        _nth_from_json(fields["nth"], f"{where}.nth"),
        _optional_pick(fields["combinator"], _COMBINATOR_BY_NAME, f"{where}.combinator"),
    )


def _attr_from_json(data: object, where: str) -> AttrTest:
    fields = _object(data, ("name", "op", "value"), where)
    return AttrTest(
        _pick(fields["name"], _ATTR_BY_NAME, f"{where}.name"),
        _pick(fields["op"], _OP_BY_SYMBOL, f"{where}.op"),
        _string_field(fields["value"], f"{where}.value"),
    )


def _nth_from_json(value: object, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_NTH:
        raise SelectorError(f"{where}: expected null or an integer from 0 to {MAX_NTH}")
    return value


def _object(data: object, keys: tuple[str, ...], where: str) -> Mapping[str, object]:
    if not isinstance(data, dict) or set(data) != set(keys):
        raise SelectorError(f"{where}: expected an object with the keys {', '.join(keys)}")
    return data


def _list(value: object, where: str, limit: int) -> list[object]:
    if not isinstance(value, list):
        raise SelectorError(f"{where}: expected a list")
    if len(value) > limit:
        raise SelectorError(f"{where}: at most {limit} items")
    return value


def _string_field(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise SelectorError(f"{where}: expected a string")
    return value


def _optional_pick(value: object, table: Mapping[str, _T], where: str) -> _T | None:
    return None if value is None else _pick(value, table, where)


def _pick(value: object, table: Mapping[str, _T], where: str) -> _T:
    if not isinstance(value, str) or value not in table:
        raise SelectorError(f"{where}: expected one of {', '.join(table)}")
    return table[value]
