"""The terminal's verdict block: the answer in at most ten lines at the terminal's width.

What to buy per stage with its $/h and KV tiers, what each tier is worth, the margin on each
target, the targets and which default set them, and the model and GPU when they were assumed
(docs/reports.md, "Terminal summary"). Each item is a paragraph wrapped between words;
when the paragraphs would run past :data:`MAX_LINES`, the least needed ones are left out
whole (the Deployments section below says each of them in full), never cut mid-sentence.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from kvadvisor.report import fmt, margin, summary, tiervalue
from kvadvisor.report.deployments import money, target_name
from kvadvisor.results.report import AdviceReport
from kvadvisor.results.verdict import StageVerdict, TierValue, Verdict, VerdictSet
from kvadvisor.termtext import printable
from kvadvisor.units import Unit
from kvadvisor.vocab import Stage

MAX_LINES = 10
HEADING = "Verdict"


@dataclass(frozen=True)
class Item:
    """One paragraph of the block and how much it is needed (0: always kept; higher: less)."""

    text: str
    rank: int


def _tiers(s: StageVerdict) -> str:
    """A stage's KV tiers, the GPU pool first: "GPU memory + host-dram-ddr4 (2 TB each)".

    Each tier by what holds it, as its worth line names it (host memory: the instance's DRAM).
    """
    held_by = {t.tier: t.storage for t in s.tier_values}
    below = []
    for t in s.tiers:
        name = held_by.get(t.name, t.storage)
        if t.capacity_bytes is None:
            below.append(name)
            continue
        per = "pooled" if t.scope == "pooled" else "each"
        below.append(f"{name} ({fmt.size(t.capacity_bytes)} {per})")
    return " + ".join(["GPU memory", *below]) if below else "GPU memory only"


def _buy(vs: VerdictSet, v: Verdict) -> str:
    """What to buy: every stage's fleet and KV tiers, the provider and the $/h."""
    cost = money(v.usd_per_hour) if v.usd_per_hour is not None else "unpriced"
    if v.usd_per_hour is not None and v.price_kind not in ("", "on_demand"):
        cost += f" ({v.price_kind.replace('_', ' ')} rate)"
    if len(v.stages) == 1 and v.stages[0].role == Stage.SERVING:
        s = v.stages[0]
        return (
            f"Recommended: {s.instances} × {s.instance} on {v.provider}, {cost}, aggregated "
            f"(prefill and decode on the same instances); KV tiers: {_tiers(s)}"
        )
    parts = [f"{s.role} {s.instances} × {s.instance} (KV: {_tiers(s)})" for s in v.stages]
    return f"Recommended on {v.provider}, {cost}, {v.topology}: " + "; ".join(parts)


def _unbought(v: Verdict) -> str:
    """The line saying --storage X was not bought, when the fleet lacks the tier asked for."""
    note = next((n for n in v.notes if n.startswith("--storage ") and " was not bought" in n), "")
    asked = note.removeprefix("--storage ").split(" was not bought", 1)[0]
    return f"--storage {asked} not bought (the notes say why)" if note else ""


def _worth(role: Stage, t: TierValue) -> str:
    """What a tier is worth, as tiervalue.line says it, less the "(sample)" a line says once."""
    return tiervalue.line(role, t).removesuffix(" (sample)")


def _stresses(v: Verdict) -> str:
    """The stresses in a few words: held, or missed and what wins then (notes have the rest)."""
    r = v.robustness
    if r is None or not r.stresses:
        return ""
    if all(s.holds for s in r.stresses):
        return "holds at " + " and ".join(margin.stress_words(s) for s in r.stresses)
    lost = [s for s in r.stresses if not s.holds]
    alts = {s.alternative for s in lost if s.alternative}
    then = f" ({alts.pop()} wins then)" if len(alts) == 1 else " (the notes say what wins then)"
    held = [s for s in r.stresses if s.holds]
    kept = "holds at " + " and ".join(margin.stress_words(s) for s in held) + "; " if held else ""
    return kept + "misses at " + " and ".join(margin.stress_words(s) for s in lost) + then


def _margin(v: Verdict) -> str:
    """The margin line with the stresses in the block's few words."""
    return "" if v.robustness is None else margin.robustness_line(v.robustness, _stresses(v))


def _targets(vs: VerdictSet) -> str:
    # TTFT first, as --slo and the margin line name them.
    keys = sorted(vs.slo.targets, key=lambda k: (not k.startswith("ttft"), k))
    targets = ", ".join(
        f"{target_name(k)} {fmt.quantity(vs.slo.targets[k], Unit.SECONDS)}" for k in keys
    )
    return f"targets: {targets} ({vs.slo.rule or vs.slo.source})"


def _assumed(report: AdviceReport, chosen: bool) -> str:
    """The model and GPU the figures rest on when the user did not name them."""
    parts = []
    m = report.model
    if m is not None and m.assumed:
        parts.append(f"model: {m.display_name or m.name} (assumed; pass --model)")
    d = m.deployment if m is not None else None
    # A chosen deployment's GPU is its instance's; without one the stage figures rest on the
    # profiler's default GPU.
    if d is not None and d.gpu_assumed and not chosen:
        parts.append(f"GPU: {d.gpu_display_name or d.gpu} (assumed; pass --gpu)")
    return "; ".join(parts)


def items(report: AdviceReport) -> tuple[Item, ...]:
    """The block's paragraphs in reading order, each with how much it is needed."""
    rec = report.recommendation
    vs = rec.verdict if rec is not None else None
    v = vs.primary_verdict if vs is not None else None
    chosen = v is not None and v.chosen
    out: list[Item] = []
    if vs is not None and v is not None and chosen:
        out.append(Item(_buy(vs, v), 0))
        out.append(Item(_unbought(v), 1))
        worth = [_worth(s.role, t) for s in v.stages for t in s.tier_values]
        if worth:
            out += [Item(w, 1) for w in worth]
            out.append(Item("(each tier's worth replayed on the search's sample)", 4))
        out.append(Item(_margin(v), 0))
        out.append(Item(margin.idle_line(report) or "", 5))
    else:
        out.append(Item(summary.headline(report), 0))
    if vs is not None:
        out.append(Item(_targets(vs), 2))
    out.append(Item(_assumed(report, chosen), 0))
    return tuple(i for i in out if i.text)


MORE = "… (the rest under Deployments below)"


def wrap(text: str, width: int) -> list[str]:
    """A paragraph made safe for a terminal, then wrapped between words (a longer word is cut)."""
    return textwrap.wrap(printable(text), width, break_on_hyphens=False) or [""]


def block(report: AdviceReport, width: int, max_lines: int = MAX_LINES) -> tuple[str, ...]:
    """The heading and the paragraphs that fit in ``max_lines`` lines of ``width`` columns.

    Paragraphs are left out whole, the least needed first (the highest rank, the last of
    equals), until the rest fit. What still does not fit (a verdict's own sentence on a very
    narrow terminal) ends with a line saying where the rest is.
    """
    kept = list(items(report))
    while True:
        lines = [HEADING] + [line for i in kept for line in wrap(i.text, width)]
        droppable = [k for k, i in enumerate(kept) if i.rank > 0]
        if len(lines) <= max_lines:
            return tuple(lines)
        if not droppable:
            return (*lines[: max_lines - 1], *wrap(MORE, width)[:1])
        worst = max(droppable, key=lambda k: (kept[k].rank, k))
        del kept[worst]
