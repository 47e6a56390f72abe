"""Writes a result's JSON so that a reader and git diff see one record a line.

`dump(obj, f)`: objects and lists nest with one item a line until an item is a flat record (a
dict or list of scalars and lists of scalars), which is written on one line. `json.load` reads it as any JSON.
"""
import json
from typing import Any, IO


def _scalar(value: Any) -> bool:
    return not isinstance(value, (dict, list)) or not value


def _flat(value: Any) -> bool:
    """A scalar, or a record of scalars and lists of scalars (a shape)."""
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
    return items is None or all(_scalar(v) or (isinstance(v, list) and all(map(_scalar, v))) for v in items)


def _render(value: Any, indent: int) -> str:
    if _flat(value):
        return json.dumps(value)
    pad, inner = " " * indent, " " * (indent + 1)
    if isinstance(value, dict):
        body = [f"{inner}{json.dumps(k)}: {_render(v, indent + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(body) + "\n" + pad + "}"
    body = [inner + _render(v, indent + 1) for v in value]
    return "[\n" + ",\n".join(body) + "\n" + pad + "]"


def dump(obj: Any, f: IO[str]) -> None:
    f.write(_render(obj, 0) + "\n")
