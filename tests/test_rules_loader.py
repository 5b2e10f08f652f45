"""Rule loader: schema, references, hostile YAML, packaging.

Rule loader: schema errors name file and key, unknown facts get suggestions, hostile YAML
fails with exit 2 and one line and runs nothing, built-in rules found installed or in a checkout.
"""

from __future__ import annotations

import importlib.resources
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvadvisor.cli import EXIT_USER_ERROR, app
from kvadvisor.errors import RuleError, RuleReferenceError, RuleSyntaxError
from kvadvisor.facts.registry import FACTS
from kvadvisor.rules import builtin_rules_dir, load_rules, parse_rule
from kvadvisor.rules.model import AllOf, Compare, Op

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]

GOOD = {
    "code": "XX01",
    "name": "custom.big_writes",
    "groups": ["custom"],
    "severity": "warning",
    "stage": "prefill",
    "summary": "Big writes",
    "when": {"all": [{"fact": "write_bytes_per_s_p99", "op": ">", "value": 1e9}]},
    "message": "p99 writes are {write_bytes_per_s_p99}",
    "docs": {"what": "w", "why": "y", "example": "e", "references": ["r"]},
}


def _rule(**changes: object) -> dict:
    doc = {**GOOD, **changes}
    return {k: v for k, v in doc.items() if v is not None}


def test_good_rule_parses() -> None:
    """The structure becomes Compare/AllOf values, nothing else."""
    rule = parse_rule(_rule(), "x.yaml", FACTS)
    assert rule.when == AllOf((Compare("write_bytes_per_s_p99", Op.GT, value=1e9),))
    assert rule.facts == ("write_bytes_per_s_p99",)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"code": "X1"}, "code: expected two capital letters"),
        ({"name": "NoDots"}, "name: expected a dotted lower-case name"),
        ({"severity": "critical"}, "severity: must be one of info, warning, error, got 'critical'"),
        ({"stage": "train"}, "stage: must be one of prefill, decode, both, got 'train'"),
        ({"docs": None}, "docs: is required"),
        (
            {"docs": {"what": "w", "why": "y", "example": "e", "references": []}},
            "docs.references: expected a non-empty list",
        ),
        ({"colour": "red"}, "colour: unknown field; known fields: code, name,"),
        (
            {"when": {"all": [{"fact": "write_bytes_per_s_p99", "op": "=~", "value": 1}]}},
            "op: must be one of <, <=, >, >=, ==, !=, got '=~'",
        ),
        (
            {"when": {"all": [{"fact": "write_bytes_per_s_p99", "op": ">", "value": "1 GB/s"}]}},
            "expected a plain number",
        ),
        (
            {"when": {"fact": "write_bytes_per_s_p99", "op": ">", "value": 1, "ref": "x"}},
            "exactly one of 'value'",
        ),
        (
            {"when": {"fact": "write_bytes_per_s_p99", "op": ">", "ref": "kv_working_set_gib"}},
            "units differ",
        ),
        ({"when": {"all": [], "any": []}}, "must be the only key"),
        (
            {"when": {"fact": "deployment_chosen", "op": ">", "value": True}},
            "true/false compares only a bool fact",
        ),
        ({"message": "{write_bytes_per_s_p99.__class__}"}, "must be a plain fact name"),
        ({"message": "{write_bytes_per_s_p99!r}"}, "conversions"),
        ({"message": "{write_bytes_per_s_p99:>{width}}"}, "format must be like"),
        ({"message": "{"}, "bad placeholder"),
        (
            {"recommend": {"action": "x", "catalog": "gpus"}},
            "recommend.catalog: must be one of storage, instances, got 'gpus'",
        ),
        # Error paths of the loader that had no test.
        ({"when": 5}, "when: expected a mapping"),
        ({"when": {"all": "x"}}, "when.all: expected a non-empty list of conditions"),
        ({"when": {"fact": 3, "op": ">", "value": 1}}, "when.fact: expected a fact name"),
        (
            {"when": {"fact": "write_bytes_per_s_p99", "op": ">", "value": 1, "colour": 1}},
            "when.colour: unknown field",
        ),
        (
            {"when": {"fact": "write_bytes_per_s_p99", "op": ">", "value": 1, "factor": 2}},
            "when.factor: only allowed with 'ref'",
        ),
        (
            {"when": {"fact": "write_bytes_per_s_p99", "op": ">", "ref": 3}},
            "when.ref: expected a fact name",
        ),
        (
            {
                "when": {
                    "fact": "write_bytes_per_s_p99",
                    "op": ">",
                    "ref": "write_bytes_per_s_p99",
                    "factor": 0,
                }
            },
            "when.factor: expected a positive number, got 0",
        ),
        ({"groups": "custom"}, "groups: expected a list of lower-case group names"),
        ({"summary": " "}, "summary: expected text, got ' '"),
        ({"docs": "text"}, "docs: expected a mapping with keys what, why, example, references"),
        ({"docs": {**GOOD["docs"], "extra": 1}}, "docs.extra: unknown field"),  # type: ignore[dict-item]
        ({"recommend": "x"}, "recommend: expected a mapping with action"),
        (
            {"recommend": {"action": "x", "colour": 1}},
            "recommend.colour: unknown field; known fields: action, catalog",
        ),
        (
            {"recommend": {"action": "x", "where": [1]}},
            "recommend.where: expected a mapping of field to",
        ),
        (
            {"recommend": {"action": "x", "where": {"Read-MBps": {">=": 1}}}},
            "recommend.where.Read-MBps: expected a catalog field name",
        ),
        (
            {"recommend": {"action": "x", "where": {"read_mbps": [1]}}},
            "recommend.where.read_mbps: expected .op: value.",
        ),
        (
            {"recommend": {"action": "x", "where": {"read_mbps": {"~": 1}}}},
            "recommend.where.read_mbps: unknown operator '~'",
        ),
        (
            {"recommend": {"action": "x", "where": {"read_mbps": {">=": [1]}}}},
            "recommend.where.read_mbps: expected a number, text or true/false",
        ),
        (
            {
                "recommend": {
                    "action": "x",
                    "where": {"read_mbps": {">=": {"fact": "write_bytes_per_s_p99", "scale": 2}}},
                }
            },
            "recommend.where.read_mbps: a fact-valued bound is",
        ),
        (
            {
                "recommend": {
                    "action": "x",
                    "where": {
                        "read_mbps": {">=": {"fact": "write_bytes_per_s_p99", "factor": "2"}}
                    },
                }
            },
            "recommend.where.read_mbps: factor must be a number",
        ),
        (
            {"recommend": {"action": "x", "rank_by": "-Read"}},
            "recommend.rank_by: expected a catalog field name",
        ),
    ],
)
def test_schema_errors(changes: dict, expected: str) -> None:
    """Each structural mistake is reported with the file and the key path."""
    with pytest.raises(RuleSyntaxError, match="x.yaml: .*" + expected.replace("(", r"\(")):
        parse_rule(_rule(**changes), "x.yaml", FACTS)


@pytest.mark.parametrize("key", ["code", "name", "groups", "severity", "stage", "docs", "when"])
def test_a_missing_key_is_reported_once(key: str) -> None:
    """A required key left out is one problem ("is required"), not a second "got None"."""
    with pytest.raises(RuleSyntaxError) as err:
        parse_rule(_rule(**{key: None}), "x.yaml", FACTS)
    assert err.value.problems == (f"x.yaml: {key}: is required",)


def test_rules_check_says_a_missing_key_in_one_line(tmp_path: Path) -> None:
    """`kvadvisor rules check` on a rule without a code lists one problem for it."""
    text = (REPO / "rules" / "cache" / "CA03-reuse-unknown.yaml").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if not line.startswith("code:")]
    body = "\n".join(lines).replace("cache.reuse_unknown", "team.no_hashes") + "\n"
    (tmp_path / "XX01.yaml").write_text(body, encoding="utf-8")
    result = runner.invoke(app, ["rules", "check", str(tmp_path)])
    assert result.exit_code == EXIT_USER_ERROR, result.output
    said = [line for line in result.output.splitlines() if "code:" in line]
    assert len(said) == 1 and "XX01.yaml:1: code: is required" in said[0], result.output


def test_a_rule_must_be_a_mapping() -> None:
    """A rule file holding a list (or text) says what a rule looks like."""
    with pytest.raises(RuleSyntaxError, match="x.yaml: expected a mapping with code, name"):
        parse_rule([GOOD], "x.yaml", FACTS)


def test_unknown_fact_in_a_where_bound() -> None:
    """A fact-valued catalog bound naming no fact is a reference error, like one in `when`."""
    where = {"read_mbps": {">=": {"fact": "write_bytes_per_s_p9"}}}
    with pytest.raises(RuleReferenceError, match="recommend.where.read_mbps: unknown fact"):
        parse_rule(_rule(recommend={"action": "x", "where": where}), "x.yaml", FACTS)


def test_rules_dir_must_be_a_directory(tmp_path: Path) -> None:
    """--rules naming a file (or nothing) is refused with the path."""
    missing = tmp_path / "nope"
    with pytest.raises(RuleSyntaxError, match="nope: not a directory of rule files"):
        load_rules([missing], FACTS)


def test_every_problem_counted() -> None:
    """All problems of a file are collected; the message names the first and counts the rest."""
    with pytest.raises(RuleSyntaxError, match=r"and 2 more problem"):
        parse_rule(_rule(code="x", severity="loud", stage="never"), "x.yaml", FACTS)


def test_unknown_fact_suggests_close_names() -> None:
    """A misspelt fact is a reference error with difflib's closest names."""
    when = {"fact": "write_bytes_per_s_p9", "op": ">", "value": 1}
    with pytest.raises(RuleReferenceError, match="did you mean 'write_bytes_per_s_p99'"):
        parse_rule(_rule(when=when), "x.yaml", FACTS)
    with pytest.raises(RuleReferenceError, match="unknown fact 'hit_ratio'"):
        parse_rule(_rule(message="{hit_ratio}"), "x.yaml", FACTS)


def test_condition_depth_is_bounded() -> None:
    """Deeply nested not/not/... is refused, not recursed into."""
    when: dict = {"fact": "write_bytes_per_s_p99", "op": ">", "value": 1}
    for _ in range(12):
        when = {"not": when}
    with pytest.raises(RuleSyntaxError, match="nested deeper"):
        parse_rule(_rule(when=when), "x.yaml", FACTS)


def test_duplicate_code_across_dirs(tmp_path: Path) -> None:
    """A user rule may not reuse a built-in code or name."""
    shutil.copy(REPO / "rules" / "storage" / "ST03-prefill-write-bandwidth.yaml", tmp_path)
    with pytest.raises(RuleSyntaxError, match="ST03 is already defined"):
        load_rules([tmp_path], FACTS)


def test_empty_user_dir_is_an_error(tmp_path: Path) -> None:
    """--rules pointing at a folder without rules is a mistake worth reporting."""
    with pytest.raises(RuleSyntaxError, match="no rule files"):
        load_rules([tmp_path], FACTS)


MARKER = "kvadvisor-hostile-yaml-ran"


def _hostile(tmp_path: Path) -> dict[str, str]:
    marker = tmp_path / MARKER
    lol = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    lol += [
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 9) + "]"
        for i in range(9)
    ]
    return {
        "python-object": f"code: !!python/object/apply:os.system ['touch {marker}']\n",
        "python-name": "code: !!python/name:os.system\n",
        "billion-laughs": "\n".join(lol) + "\n",
        "deep-nesting": "when: " + "[" * 100 + "]" * 100 + "\n",
        "huge": "code: XX01\nsummary: '" + "x" * (5 * 1024 * 1024) + "'\n",
        "malformed": "code: XX01\n  name: [unclosed\n",
        "not-utf8": "code: \udcff\n",
        "not-a-mapping": "- just\n- a list\n",
    }


@pytest.mark.parametrize(
    "case",
    [
        "python-object",
        "python-name",
        "billion-laughs",
        "deep-nesting",
        "huge",
        "malformed",
        "not-utf8",
        "not-a-mapping",
    ],
)
def test_hostile_yaml_through_the_cli(tmp_path: Path, case: str) -> None:
    """`rules check` on hostile YAML: exit 2, one line on stderr, no traceback, nothing run."""
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "R.yaml").write_bytes(_hostile(tmp_path)[case].encode("utf-8", "surrogateescape"))
    result = runner.invoke(app, ["rules", "check", str(folder)])
    assert result.exit_code == EXIT_USER_ERROR, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "R.yaml" in lines[0]
    assert not (tmp_path / MARKER).exists()


def test_hostile_rules_dir_in_analyze_runs_nothing(tmp_path: Path, mooncake_path: Path) -> None:
    """Analyze --rules with a python tag fails before reading the trace."""
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "R.yaml").write_text(_hostile(tmp_path)["python-object"], encoding="utf-8")
    result = runner.invoke(app, ["analyze", str(mooncake_path), "--rules", str(folder)])
    assert result.exit_code == EXIT_USER_ERROR
    assert "Traceback" not in result.output and not (tmp_path / MARKER).exists()


def test_builtin_rules_from_the_checkout() -> None:
    """From a source checkout the rules come from <repo>/rules."""
    packaged = importlib.resources.files("kvadvisor") / "_builtin_rules"
    if packaged.is_dir():
        pytest.skip("running from an installed wheel")
    assert builtin_rules_dir() == REPO / "rules"


def test_builtin_rules_from_the_installed_package(tmp_path: Path, monkeypatch) -> None:
    """Installed, the rules come from the package data.

    Installed, the rules are package data at kvadvisor/_builtin_rules (hatch force-include);
    they take precedence over any rules/ folder.
    """
    checkout_codes = [r.code for r in load_rules([], FACTS)]
    pkg = tmp_path / "kvadvisor"
    shutil.copytree(REPO / "rules", pkg / "_builtin_rules")
    (pkg / "_builtin_rules" / "cache" / "CA05-retention.yaml").unlink()
    monkeypatch.setattr(importlib.resources, "files", lambda name: pkg)
    assert builtin_rules_dir() == pkg / "_builtin_rules"
    installed = load_rules([], FACTS)
    assert [r.code for r in installed] == [c for c in checkout_codes if c != "CA05"]
    assert all(r.path.startswith(str(pkg)) for r in installed)


def test_missing_builtin_rules_is_a_clear_error(tmp_path: Path, monkeypatch) -> None:
    """Neither location: a user error that says to reinstall."""
    monkeypatch.setattr(importlib.resources, "files", lambda name: tmp_path)
    import kvadvisor.rules.loader as loader

    monkeypatch.setattr(loader, "__file__", str(tmp_path / "a" / "b" / "loader.py"))
    with pytest.raises(RuleError, match="reinstall"):
        builtin_rules_dir()


def test_wheel_ships_the_rules() -> None:
    """Pyproject maps the top-level rules/ into the wheel as kvadvisor/_builtin_rules."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    include = config["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert include["rules"] == "kvadvisor/_builtin_rules"


def test_real_wheel_carries_and_loads_the_rules(tmp_path: Path) -> None:
    """The real wheel carries and loads the built-in rules.

    Build the wheel (hatchling, no network), unpack it, and load the rules from it in a
    fresh interpreter run outside the checkout: they come from kvadvisor/_builtin_rules.
    """
    import subprocess
    import sys
    import zipfile

    pytest.importorskip("hatchling")
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            str(REPO),
            "-w",
            str(tmp_path / "dist"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if build.returncode != 0:
        pytest.skip(f"wheel build unavailable here: {build.stderr.strip()[-200:]}")
    wheel = next((tmp_path / "dist").glob("kvadvisor-*.whl"))
    # The docs ship too: error messages cite `kvadvisor docs errors#SLUG`.
    assert "kvadvisor/_docs/errors.md" in zipfile.ZipFile(wheel).namelist()
    # PEP 561: the marker that a type checker may read the installed package's annotations.
    assert "kvadvisor/py.typed" in zipfile.ZipFile(wheel).namelist()
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = (
        "from kvadvisor.facts import FACTS; from kvadvisor.rules import "
        "builtin_rules_dir, load_rules; print(builtin_rules_dir()); "
        "print(','.join(r.code for r in load_rules([], FACTS)))"
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(site), "PATH": ""},
        check=True,
    )
    where, codes = run.stdout.strip().splitlines()
    assert Path(where) == site / "kvadvisor" / "_builtin_rules"
    assert codes.split(",") == [r.code for r in load_rules([], FACTS)]
