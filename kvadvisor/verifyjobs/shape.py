"""The I/O a tier sees: chunk size from the engine, split by TP shard and KV layout, device unit.

Chunk tokens come from the review's own rule (``stage_chunk_tokens`` in
:mod:`kvadvisor.planreview.demand`: the plan's ``chunk_tokens``, LMCache ``chunk_size``, SGLang
``--page-size``, vLLM ``--block-size``) and KV bytes per token from the plan (DESIGN.md's
formula via :func:`kvadvisor.perfmodel.kv_size`).
What is new here is how one chunk becomes I/Os:

* **TP shard**: every rank stores its own heads' KV under its own key (LMCache keys carry the
  worker id; SGLang HiCache keys the rank), so a chunk is ``writers`` I/Os of
  ``chunk × bytes/token / writers``. With MLA the latent is the same on every rank and one rank
  writes it (SGLang ``hicache_design.md``; LMCache ``save_only_first_rank``, on for MLA).
* **Layout**: LMCache stores one object per chunk per rank, or one per layer with
  ``use_layerwise: true``; SGLang HiCache writes a page flat across layers from its default
  ``layer_first`` host layout (``get_data_page(flat=True)``) and K and V apart from
  ``page_first``/``page_first_direct`` (``get_page_buffer_meta``: one K and one V pointer per
  page, in ``python/sglang/srt/mem_cache/memory_pool_host.py``). Other engines: one I/O per block.
* **Device unit**: each I/O rounded up to the tier's ``io_unit_bytes`` (catalog), else 4 KiB,
  as the write-amplification figure in :mod:`kvadvisor.metrics.io` rounds them.
"""

from __future__ import annotations

from collections.abc import Mapping

from kvadvisor.catalog.storage import StorageSpec
from kvadvisor.engines import registry
from kvadvisor.metrics.io import DEFAULT_IO_UNIT_BYTES
from kvadvisor.plan.model import Plan, StagePlan, TierPlan
from kvadvisor.planreview.demand import stage_chunk_tokens
from kvadvisor.verifyjobs.model import IoShape


def _layout(stage: StagePlan, chunk_from: str, layers: int | None) -> tuple[str, int, str]:
    """(layout, pieces per chunk per rank, where it comes from)."""
    # The first configured engine whose settings say (Engine.io_shape, in its module).
    for e in registry.engines():
        if e.name in stage.engines and e.io_shape is not None:
            shape = e.io_shape(stage.engines, chunk_from, layers)
            if shape is not None:
                return shape
    return "contiguous", 1, "one I/O per chunk per rank (no layout setting known)"


def _writers(plan: Plan) -> tuple[int, str]:
    """Ranks that write distinct KV per instance, and why."""
    m = plan.model
    if m.spec is None:
        return m.tp, f"assumed split evenly over TP {m.tp} (no catalog model in the plan)"
    if m.spec.is_mla:
        return 1, "MLA: the latent is the same on every rank; one rank writes it"
    shards = min(m.tp, m.spec.kv_heads)
    if shards < m.tp:
        return shards, (
            f"{m.spec.kv_heads} KV heads over TP {m.tp}: {shards} distinct shards "
            "(the other ranks hold copies)"
        )
    return shards, f"TP {m.tp}: each rank writes its own KV heads"


def io_shape(
    plan: Plan,
    stage: StagePlan,
    tier: TierPlan,
    kv_bytes_per_token: float,
    spec: StorageSpec | None,
) -> IoShape:
    """How one tier's KV traffic becomes I/Os (pure)."""
    chunk, chunk_from = stage_chunk_tokens(stage)
    layers = plan.model.spec.layers if plan.model.spec is not None else None
    layout, pieces, layout_from = _layout(stage, chunk_from, layers)
    writers, writers_from = _writers(plan)
    # The plan's distinct KV per token (perfmodel.kv_size) over the ranks that write it.
    per_writer = kv_bytes_per_token / writers
    unit = spec.io_unit_bytes if spec is not None and spec.io_unit_bytes else None
    return IoShape(
        chunk_tokens=chunk,
        chunk_from=chunk_from,
        layout=layout,
        layout_from=layout_from,
        pieces_per_chunk=pieces,
        writers=writers,
        writers_from=writers_from,
        kv_bytes_per_io=chunk * per_writer / pieces,
        io_unit_bytes=unit or DEFAULT_IO_UNIT_BYTES,
        io_unit_from=(
            f"{spec.name} io_unit_bytes (catalog)"
            if unit
            else "4 KiB logical block (no io_unit_bytes in the catalog for this tier)"
        ),
    )


def gds_support(tier: TierPlan, specs: Mapping[str, StorageSpec]) -> tuple[bool, str]:
    """Whether the tier gets a GPUDirect Storage job variant, and why (catalog ``gds_support``)."""
    name = tier.storage.catalog_name
    if name is None:
        return False, (
            "inline storage spec: GPUDirect Storage support unknown (name a catalog entry with "
            "gds_support: true to get the libcufile variant)"
        )
    spec = specs.get(name)
    if spec is None or spec.gds_support is None:
        return False, f"the catalog does not say whether {name} has a GPUDirect Storage path"
    if not spec.gds_support:
        return False, f"the catalog says {name} has no GPUDirect Storage path"
    return True, f"{name}: gds_support in the catalog (NVIDIA GPUDirect Storage)"
