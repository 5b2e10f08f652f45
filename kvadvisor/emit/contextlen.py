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

VLLM_SOURCE = "vLLM vllm/config/model.py@0052a5b: max_model_len, hf_overrides"
SGLANG_SOURCE = "SGLang server_args.py: context_length, json_model_override_args"


def _why(ctx: EmitContext, source: str) -> str | None:
    check = ctx.report.context
    if check is None or check.served_context_tokens is None:
        return None
    limit = format_value(check.served_context_tokens, Unit.TOKENS)
    return (
        f"the longest request the verdict was replayed with: {limit}; {check.statement} ({source})"
    )


def context_flags(ctx: EmitContext, engine: str) -> list[Setting]:
    """The context-length flag (and the RoPE override when proposed) of ``engine``."""
    check = ctx.report.context
    source = VLLM_SOURCE if engine == "vllm" else SGLANG_SOURCE
    why = _why(ctx, source)
    if check is None or why is None:
        return []
    limit = str(check.served_context_tokens)
    if engine == "vllm":
        out = [Setting("max-model-len", limit, why)]
        if check.rope_scaling:
            out.append(
                Setting(
                    "hf-overrides",
                    json_compact({"rope_scaling": check.rope_scaling}),
                    f"the model card's RoPE scaling that serves {limit} tokens ({source})",
                )
            )
        return out
    out = [Setting("context-length", limit, why)]
    if check.rope_scaling:
        out.append(
            Setting(
                "json-model-override-args",
                json_compact({"rope_scaling": check.rope_scaling}),
                f"the model card's RoPE scaling that serves {limit} tokens ({source})",
            )
        )
    return out
