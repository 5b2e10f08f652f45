"""`verify --results BASELINE CANDIDATE --gate ...`: an A/B gate over two benchmark runs.

The seed document's joint testing gates a KV tier on a before/after comparison (its example:
TTFT down at least 25%, throughput up 29-40% with the tier on). A gate names a metric of
:data:`~kvadvisor.verifyjobs.share.METRICS` and the change the candidate must reach against
the baseline, in the metric's better direction: for a lower-is-better metric (latencies) the
change must be at most the value (``ttft_p99=-25%``: down at least 25%; ``ttft_p99=+5%``: up
at most 5%), for a higher-is-better one (throughputs) at least the value
(``throughput=+29%``: up at least 29%; ``throughput=-5%``: down at most 5%). Pure: two judged
reports in, the verdicts out.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any

from kvadvisor.errors import ConfigError
from kvadvisor.units import Unit, format_value
from kvadvisor.verifyjobs.model import BenchResult, VerifyError, VerifyReport
from kvadvisor.verifyjobs.share import METRICS

RULE = re.compile(r"([a-z0-9_]+)=([+-])(\d+(?:\.\d+)?)%")
EXAMPLE = "e.g. --gate ttft_p99=-25%,throughput=+29%"
# How a figure reads: throughputs as "413 tok/s", "6.45 req/s"; everything else in seconds.
SUFFIX = {"output_tokens_per_s": " tok", "requests_per_s": " req"}


@dataclass(frozen=True)
class GateRule:
    """One stated change: ``metric``'s relative change bound (``-0.25`` for ``-25%``)."""

    metric: str
    change: float
    text: str


@dataclass(frozen=True)
class GateVerdict:
    """One metric of one engine's benchmark: both runs' figures, the change, the verdict."""

    engine: str
    metric: str
    baseline: float | None
    candidate: float | None
    change: float | None
    rule: str | None  # the gate's text; None: reported, not gated
    passed: bool | None  # None: not gated


@dataclass(frozen=True)
class GateReport:
    """Every metric compared for the engines benchmarked in both runs."""

    baseline: str
    candidate: str
    engines: tuple[str, ...]
    verdicts: tuple[GateVerdict, ...]

    @property
    def failed(self) -> tuple[GateVerdict, ...]:
        """The gated metrics that missed their stated change."""
        return tuple(v for v in self.verdicts if v.passed is False)


def parse_gate(text: str) -> tuple[GateRule, ...]:
    """``ttft_p99=-25%,throughput=+29%`` as rules, or a one-line ConfigError."""
    rules: list[GateRule] = []
    for item in text.split(","):
        item = item.strip()
        found = RULE.fullmatch(item)
        if found is None:
            raise ConfigError(
                f"--gate '{item}': expected METRIC=+N% or METRIC=-N% (a sign and a percent), "
                f"{EXAMPLE}"
            )
        metric, sign, value = found.groups()
        if metric not in METRICS:
            raise ConfigError(
                f"--gate '{item}': unknown metric '{metric}'; one of {', '.join(METRICS)}"
            )
        if any(r.metric == metric for r in rules):
            raise ConfigError(f"--gate: '{metric}' is gated twice; give each metric once")
        rules.append(GateRule(metric, (1 if sign == "+" else -1) * float(value) / 100.0, item))
    return tuple(rules)


def _passes(metric: str, change: float, bound: float) -> bool:
    lower_better = METRICS[metric][1]
    return change <= bound if lower_better else change >= bound


def judge_gate(
    baseline: VerifyReport, candidate: VerifyReport, rules: tuple[GateRule, ...]
) -> GateReport:
    """Each engine benchmarked in both runs, every metric compared, the gated ones judged.

    The two runs must replay the same trace (by sha256): another workload is no A/B test.
    """
    a, b = baseline.trace_sha256, candidate.trace_sha256
    if a and b and a != b:
        raise VerifyError(
            f"the baseline and candidate folders were generated from different traces (sha256 "
            f"{a[:12]}…, {b[:12]}…): an A/B gate compares two runs of one workload"
        )
    base = {x.engine: x for x in baseline.benches}
    cand = {x.engine: x for x in candidate.benches}
    engines = tuple(e for e in base if e in cand)
    if not engines:
        raise VerifyError(
            "no serving benchmark has results in both folders (baseline: "
            f"{', '.join(base) or 'none'}; candidate: {', '.join(cand) or 'none'}): run the same "
            "engine's bench script in both and copy its results/ back"
        )
    gated = {r.metric: r for r in rules}
    verdicts = []
    for engine in engines:
        for metric, (key, _) in METRICS.items():
            x, y = base[engine].figures.get(key), cand[engine].figures.get(key)
            change = y / x - 1.0 if x and y is not None else None
            rule = gated.get(metric)
            passed = None
            if rule is not None:
                passed = change is not None and _passes(metric, change, rule.change)
            verdicts.append(
                GateVerdict(
                    engine, metric, x, y, change, None if rule is None else rule.text, passed
                )
            )
    return GateReport(baseline.plan, candidate.plan, engines, tuple(verdicts))


def _value(key: str, value: float | None) -> str:
    if key not in SUFFIX or value is None:
        return format_value(value, Unit.SECONDS if key not in SUFFIX else Unit.PER_S)
    return format_value(value, Unit.PER_S).replace("/s", f"{SUFFIX[key]}/s")


def measured_vs_replayed(label: str, bench: BenchResult) -> list[str]:
    """One run's benchmark: each metric measured, and what the replay gave for those requests."""
    lines = [f"  {label} {bench.engine} ({bench.path}): measured / replayed"]
    for metric, (key, _) in METRICS.items():
        got = bench.figures.get(key)
        want = None if bench.replayed is None else bench.replayed.get(key)
        lines.append(f"    {metric:<19} {_value(key, got):>12} / {_value(key, want)}")
    return lines


def render_gate(report: GateReport, baseline: VerifyReport, candidate: VerifyReport) -> str:
    """The comparison as terminal text: measured vs replayed per run, then each change."""
    failed = report.failed
    gated = [v for v in report.verdicts if v.passed is not None]
    head = (
        f"kvadvisor verify A/B: baseline '{report.baseline}' → candidate '{report.candidate}': "
        + (
            f"{len(failed)} of {len(gated)} gates failed"
            if failed
            else (f"every gate passes ({len(gated)})" if gated else "no --gate given")
        )
    )
    lines = [head]
    for engine in report.engines:
        for label, run in (("baseline", baseline), ("candidate", candidate)):
            bench = next(b for b in run.benches if b.engine == engine)
            lines += measured_vs_replayed(label, bench)
        lines.append(f"  {engine} change (candidate against baseline):")
        for v in (v for v in report.verdicts if v.engine == engine):
            key = METRICS[v.metric][0]
            signed = f"{100 * v.change:+.1f}%" if v.change is not None else ""  # exact: as --gate
            change = signed or "–"
            mark = {True: "ok  ", False: "FAIL", None: "    "}[v.passed]
            rule = f" (gate {v.rule})" if v.rule else ""
            lines.append(
                f"    {mark} {v.metric:<19} {_value(key, v.baseline)} → "
                f"{_value(key, v.candidate)}: {change}{rule}"
            )
    return "\n".join(lines) + "\n"


def gate_json(
    report: GateReport,
    baseline: dict[str, Any],
    candidate: dict[str, Any],
    generated_at: str,
    version: str,
) -> str:
    """The comparison as JSON: the verdicts and both runs' judged reports (keys sorted)."""
    doc = {
        "meta": {"format_version": 1, "kvadvisor_version": version, "generated_at": generated_at},
        "gate": asdict(report),
        "baseline": baseline,
        "candidate": candidate,
    }
    return json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n"
