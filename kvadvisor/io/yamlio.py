"""Safe YAML loading for rules, catalogs and plans: data only, bounded, errors for people.

The one boundary every YAML input passes (rules, catalogs, plans, and any key added to
them later): the safe loader builds plain data only; a file over MAX_YAML_BYTES, anchors and
aliases, nesting past MAX_NESTING, a key given twice in one mapping, an integer outside
64 bits, a float that is not finite (``.inf``, ``.nan``, ``1.0e+400``) and a control
character in text are all refused with the line and column. The loaders above then check
each value against their schema.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from kvadvisor.errors import KvAdvisorError
from kvadvisor.io.fileio import check_input
from kvadvisor.termtext import has_control
from kvadvisor.units.format import count

MAX_YAML_BYTES = 4 * 1024 * 1024
MAX_NESTING = 32

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

# libyaml's scanner and safe loader when PyYAML was built with it (about 3x faster), else pure
# Python; both construct plain data only.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Refused(yaml.YAMLError):
    """A value the document may not hold, at a node: the message says what to write instead."""

    def __init__(self, mark: Any, message: str) -> None:
        super().__init__(message)
        self.mark = mark
        self.message = message


class _CheckedLoader(_SAFE_LOADER):  # type: ignore[misc, valid-type]
    """The safe loader, refusing duplicate keys, out-of-range numbers and control characters.

    Only the constructors (pure Python in both loaders) are overridden: parsing stays libyaml's.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:
                continue  # an unhashable key: the base constructor says so
            if first is not None:
                raise _Refused(
                    key_node.start_mark,
                    f"key {_shown(key)} appears twice in one mapping (first at line "
                    f"{first.line + 1}); a second value would silently replace the first: keep "
                    "one",
                )
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        value = super().construct_yaml_int(node)
        if not INT64_MIN <= value <= INT64_MAX:
            raise _Refused(
                node.start_mark,
                f"the integer {str(value)[:30]} does not fit in 64 bits; no value here is that "
                "large",
            )
        return value

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        value = super().construct_yaml_float(node)
        if not math.isfinite(value):
            raise _Refused(
                node.start_mark,
                f"{node.value!r} is not a finite number; write a finite value",
            )
        return value

    def construct_yaml_str(self, node: yaml.ScalarNode) -> str:
        value = super().construct_yaml_str(node)
        bad = has_control(value)
        if bad is not None:
            raise _Refused(
                node.start_mark,
                f"text holds the control character U+{ord(bad):04X}; remove it (names and "
                "messages reach terminals and reports)",
            )
        return value


_CheckedLoader.add_constructor("tag:yaml.org,2002:int", _CheckedLoader.construct_yaml_int)
_CheckedLoader.add_constructor("tag:yaml.org,2002:float", _CheckedLoader.construct_yaml_float)
_CheckedLoader.add_constructor("tag:yaml.org,2002:str", _CheckedLoader.construct_yaml_str)


def _shown(key: Any) -> str:
    text = repr(key)
    return text if len(text) <= 40 else text[:37] + "..."


def _reject_aliases(path: str | Path, text: str, error: type[KvAdvisorError]) -> None:
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
    return load_yaml_lines(path, error)[0]


def load_yaml_lines(path: str | Path, error: type[KvAdvisorError]) -> tuple[Any, dict[str, int]]:
    """:func:`load_yaml`, and the line of every key path (``stages.prefill.tiers[0]``: 12).

    The lines let kvadvisor.checker say where in the file each problem is.
    """
    path = check_input(path, error)
    size = path.stat().st_size
    if size > MAX_YAML_BYTES:
        raise error(
            f"{path}: {count(size)} bytes is over the {count(MAX_YAML_BYTES)}-byte limit for YAML"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise error(f"{path}: cannot be read ({exc.strerror or exc})") from None
    return parse_yaml_lines(text, path, error)


def parse_yaml(text: str, path: str | Path, error: type[KvAdvisorError]) -> Any:
    """One YAML document from ``text`` already read, checked as :func:`load_yaml` checks one.

    The caller bounds the text's size; ``path`` names the document in every message.
    """
    return parse_yaml_lines(text, path, error)[0]


def parse_yaml_lines(
    text: str, path: str | Path, error: type[KvAdvisorError]
) -> tuple[Any, dict[str, int]]:
    """:func:`parse_yaml`, and the line of every key path (see :func:`load_yaml_lines`)."""
    _reject_aliases(path, text, error)
    lines: dict[str, int] = {}
    try:
        loader = _CheckedLoader(text)  # a safe loader, see above
        try:
            node = loader.get_single_node()
            data = None if node is None else loader.construct_document(node)
        finally:
            loader.dispose()
        if node is not None:
            _key_lines(node, "", lines)
    except _Refused as exc:
        raise error(
            f"{path}: line {exc.mark.line + 1}, column {exc.mark.column + 1}: {exc.message}"
        ) from None
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
    return data, lines


def _key_lines(root: yaml.Node, where: str, lines: dict[str, int]) -> None:
    """Record the 1-based line of every key and list item under ``root`` by its key path.

    Iterative, as the document's depth is checked only after it is built.
    """
    lines[where] = root.start_mark.line + 1
    stack = [(root, where)]
    while stack:
        node, at = stack.pop()
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    inner = f"{at}.{key.value}" if at else str(key.value)
                    lines[inner] = key.start_mark.line + 1
                    stack.append((value, inner))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                inner = f"{at}[{i}]"
                lines[inner] = item.start_mark.line + 1
                stack.append((item, inner))
