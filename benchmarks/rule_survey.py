"""Which rules fire: analyze and review over every sample trace, the shared traces and the plans.

Usage: python benchmarks/rule_survey.py [--quick] [--write docs/rule-survey.md]

Runs `analyze` on every trace in sample_traces/ (and ../shared/traces/ when present) with a few
option variations (a model, a capacity tier given with --storage, 16-token chunks, another GPU
instance), and `review` of every plan in examples/plans/ against the Mooncake sample; prints a
Markdown table of how many runs each built-in rule fired in, and for each rule that never fired
what was decided (``DECISIONS``). ``--write`` stores the table as docs/rule-survey.md.
``--quick`` runs the sample traces only, one variation each.
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
DECISIONS: dict[str, str] = {
    "CA02": (
        "kept: fires when the steady-state prefix hit ratio is under 10%; every shipped trace"
        " with hashes reuses more (the Mooncake sample 39.8%), traces without hashes get CA03"
        " instead; fire cases in tests/fixtures/rule_cases"
    ),
    "GP01": (
        "kept as a guard: the search never recommends a GPU the model does not fit, it "
        "abstains and names why (the run of Llama-3.1-405B on p4d.24xlarge), so there is no "
        "deployment for it to fire on; fire cases in tests/fixtures/rule_cases"
    ),
    "GP02": (
        "kept as a guard on the advisor's own choice: the verdict is sized on the replay so "
        "that the requests in flight fit the GPU KV pool; a finding here would contradict it "
        "(issue 13), so it must stay quiet in these runs; its fire cases are in "
        "tests/fixtures/rule_cases"
    ),
    "GP03": (
        "kept: fires when the dominant stage sits on the GPU weaker at its bottleneck; the "
        "cheapest deployment meeting the SLO chose one GPU type for both stages or the "
        "stronger one in these runs; fire cases in tests/fixtures/rule_cases"
    ),
    "IN01": (
        "kept as a guard on the advisor's own choice: the verdict is sized on the replay so "
        "that no tier exceeds the instance's disk-bandwidth cap; a finding here would "
        "contradict it (issue 13), so it must stay quiet in these runs; its fire cases are in"
        " tests/fixtures/rule_cases"
    ),
    "RV05": (
        "kept: needs a disaggregated plan with one stage's storage idle and the other's "
        "saturated; the cause examples isolate one cause each (RV11-RV13), none combines "
        "both; fire cases in tests/fixtures/rule_cases"
    ),
    "RV09": (
        "kept: fires on a plan giving an instance storage it cannot have (another provider's "
        "volume); the shipped plans are deployable; fire case tests/fixtures/rule_cases and "
        "tests/test_review*.py"
    ),
    "RV14": (
        "kept: fires on a disaggregated plan whose stages are two providers' instances; the "
        "shipped plans use one provider; tested in tests/test_review*.py"
    ),
    "ST02": (
        "kept: fires when the KV chunk is not a multiple of the device I/O unit; KV bytes per"
        " token are multiples of 4 KiB for every catalog model, so it needs an --io-unit "
        "above the chunk's size; fire cases in tests/fixtures/rule_cases"
    ),
    "ST03": (
        "kept as a guard on the advisor's own choice: the verdict is sized on the replay so "
        "that the prefill tier sustains the replayed p99 write rate; a finding here would "
        "contradict it (issue 13), so it must stay quiet in these runs; its fire cases are in"
        " tests/fixtures/rule_cases"
    ),
    "ST04": (
        "kept as a guard on the advisor's own choice: the verdict is sized on the replay so "
        "that the prefill tier's write peaks fit (or a DRAM buffer takes them); a finding "
        "here would contradict it (issue 13), so it must stay quiet in these runs; its fire "
        "cases are in tests/fixtures/rule_cases"
    ),
    "ST05": (
        "kept: fires when the replayed loads of cached KV ask the tier they read (the loading "
        "stage's, in the verdict) for more chunk reads per second at p99 than one node reaches"
        " on it; the verdicts in these runs load from host memory, which has no IOPS figure, "
        "so it is not evaluated there (ST05-ST07 read the tier cached KV is really loaded "
        "from: the prefill or serving stage's, never decode's); fire cases in "
        "tests/fixtures/rule_cases"
    ),
    "ST06": (
        "kept: fires on a millisecond-class tier on the path that loads cached KV before "
        "prefill; the verdicts in these runs load from host memory (the catalog gives no "
        "latency for it, so it is not evaluated there); fire cases in tests/fixtures/rule_cases"
        " and tests/test_advice_advisor.py (object storage as the load tier)"
    ),
    "ST07": (
        "kept: fires when large loads (p99 at least 2 GB/s per node at 1 MiB or more) read a "
        "storage tier without GPUDirect Storage; the verdicts in these runs load from host "
        "memory, where GDS does not apply; fire cases in tests/fixtures/rule_cases"
    ),
    "ST08": (
        "kept as a guard on the advisor's own choice: the verdict is sized on the replay so "
        "that SSD tiers stay within their drives' rated writes per day; a finding here would "
        "contradict it (issue 13), so it must stay quiet in these runs; its fire cases are in"
        " tests/fixtures/rule_cases"
    ),
    "TI01": (
        "kept as a guard on the advisor's own choice: the verdict is sized on the replay so "
        "that a host tier is never smaller than the GPU KV pool; a finding here would "
        "contradict it (issue 13), so it must stay quiet in these runs; its fire cases are in"
        " tests/fixtures/rule_cases"
    ),
    "TI02": (
        "kept as a guard on the advisor's own choice: the verdict is sized on the replay so "
        "that a host tier is at least twice the GPU KV pool (HiCache's minimum); a finding "
        "here would contradict it (issue 13), so it must stay quiet in these runs; its fire "
        "cases are in tests/fixtures/rule_cases"
    ),
    "UT01": (
        "kept as a guard on the advisor's own choice: the verdict is sized on the replay so "
        "that a tier is sized for the replayed p99, not the peak (the seed's first cause; "
        "RV11 catches it in a plan, examples/plans/cause1-sized-for-peak.yaml); a finding "
        "here would contradict it (issue 13), so it must stay quiet in these runs; its fire "
        "cases are in tests/fixtures/rule_cases"
    ),
}

# Rules taken out, and why (docs/rule-survey.md lists them; their codes are not reused).
RETIRED: dict[str, str] = {
    "UT02": (
        "`utilization.shared_spec_idle_stage` retired: it read whether one storage "
        "specification serves both stages and the decode tier's read utilization, but the "
        "advisor's verdicts buy storage only for the stage that loads and writes KV (prefill, "
        "or aggregated serving) and none for decode, which reads its KV from GPU memory; so "
        "its facts could only be a constant false and a decode utilization nothing measures. "
        "A shared specification happens in a plan: RV12 `stage.shared_storage_spec` judges it "
        "there (examples/plans/cause2-one-spec-both-stages.yaml), and RV05 `stage.balance` the "
        "two stages' utilization"
    ),
}


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
                "analyze mooncake --provider aws --slo ttft_p99=5s",
                mooncake,
                {"model": MODEL, "providers": ("aws",), "slo": "ttft_p99=5s,tpot_p99=200ms"},
            ),
            Run(
                "analyze mooncake --storage aws-ebs-gp3 --slo ttft_p99=5s",
                mooncake,
                {"model": MODEL, "storage": "aws-ebs-gp3", "slo": "ttft_p99=5s,tpot_p99=200ms"},
            ),
            Run(
                "analyze mooncake --chunk-tokens 16", mooncake, {"model": MODEL, "chunk_tokens": 16}
            ),
            Run(
                "analyze mooncake --instance p5e.48xlarge",
                mooncake,
                {"model": MODEL, "instance": "p5e.48xlarge"},
            ),
            Run(
                "analyze mooncake --model llama-3.1-405b --instance p4d.24xlarge",
                mooncake,
                {"model": "llama-3.1-405b", "instance": "p4d.24xlarge"},
            ),
            Run("analyze mooncake --model deepseek-v3", mooncake, {"model": "deepseek-v3"}),
            Run("analyze mooncake --model llama-3.1-8b", mooncake, {"model": "llama-3.1-8b"}),
            Run(
                "analyze azure_code --provider aws --storage aws-ebs-gp3",
                SAMPLES / "azure_code.csv.zst",
                {"model": MODEL, "providers": ("aws",), "storage": "aws-ebs-gp3"},
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
        "# Rule survey",
        "",
        "<!-- Written by `python benchmarks/rule_survey.py --write docs/rule-survey.md`. -->",
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
    lines += ["", "Retired rules:", "", "| rule | why |", "|---|---|"]
    lines += [f"| {code} | {why} |" for code, why in RETIRED.items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    """Run the survey; print (or write) its table and the time each run took."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sample traces only")
    parser.add_argument("--write", type=Path, help="write the table here (docs/rule-survey.md)")
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
