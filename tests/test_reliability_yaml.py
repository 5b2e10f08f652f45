"""Rules, catalogs, plans and model configs as a hostile user writes them (issue 18).

The protections live at the loading boundary (kvadvisor/io/yamlio.py for every YAML document,
kvadvisor/io/jsonio.py for config.json), so every key a loader accepts, including keys added
later, gets them: duplicate keys, integers past 64 bits, non-finite floats, control
characters in text. Each schema then checks its own ranges (a bandwidth > 0, a count within
physical sense).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from cli_checks import one_error_line
from typer.testing import CliRunner

from kvadvisor.catalog.models import read_hf_config
from kvadvisor.catalog.storage import load_storage
from kvadvisor.cli import app
from kvadvisor.errors import CatalogError, ConfigError, RuleSyntaxError
from kvadvisor.io.yamlio import load_yaml
from kvadvisor.plan import PlanError, load_plan
from kvadvisor.rules import load_rules
from kvadvisor.units.parse import QuantityError, parse_quantity

REPO = Path(__file__).resolve().parents[1]
PLAN = (REPO / "examples" / "plans" / "good-p5e-prefill-p5-decode.yaml").read_text()
RULE = (REPO / "rules" / "cache" / "CA01-read-less-first.yaml").read_text()
SAMPLE = REPO / "sample_traces" / "mooncake_conversation.parquet"
runner = CliRunner()

STORAGE = """kind: storage
sources:
  S1: "a test source"
entries:
  test-disk:
    category: local_nvme
    provider: generic
    read_mbps: {read}
    write_mbps: 1000
    read_iops: 1000
    write_iops: 1000
    io_unit_bytes: 4096
    as_of: 2026-01-01
    source: [S1]
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _raises(error: type[Exception], call, *needles: str) -> str:
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, (needle, message)
    return message


# --- the YAML boundary -------------------------------------------------------------------------


def test_duplicate_keys_name_both_lines(tmp_path: Path) -> None:
    """The last value silently won; now both lines are named."""
    path = _write(tmp_path, "d.yaml", "a: 1\nb:\n  c: 2\n  d: 3\n  c: 4\n")
    _raises(
        ConfigError,
        lambda: load_yaml(path, ConfigError),
        "line 5, column 3: key 'c' appears twice",
        "first at line 3",
    )


@pytest.mark.parametrize(
    "value, needle",
    [
        ("123456789012345678901234567890", "does not fit in 64 bits"),
        ("-9223372036854775809", "does not fit in 64 bits"),
        ("1.0e+400", "'1.0e+400' is not a finite number"),
        (".inf", "'.inf' is not a finite number"),
        ("-.Inf", "is not a finite number"),
        (".nan", "'.nan' is not a finite number"),
        ('"bell \\a and escape \\e[2J"', "control character U+0007"),
    ],
)
def test_values_no_document_may_hold(tmp_path: Path, value: str, needle: str) -> None:
    """Beyond int64, not finite, or a control character: refused with line and column."""
    path = _write(tmp_path, "v.yaml", f"a:\n  - {value}\n")
    _raises(ConfigError, lambda: load_yaml(path, ConfigError), "line 2, column 5", needle)


def test_int64_edges_still_load(tmp_path: Path) -> None:
    """The largest and smallest 64-bit integers are ordinary values."""
    path = _write(tmp_path, "v.yaml", "a: 9223372036854775807\nb: -9223372036854775808\n")
    assert load_yaml(path, ConfigError) == {"a": 2**63 - 1, "b": -(2**63)}


# --- plans ------------------------------------------------------------------------------------


def test_plan_duplicate_key(tmp_path: Path) -> None:
    """A plan naming `count` twice: refused at the loader, whatever key it is."""
    text = PLAN.replace("    count: 6\n", "    count: 6\n    count: 60\n")
    path = _write(tmp_path, "p.yaml", text)
    _raises(PlanError, lambda: load_plan(path), "key 'count' appears twice")


@pytest.mark.parametrize(
    "old, new, needle",
    [
        ("count: 6", "count: 123456789012345678901", "does not fit in 64 bits"),
        ("capacity: 20 TB", "capacity: 1e400 TB", "'1e400 TB' is more than 1 EB"),
        ("capacity: 20 TB", "capacity: 1.0e+400", "is not a finite number"),
        ("read_bandwidth: 200 GB/s, write", "read_bandwidth: 0 GB/s, write", "a rate of 0"),
        ("count: 6", "count: 100000000", "must be at most 1,000,000"),
        ("tp: 8", "tp: 4096", "must be at most 1,024"),
        ("scale: 1.0", "scale: 1.0e+300", "must be at most"),
    ],
)
def test_plan_numbers_in_range(tmp_path: Path, old: str, new: str, needle: str) -> None:
    """Huge, infinite or zero numbers were tracebacks or silent nonsense in a review."""
    assert old in PLAN
    path = _write(tmp_path, "p.yaml", PLAN.replace(old, new, 1))
    _raises(PlanError, lambda: load_plan(path), str(path), needle)


def test_plan_names_with_control_characters(tmp_path: Path) -> None:
    """An escape sequence in a plan name never reaches a terminal: refused at loading."""
    path = _write(
        tmp_path,
        "p.yaml",
        PLAN.replace("name: p5e-prefill-p5-decode", 'name: "\\e]0;pwned\\a p5e"'),
    )
    _raises(PlanError, lambda: load_plan(path), "control character U+001B")


@pytest.mark.parametrize(
    "text, needle",
    [
        ("1e400 GB", "more than 1 EB"),
        ("nan GB", "expected a size"),
        ("2e18 B", "more than 1 EB"),
    ],
)
def test_quantities_are_bounded(text: str, needle: str) -> None:
    """Every quantity is finite and within physical sense (an exabyte at most)."""
    with pytest.raises(QuantityError, match=re.escape(needle)):
        parse_quantity(text, "size")


# --- catalogs ---------------------------------------------------------------------------------


def test_zero_bandwidth_in_a_catalog(tmp_path: Path) -> None:
    """A read_mbps of 0 divided by zero in the advisor (ZeroDivisionError traceback)."""
    path = _write(tmp_path, "c.yaml", STORAGE.format(read=0))
    _raises(
        CatalogError,
        lambda: load_storage([path]),
        "entries.test-disk.read_mbps: must be more than 0",
    )
    result = runner.invoke(
        app,
        ["analyze", str(SAMPLE), "-q", "--catalog", str(path), "--storage", "test-disk"],
    )
    one_error_line(result, "read_mbps: must be more than 0")


@pytest.mark.parametrize(
    "value, needle",
    [
        ("123456789012345678901234567890", "does not fit in 64 bits"),
        ("1.0e+400", "is not a finite number"),
        ("1e400", "expected a number, got '1e400'"),
        ("1.0e+15", "is beyond any real figure"),
    ],
)
def test_catalog_numbers_in_range(tmp_path: Path, value: str, needle: str) -> None:
    """Integers past 64 bits or 1e400 in a catalog were tracebacks."""
    path = _write(tmp_path, "c.yaml", STORAGE.format(read=value))
    _raises(CatalogError, lambda: load_storage([path]), needle)


def test_catalog_duplicate_entry(tmp_path: Path) -> None:
    """Two entries of one name: the second silently replaced the first."""
    text = STORAGE.format(read=100) + "\n".join(
        "  " + line if line else line
        for line in STORAGE.format(read=200).split("entries:\n", 1)[1].splitlines()
    )
    path = _write(tmp_path, "c.yaml", text.replace("    test-disk:", "  test-disk:"))
    _raises(CatalogError, lambda: load_storage([path]), "key 'test-disk' appears twice")


# --- rules ------------------------------------------------------------------------------------


def _rule_dir(tmp_path: Path, text: str) -> Path:
    folder = tmp_path / "rules"
    folder.mkdir(exist_ok=True)
    _write(
        folder,
        "XX01.yaml",
        text.replace("code: CA01", "code: XX01").replace(
            "name: cache.read_less_first", "name: test.rule"
        ),
    )
    return folder


@pytest.mark.parametrize(
    "old, new, needle",
    [
        ("value: 0.3", "value: 1.0e+400", "is not a finite number"),
        ("value: 0.3", "value: 99999999999999999999999", "does not fit in 64 bits"),
        ("severity: warning", "severity: warning\nseverity: info", "key 'severity' appears twice"),
        ("summary: High prefix reuse", 'summary: "\\e[2J High" #', "control character U+001B"),
    ],
)
def test_rule_files(tmp_path: Path, old: str, new: str, needle: str) -> None:
    """Rules get the same boundary: numbers, duplicate keys, control characters."""
    from kvadvisor.facts import FACTS

    assert old in RULE
    folder = _rule_dir(tmp_path, RULE.replace(old, new, 1))
    _raises(RuleSyntaxError, lambda: load_rules([folder], FACTS, builtin=False), needle)
    one_error_line(runner.invoke(app, ["rules", "check", str(folder)]), needle)


# --- model config.json ------------------------------------------------------------------------

QWEN = {
    "num_hidden_layers": 64,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "hidden_size": 5120,
    "head_dim": 128,
    "intermediate_size": 25600,
    "vocab_size": 151936,
}


@pytest.mark.parametrize(
    "text, needle",
    [
        (json.dumps(QWEN).replace("5120", "Infinity"), "Infinity is not a JSON number"),
        (json.dumps(QWEN).replace("64,", "NaN,", 1), "NaN is not a JSON number"),
        (json.dumps({**QWEN, "hidden_size": 1e30}), "'hidden_size' must be in [0, 16,777,216]"),
        (
            json.dumps({**QWEN, "num_key_value_heads": 0}),
            "'num_key_value_heads' must be at least 1",
        ),
        (json.dumps({**QWEN, "x": 1}).replace("1}", "[" * 100_000 + "]" * 100_000 + "}"), "nested"),
        (json.dumps(QWEN).replace("64,", "1" + "0" * 5000 + ",", 1), "not valid JSON"),
        (
            json.dumps(
                {
                    **QWEN,
                    "first_k_dense_replace": 65,
                    "num_local_experts": 8,
                    "num_experts_per_tok": 2,
                }
            ),
            "more than num_hidden_layers",
        ),
        (json.dumps({**QWEN, "num_experts_per_tok": 9, "num_local_experts": 8}), "more than the"),
    ],
)
def test_bad_model_config(tmp_path: Path, text: str, needle: str) -> None:
    """inf, NaN, a 1e30 hidden size, no KV heads, deep nesting: one CatalogError each."""
    path = _write(tmp_path, "config.json", text)
    _raises(CatalogError, lambda: read_hf_config(path), str(path), needle)


def test_bad_model_config_through_the_cli(tmp_path: Path) -> None:
    """--model a config.json with a 1e30 hidden size: exit 2, one line."""
    path = _write(tmp_path, "config.json", json.dumps({**QWEN, "hidden_size": 1e30}))
    one_error_line(
        runner.invoke(app, ["analyze", str(SAMPLE), "-q", "--model", str(path)]), "hidden_size"
    )


def test_model_config_size_limit(tmp_path: Path) -> None:
    """A config.json over 4 MiB is not a config: refused before it is parsed."""
    path = _write(tmp_path, "config.json", json.dumps({**QWEN, "pad": "x" * (5 << 20)}))
    _raises(CatalogError, lambda: read_hf_config(path), "over the 4,194,304-byte limit")


def test_copied_example_plan_still_loads(tmp_path: Path) -> None:
    """The boundary refuses nothing a real plan holds."""
    path = tmp_path / "p.yaml"
    shutil.copy(REPO / "examples" / "plans" / "good-p5e-prefill-p5-decode.yaml", path)
    assert load_plan(path).name == "p5e-prefill-p5-decode"
