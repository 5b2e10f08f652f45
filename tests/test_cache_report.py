"""The prefix_cache section of the report and the analyze options that drive it."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from conftest import SAMPLES
from test_cache_sharing import ref_reuse_split
from test_trace_readers import _jsonl, _reference_sessions
from typer.testing import CliRunner

from kvadvisor.cache.tiers import CacheTierSpec
from kvadvisor.cli import app
from kvadvisor.pipeline.analyze import analyze
from kvadvisor.pipeline.options import AnalyzeOptions
from kvadvisor.report import get_renderer
from kvadvisor.trace import read_trace
from kvadvisor.trace.schema import build_trace

CONTRACT_CAPACITIES = [16384, 65536, 262144, 1048576, 4194304, 16777216, None]


@pytest.fixture(scope="module")
def mooncake_json(mooncake_jsonl_path):
    """The Mooncake head's report with three tiers and four instances, and its JSON section.

    No replay of the recommendation: it reads the cache section, never writes it, and the
    tests here read the cache section alone. The head (the published file's first 400 lines,
    real requests with their block hashes) rather than the whole trace: the tests here check
    the section's keys, that its parts add up and what the chained ids imply, which hold on
    any Mooncake trace; the whole trace's figures are the sampled test's and
    tests/test_cache_*.py's (the whole trace took about 24 CPU-s here).
    """
    opts = AnalyzeOptions(
        cache_tiers=(
            CacheTierSpec("hbm", 2**20),
            CacheTierSpec("dram", 2**24),
            CacheTierSpec("pool", None),
        ),
        cache_instances=4,
        replay=False,
    )
    report = analyze(read_trace(mooncake_jsonl_path), opts, version="t", generated_at="t")
    return report, json.loads(get_renderer("json", None).render(report))["prefix_cache"]


def test_contract_keys(mooncake_json) -> None:
    """DESIGN.md's keys: warm-up, hit ratios, the mrc capacities (null = unbounded)."""
    report, pc = mooncake_json
    assert pc["warmup_fraction"] == 0.5
    assert set(pc["hit_ratio"]) == {"all", "steady"}
    assert [p["capacity_tokens"] for p in pc["mrc"]] == CONTRACT_CAPACITIES
    for p in pc["mrc"]:
        assert {"capacity_tokens", "hit_ratio_all", "hit_ratio_steady"} <= set(p)
    assert pc["mrc"][-1]["hit_ratio_all"] == pc["hit_ratio"]["all"]
    ratios = [p["hit_ratio_all"] for p in pc["mrc"]]
    assert ratios == sorted(ratios) and 0 < ratios[-1] < 1
    assert pc["status"] == "exact" and pc["sampling"] is None


def test_sections(mooncake_json) -> None:
    """Tiers add up to the hit ratio; routing, reuse and block sizes are filled."""
    report, pc = mooncake_json
    prefix = report.prefix_cache
    levels = prefix.tiers.levels
    assert [t.name for t in levels] == ["hbm", "dram", "pool"]
    total = sum(t.share_all for t in levels) + prefix.tiers.miss_share_all
    assert total == pytest.approx(1.0)
    assert sum(t.share_all for t in levels) == pytest.approx(prefix.hit_ratio.all)
    policies = {p.policy: p for p in prefix.routing.policies}
    assert policies["session"].unavailable
    assert policies["prefix_aware"].points[-1].hit_ratio_all == pytest.approx(prefix.hit_ratio.all)
    assert prefix.reuse.hit_tokens > 0 and len(prefix.reuse.ttl) == 5
    assert [b.chunk_tokens for b in prefix.block_sizes] == [512]
    assert len(prefix.curve) == 2 and len(prefix.curve[0].x) == len(prefix.curve[0].y) > 10


def test_no_hashes_prefix_reuse_unknown() -> None:
    """A trace without hashes: 'prefix reuse unknown', every ratio null, no invented numbers."""
    table = pa.table({"arrival_s": [0.0, 1.0], "input_tokens": [5, 6], "output_tokens": [1, 1]})
    trace = build_trace(table, path="t.csv", source_format="test", block_tokens=None)
    report = analyze(trace, version="t", generated_at="t")
    pc = json.loads(get_renderer("json", None).render(report))["prefix_cache"]
    assert pc["status"] == "unknown" and "prefix reuse unknown" in pc["note"]
    assert pc["hit_ratio"] == {"all": None, "steady": None}
    assert [p["capacity_tokens"] for p in pc["mrc"]] == CONTRACT_CAPACITIES
    assert all(p["hit_ratio_all"] is None and p["hit_ratio_steady"] is None for p in pc["mrc"])


def test_cli_options(mooncake_jsonl_path) -> None:
    """The analyze options reach the engine: tiers, instances, chunk size, warm-up.

    On the Mooncake head (400 requests with hashes): what is checked is where each option
    lands, not a figure of the whole trace; one provider's search and no closed-loop replay,
    which read the cache section and never write it.
    """
    runner = CliRunner()
    res = runner.invoke(
        app,
        [
            "analyze",
            str(mooncake_jsonl_path),
            "--format",
            "json",
            "-o",
            "-",
            "--cache-tier",
            "hbm=1M",
            "--cache-tier",
            "pool=inf",
            "--cache-instances",
            "1",
            "--chunk-tokens",
            "1024",
            "--save-unfull-chunk",
            "--warmup-fraction",
            "0.25",
            "--provider",
            "aws",
            "--no-replay",
        ],
    )
    assert res.exit_code == 0, res.output
    pc = json.loads(res.stdout)["prefix_cache"]
    assert pc["block_tokens"] == 1024 and pc["warmup_fraction"] == 0.25
    assert [t["name"] for t in pc["tiers"]["levels"]] == ["hbm", "pool"]
    assert pc["routing"] is None


@pytest.mark.parametrize(
    "args, message",
    [
        (["--chunk-tokens", "256"], "cannot refine"),
        (["--cache-tier", "hbm"], "NAME=TOKENS"),
    ],
)
def test_cli_user_errors(mooncake_path, args, message) -> None:
    """Bad cache options: one line, exit 2, no traceback."""
    res = CliRunner().invoke(app, ["analyze", str(mooncake_path), *args])
    assert res.exit_code == 2
    assert message in res.output and "Traceback" not in res.output


def test_sampled_section(mooncake_path) -> None:
    """A sampled curve says so: rate, sample size and error estimate; no per-request extras."""
    opts = AnalyzeOptions(cache_sample_rate=0.25, replay=False)  # the cache section alone
    report = analyze(read_trace(mooncake_path), opts, version="t", generated_at="t")
    pc = json.loads(get_renderer("json", None).render(report))["prefix_cache"]
    assert pc["status"] == "sampled" and "SHARDS" in pc["note"]
    assert pc["sampling"]["rate"] == pytest.approx(0.25)
    assert 0 < pc["sampling"]["error_estimate"] < 0.05
    assert pc["routing"] is None and pc["reuse"] is None and pc["block_sizes"] == []
    assert [p["capacity_tokens"] for p in pc["mrc"]] == CONTRACT_CAPACITIES
    assert 0.3 < pc["hit_ratio"]["all"] < 0.45


def test_sharing_and_conversations_in_the_section(mooncake_json, mooncake_jsonl_path) -> None:
    """The Mooncake head: the top prefix is its shared first block; shares add up.

    Every one of the 400 requests starts with block 0 (traces README: ids are chained and
    id 0 opens every prompt), so the top prefix by requests is 512 tokens shared by all.
    """
    report, pc = mooncake_json
    # The file's own rows, read with json alone: 400 requests, 5,710,530 input tokens.
    rows = [json.loads(line) for line in mooncake_jsonl_path.read_text().splitlines()]
    assert len(rows) == 400 and all(r["hash_ids"][0] == 0 for r in rows)
    tokens = sum(r["input_length"] for r in rows)
    sharing, conv = report.prefix_cache.sharing, report.prefix_cache.conversations
    top = sharing.top_by_count[0]
    assert (top.prefix_tokens, top.requests, top.first_arrival_s) == (512, 400, 0.0)
    assert top.reusable_share == pytest.approx(512 * 399 / tokens)
    assert sharing.requests_sharing == 400
    assert conv.basis == "continuation"  # the trace has no session ids
    hit = report.prefix_cache.hit_ratio
    assert conv.within_share_all + conv.across_share_all == pytest.approx(hit.all)
    assert conv.within_share_steady + conv.across_share_steady == pytest.approx(hit.steady)
    assert pc["conversations"]["basis"] == "continuation"


def test_sessions_split_the_reuse_when_the_trace_has_them() -> None:
    """The Bailian example (sessions from chat chains): the split equals the set replay's."""
    path = SAMPLES / "bailian_example.jsonl"
    rows = _jsonl(path)
    roots = _reference_sessions(rows)
    codes = {r: i for i, r in enumerate(dict.fromkeys(roots))}
    report = analyze(read_trace(path), version="t", generated_at="t")
    conv = report.prefix_cache.conversations
    assert conv.basis == "session" and conv.conversations == len(codes) == 40
    # The file is in arrival order (ties keep file order), so rows are replayed as they are.
    assert [r["timestamp"] for r in rows] == sorted(r["timestamp"] for r in rows)
    within, across, _, _ = ref_reuse_split(
        [r["hash_ids"] for r in rows],
        [r["input_length"] for r in rows],
        16,
        len(rows) // 2,
        [codes[s] for s in roots],
    )
    total = sum(r["input_length"] for r in rows)
    assert conv.within_tokens_all == within and conv.across_tokens_all == across
    assert conv.within_share_all == pytest.approx(within / total)
