"""Compiled kernel for reuse times on a spatial hash sample (imported only when one is estimated).

The sampled twin of :func:`kvadvisor.cache.reusekernels.reuse_hits`: the sub-stream holds only
the sampled blocks of each request, each with its own tokens (its position in the request is
gone), so the tokens come with the accesses instead of from the position.
"""

from __future__ import annotations

import numba as nb

from kvadvisor.cache.stackdist import COLD
from kvadvisor.firstuse import watch_numba_compiles

watch_numba_compiles()


@nb.njit(cache=True, nogil=True)
def sampled_reuse_hits(
    offsets, ids, dist, arrival_s, tok, last_req, gap_s, lead_s, tokens, where
):  # pragma: no cover - compiled
    """Each sampled hit's gap, running-max gap, tokens and access index; return how many.

    Group g (``offsets[g]:offsets[g+1]``) is one request's sampled accesses, arriving at
    ``arrival_s[g]``. A hit is an access whose leading distance on the sub-stream is finite;
    its gap is the seconds since the last group that used the block, ``lead_s`` the running
    maximum of the gaps within the group (the leading run a TTL cache keeps). ``last_req``
    (int32 per dense id, filled with -1) is scratch.
    """
    k = 0
    for g in range(offsets.shape[0] - 1):
        running = 0.0
        for t in range(offsets[g], offsets[g + 1]):
            p = last_req[ids[t]]
            if p >= 0 and dist[t] != COLD:
                x = arrival_s[g] - arrival_s[p]
                if x > running:
                    running = x
                gap_s[k] = x
                lead_s[k] = running
                tokens[k] = tok[t]
                where[k] = t
                k += 1
        for t in range(offsets[g], offsets[g + 1]):
            last_req[ids[t]] = g
    return k
