"""The one safe YAML loader behind rules, catalogs and plans: hostile files fail, nothing runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvadvisor.errors import ConfigError
from kvadvisor.io.yamlio import MAX_NESTING, MAX_YAML_BYTES, load_yaml

BILLION_LAUGHS = "\n".join(
    ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    + [
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]"
        for i in range(8)
    ]
)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "doc.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_plain_data_loads(tmp_path: Path) -> None:
    """A normal document comes back as plain data."""
    assert load_yaml(_write(tmp_path, "a: 1\nb: [x, 2.5]\n"), ConfigError) == {
        "a": 1,
        "b": ["x", 2.5],
    }


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("x: !!python/object/apply:os.system ['touch pwned']\n", "invalid YAML"),
        (BILLION_LAUGHS, "anchors and aliases are not allowed"),
        ("a: &x 1\nb: *x\n", "line 1, column 4"),
        ("[" * (MAX_NESTING + 5) + "]" * (MAX_NESTING + 5), "nested"),
        ("a: [1, 2\n", "invalid YAML"),
    ],
)
def test_hostile_or_broken_yaml_is_one_error(tmp_path: Path, text: str, words: str) -> None:
    """Python tags, alias bombs, deep nesting and syntax errors raise the caller's error type."""
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_yaml(path, ConfigError)
    assert words in str(info.value)
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "pwned").exists()


def test_oversized_file_is_refused_unread(tmp_path: Path) -> None:
    """A file over the size bound is refused before parsing."""
    path = _write(tmp_path, "#" * (MAX_YAML_BYTES + 1))
    with pytest.raises(ConfigError, match="byte limit"):
        load_yaml(path, ConfigError)


def test_missing_file(tmp_path: Path) -> None:
    """A missing file names itself."""
    with pytest.raises(ConfigError, match="no such file"):
        load_yaml(tmp_path / "nope.yaml", ConfigError)


def test_text_that_is_not_utf8(tmp_path: Path) -> None:
    """Bytes that are not UTF-8 name the byte offset: 0xff is never valid UTF-8 (RFC 3629)."""
    path = tmp_path / "doc.yaml"
    path.write_bytes(b"a: \xff\n")
    with pytest.raises(ConfigError) as info:
        load_yaml(path, ConfigError)
    assert str(info.value) == f"{path}: not UTF-8 text (invalid start byte at byte 3)"
