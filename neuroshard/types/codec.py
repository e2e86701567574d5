"""The one JSON codec of the package's records: a dataclass to a JSON object and back.

A record mixes in `Record`; `record.to_json()` writes its fields in declaration
order as JSON values (nested records, lists and tuples become JSON lists) and
`Cls.from_json(obj)` reads them back, converting each value to its field's
declared type, so a file holds exactly what the record holds. Field metadata
(`json_field(...)`) says where a field's JSON differs from its name and value:

* `key`: the JSON name (a measurement's `index` is written as "i");
* `omit_none`: left out while None, so files written before the field existed
  read back the same and stay as short as they were;
* `omit`: a predicate on the value; left out when it holds (a default that
  older files never carried).

Derived values that readers of a file want (a plan's cost beside its per-rank
parts) come from the record's `json_extra()` and are written after the fields
but never read back. A malformed object is a KeyError (a missing field),
TypeError or ValueError, which the file readers turn into one-line errors
naming the file.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Callable


def json_field(default: Any = dataclasses.MISSING, *, key: str | None = None, omit_none: bool = False,
               omit: Callable[[Any], bool] | None = None, default_factory: Any = dataclasses.MISSING):
    """A dataclass field with the codec's metadata (see the module doc)."""
    meta = {"json_key": key, "omit_none": omit_none, "omit": omit}
    return dataclasses.field(default=default, default_factory=default_factory, metadata=meta)


def _key(f: dataclasses.Field) -> str:
    return f.metadata.get("json_key") or f.name


def encode(value: Any) -> Any:
    """A value as JSON: records through their `to_json`, sequences as lists, mappings as objects."""
    if isinstance(value, Record):
        return value.to_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    return value


def _optional(tp) -> tuple[Any, bool]:
    """(inner type, optional?) of `X | None`."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def decode(tp, value: Any) -> Any:
    """`value` (parsed JSON) as type `tp`: an int as an int, a number as a float, lists and tuples element
    by element, nested records by their `from_json`."""
    inner, optional = _optional(tp)
    if value is None:
        if optional or tp is Any:
            return None
        raise TypeError("null where a value is expected")
    tp = inner
    origin = typing.get_origin(tp)
    if tp is Any or tp is object:
        return value
    if origin in (typing.Union, types.UnionType):  # e.g. `float | tuple[float, ...]`: the first that reads it
        errors = []
        for option in typing.get_args(tp):
            if option is type(None):
                continue
            try:
                return decode(option, value)
            except (TypeError, ValueError) as e:
                errors.append(str(e))
        raise ValueError(" or ".join(errors))
    if isinstance(tp, type) and issubclass(tp, Record):
        return tp.from_json(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise TypeError(f"expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise TypeError(f"expected a string, got {value!r}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"expected a list, got {value!r}")
        args = typing.get_args(tp)
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(args) != len(value):
                raise ValueError(f"expected {len(args)} values, got {len(value)}")
            return tuple(decode(a, v) for a, v in zip(args, value))
        out = [decode(args[0], v) for v in value] if args else list(value)
        return tuple(out) if origin is tuple else out
    if origin is dict:
        if not isinstance(value, dict):
            raise TypeError(f"expected an object, got {value!r}")
        _, vt = typing.get_args(tp) or (str, Any)
        return {str(k): decode(vt, v) for k, v in value.items()}
    if tp in (list, dict, tuple):
        if not isinstance(value, tp if tp is not tuple else (list, tuple)):
            raise TypeError(f"expected a {tp.__name__}, got {value!r}")
        return value
    raise TypeError(f"the codec cannot read a {tp!r}")


class Record:
    """Mixin for a dataclass that the codec writes and reads (see the module doc)."""

    def json_extra(self) -> dict:
        """Derived values written after the fields, for readers of the file; not read back."""
        return {}

    def to_json(self) -> dict:
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("omit_none") and value is None:
                continue
            omit = f.metadata.get("omit")
            if omit is not None and omit(value):
                continue
            out[_key(f)] = encode(value)
        out.update(self.json_extra())
        return out

    @classmethod
    def from_json(cls, obj: dict):
        """The record from a JSON object (extra keys, such as derived values, are ignored); KeyError naming a
        missing field, TypeError / ValueError naming a malformed one."""
        if not isinstance(obj, dict):
            raise TypeError(f"{cls.__name__}: expected an object, got {type(obj).__name__}")
        hints = _hints(cls)
        kwargs = {}
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            key = _key(f)
            if key not in obj:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    raise KeyError(key)
                continue
            try:
                kwargs[f.name] = decode(hints[f.name], obj[key])
            except (TypeError, ValueError) as e:
                raise type(e)(f"{key}: {e}") from None
        return cls(**kwargs)


_HINTS: dict[type, dict] = {}


def _hints(cls) -> dict:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]
