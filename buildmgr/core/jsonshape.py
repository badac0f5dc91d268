"""Typed JSON records: frozen dataclasses read from JSON with every field checked, and written back.

The receipt and the inventory are such records. `load` names the first wrong field by its path
(`recipe.backends[1]: expected a string, got 3`), so a file of the wrong shape is one clear error, never a
KeyError deep inside a command. Keys a record does not name are ignored, so a reader accepts a writer's additions.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import types
import typing
from typing import Any, ClassVar, Self

# A field that is left out of the JSON when it is None (present only in some records, e.g. `installed_from`).
OMIT_IF_NONE = {"omit_if_none": True}
# A list field left out when empty: a field added later, so that records without it are written back as they were read.
OMIT_IF_EMPTY = {"omit_if_empty": True}

_NAMES = {str: "a string", int: "a whole number", float: "a number", bool: "true or false"}


class ShapeError(ValueError):
    """JSON that is not the record it should be; the message starts with the path of the wrong field."""


class NewerSchema(ShapeError):
    """A record written by a newer buildmgr: readers keep the file rather than set it aside."""


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _wrong(where: str, expected: str, value: object) -> ShapeError:
    shown = repr(value) if len(repr(value)) <= 40 else f"{type(value).__name__}"
    return ShapeError(f"{where or 'the top level'}: expected {expected}, got {shown}")


def load(kind: Any, value: object, where: str = "") -> Any:
    """`value` (parsed JSON) as `kind`: a dataclass, an Enum (by value), str/int/float/bool, `X | None`,
    tuple[X, ...], list[X], dict[str, X] or Any. Raises ShapeError naming the field."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is Any:
        return value
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return load(inner, value, where)
    if origin in (tuple, list):
        if not isinstance(value, list):
            raise _wrong(where, "a list", value)
        items = [load(args[0], item, f"{where}[{i}]") for i, item in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise _wrong(where, "an object", value)
        return {key: load(args[1], item, f"{where}.{key}") for key, item in value.items()}
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return _record(kind, value, where)
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        try:
            return kind(value)
        except ValueError:
            raise _wrong(where, "one of " + ", ".join(repr(m.value) for m in kind), value) from None
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _wrong(where, _NAMES[float], value)
        return value
    if kind in (str, bool, int):
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise _wrong(where, _NAMES[kind], value)
        return value
    raise TypeError(f"jsonshape cannot read {kind!r}")  # a record declared with a type this module lacks


def parse(text: str | bytes) -> object:
    """JSON text's value; ShapeError where it is not JSON, or nests deeper than Python's parser recurses (no file
    buildmgr reads nests so deep: bytes made to crash a reader)."""
    try:
        return json.loads(text)
    except ValueError as err:
        raise ShapeError(f"not JSON ({err})") from None
    except RecursionError:
        raise ShapeError("not JSON buildmgr reads (nested deeper than any of its files)") from None


class Record:
    """A file's top-level record (a frozen dataclass with a `schema` field): read checked, written as the file's
    text. A higher schema than VERSION is a newer buildmgr's (NewerSchema); OLDEST is the oldest still read."""

    VERSION: ClassVar[int]
    OLDEST: ClassVar[int | None] = None  # None: only VERSION

    @classmethod
    def from_json(cls, data: object) -> Self:
        """Checked: raises ShapeError naming the first wrong field."""
        found = data.get("schema") if isinstance(data, dict) else None
        if type(found) is int and found > cls.VERSION:
            raise NewerSchema(f"schema {found}: written by a newer buildmgr (this one reads {cls.VERSION})")
        oldest = cls.VERSION if cls.OLDEST is None else cls.OLDEST
        if type(found) is not int or not oldest <= found <= cls.VERSION:
            raise ShapeError(f"schema: expected {cls.VERSION}, got {found!r}")
        loaded: Self = load(cls, data)
        return loaded

    @classmethod
    def from_text(cls, text: str | bytes) -> Self:
        return cls.from_json(parse(text))

    def to_json(self) -> dict[str, Any]:
        dumped: dict[str, Any] = dump(self)
        return dumped

    def to_text(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n"


def _record(cls: type, value: object, where: str) -> Any:
    if not isinstance(value, dict):
        raise _wrong(where, "an object", value)
    hints = _hints(cls)
    values = {}
    for field in dataclasses.fields(cls):
        path = f"{where}.{field.name}" if where else field.name
        if field.name in value:
            values[field.name] = load(hints[field.name], value[field.name], path)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise ShapeError(f"{path} is missing")
    return cls(**values)


def dump(value: object) -> Any:
    """A record (or anything inside one) as JSON values, in field order."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            field.name: dump(item)
            for field in dataclasses.fields(value)
            if not ((item := getattr(value, field.name)) is None and field.metadata.get("omit_if_none"))
            and not (item == () and field.metadata.get("omit_if_empty"))
        }
    if isinstance(value, (tuple, list)):
        return [dump(item) for item in value]
    if isinstance(value, dict):
        return {key: dump(item) for key, item in value.items()}
    if isinstance(value, enum.Enum):
        return value.value
    return value
