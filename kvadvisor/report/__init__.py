"""Renderers: each turns an AdviceReport into text in one format."""

from kvadvisor.report.registry import RENDERERS, get_renderer

__all__ = ["RENDERERS", "get_renderer"]
