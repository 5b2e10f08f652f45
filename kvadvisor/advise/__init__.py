"""Assemble the advice report from a trace: measure, simulate, apply rules."""

from kvadvisor.advise.advisor import AdvisorOptions, advise
from kvadvisor.advise.analysis import AnalyzeOptions, analyze
from kvadvisor.advise.facts import FACTS, render_facts_doc
from kvadvisor.advise.inputs import AdvisorInputs, load_advisor_inputs, load_rule_set
from kvadvisor.advise.model import AdviceReport

__all__ = [
    "FACTS",
    "AdviceReport",
    "AdvisorInputs",
    "AdvisorOptions",
    "AnalyzeOptions",
    "advise",
    "analyze",
    "load_advisor_inputs",
    "load_rule_set",
    "render_facts_doc",
]
