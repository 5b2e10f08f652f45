"""Which rules fire: analyze and review over every sample trace, the shared traces and the plans.

Usage: python benchmarks/rule_survey.py [--quick] [--write rules/SURVEY.md]

Runs `analyze` on every trace in sample_traces/ (and ../shared/traces/ when present) with a few
option variations (a model, one storage spec for both stages, 16-token chunks, another GPU
instance), and `review` of every plan in examples/plans/ against the Mooncake sample; prints a
Markdown table of how many runs each built-in rule fired in, and for each rule that never fired
what was decided (``DECISIONS``). ``--write`` stores the table where `kvadvisor rules docs`
appends it to docs/rules.md. ``--quick`` runs the sample traces only, one variation each.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kvadvisor
from kvadvisor.advice.inputs import load_rule_set
from kvadvisor.errors import KvAdvisorError

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"
SHARED = REPO.parent / "shared" / "traces"
PLANS = REPO / "examples" / "plans"
MODEL = "llama-3.1-70b"

# What was decided for each rule that fires in no run, and why (docs/rules.md shows it).
DECISIONS: dict[str, str] = {}


@dataclass(frozen=True)
class Run:
    """One command: analyze a trace with options, or review plans against a trace."""

    label: str
    trace: Path
    options: dict[str, Any] = field(default_factory=dict)
    plans: tuple[Path, ...] = ()


def _sample_traces() -> list[Path]:
    return sorted(p for p in SAMPLES.iterdir() if p.is_file() and p.suffix not in (".md", ".py"))


def runs(quick: bool) -> list[Run]:
    """Every run of the survey, in order."""
    out = [Run(f"analyze {p.name}", p, {"model": MODEL}) for p in _sample_traces()]
    mooncake = SAMPLES / "mooncake_conversation.parquet"
    if not quick:
        out += [
            Run(
                "analyze mooncake --storage aws-ebs-gp3",
                mooncake,
                {"model": MODEL, "storage": "aws-ebs-gp3"},
            ),
            Run(
                "analyze mooncake --chunk-tokens 16", mooncake, {"model": MODEL, "chunk_tokens": 16}
            ),
            Run(
                "analyze mooncake --instance p5e.48xlarge",
                mooncake,
                {"model": MODEL, "instance": "p5e.48xlarge"},
            ),
            Run("analyze mooncake --model deepseek-v3", mooncake, {"model": "deepseek-v3"}),
            Run("analyze mooncake --model llama-3.1-8b", mooncake, {"model": "llama-3.1-8b"}),
            Run(
                "analyze azure_code --storage aws-ebs-gp3",
                SAMPLES / "azure_code.csv.zst",
                {"model": MODEL, "storage": "aws-ebs-gp3"},
            ),
        ]
        if SHARED.is_dir():
            out += [
                Run(f"analyze shared {p.name}", p, {"model": MODEL})
                for p in sorted(SHARED.iterdir())
                if p.suffix in (".jsonl", ".csv")
            ]
    out.append(Run("review examples/plans", mooncake, plans=tuple(sorted(PLANS.glob("*.yaml")))))
    return out


def fired_in(run: Run) -> tuple[set[str], str]:
    """The codes that fired in one run (findings of analyze, failed checks of review)."""
    try:
        if run.plans:
            review = kvadvisor.review(run.trace, list(run.plans), generated_at="survey")
            return {c.code for p in review.plans for c in p.findings}, ""
        report = kvadvisor.analyze(run.trace, generated_at="survey", **run.options)
        return {f.code for f in report.findings if f.code}, ""
    except KvAdvisorError as exc:
        return set(), f"refused: {exc}"


def survey(quick: bool) -> tuple[list[tuple[Run, set[str], str, float]], dict[str, list[str]]]:
    """Run everything: per run its fired codes; per code the runs it fired in."""
    results = []
    by_code: dict[str, list[str]] = defaultdict(list)
    for run in runs(quick):
        start = time.perf_counter()
        codes, note = fired_in(run)
        results.append((run, codes, note, time.perf_counter() - start))
        for code in codes:
            by_code[code].append(run.label)
    return results, by_code


def table(results, by_code: dict[str, list[str]]) -> str:
    """The survey as Markdown: the runs, then per rule how many fired and the decision."""
    rules = load_rule_set()
    lines = [
        "## Rule survey",
        "",
        "<!-- Written by `python benchmarks/rule_survey.py --write rules/SURVEY.md`. -->",
        "",
        f"`benchmarks/rule_survey.py` ran {len(results)} commands: `analyze` on every trace in"
        " `sample_traces/` (model "
        f"{MODEL}) and the shared traces, with option variations, and `review` of every plan"
        " in `examples/plans/` against the Mooncake sample. A rule counts as fired in a run"
        " when it is a finding of it (a failed check, for the review).",
        "",
        "| run | fired |",
        "|---|---|",
    ]
    for run, codes, note, _ in results:
        lines.append(f"| {run.label} | {', '.join(sorted(codes)) or note or 'none'} |")
    lines += [
        "",
        "| rule | scope | runs it fired in | decision where it fired in none |",
        "|---|---|---|---|",
    ]
    for rule in rules:
        fired = by_code.get(rule.code, [])
        decision = "" if fired else DECISIONS.get(rule.code, "**undecided**")
        lines.append(
            f"| {rule.code} `{rule.name}` | {rule.scope.value} | {len(fired)} | {decision} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    """Run the survey; print (or write) its table and the time each run took."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sample traces only")
    parser.add_argument("--write", type=Path, help="write the table here (rules/SURVEY.md)")
    args = parser.parse_args()
    results, by_code = survey(args.quick)
    text = table(results, by_code)
    if args.write:
        args.write.write_text(text, encoding="utf-8")
    print(text)
    for run, _, _, seconds in results:
        print(f"{seconds:7.1f} s  {run.label}")


if __name__ == "__main__":
    main()
