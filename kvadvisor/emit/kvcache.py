"""The KV cache's dtype and, for MLA models, its page size, as each engine spells them.

The pool the verdict was replayed with was sized at the deployment's KV dtype (``--kv-dtype``),
so the engine must store KV at that dtype: FP8 halves the bytes per token, and an engine left at
its default would run BF16 KV with half the replayed pool. vLLM: ``--kv-cache-dtype`` (vllm/
config/cache.py ``CacheDType``: auto, bfloat16, fp8, fp8_e4m3, fp8_e5m2, fp8_inc, fp8_ds_mla;
``fp8`` is E4M3 on CUDA); SGLang: ``--kv-cache-dtype`` (python/sglang/srt/server_args.py: auto,
fp8_e5m2, fp8_e4m3, bf16, bfloat16, fp4_e2m1). FP16 KV is written ``auto`` (the model's dtype):
not every vLLM release lists float16.

MLA models run on the MLA attention back-ends, whose kernels fix the page: vLLM's FlashMLA
takes 64-token blocks only (vllm/v1/attention/backends/mla/flashmla.py
``get_supported_kernel_block_sizes``: [64]); SGLang's FlashMLA back-end sets ``page_size`` 64
(server_args.py ``_handle_attention_backend_compatibility``: "FlashMLA only supports a page_size
of 64").
"""

from __future__ import annotations

from kvadvisor.emit.context import EmitContext
from kvadvisor.emit.text import Setting
from kvadvisor.engines import registry
from kvadvisor.units import Unit, format_value

VLLM_DTYPE_SOURCE = "vLLM vllm/config/cache.py CacheDType"
SGLANG_DTYPE_SOURCE = "SGLang python/sglang/srt/server_args.py kv_cache_dtype"
# The deployment's KV dtype -> each engine's value (FP16: the model's own dtype, see above).
_VALUES = {
    "vllm": {"fp8": "fp8", "bf16": "bfloat16", "fp16": "auto"},
    "sglang": {"fp8": "fp8_e4m3", "bf16": "bf16", "fp16": "auto"},
}
MLA_PAGE_TOKENS = 64  # FlashMLA, vLLM and SGLang alike (module docstring)
MLA_PAGE_SOURCE = {
    "vllm": "vLLM vllm/v1/attention/backends/mla/flashmla.py: FlashMLA takes 64-token blocks",
    "sglang": "SGLang server_args.py: FlashMLA only supports a page_size of 64",
}


def kv_dtype_flag(ctx: EmitContext, engine: str) -> Setting:
    """``--kv-cache-dtype`` of ``engine`` ("vllm" or "sglang") for the deployment's KV dtype."""
    dtype = ctx.dep.kv_dtype.lower()
    value = _VALUES[engine].get(dtype, "auto")
    source = VLLM_DTYPE_SOURCE if engine == "vllm" else SGLANG_DTYPE_SOURCE
    per_token = ctx.dep.kv_bytes_per_token
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


def mla_page(ctx: EmitContext) -> bool:
    """Whether the model is MLA, whose attention back-ends fix the page size."""
    return ctx.dep.attention == "mla"
