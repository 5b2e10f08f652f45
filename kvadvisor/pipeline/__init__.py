"""The pipelines: one entry per command that reads, measures and advises (`analyze`, `review`).

Each entry takes a trace (a path, a Trace, or a stream) and chooses how to read it: whole, or
streamed within a memory budget; `replay_plan` runs a trace through a plan's deployment.
"""

from kvadvisor.pipeline.analyze import analyze
from kvadvisor.pipeline.options import AnalyzeOptions
from kvadvisor.pipeline.replay import replay_plan
from kvadvisor.pipeline.review import review

__all__ = ["AnalyzeOptions", "analyze", "replay_plan", "review"]
