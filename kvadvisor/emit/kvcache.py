"""The KV cache's dtype and page size, as each engine spells them.

The pool the verdict was replayed with was sized at the deployment's KV dtype (``--kv-dtype``),
so the engine must store KV at that dtype: FP8 halves the bytes per token, and an engine left at
its default would run BF16 KV with half the replayed pool. vLLM: ``--kv-cache-dtype`` (vllm/
config/cache.py ``CacheDType``: auto, bfloat16, fp8, fp8_e4m3, fp8_e5m2, fp8_inc, fp8_ds_mla;
``fp8`` is E4M3 on CUDA); SGLang: ``--kv-cache-dtype`` (python/sglang/srt/server_args.py: auto,
fp8_e5m2, fp8_e4m3, bf16, bfloat16, fp4_e2m1). FP16 KV is written ``auto`` (the model's dtype):
not every vLLM release lists float16.

The KV page is the engine's (engines/data/<engine>.yaml ``page``): vLLM's 16-token block for a
dense model, SGLang HiCache's 64-token page (one storage object per page), and for an MLA model
the page its MLA attention back-end fixes (FlashMLA 64; SGLang's TRT-LLM MLA 64, Cutlass MLA
128). The verdict was replayed at one page, so an engine that runs another is refused
(:func:`check_page`) rather than written with a page the replay never saw. The same holds for
preemption: every engine here preempts by recompute (engines/<engine>.py ``PREEMPTION``), so a
plan replayed with swap is refused (:func:`check_preemption`).
"""

from __future__ import annotations

from kvadvisor.emit.context import EmitContext
from kvadvisor.emit.text import Setting
from kvadvisor.engines import registry
from kvadvisor.errors import ConfigError
from kvadvisor.plan.model import StagePlan
from kvadvisor.units import Unit, format_value

VLLM_DTYPE_SOURCE = "vLLM vllm/config/cache.py CacheDType"
SGLANG_DTYPE_SOURCE = "SGLang python/sglang/srt/server_args.py kv_cache_dtype"
# The deployment's KV dtype -> each engine's value (FP16: the model's own dtype, see above).
_VALUES = {
    "vllm": {"fp8": "fp8", "bf16": "bfloat16", "fp16": "auto"},
    "sglang": {"fp8": "fp8_e4m3", "bf16": "bf16", "fp16": "auto"},
}


def kv_dtype_flag(ctx: EmitContext, engine: str) -> Setting:
    """``--kv-cache-dtype`` of ``engine`` ("vllm" or "sglang") for the deployment's KV dtype."""
    dtype = ctx.plan.model.kv_dtype.lower()
    value = _VALUES[engine].get(dtype, "auto")
    source = VLLM_DTYPE_SOURCE if engine == "vllm" else SGLANG_DTYPE_SOURCE
    per_token = ctx.facts.kv_bytes_per_token
    return Setting(
        "kv-cache-dtype",
        value,
        f"KV stored as {dtype}, the dtype the GPU pool was sized and replayed at "
        f"({format_value(per_token, Unit.BYTES_PER_TOKEN)} over the whole model)"
        + ("; auto is the model's own dtype" if value == "auto" else "")
        + f" ({source})",
    )


def kv_dtype_read(value: object) -> str | None:
    """The deployment KV dtype an engine's ``kv-cache-dtype`` value stores (None: ``auto``).

    Read from the engines' settings (``stores`` in engines/data/<engine>.yaml), the table the
    review's EL32 reads too.
    """
    for e in registry.engines():
        stores = (e.settings.get("settings", {}).get("kv-cache-dtype") or {}).get("stores", {})
        if str(value) in stores:
            return str(stores[str(value)])
    return None


def engine_page(ctx: EmitContext, engine: str, stage: StagePlan) -> registry.Page:
    """The KV page ``engine`` runs the deployment's model with on ``stage``'s GPU."""
    return registry.page_for(
        engine, ctx.facts.attention, None if stage.gpu is None else stage.gpu.architecture
    )


def check_page(ctx: EmitContext, engine: str) -> None:
    """Refuse ``engine`` when it runs another KV page than the verdict was replayed at.

    The page decides the pool in pages and which prefix hits count (a partial page is none),
    so the files would start a deployment the replay did not run. An engine that declares no
    page (one registered from outside) is not checked.
    """
    if not registry.engine(engine).page:
        return
    for stage in ctx.plan.stages:
        page = engine_page(ctx, engine, stage)
        replayed = stage.scheduler.page_tokens
        if replayed is not None and page.tokens != replayed:
            raise ConfigError(
                f"{registry.engine(engine).label or engine} runs {page.tokens}-token KV pages "
                f"on the {stage.stage} stage ({page.why}), and the verdict was replayed at "
                f"{replayed}-token pages, the page of the first --emit engine; give "
                f"--emit {engine} first (or alone) to replay the deployment it runs"
            )


def check_preemption(ctx: EmitContext, engine: str) -> None:
    """Refuse ``engine`` when it preempts otherwise than the verdict was replayed.

    Swap keeps a preempted request's KV in host memory and recompute drops it, so the two
    replays differ in prefill work and host memory. An engine that declares no preemption (one
    registered from outside) is not checked.
    """
    declared = registry.engine(engine).preemption
    if declared is None:
        return
    mode, why = declared
    for stage in ctx.plan.stages:
        preemption = stage.scheduler.preemption
        if preemption is not None and preemption != mode:
            raise ConfigError(
                f"{registry.engine(engine).label or engine} preempts by {mode} ({why}), and "
                f"the {stage.stage} stage was replayed with {preemption} preemption; "
                f"replay the plan with scheduler.preemption: {mode} to emit it"
            )
