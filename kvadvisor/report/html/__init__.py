"""HTML renderer: one self-contained page that explains the recommendation (no CDN, no scripts).

First :func:`build_view` turns the advice model into plain ``HtmlView`` dataclasses holding every
formatted value and chart (coverage.py's HtmlDataGeneration idiom); then the jinja2 template only
places them, with autoescape on. Charts are inline SVG from :mod:`kvadvisor.report.charts`.

One module per job: ``view`` (the dataclasses), ``chartviews`` (charts: the specs of
``report.chartspecs``, shared with ``Report.plot``, captioned as SVG), one module per section
group (``workload``, ``stages``, ``prefix``, ``iodemand``,
``advice``, ``plans``, ``inputs``), ``build`` (the whole page), ``renderer`` (the template) and
``abbr`` (each glossary term marked where the page first uses it).
"""

from kvadvisor.report.html.build import build_view
from kvadvisor.report.html.renderer import HtmlRenderer
from kvadvisor.report.html.view import HtmlView

__all__ = ["HtmlRenderer", "HtmlView", "build_view"]
