"""Rebuilding result dataclasses from their plain (``asdict`` or parsed JSON) form."""

from __future__ import annotations

import dataclasses
import types
import typing
from enum import Enum
from typing import Any, Union


def from_plain(tp: Any, value: Any) -> Any:
    """Rebuild a value of type ``tp`` from its ``asdict``/JSON form (dataclasses, tuples, dicts)."""
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(options) == 1:
            return from_plain(options[0], value)
        for option in options:  # e.g. int | str: keep the value when it already fits
            if isinstance(value, typing.get_origin(option) or option):
                return value
        return value
    if isinstance(tp, type) and issubclass(tp, Enum):
        return tp(value)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        hints = typing.get_type_hints(tp)
        known = {f.name for f in dataclasses.fields(tp) if f.init}
        return tp(**{k: from_plain(hints[k], v) for k, v in value.items() if k in known})
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_plain(args[0], v) for v in value)
        return tuple(from_plain(a, v) for a, v in zip(args, value, strict=True))
    if origin is dict:
        _, val_tp = typing.get_args(tp)
        return {k: from_plain(val_tp, v) for k, v in value.items()}
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value
