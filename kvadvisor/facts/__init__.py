"""Facts: the named numbers rules read, their registry and the functions that compute them."""

from kvadvisor.facts.doc import render_facts_doc
from kvadvisor.facts.registry import FACT_SPECS, FACTS, collect, fact
from kvadvisor.facts.workload import (
    WORKING_SET_HIT_SHARE,
    curve_points,
    div,
    hit_ratio_at,
    report_facts,
    working_set_tokens,
    workload_facts,
)

__all__ = [
    "FACTS",
    "FACT_SPECS",
    "WORKING_SET_HIT_SHARE",
    "collect",
    "curve_points",
    "div",
    "fact",
    "hit_ratio_at",
    "render_facts_doc",
    "report_facts",
    "working_set_tokens",
    "workload_facts",
]
