"""A small JSON Schema checker for action arguments (the keywords our schemas use).

The schemas double as LLM tool definitions, so they stay plain: ``type``, ``properties``,
``required``, ``additionalProperties: false``, ``enum``, ``pattern``, ``minLength``,
``maxLength``, ``minimum``, ``maximum``. Every failure names its field (``InvalidArgs``).
A ``pattern`` must match the whole string (``re.fullmatch``), so ``"main\n"`` is no slot.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

from wire.errors import InvalidArgs

Schema = dict[str, Any]

_TYPES: Final[dict[str, Callable[[Any], bool]]] = {
    "object": lambda v: isinstance(v, dict),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
}


def _type(field: str, schema: Schema, value: Any) -> None:
    kind = schema.get("type")
    if kind is not None and not _TYPES[kind](value):
        raise InvalidArgs(field or "body", f"must be a JSON {kind}")


def _enum(field: str, schema: Schema, value: Any) -> None:
    allowed = schema.get("enum")
    if allowed is not None and value not in allowed:
        raise InvalidArgs(field, f"must be one of {', '.join(map(str, allowed))}")


def _string(field: str, schema: Schema, value: Any) -> None:
    if not isinstance(value, str):
        return
    if len(value) < schema.get("minLength", 0):
        raise InvalidArgs(field, f"must have at least {schema['minLength']} characters")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        raise InvalidArgs(field, f"must have at most {schema['maxLength']} characters")
    # Whole-string match: ``re.search("^main$", "main\n")`` would match (``$`` before a newline).
    if "pattern" in schema and not re.fullmatch(schema["pattern"], value):
        raise InvalidArgs(field, f"must match {schema['pattern']}")


def _number(field: str, schema: Schema, value: Any) -> None:
    if not _TYPES["number"](value):
        return
    if "minimum" in schema and value < schema["minimum"]:
        raise InvalidArgs(field, f"must be at least {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        raise InvalidArgs(field, f"must be at most {schema['maximum']}")


def _object(field: str, schema: Schema, value: Any) -> None:
    if not isinstance(value, dict):
        return
    properties: dict[str, Schema] = schema.get("properties", {})
    for name in schema.get("required", ()):
        if name not in value:
            raise InvalidArgs(_join(field, name), "required")
    if schema.get("additionalProperties") is False:
        for name in sorted(set(value) - set(properties)):
            raise InvalidArgs(_join(field, name), "unknown argument")
    for name, sub in properties.items():
        if name in value:
            validate(sub, value[name], _join(field, name))


_CHECKS: Final = (_type, _enum, _string, _number, _object)


def _join(parent: str, name: str) -> str:
    return f"{parent}.{name}" if parent else name


def validate(schema: Schema, value: Any, field: str = "") -> None:
    """Raise ``InvalidArgs`` naming the first field of ``value`` that breaks ``schema``."""
    for check in _CHECKS:
        check(field, schema, value)


def with_defaults(schema: Schema, args: dict[str, Any]) -> dict[str, Any]:
    """``args`` plus the ``default`` of every absent top-level property."""
    defaults = {
        name: sub["default"]
        for name, sub in schema.get("properties", {}).items()
        if "default" in sub and name not in args
    }
    return {**defaults, **args}
