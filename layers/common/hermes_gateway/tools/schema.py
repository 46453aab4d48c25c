"""Checks a tool call's arguments against the tool's JSON schema, before the tool sees them.

Only the part of JSON Schema the built-in tools use: `type` (object, string, integer, number,
boolean, array), `properties`, `required`, `additionalProperties: false`, `enum`, `minLength`,
`maxLength`, `minimum`, `maximum`, `items`. A model's mistake comes back as one short sentence
it can fix.
"""

from __future__ import annotations

from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
}


class SchemaError(ValueError):
    """The arguments do not fit the schema; the message says where and why."""


def check_arguments(schema: dict[str, Any], arguments: Any) -> None:
    _check(schema, arguments, "arguments")


def _check(schema: dict[str, Any], value: Any, where: str) -> None:
    expected = schema.get("type")
    if expected is not None:
        allowed = _TYPES[expected]
        # bool is an int in Python, never in JSON
        if not isinstance(value, allowed) or (isinstance(value, bool) and expected != "boolean"):
            raise SchemaError(f"{where} must be {'an' if expected[0] in 'aeiou' else 'a'} {expected}")
    if "enum" in schema and value not in schema["enum"]:
        raise SchemaError(f"{where} must be one of {', '.join(map(str, schema['enum']))}")
    _check_bounds(schema, value, where)
    if isinstance(value, dict):
        _check_object(schema, value, where)
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            _check(schema["items"], item, f"{where}[{index}]")


def _check_bounds(schema: dict[str, Any], value: Any, where: str) -> None:
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            raise SchemaError(f"{where} needs at least {schema['minLength']} character(s)")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            raise SchemaError(f"{where} is longer than {schema['maxLength']} characters")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            raise SchemaError(f"{where} must be at least {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            raise SchemaError(f"{where} must be at most {schema['maximum']}")


def _check_object(schema: dict[str, Any], value: dict[str, Any], where: str) -> None:
    properties: dict[str, Any] = schema.get("properties", {})
    for name in schema.get("required", ()):
        if name not in value or value[name] is None:
            raise SchemaError(f"{where}.{name} is required")
    if schema.get("additionalProperties") is False:
        extra = sorted(set(value) - set(properties))
        if extra:
            raise SchemaError(f"{where} has unknown field(s): {', '.join(extra[:5])}")
    for name, item in value.items():
        if name in properties and item is not None:
            _check(properties[name], item, f"{where}.{name}")
