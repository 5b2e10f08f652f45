"""The verify report as terminal text and as JSON; the measured catalog as YAML."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import yaml

from kvadvisor.units import Unit, format_value, plural
from kvadvisor.verifyjobs.model import VerifyReport
from kvadvisor.verifyjobs.results import review_checks
from kvadvisor.vocab import CheckStatus, Severity

FORMAT_VERSION = 1  # of the JSON report; 1: first version


def _pct(value: float | None) -> str:
    return "–" if value is None else format_value(value, Unit.RATIO)


def _calibration(cal: dict[str, Any]) -> str:
    def err(key: str) -> str:
        return _pct((cal.get(key) or {}).get("mape"))

    # Through the replay the fitted quantities are TTFT and TPOT (queueing included).
    replay = cal.get("method") == "replay"
    first, second = ("TTFT", "TPOT") if replay else ("prefill", "decode step")
    how = " through the replay" if replay else ""
    return (
        f"calibrated on {plural(cal['fit_rows'], 'request')}{how}, held-out error (MAPE) before → "
        f"after: {first} {err('prefill_heldout_prior')} → {err('prefill_heldout')}, {second} "
        f"{err('decode_step_heldout_prior')} → {err('decode_step_heldout')} "
        f"({plural(cal['heldout_rows'], 'held-out request')})"
    )


def _against_replay(measured: dict[str, Any], replayed: dict[str, Any]) -> str:
    """TTFT, TPOT p99 and throughput measured against the replay of the same requests."""

    def pair(key: str, unit: Unit) -> str:
        return f"{format_value(measured.get(key), unit)} / {format_value(replayed.get(key), unit)}"

    return (
        f"measured / replayed: TTFT p99 {pair('ttft_p99_s', Unit.SECONDS)}, TPOT p99 "
        f"{pair('tpot_p99_s', Unit.SECONDS)}, output tokens "
        f"{pair('output_tokens_per_s', Unit.PER_S)}"
    )


def render_text(report: VerifyReport, catalog_path: str | None = None) -> str:
    """The terminal summary: one line per check, then the catalog written."""
    checks = review_checks(report)
    failed = [c for c in checks if c.status is CheckStatus.FAIL]
    head = (
        f"kvadvisor verify --results: plan '{report.plan}', job set {report.job_set_id}: "
        + (f"{len(failed)} failed" if failed else "every measured check passes")
        + f" ({sum(c.status is not CheckStatus.SKIP for c in checks)} checks, "
        f"{sum(c.status is CheckStatus.SKIP for c in checks)} without results)"
    )
    lines = [head]
    for c in checks:
        marks = {CheckStatus.PASS: "ok  ", CheckStatus.SKIP: "skip"}
        mark = marks.get(c.status, str(c.severity)[:4])
        if c.severity is Severity.INFO:
            mark = "meas"
        lines.append(f"  {mark} {c.code} {c.stage} {c.message}")
    for b in report.benches:
        if b.replayed is not None:
            lines.append(f"       {b.engine}: {_against_replay(b.figures, b.replayed)}")
        if b.calibration is not None:
            lines.append(f"       {b.engine}: {_calibration(b.calibration)}")
        if b.input_tokens_ratio is not None:
            share = format_value(b.input_tokens_ratio, Unit.RATIO)
            lines.append(
                f"       {b.engine}: input tokens {share} of the replayed dataset's (the "
                "engine's tokenizer against the trace's counts)"
            )
    if report.catalog is not None:
        names = ", ".join(report.catalog["entries"])
        where = f"written to {catalog_path}" if catalog_path else "not written"
        lines.append(f"measured catalog ({names}): {where}; use it with --catalog")
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines) + "\n"


def render_json(report: VerifyReport, generated_at: str, version: str) -> str:
    """Every verdict with its figures (keys sorted; seconds and bytes per second)."""
    doc = {
        "meta": {
            "format_version": FORMAT_VERSION,
            "kvadvisor_version": version,
            "generated_at": generated_at,
        },
        **asdict(report),
        "checks": [asdict(c) for c in review_checks(report)],
    }
    return json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n"


def render_catalog(catalog: dict[str, Any]) -> str:
    """The measured storage catalog as YAML (loadable with ``--catalog``)."""
    head = (
        "# Measured storage figures, written by `kvadvisor verify --results`. Use it with\n"
        "# `kvadvisor analyze|review ... --catalog THIS_FILE`: entries named like the catalog\n"
        "# entries the plan uses replace them.\n"
    )
    return head + yaml.safe_dump(catalog, sort_keys=False, allow_unicode=True, width=100)
