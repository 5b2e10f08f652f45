"""Safe YAML loading for rules, catalogs and plans: data only, size-bounded, errors for people."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kvadvisor.errors import KvAdvisorError

MAX_YAML_BYTES = 4 * 1024 * 1024
MAX_NESTING = 32

# libyaml's scanner and safe loader when PyYAML was built with it (about 3x faster), else pure
# Python; both construct plain data only.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _reject_aliases(path: Path, text: str, error: type[KvAdvisorError]) -> None:
    """Refuse anchors and aliases before the document is built.

    No rule, catalog or plan needs them, and aliases are how a small file expands into a huge
    structure (the "billion laughs" attack): refusing them keeps loading linear in file size.
    Syntax errors are left to the loader, which reports them with their position.
    """
    try:
        for token in yaml.scan(text, Loader=_SAFE_LOADER):
            if isinstance(token, (yaml.AliasToken, yaml.AnchorToken)):
                mark = token.start_mark
                raise error(
                    f"{path}: line {mark.line + 1}, column {mark.column + 1}: YAML anchors and "
                    "aliases are not allowed; write the value out"
                )
    except yaml.YAMLError:
        return


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
    refuses files over MAX_YAML_BYTES, anchors and aliases, and documents nested deeper than
    MAX_NESTING.
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
    _reject_aliases(path, text, error)
    try:
        data = yaml.load(text, Loader=_SAFE_LOADER)  # a safe loader, see above
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise error(f"{path}:{where}: invalid YAML: {problem}") from None
    except RecursionError:
        raise error(f"{path}: YAML nested too deeply") from None
    except ValueError as exc:
        # The safe loader's date constructor raises this for an impossible date such as
        # 2026-13-01; quote a value that is not meant as a date.
        raise error(f"{path}: invalid YAML value: {exc} (write dates as YYYY-MM-DD)") from None
    if _depth(data, MAX_NESTING) > MAX_NESTING:
        raise error(f"{path}: YAML nested deeper than {MAX_NESTING} levels")
    return data
