"""Safe YAML loading for rules, catalogs and plans: data only, size-bounded, errors for people."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kvadvisor.errors import KvAdvisorError

MAX_YAML_BYTES = 4 * 1024 * 1024
MAX_NESTING = 32


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of plain data, stopping once ``limit`` is passed."""
    stack = [(value, 1)]
    deepest = 0
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return deepest


def load_yaml(path: str | Path, error: type[KvAdvisorError]) -> Any:
    """Load one YAML document with ``yaml.safe_load``; any failure raises ``error`` with the file.

    Never constructs Python objects (``!!python/...`` tags are rejected by the safe loader),
    refuses files over MAX_YAML_BYTES and documents nested deeper than MAX_NESTING.
    """
    path = Path(path)
    if not path.is_file():
        raise error(f"{path}: no such file")
    size = path.stat().st_size
    if size > MAX_YAML_BYTES:
        raise error(f"{path}: {size:,} bytes is over the {MAX_YAML_BYTES:,}-byte limit for YAML")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise error(f"{path}:{where}: invalid YAML: {problem}") from None
    except RecursionError:
        raise error(f"{path}: YAML nested too deeply") from None
    if _depth(data, MAX_NESTING) > MAX_NESTING:
        raise error(f"{path}: YAML nested deeper than {MAX_NESTING} levels")
    return data
