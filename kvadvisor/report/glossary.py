"""The report's abbreviations and terms, each with what it means (data, shown as written)."""

from __future__ import annotations

# (term, how it is spelled in the text, meaning). The spellings are matched as whole words,
# case-sensitive, so "TP" never matches inside "TPOT".
GLOSSARY: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (
        "aggregated",
        ("aggregated",),
        "prefill and decode run on the same instances, each replica doing both",
    ),
    (
        "disaggregated",
        ("disaggregated",),
        "prefill and decode run on separate instances; each request's KV cache is sent from "
        "the prefill instance to a decode instance over the P-to-D link",
    ),
    ("DRAM", ("DRAM", "dram"), "dynamic RAM: the host's main memory, a KV tier below the GPU's"),
    (
        "DWPD",
        ("DWPD",),
        "drive writes per day: how often a drive's whole capacity may be "
        "written each day over its warranty",
    ),
    ("EP", ("EP",), "expert parallelism: a mixture-of-experts model's experts spread over GPUs"),
    ("GPU", ("GPU", "GPUs"), "graphics processing unit: the accelerator that runs the model"),
    ("GQA", ("GQA", "gqa"), "grouped-query attention: several query heads share one KV head"),
    ("HBM", ("HBM",), "high-bandwidth memory: the GPU's own memory, the first KV tier"),
    (
        "KV",
        ("KV",),
        "key-value: the attention keys and values kept for every token so later "
        "tokens need not recompute them (the KV cache)",
    ),
    ("LRU", ("LRU",), "least recently used: the cache evicts the block unused the longest"),
    ("MHA", ("MHA", "mha"), "multi-head attention: one KV head per query head"),
    (
        "MLA",
        ("MLA", "mla"),
        "multi-head latent attention: KV compressed to one latent vector per token (DeepSeek)",
    ),
    ("MoE", ("MoE",), "mixture of experts: each token runs through a few of many expert layers"),
    ("NVMe", ("NVMe", "nvme"), "non-volatile memory express: a solid-state drive on PCIe"),
    (
        "P-to-D",
        ("P-to-D",),
        "prefill to decode: the network link that carries each request's "
        "KV cache from the prefill instance to the decode instance",
    ),
    ("PCIe", ("PCIe",), "PCI Express: the bus between the host, its drives and the GPUs"),
    (
        "p50, p90, p99",
        ("p50", "p90", "p99"),
        "percentiles: p99 is the value 99% of requests (or windows) stay at or under",
    ),
    (
        "SLO",
        ("SLO",),
        "service-level objective: the latency targets a deployment must meet, "
        "each at a percentile (TTFT p99 6 s: 99% of requests see their first token within 6 s)",
    ),
    (
        "TP",
        ("TP",),
        "tensor parallelism: one model replica's layers split over this many GPUs; "
        "TP 8 × 2 is two replicas of eight GPUs each on an instance",
    ),
    (
        "TPOT",
        ("TPOT",),
        "time per output token: a request's decode time divided by the output "
        "tokens after the first",
    ),
    (
        "TTFT",
        ("TTFT",),
        "time to first token: from a request's arrival to its first output token "
        "(queueing plus prefill)",
    ),
    ("TTL", ("TTL",), "time to live: how long a cache keeps a block after its last use"),
    ("$/h, $/M", (), "dollars per hour of the whole fleet; dollars per million tokens in or out"),
)
