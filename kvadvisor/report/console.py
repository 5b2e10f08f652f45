"""Terminal summary renderer: rich tables that fit the width, wrap between words, colour severities.

Drawn with rich (typer's own dependency) into a string at a fixed width: tables size their
columns from their content and wrap cells at spaces, so a name is cut only when it alone is
wider than its column could ever be. Colour (severity, headings, the headline number) only
when asked: the CLI asks when stdout is a terminal and ``NO_COLOR`` is unset. Every string from
a trace, a rule or a catalog passes through :func:`kvadvisor.termtext.printable` and goes in as
plain text (never as rich markup), so it can neither inject terminal controls nor styling.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from kvadvisor.report import deployments, summary, tiervalue, verdictblock
from kvadvisor.results.report import AdviceReport
from kvadvisor.termtext import printable
from kvadvisor.units.format import plural
from kvadvisor.vocab import Severity

DEFAULT_WIDTH = 100
MIN_WIDTH = 40

# Severity -> rich style, when colour is on; also the order the findings table keeps.
SEVERITY_STYLES = {
    Severity.ERROR: "bold red",
    Severity.WARNING: "yellow",
    Severity.INFO: "cyan",
}
HEADING_STYLE = "bold"
HEADLINE_STYLE = "bold cyan"
_TRAILING = re.compile(r"\s+((?:\x1b\[[0-9;]*m)*)$")


def _text(value: str, style: str = "") -> Text:
    """Untrusted text as a rich Text: control characters escaped, never parsed as markup."""
    return Text(printable(value), style=style)


def _plain(cell: str | Text) -> str:
    return cell.plain if isinstance(cell, Text) else cell


def column_widths(columns: Sequence[Sequence[str]], avail: int) -> list[int]:
    """Widths for ``columns`` (their cells' text) within ``avail`` characters.

    Each starts at its widest cell; the widest column narrows one character at a time until
    they fit, never below its longest word while any column can still give way, so cells
    wrap between words. Only when no layout keeps every word whole are words cut.
    """
    widths = [max((len(c) for c in col), default=0) for col in columns]
    floors = [max((len(w) for c in col for w in c.split()), default=0) for col in columns]
    while sum(widths) > avail:
        can = [i for i, w in enumerate(widths) if w > floors[i]]
        if not can:
            floors = [1] * len(widths)  # every word cannot fit: cut the widest
            can = [i for i, w in enumerate(widths) if w > 1]
            if not can:
                break
        widest = max(can, key=lambda i: (widths[i], i))
        widths[widest] -= 1
    return widths


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str | Text]],
    width: int,
) -> Table:
    """A borderless table within ``width``: a rule under the headers, cells wrapped at words."""
    out = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        header_style=HEADING_STYLE,
        expand=False,
    )
    columns = list(zip(*([list(headers)] + [[_plain(c) for c in r] for r in rows]), strict=True))
    # Between two columns: one space of padding on each side and the (blank) divider.
    gaps = 3 * (len(headers) - 1)
    for header, w in zip(headers, column_widths(columns, width - gaps), strict=True):
        out.add_column(_text(header), overflow="fold", width=w)
    for row in rows:
        out.add_row(*(cell if isinstance(cell, Text) else _text(cell) for cell in row))
    return out


def column_groups(columns: Sequence[Sequence[str]], width: int) -> list[list[int]]:
    """The columns split into tables that fit ``width``, each led by the first (the name).

    A wide catalog squeezed into 80 columns cut its numbers mid-figure ("1,02" over "4"):
    instead the columns after the first go, in order, into as many tables as they need, each
    at the columns' natural widths; a column wider than a table alone could be still wraps.
    """
    natural = [max((len(c) for c in col), default=0) for col in columns]
    groups: list[list[int]] = []
    used = width + 1
    for i in range(1, len(columns)):
        if used + 3 + natural[i] > width and groups and len(groups[-1]) > 1:
            groups.append([0, i])
            used = natural[0] + 3 + natural[i]
        elif not groups:
            groups.append([0, i])
            used = natural[0] + 3 + natural[i]
        else:
            groups[-1].append(i)
            used += 3 + natural[i]
    return groups or [[0]]


def table_text(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int) -> str:
    """Rows as plain tables within ``width`` columns, no colour (see :func:`column_groups`)."""
    width = max(MIN_WIDTH, width)
    console = Console(
        file=io.StringIO(),
        width=width,
        color_system=None,
        no_color=True,
        highlight=False,
        emoji=False,
        markup=False,
        legacy_windows=False,
        _environ={},
    )
    columns = list(zip(*([list(headers)] + [list(r) for r in rows]), strict=True))
    for n, group in enumerate(column_groups(columns, width)):
        if n:
            console.print()
        console.print(
            table([headers[i] for i in group], [[r[i] for i in group] for r in rows], width)
        )
    text = console.file.getvalue()  # type: ignore[attr-defined]
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


class ConsoleRenderer:
    """Render the terminal summary: headline number, verdict per stage, key numbers, findings."""

    name = "text"
    file_extension = ".txt"

    def __init__(self, width: int | None = None, *, color: bool = False) -> None:
        """Lay out for ``width`` columns (default DEFAULT_WIDTH, at least MIN_WIDTH).

        ``color``: ANSI styles for severities and headings (the caller decides: a terminal,
        and no ``NO_COLOR``); off, the text has no escape sequence at all.
        """
        self.width = max(MIN_WIDTH, width or DEFAULT_WIDTH)
        self.color = color

    def _console(self) -> Console:
        return Console(
            file=io.StringIO(),
            width=self.width,
            force_terminal=self.color,
            color_system="standard" if self.color else None,
            no_color=not self.color,
            highlight=False,
            emoji=False,
            markup=False,
            legacy_windows=False,
            _environ={},  # the width and colour are ours to set, not COLUMNS' or NO_COLOR's
        )

    def _deployments(self, console: Console, report: AdviceReport) -> None:
        """Every provider's verdict; the primary one's stages, link, runners-up and notes."""
        vs = deployments.verdict_set(report)
        if vs is None:
            return
        w = self.width
        console.print()
        console.print(_text("Deployments", HEADING_STYLE))
        console.print(_text(deployments.slo_line(vs)))
        if vs.sample is not None:
            console.print(_text(deployments.sample_line(vs)))
        console.print()
        console.print(table(["provider", "verdict"], deployments.provider_pairs(vs), w))
        v = vs.primary_verdict
        if v is None or not v.chosen:
            console.print(_text(f"no primary verdict: {vs.primary_why}"))
            return
        console.print(_text(f"{v.provider} (primary: {vs.primary_why})", HEADING_STYLE))
        for s in v.stages:
            console.print()
            console.print(
                table([s.role, "configuration"], [list(r) for r in deployments.stage_rows(s)], w)
            )
            if worth := tiervalue.stage_rows(s):
                console.print()
                console.print(
                    table([s.role, "what the tier is worth"], [list(r) for r in worth], w)
                )
        if link := deployments.link_text(v):
            console.print(_text(link))
        if v.runners_up:
            console.print()
            console.print(_text("Runners-up", HEADING_STYLE))
            console.print(table(["candidate", "why it lost"], deployments.runner_pairs(v), w))
        for note in deployments.verdict_notes(v):
            console.print(_text(f"note: {note}"))

    def render(self, report: AdviceReport) -> str:
        """Return the summary text, every line at most ``width`` characters where words allow."""
        console = self._console()
        t = report.trace
        meta = report.meta
        # The answer first, in the terminal's first ten lines (what to buy, the tiers' worth,
        # the margin, the targets, what was assumed); what it was run on and the evidence next.
        heading, *block = verdictblock.block(report, self.width)
        console.print(_text(heading, HEADING_STYLE))
        for line in block:
            console.print(_text(line), overflow="ignore", crop=False)
        console.print()
        console.print(_text(f"kvadvisor {meta.kvadvisor_version} · {meta.generated_at}"))
        console.print(_text(f"trace: {t.path} ({t.format})"))
        console.print()
        lead = summary.headline_number(report)
        console.print(Text.assemble(_text(lead.value, HEADLINE_STYLE), " ", _text(lead.text)))
        verdicts = summary.verdicts(report)
        if verdicts:
            console.print()
            headers, rows = summary.verdict_table(verdicts)
            console.print(table(headers, rows, self.width))
        self._deployments(console, report)
        console.print()
        console.print(_text("Key numbers", HEADING_STYLE))
        console.print(
            table(
                ["", "value", "detail"],
                [[k.name, k.value, k.note] for k in summary.key_numbers(report)],
                self.width,
            )
        )
        findings = summary.sorted_findings(report)
        console.print()
        console.print(_text(f"Findings ({len(findings)})", HEADING_STYLE))
        if findings:
            console.print(
                table(
                    ["severity", "code", "stage", "message"],
                    [
                        [
                            _text(f.severity, SEVERITY_STYLES.get(f.severity, "")),
                            f.code,
                            f.stage,
                            f.message,
                        ]
                        for f in findings
                    ],
                    self.width,
                )
            )
        else:
            console.print(
                _text(
                    "none: no rule fired"
                    if report.recommendation
                    else summary.why_missing(report, "recommendation")
                )
            )
        extra = [f"note: {n}" for n in t.notes]
        extra += [f"dropped {plural(n, 'row')}: {why}" for why, n in sorted(t.dropped.items())]
        if extra:
            console.print()
            for line in extra:
                console.print(_text(line))
        text = console.file.getvalue()  # type: ignore[attr-defined]
        # rich pads table lines to their width; trailing blanks carry nothing (also when a
        # style's reset follows them).
        return "\n".join(_TRAILING.sub(r"\1", line) for line in text.splitlines()) + "\n"
