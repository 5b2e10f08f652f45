"""The one YAML checker: plans, rules and catalogs report every problem, its path and line.

Each file below holds several distinct mistakes; each loader must report all of them at once,
each naming the file, the line YAML read it from (found here by searching the text), the key
path, and a did-you-mean for a misspelt key or value. The CLI prints one line per problem and
exits 2, no traceback.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_checks import without_progress
from typer.testing import CliRunner

from kvadvisor.catalog.checkfile import check_catalog_file
from kvadvisor.catalog.storage import load_storage
from kvadvisor.checker import Checker, Field, close_names, did_you_mean
from kvadvisor.cli import EXIT_USER_ERROR, app
from kvadvisor.errors import CatalogError, PlanError, RuleReferenceError, RuleSyntaxError
from kvadvisor.facts import FACTS
from kvadvisor.io.yamlio import load_yaml_lines, parse_yaml_lines
from kvadvisor.plan import load_plan
from kvadvisor.rules.loader import load_rule_file

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO / "tests" / "fixtures" / "traces" / "tiny_mooncake.jsonl"
runner = CliRunner()


def line_of(text: str, needle: str) -> int:
    """The 1-based line of ``text`` holding ``needle`` (exactly one)."""
    found = [i for i, line in enumerate(text.splitlines(), 1) if needle in line]
    assert len(found) == 1, (needle, found)
    return found[0]


# Three mistakes: a misspelt key, a size written as a rate, a misspelt router.
PLAN = """\
name: three-mistakes
model:
  name: llama-3.1-70b
  tp: 8
stages:
  prefill:
    cuont: 2
    router: round_robbin
    tiers:
      - name: host
        storage: {kind: dram, read_bandwidth: 50 GB/s}
        capacity: 1 TB
      - name: nvme
        storage: {kind: ssd, read_bandwidth: 6 GB/s}
        capacity: 2 TB/s
"""

PLAN_PROBLEMS = [
    ("cuont: 2", "stages.prefill.cuont: unknown field; did you mean 'count'?"),
    (
        "router: round_robbin",
        "stages.prefill.router: must be one of round_robin, least_outstanding, prefix_aware, "
        "got 'round_robbin'; did you mean 'round_robin'?",
    ),
    ("capacity: 2 TB/s", "stages.prefill.tiers[1].capacity: 'TB/s' is a rate unit; a size takes"),
]


def test_a_plan_with_three_mistakes_reports_all_three(tmp_path: Path) -> None:
    """Every problem of the plan at once, each with file, line and key path, in file order."""
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN, encoding="utf-8")
    with pytest.raises(PlanError) as err:
        load_plan(path)
    problems = err.value.problems
    assert len(problems) == 3, problems
    for problem, (marker, said) in zip(problems, PLAN_PROBLEMS, strict=True):
        assert problem.startswith(f"{path}:{line_of(PLAN, marker)}: {said}"), problem
    assert str(err.value) == f"{problems[0]} (and 2 more problems)"


def test_a_plan_catalog_name_and_a_type_error_both_reported(tmp_path: Path) -> None:
    """A catalog miss (found while building) and a schema problem come in one error."""
    text = PLAN.replace("name: llama-3.1-70b", "name: llama-3.1-71b")
    path = tmp_path / "plan.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PlanError) as err:
        load_plan(path)
    said = "\n".join(err.value.problems)
    assert f"{path}:{line_of(text, '71b')}: model.name: unknown model 'llama-3.1-71b'" in said
    assert "did you mean 'llama-3.1-70b'" in said
    assert len(err.value.problems) == 4


def test_the_cli_prints_one_line_per_plan_problem(tmp_path: Path) -> None:
    """`review --plan` with three mistakes: three error lines and a count, exit 2."""
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN, encoding="utf-8")
    result = runner.invoke(app, ["review", str(TRACE), "--plan", str(path)])
    assert result.exit_code == EXIT_USER_ERROR and "Traceback" not in result.output
    *each, last = without_progress(result.stderr)
    assert len(each) == 3, each
    for line, (marker, said) in zip(each, PLAN_PROBLEMS, strict=True):
        assert line.startswith(f"error: {path}:{line_of(PLAN, marker)}: {said}"), line
    assert last == "error: 3 problems (see `kvadvisor docs errors#plan`)"


RULE = (REPO / "rules" / "cache" / "CA03-reuse-unknown.yaml").read_text(encoding="utf-8")
# Four mistakes: a misspelt severity and stage, a misspelt key, groups in capitals.
BAD_RULE = (
    RULE.replace("severity: info", "severity: warnng")
    .replace("stage: both", "stage: prefil")
    .replace("groups: [cache]", "groups: [Cache]")
    .replace("recommend:", "recomend:")
)
RULE_PROBLEMS = [  # in file order
    ("groups: [Cache]", "groups: expected a list of lower-case group names, got ['Cache']"),
    (
        "severity: warnng",
        "severity: must be one of info, warning, error, got 'warnng'; did you mean 'warning'?",
    ),
    (
        "stage: prefil",
        "stage: must be one of prefill, decode, both, got 'prefil'; did you mean 'prefill'?",
    ),
    ("recomend:", "recomend: unknown field; did you mean 'recommend'?"),
]


def test_a_rule_with_four_mistakes_reports_all_four(tmp_path: Path) -> None:
    """A rule file's problems all at once, each with its line and a did-you-mean."""
    path = tmp_path / "XX01.yaml"
    path.write_text(BAD_RULE, encoding="utf-8")
    with pytest.raises(RuleSyntaxError) as err:
        load_rule_file(path, FACTS)
    problems = err.value.problems
    assert len(problems) == len(RULE_PROBLEMS), problems
    for problem, (marker, said) in zip(problems, RULE_PROBLEMS, strict=True):
        assert problem == f"{path}:{line_of(BAD_RULE, marker)}: {said}", problem


def test_a_misspelt_fact_in_a_rule_gets_its_line_and_name(tmp_path: Path) -> None:
    """An unknown fact (a reference problem) names the closest fact and the line it is on."""
    text = RULE.replace("fact: prefix_reuse_measurable", "fact: prefix_reuse_measurabel")
    path = tmp_path / "XX01.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(RuleReferenceError) as err:
        load_rule_file(path, FACTS)
    (problem,) = err.value.problems
    assert problem.startswith(
        f"{path}:{line_of(text, 'measurabel')}: when.all[0].fact: unknown fact "
        "'prefix_reuse_measurabel'; did you mean 'prefix_reuse_measurable'"
    )


def test_rules_check_prints_every_problem(tmp_path: Path) -> None:
    """`rules check DIR`: one error line per problem of the rule file, exit 2."""
    (tmp_path / "XX01.yaml").write_text(BAD_RULE, encoding="utf-8")
    result = runner.invoke(app, ["rules", "check", str(tmp_path)])
    assert result.exit_code == EXIT_USER_ERROR and "Traceback" not in result.output
    lines = [line for line in without_progress(result.stderr) if "XX01.yaml:" in line]
    assert len(lines) == len(RULE_PROBLEMS), lines
    for line, (_, said) in zip(lines, RULE_PROBLEMS, strict=True):
        assert line.startswith("error: ") and line.endswith(said), line


# Three mistakes in one storage entry: a misspelt key, a misspelt category, a negative rate.
CATALOG = """\
kind: storage
sources: {S: "our lab's measurements"}
entries:
  lab-nvme:
    category: local_nvm
    provider: generic
    read_mbps: 7000
    write_mpbs: 3000
    read_iops: -1
    source: [S]
    as_of: 2026-12-01
"""
CATALOG_PROBLEMS = [  # in file order
    ("local_nvm", "entries.lab-nvme.category: must be one of memory, "),
    ("write_mpbs", "entries.lab-nvme.write_mpbs: unknown field; did you mean 'write_mbps'?"),
    ("read_iops", "entries.lab-nvme.read_iops: must be >= 0, got -1"),
]


def test_a_catalog_with_three_mistakes_reports_all_three(tmp_path: Path) -> None:
    """The loader and `catalog check` both see every problem, each with line and path."""
    path = tmp_path / "storage.yaml"
    path.write_text(CATALOG, encoding="utf-8")
    with pytest.raises(CatalogError) as err:
        load_storage([path])
    checked = check_catalog_file(path)
    for problems in (err.value.problems, checked.problems):
        assert len(problems) == 3, problems
        for problem, (marker, said) in zip(problems, CATALOG_PROBLEMS, strict=True):
            assert problem.startswith(f"{path}:{line_of(CATALOG, marker)}: {said}"), problem
    assert "got 'local_nvm'; did you mean 'local_nvme'?" in err.value.problems[0]
    result = runner.invoke(app, ["catalog", "check", str(path)])
    assert result.exit_code == EXIT_USER_ERROR and "Traceback" not in result.output
    assert without_progress(result.stderr) == [f"error: {p}" for p in checked.problems]


def test_the_checker_walks_nested_lists_with_paths_and_lines() -> None:
    """Paths like stages.prefill.tiers[1].capacity; a missing key takes its mapping's line."""
    text = "a:\n  items:\n    - {n: 1}\n    - n: x\n      extra: 2\n    - {}\n"
    data, lines = parse_yaml_lines(text, "f.yaml", PlanError)
    c = Checker("f.yaml", lines)
    item = Field("mapping", fields={"n": Field("int", required=True)})
    fields = {"a": Field("mapping", fields={"items": Field("list", items=item)})}
    checked = c.record("", data, fields)
    assert c.lines_of_problems() == (
        "f.yaml:4: a.items[1].n: expected a number, got 'x'",
        "f.yaml:5: a.items[1].extra: unknown field; known fields: n",
        "f.yaml:6: a.items[2].n: is required",
    )
    assert checked == {"a": {"items": [{"n": 1}, {}, {}]}}


def test_did_you_mean_is_one_helper() -> None:
    """Closest names first (a prefix before difflib's), quoted; nothing close says nothing."""
    assert did_you_mean("cuont", ["count", "chunk_tokens"]) == "did you mean 'count'?"
    assert did_you_mean("zzz", ["count"]) == ""
    assert close_names("p5e", ["p5e.48xlarge", "p5en.48xlarge", "m5.large"], 3) == [
        "p5e.48xlarge",
        "p5en.48xlarge",
    ]


def test_load_yaml_lines_matches_the_text(tmp_path: Path) -> None:
    """The line of every key and list item is the line it is written on."""
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN, encoding="utf-8")
    data, lines = load_yaml_lines(path, PlanError)
    assert data["stages"]["prefill"]["cuont"] == 2
    assert lines["stages.prefill.cuont"] == line_of(PLAN, "cuont")
    assert lines["stages.prefill.tiers[1]"] == line_of(PLAN, "name: nvme")
    assert lines["stages.prefill.tiers[1].capacity"] == line_of(PLAN, "TB/s")


def test_a_null_engine_is_one_enabled_with_its_defaults(tmp_path: Path) -> None:
    """`engines: {lmcache: }` enables LMCache with no settings; a misspelt engine is named."""
    text = PLAN.replace("    cuont: 2\n", "    engines:\n      lmcache:\n").replace(
        "router: round_robbin", "router: round_robin"
    )
    path = tmp_path / "plan.yaml"
    path.write_text(text.replace("capacity: 2 TB/s", "capacity: 2 TB"), encoding="utf-8")
    assert load_plan(path).stages[0].engines == {"lmcache": {}}
    path.write_text(text.replace("lmcache:", "lmcahce:"), encoding="utf-8")
    with pytest.raises(PlanError) as err:
        load_plan(path)
    assert err.value.problems[0] == (
        f"{path}:{line_of(text, 'lmcache:')}: stages.prefill.engines.lmcahce: unknown field; "
        "did you mean 'lmcache'?"
    )


def test_option_values_and_catalog_kinds_get_the_same_suggestion(tmp_path: Path) -> None:
    """--provider and a catalog file's kind name the closest choice too."""
    from kvadvisor.advice.advisor import parse_providers
    from kvadvisor.errors import ConfigError

    with pytest.raises(ConfigError, match="'gpc': expected one of .*; did you mean 'gcp'"):
        parse_providers(["aws,gpc"])
    path = tmp_path / "c.yaml"
    path.write_text("kind: storge\nentries: {}\n", encoding="utf-8")
    (problem,) = check_catalog_file(path).problems
    assert problem.endswith("did you mean 'storage'?"), problem
