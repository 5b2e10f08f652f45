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
from typing import Any

from kvadvisor.jitcache import ensure_cache_dir

__version__ = "0.1.0"

# Before any compiled kernel is defined: numba needs a writable cache directory for them.
ensure_cache_dir()

# Public name -> the module defining it (docs/api.md).
_EXPORTS = {
    "read_trace": "kvadvisor.trace",
    "convert": "kvadvisor.tracefiles",
    "describe": "kvadvisor.tracefiles",
    "synthesize": "kvadvisor.tracefiles",
    "SynthShape": "kvadvisor.synth",
    "TraceFormat": "kvadvisor.trace",
    "load_rules": "kvadvisor.references",
    "check_rules": "kvadvisor.references",
    "builtin_rules_dir": "kvadvisor.rules",
    "load_catalogs": "kvadvisor.references",
    "check_catalog": "kvadvisor.references",
    "Catalogs": "kvadvisor.references",
    "analyze": "kvadvisor.api",
    "review": "kvadvisor.api",
    "replay": "kvadvisor.api",
    "Replay": "kvadvisor.api",
    "verify": "kvadvisor.api",
    "verify_results": "kvadvisor.api",
    "verify_compare": "kvadvisor.api",
    "load_plan": "kvadvisor.api",
    "Report": "kvadvisor.api",
    "Review": "kvadvisor.api",
    "Verification": "kvadvisor.api",
    "Comparison": "kvadvisor.api",
    "AnalyzeOptions": "kvadvisor.pipeline",
    "Trace": "kvadvisor.trace",
    "Plan": "kvadvisor.plan",
    "KvAdvisorError": "kvadvisor.errors",
}

__all__ = ["__version__", *_EXPORTS]


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
