"""Terminal summary renderer (plain text)."""

from __future__ import annotations

from kvadvisor.advise.model import AdviceReport


class ConsoleRenderer:
    """Render a short plain-text summary."""

    name = "text"
    file_extension = ".txt"

    def render(self, report: AdviceReport) -> str:
        """Return the summary text."""
        t = report.trace
        lines = [
            f"kvadvisor {report.meta.kvadvisor_version}",
            f"trace      {t.path} ({t.format})",
            f"requests   {t.requests:,} over {t.duration_s:,.1f} s",
            f"tokens     {t.input_tokens_total:,} in, {t.output_tokens_total:,} out",
        ]
        lines.extend(f"note       {n}" for n in t.notes)
        lines.extend(f"dropped    {n:,} rows: {why}" for why, n in t.dropped.items())
        return "\n".join(lines) + "\n"
