"""Step times from NVIDIA AIConfigurator's silicon database (the optional ``silicon`` extra).

With ``aiconfigurator-core`` installed (``pip install "kvadvisor[silicon]"``) and the model,
GPU and serving engine in its database, the step-time table is sampled from AIConfigurator's
kernel timings measured on the real GPU instead of the calibrated roofline. The estimator is
asked for whole forward passes only, once per grid point, so a replay never calls it per step:

* prefill attention per pair ``s_per_pair``: what the same new tokens cost more after a longer
  cached prefix (only their attention pairs grow), by least squares over chunks of 1k and 4k
  tokens after 4k and 16k cached ones;
* token part ``tokens_s(T)``: a prefill of ``T`` tokens, as the fewest prompts of at most 16k
  tokens, less their LM heads and their ``s_per_pair x pairs`` (the kernels' per-query cost and
  the prefill floor stay in it), sampled only on AIConfigurator's own measured grid: to 32k
  tokens (its vLLM GEMM tables stop at ``m`` = 32,768, its context-attention tables at
  16,384-token prompts). Past 32k its answers are its own extrapolation (a 64 x 4k pass
  predicted from a 256k-token prompt came out 1.9x AIC's time for it), so the table follows
  the roofline's token part there, scaled to meet the sampled value at 32k
  (``extend_with_roofline``; the source says so);
* LM head ``logits_s(L)``: the estimator's logits op for a batch of ``L``;
* decode attention: decode steps of ``B`` sequences at ``n`` tokens of context less the token
  part and head, fitted to ``s_kv KV_bytes + c``: ``s_kv`` per KV byte read, ``c`` the decode
  floor less the prefill floor the token part already carries (so a mixed step pays one floor).

Nothing here imports AIConfigurator until :func:`silicon_step_table` runs; the project works and
tests fully without it. :func:`sample_step_table` holds the sampling logic and takes any object
with the :class:`Estimator` methods (the tests pass a fake one).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from kvadvisor.perfmodel.perf import PerfModel
from kvadvisor.perfmodel.step import StepTable
from kvadvisor.units.format import count

MS_PER_S = 1e3
# Tokens per step sampled for the token part: 2 points per doubling, 1 to 32k, the end of
# AIC's measured GEMM grid (m up to 32,768 in systems/data/<gpu>/gemm/vllm/*/gemm_perf.parquet);
# prompts of at most 16k, the end of its context-attention grid (isl up to 16,384). Beyond,
# the roofline's shape to 1M (its own grid's end, 2 points per doubling), linear past that.
SILICON_TOKENS_GRID = np.unique(np.round(np.logspace(0, 15, 31, base=2.0)))
MAX_PROMPT_TOKENS = 16384
BEYOND_GRID = np.unique(np.round(np.logspace(15.5, 20, 10, base=2.0)))
SILICON_LOGITS_GRID = np.unique(np.r_[0.0, np.round(np.logspace(0, 12, 13, base=2.0))])
PREFIX_CHUNKS = np.array([1024.0, 4096.0])
PREFIXES = np.array([4096.0, 16384.0])
DECODE_BATCHES = np.array([1.0, 8.0, 32.0])
DECODE_CONTEXTS = np.array([512.0, 2048.0, 8192.0, 32768.0])
# kvadvisor GPU catalog name -> AIConfigurator system name.
AIC_SYSTEMS = {
    "h100-sxm": "h100_sxm",
    "h200": "h200_sxm",
    "b200": "b200_sxm",
    "a100-80gb": "a100_sxm",
    "l40s": "l40s",
}
# kvadvisor weight / KV dtype -> AIConfigurator's quant mode (aiconfigurator_core.sdk.common
# GEMMQuantMode, MoEQuantMode, KVCacheQuantMode). "fp8" is block-scaled (fp8_block),
# "fp8-tensor" per-tensor (fp8); 4-bit weight-only formats map to AIC's w4a16 modes and "fp4"
# to NVFP4 (its own FP4 kernels on Blackwell). A dtype missing here has no AIC mode.
GEMM_QUANT = {
    "bf16": "bfloat16",
    "fp8": "fp8_block",
    "fp8-tensor": "fp8",
    "int8": "int8_wo",
    "int4": "int4_wo",
    "fp4": "nvfp4",
}
MOE_QUANT = {
    "bf16": "bfloat16",
    "fp8": "fp8_block",
    "fp8-tensor": "fp8",
    "int4": "int4_wo",
    "mxfp4": "w4a16_mxfp4",
    "fp4": "nvfp4",
}
KV_QUANT = {"bf16": "bfloat16", "fp8": "fp8"}


class Estimator(Protocol):
    """What the sampler needs from a silicon estimator (times in ms)."""

    def prefill_ms(self, batch: int, isl: int, prefix: int) -> float:
        """One pass prefilling ``batch`` prompts of ``isl`` tokens, ``prefix`` cached, ms."""

    def decode_ms(self, batch: int, isl: int) -> float:
        """One decode step of ``batch`` sequences with ``isl`` tokens of context, ms."""

    def head_ms(self, batch: int) -> float:
        """The LM head (logits) for ``batch`` sequences, ms."""


def quant_modes(perf: PerfModel) -> tuple[dict[str, str], str | None]:
    """AIC's quant modes for the deployment's weights, experts and KV, or why there are none.

    Returns the estimator's keyword arguments and None, or ``({}, why)`` naming the dtype AIC
    has no mode for.
    """
    modes: dict[str, str] = {}
    wanted = [("gemm_quant_mode", GEMM_QUANT, perf.weight_dtype, "weight")]
    if perf.model.is_moe:
        wanted.append(("moe_quant_mode", MOE_QUANT, perf.expert_dtype, "expert weight"))
    wanted.append(("kvcache_quant_mode", KV_QUANT, perf.kv_dtype, "KV"))
    for key, table, dtype, what in wanted:
        if dtype not in table:
            return {}, f"AIConfigurator has no {what} quantization for {dtype}"
        modes[key] = table[dtype]
    return modes, None


def uncovered(modes: dict[str, str], supported: dict, is_moe: bool, is_mla: bool) -> str | None:
    """Which asked-for quant mode the database has no kernels for, or None when all are there.

    ``supported``: the database's ``supported_quant_mode`` (op family -> modes measured);
    KV dtypes are checked against generation attention (GQA; MLA has its own modules).
    """
    checks = [("gemm", "gemm_quant_mode", "GEMM")]
    if is_moe:
        checks.append(("moe", "moe_quant_mode", "MoE"))
    if not is_mla:
        checks.append(("generation_attention", "kvcache_quant_mode", "KV-cache attention"))
    for family, key, what in checks:
        have = [str(m) for m in (supported.get(family) or [])]
        if modes[key] not in have:
            return f"no {modes[key]} {what} kernels (measured: {', '.join(have) or 'none'})"
    return None


@dataclass(frozen=True)
class SiliconChoice:
    """Which step model produced the times, and why (the report prints both)."""

    perf: PerfModel
    step_model: str  # "silicon" | "roofline"
    reason: str


def extend_with_roofline(
    perf: PerfModel, grid: np.ndarray, tokens_s: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The sampled token part continued past its grid by the roofline's, scaled to meet it.

    ``tokens_s(T) = tokens_s(T_last) x roofline(T) / roofline(T_last)`` on ``BEYOND_GRID``:
    the roofline's large-step shape (compute-bound GEMMs, linear in ``T``) at the silicon
    table's level, instead of the last sampled segment's slope.
    """
    beyond = BEYOND_GRID[BEYOND_GRID > grid[-1]]
    roof = perf.tokens_s(np.r_[grid[-1], beyond])
    return np.r_[grid, beyond], np.r_[tokens_s, tokens_s[-1] * roof[1:] / roof[0]]


def sample_step_table(perf: PerfModel, est: Estimator, source: str) -> StepTable:
    """Sample ``est`` on grids into a step table shaped like ``perf``'s (module docstring)."""
    base = perf.step_table  # the roofline's pair counting (same attention shape)
    head = np.array([est.head_ms(int(n)) / MS_PER_S if n > 0 else 0.0 for n in SILICON_LOGITS_GRID])

    # Attention per pair: the same new tokens after a longer cached prefix add only pairs.
    rows, gains = [], []
    for m in PREFIX_CHUNKS:
        alone = est.prefill_ms(1, int(m), 0) / MS_PER_S
        for p in PREFIXES:
            extra = float(base.attention_pairs(m, p) - base.attention_pairs(m, 0.0))
            rows.append(extra)
            gains.append(est.prefill_ms(1, int(m + p), int(p)) / MS_PER_S - alone)
    x, y = np.asarray(rows), np.asarray(gains)
    s_pair = max(float(x @ y / (x @ x)), 0.0)  # least squares through the origin

    # Token part: T tokens as the fewest prompts of at most 16k, less their heads and their
    # attention pairs (the kernels' per-query cost and the prefill floor stay in it).
    grid = SILICON_TOKENS_GRID
    n = np.ceil(grid / MAX_PROMPT_TOKENS)
    isl = np.round(grid / n)
    passes = [
        est.prefill_ms(int(b), int(i), 0) - est.head_ms(int(b)) for b, i in zip(n, isl, strict=True)
    ]
    pairs = n * base.attention_pairs(isl, np.zeros_like(isl))
    tokens_s = np.array(passes) / MS_PER_S - s_pair * pairs

    # Decode attention: a decode step less its token part and head, against the KV it reads.
    b, ctx = (v.ravel() for v in np.meshgrid(DECODE_BATCHES, DECODE_CONTEXTS))
    kv = b * perf.kv_rank_bytes(ctx + 1.0)
    step = np.array([est.decode_ms(int(i), int(j)) / MS_PER_S for i, j in zip(b, ctx, strict=True)])
    heads = np.array([est.head_ms(int(i)) / MS_PER_S for i in b])
    rest = step - np.interp(b, grid, tokens_s) - heads
    s_kv, floor = np.linalg.lstsq(np.c_[kv, np.ones_like(kv)], rest, rcond=None)[0]
    full_grid, full_tokens_s = extend_with_roofline(perf, grid, tokens_s)
    return replace(
        base,
        source=f"{source}; steps past {count(grid[-1])} tokens follow the roofline's shape",
        tokens_grid=full_grid,
        tokens_s=full_tokens_s,
        logits_grid=SILICON_LOGITS_GRID,
        logits_s=head,
        s_per_pair=s_pair,
        decode_s_per_kv_byte=max(float(s_kv), 0.0),
        # The token part was sampled from prefills, so it carries the prefill attention floor;
        # a decode step's own floor enters as the difference (possibly negative).
        prefill_attention_fixed_s=0.0,
        decode_attention_fixed_s=float(floor),
    )


def _aic_model_path(perf: PerfModel, known: set[str]) -> str | None:
    """AIConfigurator's name for the model (one of its vendored configs), or None."""
    m = perf.model
    names = [*m.aliases, m.name]
    for name in names:
        for candidate in (
            name,
            name.replace("Llama-3", "Meta-Llama-3"),
            name.removesuffix("-Instruct"),
        ):
            if candidate in known:
                return candidate
    return None


class AicEstimator:
    """AIConfigurator's compiled engine for one deployment (``aiconfigurator_core.sdk``)."""

    def __init__(self, handle: object, head: dict[int, float]) -> None:
        self._handle = handle
        self._head = head

    @classmethod
    def build(
        cls, model_path: str, system: str, backend: str, perf: PerfModel, modes: dict[str, str]
    ) -> AicEstimator:
        """Compile the engine for the deployment (TP, EP for the experts, quant ``modes``)."""
        from aiconfigurator_core.sdk.engine import EngineHandle

        moe = {}
        if perf.model.is_moe:
            moe = {"moe_tp_size": perf.tp // perf.ep, "moe_ep_size": perf.ep}
        handle = EngineHandle.compile(model_path, system, backend, tp_size=perf.tp, **moe, **modes)
        return cls(handle, {})

    def prefill_ms(self, batch: int, isl: int, prefix: int) -> float:
        """AIC static prefill of ``batch`` prompts of ``isl`` tokens, ``prefix`` cached, ms."""
        return float(self._handle.predict_prefill_latency(batch, isl, prefix))

    def decode_ms(self, batch: int, isl: int) -> float:
        """AIC static decode step of ``batch`` sequences at ``isl`` tokens, ms."""
        return float(self._handle.predict_decode_latency(batch, isl, 2))

    def head_ms(self, batch: int) -> float:
        """AIC's logits op in the generation phase for ``batch`` sequences, ms."""
        if batch not in self._head:
            ops = self._handle.decode_step_per_op(batch, 1, 2)
            self._head[batch] = float(sum(op[1] for op in ops if "logits" in op[0]))
        return self._head[batch]


def silicon_step_table(perf: PerfModel, backend: str = "vllm") -> SiliconChoice:
    """``perf`` with AIConfigurator's step times when it can give them, else the roofline's.

    The reason names what was missing: the extra not installed, the GPU, the engine or the
    model not in its database, or kernels for the deployment's weight, expert or KV dtype
    (the estimator is asked for exactly those; it never times an FP8 model as BF16).
    """
    try:
        import aiconfigurator_core  # noqa: F401
        from aiconfigurator_core.sdk.common import DefaultHFModels
        from aiconfigurator_core.sdk.perf_database import (
            get_database,
            get_latest_database_version,
        )
    except ImportError:
        return SiliconChoice(perf, "roofline", "roofline: aiconfigurator-core not installed")
    system = AIC_SYSTEMS.get(perf.gpu.name)
    if system is None:
        why = f"roofline: {perf.gpu.name} is not in AIConfigurator's silicon database"
        return SiliconChoice(perf, "roofline", why)
    version = get_latest_database_version(system=system, backend=backend)
    if version is None:
        why = f"roofline: no {backend} data for {system} in AIConfigurator's database"
        return SiliconChoice(perf, "roofline", why)
    model_path = _aic_model_path(perf, set(DefaultHFModels))
    if model_path is None:
        why = f"roofline: {perf.model.display_name} is not among AIConfigurator's models"
        return SiliconChoice(perf, "roofline", why)
    modes, why = quant_modes(perf)
    if why is None:
        db = get_database(system, backend, version)
        supported = dict(getattr(db, "supported_quant_mode", None) or {})
        gap = uncovered(modes, supported, perf.model.is_moe, perf.model.is_mla)
        if gap is not None:
            why = f"AIConfigurator's {system} {backend} {version} data has {gap}"
    if why is not None:
        dtypes = f"weights {perf.weight_dtype}, KV {perf.kv_dtype}"
        if perf.model.is_moe:
            dtypes = f"weights {perf.weight_dtype}, experts {perf.expert_dtype}, KV {perf.kv_dtype}"
        return SiliconChoice(perf, "roofline", f"roofline (silicon table refused: {why}; {dtypes})")
    try:
        est = AicEstimator.build(model_path, system, backend, perf, modes)
        quant = "/".join(modes[k] for k in ("gemm_quant_mode", "moe_quant_mode") if k in modes)
        source = (
            f"silicon: aiconfigurator-core {system} {backend} {version}, {model_path} "
            f"({quant} weights, {modes['kvcache_quant_mode']} KV)"
        )
        table = sample_step_table(perf, est, source)
    except Exception as exc:
        why = f"roofline: AIConfigurator could not estimate it ({type(exc).__name__}: {exc})"
        return SiliconChoice(perf, "roofline", why[:300])
    return SiliconChoice(perf.with_step_table(table), "silicon", source)
