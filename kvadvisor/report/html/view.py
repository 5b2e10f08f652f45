"""The view the HTML template fills: plain dataclasses of already formatted values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from kvadvisor.report import summary
from kvadvisor.vocab import Stage


@dataclass(frozen=True)
class Chart:
    """One rendered chart: an id for the page, a caption, and the SVG markup."""

    key: str
    caption: str
    svg: Markup
    half: bool = False  # shown side by side with the next half-width chart


@dataclass(frozen=True)
class Table:
    """A small table of already formatted cells."""

    caption: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    note: str = ""
    # Columns of names kept on one line: a browser breaks "aws-fsx-lustre-..." at its hyphens
    # when a long column beside it (a source, a sentence) squeezes the table.
    whole: tuple[int, ...] = ()


@dataclass(frozen=True)
class Section:
    """One report section: a lead sentence, numbers, charts and tables, or why it is missing."""

    id: str
    title: str
    lead: str = ""
    rows: tuple[tuple[str, str], ...] = ()
    charts: tuple[Chart, ...] = ()
    tables: tuple[Table, ...] = ()
    missing: str | None = None
    notes: tuple[str, ...] = ()  # caveats the producing part attached
    # Evidence behind the answer: drawn closed (<details>), its summary line beside the title.
    collapsed: bool = False
    summary: str = ""
    # Figures a reader needs only to check the section: a closed <details> under its body.
    more_title: str = ""
    more_rows: tuple[tuple[str, str], ...] = ()
    more_tables: tuple[Table, ...] = ()
    more_notes: tuple[str, ...] = ()
    more_charts: tuple[Chart, ...] = ()


@dataclass(frozen=True)
class FindingView:
    """A finding as shown: severity class for styling, evidence as formatted pairs."""

    code: str
    severity: str
    severity_class: str
    stage: Stage
    message: str
    evidence: tuple[tuple[str, str], ...]
    name: str = ""
    summary: str = ""
    action: str = ""
    candidates: str = ""
    references: tuple[str, ...] = ()


@dataclass(frozen=True)
class VerdictCard:
    """One stage's recommendation card."""

    stage: Stage
    role: str  # what the stage does, in words
    needs: tuple[tuple[str, str], ...]  # measured demand of the stage
    items: tuple[tuple[str, str], ...]  # the recommended configuration (empty: none)
    notes: tuple[str, ...] = ()  # how the figures were derived, what was assumed (this stage only)


@dataclass(frozen=True)
class GlossaryEntry:
    """One term or abbreviation and what it means."""

    term: str
    meaning: str


@dataclass(frozen=True)
class HtmlView:
    """Everything the template shows, formatted; the template does no arithmetic."""

    title: str
    headline: str
    verdict_lines: tuple[str, ...]  # targets, what each KV tier is worth, the margin
    lead_number: summary.HeadlineNumber
    version: str
    generated_at: str
    cards: tuple[VerdictCard, ...]
    shared_notes: tuple[str, ...]  # how the figures were derived, the same for every stage
    answer_chart: Chart | None  # the cost/latency chart beside the verdict
    answer_chart_missing: str | None  # why there is none, said in its place
    verdict_missing: str | None
    key_numbers: tuple[summary.KeyNumber, ...]
    finding_counts: tuple[tuple[str, int], ...]
    sections: tuple[Section, ...]  # the answer's sections, open
    evidence: tuple[Section, ...]  # the evidence behind it, closed
    findings: tuple[FindingView, ...]
    top_findings: tuple[FindingView, ...]  # the most severe, shown with the verdict
    findings_missing: str | None
    rules: Section
    inputs: tuple[tuple[str, str], ...]
    notes: tuple[str, ...]
    glossary: tuple[GlossaryEntry, ...]
    report_data: dict[str, Any]
