"""Coarsen fine block hashes to an engine's chunk size (refining coarse blocks is impossible)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa

from kvadvisor.errors import ConfigError
from kvadvisor.trace.arrays import BlockArrays
from kvadvisor.trace.model import Trace


def coarsen_blocks(
    blocks: BlockArrays,
    input_tokens: np.ndarray,
    chunk_tokens: int,
    *,
    save_unfull_chunk: bool = False,
) -> BlockArrays:
    """The block hashes regrouped into chunks of ``chunk_tokens`` tokens.

    Hashes are prefix-chained, so the hash of a chunk's last fine block identifies the chunk and
    everything before it: chunk i of a request takes the hash of fine block ``(i+1)·k − 1``
    (k = chunk_tokens / block_tokens). A chunk is full when the prompt reaches its end
    (``(i+1)·chunk_tokens <= input_tokens``). The partial last chunk is kept, under the hash of
    the request's last fine block, only with ``save_unfull_chunk`` (LMCache's option of that
    name; its default, False, drops it, so those tokens are always recomputed).
    """
    block_tokens = blocks.block_tokens
    # The chunk size reaches here from `analyze --chunk-tokens`; the messages name the option.
    if chunk_tokens <= 0:
        raise ConfigError(
            f"--chunk-tokens {chunk_tokens}: the chunk size must be a positive number of "
            f"tokens; give a multiple of the trace's {block_tokens}-token blocks"
        )
    if chunk_tokens < block_tokens:
        raise ConfigError(
            f"--chunk-tokens {chunk_tokens}: cannot refine the trace's {block_tokens}-token "
            f"blocks into {chunk_tokens}-token chunks: a block hash does not say which tokens "
            f"inside the block match; give a chunk size that is a multiple of {block_tokens}"
        )
    if chunk_tokens % block_tokens:
        raise ConfigError(
            f"--chunk-tokens {chunk_tokens}: chunk size {chunk_tokens} is not a multiple of the "
            f"trace's {block_tokens}-token blocks; give a multiple of {block_tokens}"
        )
    k = chunk_tokens // block_tokens
    if k == 1 and save_unfull_chunk:
        return blocks
    offsets, values = blocks.offsets, blocks.values
    counts = np.diff(offsets)
    inp = np.asarray(input_tokens).astype(np.int64)
    pos = np.arange(values.shape[0], dtype=np.int64) - np.repeat(offsets[:-1], counts)
    full_chunks = np.minimum(counts // k, inp // chunk_tokens)
    keep = ((pos + 1) % k == 0) & (pos + 1 <= np.repeat(full_chunks * k, counts))
    if save_unfull_chunk:
        has_tail = (counts > 0) & (inp > full_chunks * chunk_tokens)
        keep |= (pos == np.repeat(counts - 1, counts)) & np.repeat(has_tail, counts)
    kept_before = np.concatenate(([0], np.cumsum(keep, dtype=np.int64)))
    new_counts = kept_before[offsets[1:]] - kept_before[offsets[:-1]]
    new_offsets = np.concatenate(([0], np.cumsum(new_counts))).astype(np.int64)
    return BlockArrays(new_offsets, values[keep], chunk_tokens)


def coarsen_trace(trace: Trace, chunk_tokens: int, *, save_unfull_chunk: bool = False) -> Trace:
    """The trace with its block hashes regrouped by :func:`coarsen_blocks`, and a note saying so."""
    blocks = BlockArrays.of(trace)
    coarse = coarsen_blocks(
        blocks, trace.column_np("input_tokens"), chunk_tokens, save_unfull_chunk=save_unfull_chunk
    )
    if coarse is blocks:
        return trace
    hashes = pa.ListArray.from_arrays(
        pa.array(coarse.offsets.astype(np.int32)), pa.array(coarse.values, pa.int64())
    )
    table = trace.table
    table = table.set_column(table.column_names.index("block_hashes"), "block_hashes", hashes)
    tail = "kept (save_unfull_chunk)" if save_unfull_chunk else "dropped"
    note = (
        f"block hashes coarsened from {blocks.block_tokens}- to {chunk_tokens}-token chunks; "
        f"partial last chunks {tail}"
    )
    return dataclasses.replace(
        trace, table=table, block_tokens=chunk_tokens, notes=(*trace.notes, note)
    )
