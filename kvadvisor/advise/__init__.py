"""Assemble the advice report from a trace: measure, simulate, apply rules."""

from kvadvisor.advise.analysis import AnalyzeOptions, analyze
from kvadvisor.advise.model import AdviceReport

__all__ = ["AdviceReport", "AnalyzeOptions", "analyze"]
