"""Every prefix-cache measurement of a trace's arrays: the pass, routing, reuse, sharing, sizes.

The pipeline hands the request arrays (hashes included) down once; this runs the simulation
the report rests on and, when it is exact and small enough, the extras that need the same
hashes, and returns their results together for the report's section to read.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kvadvisor.cache.coarsen import coarsen_blocks
from kvadvisor.cache.model import STANDARD_CAPACITIES_TOKENS, PrefixCacheResult
from kvadvisor.cache.prefix import pass_block_ids
from kvadvisor.cache.reuse import ReuseTimes, reuse_times
from kvadvisor.cache.routing import RoutingComparison, compare_routing
from kvadvisor.cache.sharing import PrefixSharing, ReuseSplit, measure_sharing
from kvadvisor.cache.simulate import simulate_blocks
from kvadvisor.trace.arrays import BlockArrays, RequestArrays, SessionKeys

if TYPE_CHECKING:  # sampledextras imports this module: the annotation only
    from kvadvisor.cache.sampledextras import SampledExtras

# Engine chunk sizes compared when the trace's blocks are fine enough (LMCache's default is
# 256, vLLM/SGLang pages 16-64, Mooncake 512; research/field.md).
COMPARED_CHUNK_TOKENS = (64, 256, 512)
# Routing, reuse times and block sizes replay the trace again (routing once per instance) and
# reuse times hold about 60 bytes per block access; above this many accesses they are skipped.
EXTRAS_MAX_ACCESSES = 20_000_000


@dataclass(frozen=True)
class BlockSizeRatio:
    """The token hit ratio (all requests, steady state) with the hashes regrouped to a chunk."""

    chunk_tokens: int
    save_unfull_chunk: bool
    hit_ratio_all: float | None
    hit_ratio_steady: float | None


@dataclass(frozen=True, eq=False)
class PrefixMeasurements:
    """The prefix-cache results of one trace, for its report section and the stage profiler.

    ``arrays`` are the requests measured and ``blocks`` their hashes as simulated (regrouped to
    the engine chunk size when one was given: ``coarsened``). ``result`` is the pass at every
    capacity. The extras (``routing``, ``reuse``, ``sharing``, ``conversations``,
    ``block_sizes``) ran when ``extras`` is True: the pass is exact and has at most
    :data:`EXTRAS_MAX_ACCESSES` block accesses; ``routing`` needs more than one instance;
    ``sharing`` and ``conversations`` are None with ``tree_problem`` saying why when the hashes
    are not a prefix tree.
    """

    arrays: RequestArrays
    blocks: BlockArrays
    coarsened: bool
    result: PrefixCacheResult
    extras: bool
    routing: RoutingComparison | None = None
    reuse: ReuseTimes | None = None
    sharing: PrefixSharing | None = None
    conversations: ReuseSplit | None = None
    tree_problem: str | None = None
    block_sizes: tuple[BlockSizeRatio, ...] = ()
    # Routing, reuse times and block sizes estimated on a hash sample when ``extras`` is False.
    estimated: SampledExtras | None = None


def _block_sizes(
    arrays: RequestArrays,
    blocks: BlockArrays,
    warmup_fraction: float,
    save_unfull_chunk: bool,
    own_ratio: tuple[float | None, float | None] | None,
) -> tuple[BlockSizeRatio, ...]:
    """Hit ratio with the trace's own hashes ``blocks`` regrouped to each compared chunk size.

    ``own_ratio`` is the (all, steady) token hit ratio already simulated at the trace's own
    block size, which then is not simulated again.
    """
    block_tokens = blocks.block_tokens
    sizes = sorted(
        {block_tokens}
        | {c for c in COMPARED_CHUNK_TOKENS if c > block_tokens and c % block_tokens == 0}
    )
    points = []
    for chunk in sizes:
        save = save_unfull_chunk or chunk == block_tokens
        if chunk == block_tokens and own_ratio is not None:
            all_, steady = own_ratio
        else:
            coarse = coarsen_blocks(blocks, arrays.input_tokens, chunk, save_unfull_chunk=save)
            all_, steady = simulate_blocks(
                coarse, arrays.input_tokens, warmup_fraction=warmup_fraction
            ).token_hit_ratio
        points.append(BlockSizeRatio(chunk, save, all_, steady))
    return tuple(points)


def _sharing(
    arrays: RequestArrays,
    blocks: BlockArrays,
    result: PrefixCacheResult,
    sessions: SessionKeys | None,
) -> tuple[PrefixSharing | None, ReuseSplit | None, str | None]:
    """Shared prefixes and the conversation split, or why they cannot be told."""
    ids, bound = pass_block_ids(result, blocks.values)
    return measure_sharing(
        blocks.offsets,
        ids,
        bound,
        arrays.input_tokens,
        blocks.block_tokens,
        warmup_requests=result.warmup_requests,
        session=None if sessions is None else sessions.codes,
    )


def measure_prefix_cache(
    arrays: RequestArrays,
    *,
    warmup_fraction: float = 0.5,
    chunk_tokens: int | None = None,
    save_unfull_chunk: bool = False,
    sample_rate: float | None = None,
    instances: int = 8,
    routing_seed: int = 0,
    capacities_tokens: Sequence[int | None] = STANDARD_CAPACITIES_TOKENS,
) -> PrefixMeasurements | None:
    """The pass over ``arrays``' hashes and, when it is exact and small enough, its extras.

    The hashes are regrouped to ``chunk_tokens`` first when that differs from their block size.
    None when the trace has no hashes (prefix reuse unknown).
    """
    own = arrays.blocks
    if own is None:
        return None
    blocks = own
    if chunk_tokens is not None and chunk_tokens != own.block_tokens:
        blocks = coarsen_blocks(
            own, arrays.input_tokens, chunk_tokens, save_unfull_chunk=save_unfull_chunk
        )
    result = simulate_blocks(
        blocks, arrays.input_tokens, warmup_fraction=warmup_fraction, sample_rate=sample_rate
    )
    coarsened = blocks is not own
    extras = result.exact and result.curve.total_blocks_all <= EXTRAS_MAX_ACCESSES
    measured = PrefixMeasurements(arrays, blocks, coarsened, result, extras)
    if not extras and sample_rate is not None:
        return measured  # a sampled curve asked for: its extras are not estimated either
    if not extras:
        from kvadvisor.cache.sampledextras import estimate_in_memory

        estimated = estimate_in_memory(
            arrays,
            blocks,
            result,
            warmup_fraction=warmup_fraction,
            instances=instances,
            seed=routing_seed,
            save_unfull_chunk=save_unfull_chunk,
        )
        return replace(measured, estimated=estimated)
    return with_extras(
        measured,
        warmup_fraction=warmup_fraction,
        save_unfull_chunk=save_unfull_chunk,
        instances=instances,
        routing_seed=routing_seed,
        capacities_tokens=capacities_tokens,
    )


def with_extras(
    measured: PrefixMeasurements,
    *,
    warmup_fraction: float = 0.5,
    save_unfull_chunk: bool = False,
    instances: int = 8,
    routing_seed: int = 0,
    capacities_tokens: Sequence[int | None] = STANDARD_CAPACITIES_TOKENS,
) -> PrefixMeasurements:
    """``measured`` with its extras: routing, reuse times, shared prefixes, block sizes.

    ``measured.result`` must be the exact pass over ``measured.blocks`` (from
    :func:`measure_prefix_cache`, or a streamed trace's exact pass over the same hashes).
    """
    arrays, blocks, result = measured.arrays, measured.blocks, measured.result
    own = arrays.blocks
    assert own is not None and result.exact
    coarsened = measured.coarsened
    # Encoded once here: both threads below read them.
    sessions = arrays.sessions

    def single_threaded() -> tuple[
        tuple[PrefixSharing | None, ReuseSplit | None, str | None],
        ReuseTimes,
        tuple[BlockSizeRatio, ...],
    ]:
        return (
            _sharing(arrays, blocks, result, sessions),
            reuse_times(blocks, arrays.arrival_s, result),
            _block_sizes(
                arrays,
                own,
                warmup_fraction,
                save_unfull_chunk,
                # The pass is the trace at its own block size unless it was regrouped.
                own_ratio=None if coarsened else result.token_hit_ratio,
            ),
        )

    # The single-threaded extras run beside the routing replays (which use every core): the
    # kernels release the GIL, so on an idle machine the two overlap instead of queueing.
    with ThreadPoolExecutor(max_workers=1) as side:
        extras_done = side.submit(single_threaded)
        routing = (
            compare_routing(
                blocks,
                arrays.input_tokens,
                sessions=sessions,
                instances=instances,
                capacities_tokens=capacities_tokens,
                warmup_fraction=warmup_fraction,
                seed=routing_seed,
                pooled=result,
            )
            if instances > 1
            else None
        )
        (sharing, conversations, problem), reuse, block_sizes = extras_done.result()
    return replace(
        measured,
        extras=True,
        routing=routing,
        reuse=reuse,
        sharing=sharing,
        conversations=conversations,
        tree_problem=problem,
        block_sizes=block_sizes,
    )
