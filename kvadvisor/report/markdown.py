"""Markdown renderer: a pull-request comment with the verdict, findings table and key numbers."""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

from kvadvisor.report import deployments, fmt, summary, tiervalue
from kvadvisor.results.report import AdviceReport


def cell(text: str) -> str:
    """Text safe inside a GitHub table cell.

    HTML is escaped (raw HTML renders there), pipes and newlines are neutralised, and
    Markdown emphasis and link characters are taken literally.
    """
    text = html.escape(text, quote=False)
    for ch in "\\`*_[]|":
        text = text.replace(ch, "\\" + ch)
    return " ".join(text.split())


def code_span(text: str) -> str:
    """``text`` as an inline code span that no character in it can end (CommonMark 6.1).

    The fence is one backtick longer than the longest run inside, padded with a space when
    the text starts or ends with a backtick; inside a code span HTML is shown as written, so
    only the table cell delimiter (``|``) and line breaks need neutralising.
    """
    text = " ".join(text.split()).replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A GitHub-flavoured Markdown table."""
    lines = ["| " + " | ".join(cell(h) for h in headers) + " |"]
    lines.append("|" + "|".join("---" for _ in headers) + "|")
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return lines


class MarkdownRenderer:
    """Render a report short enough for a pull-request comment."""

    name = "markdown"
    file_extension = ".md"

    def _deployments(self, report: AdviceReport) -> list[str]:
        vs = deployments.verdict_set(report)
        if vs is None:
            return []
        out = ["### Deployments", "", cell(deployments.slo_line(vs)), ""]
        if vs.sample is not None:
            out += [cell(deployments.sample_line(vs)), ""]
        out += md_table(*deployments.provider_rows(vs)) + [""]
        v = vs.primary_verdict
        if v is None or not v.chosen:
            return out + [cell(f"No primary verdict: {vs.primary_why}"), ""]
        out += [f"#### {cell(v.provider)} ({cell(vs.primary_why)})", ""]
        for s in v.stages:
            out += md_table([s.role, ""], [list(r) for r in deployments.stage_rows(s)]) + [""]
            if worth := tiervalue.stage_rows(s):
                out += md_table([s.role, "what the tier is worth"], [list(r) for r in worth])
                out += [""]
        if link := deployments.link_text(v):
            out += [cell(link), ""]
        if v.runners_up:
            out += ["Runners-up:", ""] + md_table(*deployments.runner_rows(v)) + [""]
        out += [f"- {cell(n)}" for n in deployments.verdict_notes(v)]
        return out + [""]

    def render(self, report: AdviceReport) -> str:
        """Return the Markdown text."""
        t = report.trace
        lead = summary.headline_number(report)
        out = [f"## kvadvisor: {cell(summary.headline(report))}", ""]
        out += [f"- {cell(line)}" for line in summary.verdict_lines(report)]
        out += [""] if summary.verdict_lines(report) else []
        out += [f"**{cell(lead.value)}** {cell(lead.text)}", ""]
        verdicts = summary.verdicts(report)
        if verdicts:
            out += md_table(*summary.verdict_table(verdicts)) + [""]
        out += self._deployments(report)
        findings = summary.sorted_findings(report)
        out += [f"### Findings ({len(findings)})", ""]
        if findings:
            out += md_table(
                ["severity", "code", "stage", "message"],
                [[f.severity, f.code, f.stage, f.message] for f in findings],
            )
        elif report.recommendation is None:
            out.append(cell(summary.why_missing(report, "recommendation")))
        else:
            out.append("No rule fired.")
        out += ["", "### Key numbers", ""]
        out += md_table(
            ["", "value", "detail"],
            [[k.name, k.value, k.note] for k in summary.key_numbers(report)],
        )
        out += [
            "",
            f"<sub>trace {cell(t.path)} ({cell(t.format)}"
            + (f", sha256 {cell(t.sha256[:12])}" if t.sha256 else "")
            + f"); kvadvisor {cell(report.meta.kvadvisor_version)}, "
            f"{cell(report.meta.generated_at)}</sub>",
        ]
        if t.dropped:
            dropped = ", ".join(f"{fmt.count(n)} {why}" for why, n in sorted(t.dropped.items()))
            out += ["", f"Rows dropped: {cell(dropped)}."]
        return "\n".join(out) + "\n"
