"""The served context length, and the RoPE scaling when the analysis proposed it, per engine.

Read off the report's context check (kvadvisor/sections/context.py): the engines are told the
longest request the verdict was replayed with, so a request longer than that is refused by the
engine as it was left out (or scaled) by the analysis. vLLM: ``--max-model-len`` and the
``rope_scaling`` block through ``--hf-overrides`` (vllm/config/model.py@0052a5b ModelConfig
``max_model_len``, ``hf_overrides``); SGLang: ``--context-length`` and
``--json-model-override-args`` (python/sglang/srt/server_args.py ServerArgs).
"""

from __future__ import annotations

from kvadvisor.emit.context import EmitContext
from kvadvisor.emit.text import Setting, json_compact
from kvadvisor.units import Unit, format_value

# The launcher's flag for the served length, its flag for a config override, and their source.
FLAGS = {
    "vllm": (
        "max-model-len",
        "hf-overrides",
        "vLLM vllm/config/model.py@0052a5b: max_model_len, hf_overrides",
    ),
    "sglang": (
        "context-length",
        "json-model-override-args",
        "SGLang server_args.py: context_length, json_model_override_args",
    ),
}


def context_flags(ctx: EmitContext, launcher: str) -> list[Setting]:
    """The context-length flag (and the RoPE override when proposed) of ``launcher``."""
    check = ctx.report.context
    if check is None or check.served_context_tokens is None:
        return []
    length_flag, override_flag, source = FLAGS[launcher]
    limit = str(check.served_context_tokens)
    why = (
        "the longest request the verdict was replayed with: "
        f"{format_value(check.served_context_tokens, Unit.TOKENS)}; {check.statement} ({source})"
    )
    out = [Setting(length_flag, limit, why)]
    if check.rope_scaling:
        out.append(
            Setting(
                override_flag,
                json_compact({"rope_scaling": check.rope_scaling}),
                f"the model card's RoPE scaling that serves {limit} tokens ({source})",
            )
        )
    return out
