"""The prefix-cache section: hit-ratio curve, tiers, reuse times, routing, chunk sizes."""

from __future__ import annotations

from kvadvisor.report import fmt, summary
from kvadvisor.report.chartspecs import binary_compact
from kvadvisor.report.html.chartviews import mrc_chart, reuse_chart
from kvadvisor.report.html.view import Section, Table
from kvadvisor.results.report import (
    AdviceReport,
    BlockSizePoint,
    CacheReuse,
    CacheRouting,
    CacheSharing,
    CacheTiers,
    ConversationReuse,
    PrefixCache,
)
from kvadvisor.vocab import CacheStatus


def prefix_section(report: AdviceReport) -> Section:
    """The hit-ratio curve, hits per tier, reuse times, routing and block size."""
    pc = report.prefix_cache
    if pc is None:
        return Section(
            "prefix", "Prefix cache", missing=summary.why_missing(report, "prefix_cache")
        )
    if pc.status == CacheStatus.UNKNOWN:
        return Section(
            "prefix",
            "Prefix cache",
            missing=f"{fmt.NOT_MEASURED}: {pc.note or 'prefix reuse is unknown for this trace'}",
        )
    lead = (
        f"With an unbounded cache {fmt.percent(pc.hit_ratio.all)} of prompt tokens could be "
        f"loaded instead of recomputed ({fmt.percent(pc.hit_ratio.steady)} after warm-up). "
        "Read less first: capacity that lifts this ratio pays before faster storage does."
    )
    charts = [c for c in (mrc_chart(pc),) if c is not None]
    tables = [_mrc_table(pc)]
    if pc.tiers is not None:
        tables.append(_tiers_table(pc.tiers))
    if pc.reuse is not None:
        chart = reuse_chart(pc.reuse)
        if chart is not None:
            charts.append(chart)
        tables.append(_ttl_table(pc.reuse))
    if pc.routing is not None and pc.routing.policies:
        tables.append(_routing_table(pc.routing))
    if pc.conversations is not None:
        tables.append(_conversations_table(pc.conversations))
    if pc.sharing is not None:
        tables += _sharing_tables(pc.sharing)
    if pc.block_sizes:
        tables.append(_block_sizes_table(pc.block_sizes))
    return Section(
        "prefix",
        "Prefix cache",
        lead,
        _summary_rows(pc),
        tuple(charts),
        tuple(tables),
    )


def _summary_rows(pc: PrefixCache) -> tuple[tuple[str, str], ...]:
    """The headline rows: hit ratios, warm-up, curve status, block size and sampling."""
    rows = [
        ("token hit ratio, all requests", fmt.percent(pc.hit_ratio.all)),
        ("token hit ratio, steady state", fmt.percent(pc.hit_ratio.steady)),
        ("warm-up (share of requests)", fmt.percent(pc.warmup_fraction)),
        ("curve", pc.status + (f" ({pc.note})" if pc.note else "")),
    ]
    if pc.block_tokens:
        rows.append(("block size simulated", fmt.tokens(pc.block_tokens)))
    if pc.block_hit_ratio is not None:
        rows.append(("block hit ratio, all requests", fmt.percent(pc.block_hit_ratio.all)))
    if pc.sampling is not None:
        smp = pc.sampling
        rows += [
            # The rate as --cache-sample-rate and the streaming notes write it (0.0023, not
            # 0.2%): SHARDS rates are mostly below 1%, where a percentage keeps one digit.
            ("sampling rate (SHARDS)", fmt.number(smp.rate)),
            (
                "sampled block accesses",
                f"{fmt.count(smp.sampled_accesses)} of {fmt.count(smp.total_accesses)}",
            ),
            (f"estimated error ({smp.error_method})", fmt.percent(smp.error_estimate)),
        ]
    for extra in pc.extras_sampling:
        # Estimated on a hash sample (a streamed trace whose rows do not fit): rate and error.
        error = (
            "not estimable" if extra.error_estimate is None else fmt.number(extra.error_estimate)
        )
        rows.append(
            (
                f"{extra.extra.replace('_', ' ')}: estimated at rate "
                f"{fmt.number(extra.rate)}, standard error ({extra.error_unit})",
                error,
            )
        )
    return tuple(rows)


def _mrc_table(pc: PrefixCache) -> Table:
    """The hit-ratio curve as a table: one row a simulated capacity."""
    return Table(
        "Hit ratio at each capacity",
        ("capacity", "all requests", "steady state"),
        tuple(
            (
                f"{binary_compact(p.capacity_tokens)} tokens"
                if p.capacity_tokens is not None
                else "unbounded",
                fmt.percent(p.hit_ratio_all),
                fmt.percent(p.hit_ratio_steady),
            )
            for p in pc.mrc
        ),
    )


def _tiers_table(t: CacheTiers) -> Table:
    """Hits per tier of the inclusive hierarchy, with the recomputed misses last."""
    return Table(
        "Hits per tier (inclusive hierarchy, fastest first)",
        ("tier", "capacity", "share of prompt tokens, all", "steady state", "hit KV"),
        tuple(
            (
                lv.name,
                fmt.tokens(lv.effective_capacity_tokens or lv.capacity_tokens),
                fmt.percent(lv.share_all),
                fmt.percent(lv.share_steady),
                fmt.size(lv.hit_bytes_all) if lv.hit_bytes_all is not None else "",
            )
            for lv in t.levels
        )
        + (
            (
                "miss (recomputed)",
                "",
                fmt.percent(t.miss_share_all),
                fmt.percent(t.miss_share_steady),
                "",
            ),
        ),
        whole=(0,),
    )


def _ttl_table(reuse: CacheReuse) -> Table:
    """The retention each share of hits needs, against the LRU capacity for the same hits."""
    return Table(
        "Retention (TTL) that keeps a share of the hits, and the capacity it needs",
        ("share of hits kept", "TTL", "capacity with TTL", "LRU capacity, same hits"),
        tuple(
            (
                fmt.percent(tp.share),
                fmt.duration(tp.ttl_s),
                fmt.tokens(tp.capacity_tokens),
                fmt.tokens(tp.lru_capacity_tokens),
            )
            for tp in reuse.ttl
        ),
    )


def _routing_table(r: CacheRouting) -> Table:
    """Per-instance hit ratios by routing policy; a policy that could not run says why."""
    caps = [p.capacity_tokens_per_instance for p in r.policies[0].points]
    return Table(
        f"Hit ratio (all requests) with {r.instances} instances: per-instance caches "
        "by routing policy, by capacity per instance",
        ("policy", *(f"{binary_compact(c)}" if c else "unbounded" for c in caps)),
        tuple(
            (pol.policy, *(fmt.percent(p.hit_ratio_all) for p in pol.points))
            if pol.unavailable is None
            else (pol.policy, *("n/a" for _ in caps))
            for pol in r.policies
        ),
        note="; ".join(
            f"{p.policy}: {fmt.NOT_MEASURED}, {p.unavailable}"
            for p in r.policies
            if p.unavailable is not None
        ),
    )


def _conversations_table(c: ConversationReuse) -> Table:
    """Reuse within a conversation against reuse across conversations."""
    return Table(
        "Where the reuse comes from: the same conversation or another one "
        f"({fmt.count(c.conversations)} conversations, "
        f"{summary.BASIS_WORDS.get(c.basis, c.basis)})",
        ("prefix held before by", "share of prompt tokens, all", "steady state"),
        (
            (
                "the same conversation",
                fmt.percent(c.within_share_all),
                fmt.percent(c.within_share_steady),
            ),
            (
                "another conversation",
                fmt.percent(c.across_share_all),
                fmt.percent(c.across_share_steady),
            ),
        ),
        note=(
            "Reuse within a conversation is reachable by routing a session to the "
            "instance that holds it; reuse across conversations needs a shared pool or "
            "prefix-aware routing."
            + (
                " Inferred without session ids: a prompt that is only a shared prefix "
                "(a system prompt alone) makes later requests look like its "
                "continuations, so the first row is an upper bound."
                if c.basis == "continuation"
                else ""
            )
        ),
    )


def _sharing_tables(sh: CacheSharing) -> list[Table]:
    """The top shared prefixes, ranked by requests and by reusable tokens (empty ranks left out)."""
    tables = []
    for caption, ranked in (
        ("Top shared prefixes by requests", sh.top_by_count),
        ("Top shared prefixes by reusable tokens", sh.top_by_volume),
    ):
        if ranked:
            tables.append(
                Table(
                    f"{caption} ({fmt.count(sh.groups)} shared prefixes; "
                    f"{fmt.count(sh.requests_sharing)} requests share their first block)",
                    (
                        "prefix length",
                        "requests",
                        "reusable tokens",
                        "share of prompt tokens",
                        "first seen at",
                    ),
                    tuple(
                        (
                            fmt.tokens(p.prefix_tokens),
                            fmt.count(p.requests),
                            fmt.tokens(p.reusable_tokens),
                            fmt.percent(p.reusable_share),
                            fmt.duration(p.first_arrival_s),
                        )
                        for p in ranked
                    ),
                )
            )
    return tables


def _block_sizes_table(block_sizes: tuple[BlockSizePoint, ...]) -> Table:
    """Hit ratios by the engine's chunk size, with and without the partial last chunk."""
    return Table(
        "Hit ratio by engine chunk size",
        ("chunk", "partial last chunk saved", "all requests", "steady state"),
        tuple(
            (
                fmt.tokens(b.chunk_tokens),
                fmt.yes_no(b.save_unfull_chunk),
                fmt.percent(b.hit_ratio_all),
                fmt.percent(b.hit_ratio_steady),
            )
            for b in block_sizes
        ),
    )
