"""The check of an op's arguments against its ``TypedDict``, field by field (``wire.ops``).

A missing, unknown or mistyped field is ``InvalidArgs`` naming it (``target.type`` inside a
nested object); ``Literal`` fields take exactly their options, ``int`` fields no ``bool``.
"""

import types
from functools import cache
from typing import Any, Literal, Union, cast, get_args, get_origin, get_type_hints, is_typeddict

from wire.errors import InvalidArgs


@cache
def _hints(typeddict: type) -> dict[str, Any]:
    return get_type_hints(typeddict)


def check_typeddict(typeddict: type, value: object, where: str = "") -> dict[str, Any]:
    """``value`` checked against ``typeddict``'s fields; ``InvalidArgs`` names the first bad one
    (``where`` prefixes the names of a nested object's fields)."""
    if not isinstance(value, dict):
        raise InvalidArgs(where or "args", "must be an object")
    hints = _hints(typeddict)
    for key in value:
        if key not in hints:
            raise InvalidArgs(f"{where}{key}", "unknown argument")
    for key in sorted(cast(frozenset[str], typeddict.__required_keys__)):  # type: ignore[attr-defined]
        if key not in value:
            raise InvalidArgs(f"{where}{key}", "required")
    for key, item in value.items():
        _check_value(hints[key], item, f"{where}{key}")
    return value


def _check_value(hint: Any, value: object, name: str) -> None:
    if not _fits(hint, value, name):
        raise InvalidArgs(name, f"must be {_describe(hint)}")


def _fits(hint: Any, value: object, name: str) -> bool:
    origin = get_origin(hint)
    if hint is Any or hint is object:
        return True
    if hint is None or hint is type(None):
        return value is None
    if origin is Literal:
        return any(value == option and type(value) is type(option) for option in get_args(hint))
    if origin in (Union, types.UnionType):
        return any(_fits(option, value, name) for option in get_args(hint))
    if is_typeddict(hint):
        check_typeddict(hint, value, f"{name}.")
        return True
    if origin is list:
        return isinstance(value, list) and all(_fits(get_args(hint)[0], v, name) for v in value)
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, hint)


def _describe(hint: Any) -> str:
    origin = get_origin(hint)
    if origin is Literal:
        return "one of " + ", ".join(repr(option) for option in get_args(hint))
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(option) for option in get_args(hint))
    if hint is None or hint is type(None):
        return "null"
    if origin is list:
        return "a list"
    if origin is dict or hint is dict or is_typeddict(hint):
        return "an object"
    names = {str: "a string", int: "an integer", bool: "true or false", float: "a number"}
    return names.get(hint, getattr(hint, "__name__", str(hint)))
