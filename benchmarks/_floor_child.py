"""The floor for `analyze`: read the parquet's hashes with pyarrow, flatten, run the bare kernel.

Nothing else: no validation, no report, no curve binning. Used by bench_floor.py as a child.
"""

from __future__ import annotations

import sys

import numpy as np
import pyarrow.parquet as pq

from kvadvisor.cache import stackdist
from kvadvisor.cache.prefix import dense_block_ids


def main(path: str) -> None:
    """Read, flatten, remap to dense ids when needed, and compute the prefix stack distances."""
    col = pq.read_table(path, columns=["block_hashes"])["block_hashes"].combine_chunks()
    offsets = col.offsets.to_numpy().astype(np.int64)
    values = col.values.to_numpy()
    ids, bound = dense_block_ids(values)
    stackdist.leading_distances(offsets, ids, bound)
    print(len(ids), int((ids >= 0).sum()))


if __name__ == "__main__":
    main(sys.argv[1])
