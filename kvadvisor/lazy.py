"""Package exports loaded on first use (PEP 562): importing a package loads none of its parts.

``kvadvisor --help`` imports the command line, whose option types come from packages such as
``kvadvisor.trace``; with their exports lazy, those imports stay free of numpy and pyarrow
until a command actually reads a trace.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, table: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: each public name loads from its module.

    ``table`` maps a public name to the module defining it; the value is cached in the
    package's namespace, so later lookups skip the hook.
    """

    def getattr_(name: str) -> Any:
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(table[name]), name)
        setattr(importlib.import_module(package), name, value)
        return value

    def dir_() -> list[str]:
        return sorted(set(vars(importlib.import_module(package))) | set(table))

    return getattr_, dir_
