"""A small JSON Schema validator: the subset that tool argument schemas use.

Supported keywords: ``type`` (a name or a list of names), ``properties``, ``required``,
``additionalProperties`` (a bool), ``items``, ``enum``, ``minLength``/``maxLength``, ``pattern``,
``minimum``/``maximum``, plus ``description``/``title``/``default``/``examples`` (ignored).
``jsonschema`` is not a dependency: tool schemas are small, and the same code checks a spec's
schemas at load time (:func:`schema_problems`) and a call's arguments (:func:`validate`).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["schema_problems", "validate"]

_TYPES = {"object", "string", "integer", "number", "boolean", "array", "null"}
_KEYWORDS = {
    "type", "properties", "required", "additionalProperties", "items", "enum", "minLength",
    "maxLength", "pattern", "minimum", "maximum", "description", "title", "default", "examples",
}


def schema_problems(schema: Any, where: str = "schema") -> list[str]:
    """What is wrong with ``schema`` itself (an empty list when it is usable)."""
    if not isinstance(schema, dict):
        return [f"{where} must be a mapping"]
    problems = [f"{where}: unsupported keyword {k!r}" for k in schema if k not in _KEYWORDS]
    types = schema.get("type")
    for t in types if isinstance(types, list) else [types] if types is not None else []:
        if t not in _TYPES:
            problems.append(f"{where}: unknown type {t!r} (one of {', '.join(sorted(_TYPES))})")
    props = schema.get("properties", {})
    if not isinstance(props, dict):
        problems.append(f"{where}.properties must be a mapping")
    else:
        for name, sub in props.items():
            problems += schema_problems(sub, f"{where}.properties.{name}")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        problems.append(f"{where}.required must be a list of names")
    if "items" in schema:
        problems += schema_problems(schema["items"], f"{where}.items")
    if "pattern" in schema:
        try:
            re.compile(schema["pattern"])
        except (re.error, TypeError) as exc:
            problems.append(f"{where}.pattern is not a regular expression: {exc}")
    return problems


def _type_ok(value: Any, name: str) -> bool:
    if name == "object":
        return isinstance(value, dict)
    if name == "string":
        return isinstance(value, str)
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "array":
        return isinstance(value, list)
    return value is None


def validate(value: Any, schema: dict, where: str = "arguments") -> list[str]:
    """Every way ``value`` breaks ``schema`` (an empty list when it conforms)."""
    types = schema.get("type")
    if types is not None:
        names = types if isinstance(types, list) else [types]
        if not any(_type_ok(value, t) for t in names):
            return [f"{where} must be of type {'/'.join(names)}, not {type(value).__name__}"]
    problems: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{where} must be one of {schema['enum']!r}")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            problems.append(f"{where} is shorter than {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            problems.append(f"{where} is longer than {schema['maxLength']} characters")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            problems.append(f"{where} does not match {schema['pattern']!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            problems.append(f"{where} is below {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            problems.append(f"{where} is above {schema['maximum']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                problems.append(f"{where}.{name} is required")
        for name, item in value.items():
            if name in props:
                problems += validate(item, props[name], f"{where}.{name}")
            elif schema.get("additionalProperties", True) is False:
                problems.append(f"{where}.{name} is not allowed")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            problems += validate(item, schema["items"], f"{where}[{i}]")
    return problems
