"""The HTML renderer: fill the jinja2 template with the page view (autoescape on)."""

from __future__ import annotations

from jinja2 import Environment, PackageLoader, StrictUndefined

from kvadvisor.report.html.abbr import abbreviate
from kvadvisor.report.html.build import build_view
from kvadvisor.results.report import AdviceReport

_ENV = Environment(
    loader=PackageLoader("kvadvisor", "report/templates"),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)


class HtmlRenderer:
    """Render the self-contained HTML report."""

    name = "html"
    file_extension = ".html"

    def render(self, report: AdviceReport) -> str:
        """Return the page as one string."""
        page = _ENV.get_template("report.html.j2").render(view=build_view(report))
        return abbreviate(page)
