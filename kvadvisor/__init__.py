"""kvadvisor: measure LLM-serving traffic, then advise KV-cache storage per stage.

The public Python API (docs/api.md)::

    import kvadvisor

    trace = kvadvisor.read_trace("trace.jsonl")
    report = kvadvisor.analyze(trace, model="qwen3-32b", gpu="h200")
    html = report.to_html()
    review = kvadvisor.review(trace, ["plan.yaml"])
    fleet = kvadvisor.replay(trace, "plan.yaml", slo="ttft_p90=2s")

The names load on first use (PEP 562), so importing kvadvisor (and `kvadvisor --version`)
does not load the analysis.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from kvadvisor.jitcache import ensure_cache_dir

__version__ = "0.1.0"

# Before any compiled kernel is defined: numba needs a writable cache directory for them.
ensure_cache_dir()

# Public name -> the module defining it (docs/api.md).
_EXPORTS = {
    "read_trace": "kvadvisor.trace",
    "convert": "kvadvisor.api.tracefiles",
    "describe": "kvadvisor.api.tracefiles",
    "synthesize": "kvadvisor.api.tracefiles",
    "SynthShape": "kvadvisor.synth",
    "TraceFormat": "kvadvisor.trace",
    "load_rules": "kvadvisor.api.references",
    "check_rules": "kvadvisor.api.references",
    "builtin_rules_dir": "kvadvisor.rules",
    "load_catalogs": "kvadvisor.api.references",
    "check_catalog": "kvadvisor.api.references",
    "Catalogs": "kvadvisor.api.references",
    "Advisor": "kvadvisor.api.advisor",
    "default_advisor": "kvadvisor.api.advisor",
    "analyze": "kvadvisor.api.advisor",
    "review": "kvadvisor.api.advisor",
    "replay": "kvadvisor.api.advisor",
    "Replay": "kvadvisor.api.advisor",
    "verify": "kvadvisor.api.advisor",
    "verify_results": "kvadvisor.api.advisor",
    "verify_compare": "kvadvisor.api.advisor",
    "load_plan": "kvadvisor.api.advisor",
    "Report": "kvadvisor.api.advisor",
    "Review": "kvadvisor.api.advisor",
    "Verification": "kvadvisor.api.advisor",
    "Comparison": "kvadvisor.api.advisor",
    "AnalyzeOptions": "kvadvisor.pipeline",
    "Trace": "kvadvisor.trace",
    "Plan": "kvadvisor.plan",
    "KvAdvisorError": "kvadvisor.errors",
}

__all__ = ["__version__", *_EXPORTS]

if TYPE_CHECKING:  # what a type checker sees: each name with its type (never run)
    from kvadvisor.api.advisor import Advisor as Advisor
    from kvadvisor.api.advisor import Comparison as Comparison
    from kvadvisor.api.advisor import Replay as Replay
    from kvadvisor.api.advisor import Report as Report
    from kvadvisor.api.advisor import Review as Review
    from kvadvisor.api.advisor import Verification as Verification
    from kvadvisor.api.advisor import analyze as analyze
    from kvadvisor.api.advisor import default_advisor as default_advisor
    from kvadvisor.api.advisor import load_plan as load_plan
    from kvadvisor.api.advisor import replay as replay
    from kvadvisor.api.advisor import review as review
    from kvadvisor.api.advisor import verify as verify
    from kvadvisor.api.advisor import verify_compare as verify_compare
    from kvadvisor.api.advisor import verify_results as verify_results
    from kvadvisor.api.references import Catalogs as Catalogs
    from kvadvisor.api.references import check_catalog as check_catalog
    from kvadvisor.api.references import check_rules as check_rules
    from kvadvisor.api.references import load_catalogs as load_catalogs
    from kvadvisor.api.references import load_rules as load_rules
    from kvadvisor.api.tracefiles import convert as convert
    from kvadvisor.api.tracefiles import describe as describe
    from kvadvisor.api.tracefiles import synthesize as synthesize
    from kvadvisor.errors import KvAdvisorError as KvAdvisorError
    from kvadvisor.pipeline import AnalyzeOptions as AnalyzeOptions
    from kvadvisor.plan import Plan as Plan
    from kvadvisor.rules import builtin_rules_dir as builtin_rules_dir
    from kvadvisor.synth import SynthShape as SynthShape
    from kvadvisor.trace import Trace as Trace
    from kvadvisor.trace import TraceFormat as TraceFormat
    from kvadvisor.trace import read_trace as read_trace


def __getattr__(name: str) -> Any:
    """Load a public name from its module the first time it is used."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'kvadvisor' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    """The public names, loaded or not."""
    return sorted(set(globals()) | set(_EXPORTS))
