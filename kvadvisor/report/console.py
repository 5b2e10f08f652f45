"""Terminal summary renderer: plain text that fits the terminal's width (cells wrap)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from kvadvisor.report import summary
from kvadvisor.results.report import AdviceReport

DEFAULT_WIDTH = 100
MIN_WIDTH = 40
GAP = "  "
MIN_COLUMN = 6


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int) -> list[str]:
    """Lay out a table within ``width`` columns; cells wrap.

    Start from each column's natural width and narrow the widest column, one character at a
    time, until a row fits (no column below MIN_COLUMN).
    """
    cols = len(headers)
    widths = [max([len(headers[i])] + [len(r[i]) for r in rows]) for i in range(cols)]
    avail = width - len(GAP) * (cols - 1)
    while sum(widths) > avail and max(widths) > MIN_COLUMN:
        widest = max(range(cols), key=lambda i: (widths[i], i))
        widths[widest] -= 1
    lines = []
    for cells in [tuple(headers), *(tuple(r) for r in rows)]:
        wrapped = [
            textwrap.wrap(c, w, break_on_hyphens=False) or [""]
            for c, w in zip(cells, widths, strict=True)
        ]
        for k in range(max(len(w) for w in wrapped)):
            parts = [(w[k] if k < len(w) else "").ljust(widths[i]) for i, w in enumerate(wrapped)]
            lines.append(GAP.join(parts).rstrip())
        if cells == tuple(headers):
            lines.append(GAP.join("-" * w for w in widths))
    return lines


class ConsoleRenderer:
    """Render the terminal summary: verdict per stage, key numbers, findings."""

    name = "text"
    file_extension = ".txt"

    def __init__(self, width: int | None = None) -> None:
        """Lay out for ``width`` columns (default DEFAULT_WIDTH, at least MIN_WIDTH)."""
        self.width = max(MIN_WIDTH, width or DEFAULT_WIDTH)

    def _wrap(self, text: str, indent: str = "") -> list[str]:
        lines = textwrap.wrap(
            text,
            self.width,
            initial_indent=indent,
            subsequent_indent=indent,
            break_on_hyphens=False,
        )
        return lines or [indent.rstrip()]

    def render(self, report: AdviceReport) -> str:
        """Return the summary text, every line at most ``width`` characters where words allow."""
        t = report.trace
        w = self.width
        out = self._wrap(f"kvadvisor {report.meta.kvadvisor_version} · {report.meta.generated_at}")
        out += self._wrap(f"trace: {t.path} ({t.format})")
        lead = summary.headline_number(report)
        out += ["", *self._wrap(f"{lead.value} {lead.text}")]
        out += ["", "Verdict"]
        out += self._wrap(summary.headline(report), "  ")
        verdicts = summary.verdicts(report)
        if verdicts:
            out += ["", *table(*summary.verdict_table(verdicts), w)]
        out += ["", "Key numbers"]
        out += table(
            ["", "value", "detail"],
            [[k.name, k.value, k.note] for k in summary.key_numbers(report)],
            w,
        )
        findings = summary.sorted_findings(report)
        out += ["", f"Findings ({len(findings)})"]
        if findings:
            out += table(
                ["severity", "code", "stage", "message"],
                [[f.severity, f.code, f.stage, f.message] for f in findings],
                w,
            )
        else:
            out += self._wrap(
                "none: no rule fired"
                if report.recommendation
                else summary.why_missing(report, "recommendation"),
                "  ",
            )
        extra = [f"note: {n}" for n in t.notes]
        extra += [f"dropped {n:,} rows: {why}" for why, n in sorted(t.dropped.items())]
        if extra:
            out.append("")
            for line in extra:
                out += self._wrap(line)
        return "\n".join(out) + "\n"
