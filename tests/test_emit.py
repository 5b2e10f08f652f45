"""Engine configurations: documented names only, each with its reason, parsed as their format."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from kvadvisor.emit import emit_config
from kvadvisor.errors import ConfigError
from kvadvisor.plan import engine_settings_table
from kvadvisor.results.common import IoRate, Meta, TraceSummary
from kvadvisor.results.report import (
    AdviceReport,
    HitRatio,
    IoDemand,
    ModelSummary,
    MrcPoint,
    PrefixCache,
)

KVB = 327_680  # Llama-3.1-70B, bf16 (research/field.md §4.1)
MRC = (
    MrcPoint(16_384, 0.10, 0.10),
    MrcPoint(65_536, 0.30, 0.35),
    MrcPoint(262_144, 0.40, 0.42),
    MrcPoint(1_048_576, 0.45, 0.47),
    MrcPoint(None, 0.46, 0.48),
)


RATIO = HitRatio(0.46, 0.48)


def _report(mrc=MRC, ratio=RATIO, write_peak=10e9) -> AdviceReport:
    return AdviceReport(
        meta=Meta(1, "0.1.0", "2026-01-01T00:00:00+00:00"),
        trace=TraceSummary("trace.parquet", "mooncake", 100, 10.0, 512),
        model=ModelSummary("llama-3.1-70b", KVB),
        prefix_cache=PrefixCache(0.5, ratio, mrc),
        io=IoDemand(IoRate(1e9, 5e9, write_peak), IoRate(1e9, 2e9, 3e9), 1.0),
    )


DOCUMENTED = {e: set(spec["settings"]) for e, spec in engine_settings_table()["engines"].items()}


def _commented(lines: list[str], is_setting) -> list[str]:
    """Setting lines, asserting each has a comment line right above it."""
    found = []
    for i, line in enumerate(lines):
        if is_setting(line):
            assert lines[i - 1].strip().startswith("#"), f"no reason above {line!r}"
            assert any(ch.isdigit() for ch in lines[i - 1]), f"no measured number: {lines[i - 1]}"
            found.append(line)
    return found


def _bash_array(text: str, var: str, tmp_path: Path) -> list[str]:
    body = text.split(f"{var}=(", 1)[1].rsplit(")", 1)[0]
    if shutil.which("bash"):
        script = tmp_path / "x.sh"
        script.write_text(text)
        assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    return shlex.split(body, comments=True)


def test_lmcache_yaml_keys_values_and_reasons() -> None:
    """Host tier at the knee (80% of 48% → 262,144 tokens), disk at the tail (95% → 1,048,576)."""
    files = emit_config(_report(), "lmcache")
    text = files["lmcache.yaml"]
    doc = yaml.safe_load(text)
    assert set(doc) <= DOCUMENTED["lmcache"]
    assert doc == {
        "chunk_size": 256,
        "local_cpu": True,
        "max_local_cpu_size": 85.9,  # 262,144 × 327,680 B = 85.90 GB, rounded up to 0.1
        "local_disk": "file:///var/lib/lmcache/",
        "max_local_disk_size": 343.6,  # 1,048,576 × 327,680 B = 343.60 GB
    }
    lines = text.splitlines()
    assert len(_commented(lines, lambda s: s and not s.startswith("#"))) == len(doc)
    assert (
        "the smallest measured capacity reaching 80% of the unbounded hit ratio: 262,144 "
        "tokens × 327,680 B/token (llama-3.1-70b) = 85.9 GB; the trace's steady prefix hit "
        "ratio there is 42.0% of an unbounded 48.0%"
    ) in text


def test_sglang_flags(tmp_path: Path) -> None:
    """Flags parse with shlex, bash accepts the file, every flag is documented."""
    text = emit_config(_report(), "sglang-hicache", tp=8)["sglang-hicache.sh"]
    args = _bash_array(text, "SGLANG_HICACHE_ARGS", tmp_path)
    flags = [a for a in args if a.startswith("--")]
    assert {f[2:] for f in flags} <= DOCUMENTED["sglang-hicache"]
    assert args == [
        "--enable-hierarchical-cache",
        "--page-size",
        "64",
        "--hicache-size",
        "11",
        "--hicache-write-policy",
        "write_through",
        "--hicache-storage-backend",
        "file",
    ]  # 85.9 GB / 8 ranks = 10.7 → 11 GB per rank
    lines = text.splitlines()
    assert len(_commented(lines, lambda s: s.strip().startswith("--"))) == len(flags)


def test_kvbm_env_file() -> None:
    """KEY=VALUE lines with documented names; DISK >= CPU as KVBM's guide asks."""
    text = emit_config(_report(), "dynamo-kvbm")["kvbm.env"]
    lines = text.splitlines()
    settings = _commented(lines, lambda s: s and not s.startswith("#"))
    env = dict(line.split("=", 1) for line in settings)
    assert set(env) <= DOCUMENTED["dynamo-kvbm"]
    assert env == {"DYN_KVBM_CPU_CACHE_GB": "86", "DYN_KVBM_DISK_CACHE_GB": "344"}


def test_mooncake_master_and_client(tmp_path: Path) -> None:
    """Master flags in gflags form, client keys as mooncake_config.json spells them."""
    files = emit_config(_report(), "mooncake")
    args = _bash_array(files["mooncake-master.sh"], "MOONCAKE_MASTER_ARGS", tmp_path)
    flags = dict(a[2:].split("=", 1) for a in args)
    assert set(flags) <= DOCUMENTED["mooncake"]
    # 10 GB peak write in a 1 s window over an 85.9 GB pool: evict 11.6% at a time.
    assert flags == {"enable_offload": "true", "eviction_ratio": "0.116"}
    client = json.loads(files["mooncake-client.json"])
    assert set(client) <= DOCUMENTED["mooncake"]
    assert client == {"global_segment_size": "86GB"}
    assert "global_segment_size:" in files["mooncake-client.notes.txt"]


def test_eviction_ratio_floor_is_the_default(tmp_path: Path) -> None:
    """A small burst keeps Mooncake's default eviction ratio of 0.05."""
    files = emit_config(_report(write_peak=1e9), "mooncake")
    args = _bash_array(files["mooncake-master.sh"], "MOONCAKE_MASTER_ARGS", tmp_path)
    assert "--eviction_ratio=0.050" in args


def test_no_reuse_means_no_offload_tier() -> None:
    """A zero hit ratio: LMCache keeps no CPU tier; engines without a tier to write refuse."""
    flat = tuple(MrcPoint(p.capacity_tokens, 0.0, 0.0) for p in MRC)
    report = _report(flat, HitRatio(0.0, 0.0))
    doc = yaml.safe_load(emit_config(report, "lmcache")["lmcache.yaml"])
    assert doc == {"chunk_size": 256, "local_cpu": False}
    for engine in ("sglang-hicache", "dynamo-kvbm", "mooncake"):
        with pytest.raises(ConfigError, match="0.0%"):
            emit_config(report, engine)
    # Each refusal names what its engine would have emitted (emit/writers.py), not just 0.0%.
    for engine, what in (
        ("sglang-hicache", "no HiCache flags to emit"),
        ("dynamo-kvbm", "no KVBM tiers to emit"),
        ("mooncake", "no Mooncake Store pool to emit"),
    ):
        with pytest.raises(ConfigError, match=f"^{what}: .*0\\.0%"):
            emit_config(report, engine)


def test_missing_measurements_are_user_errors() -> None:
    """No hashes or no model: one clear error, never invented sizes."""
    report = _report()
    no_hashes = AdviceReport(report.meta, report.trace, report.model, None, None, report.io)
    with pytest.raises(ConfigError, match="no block hashes"):
        emit_config(no_hashes, "lmcache")
    no_model = AdviceReport(report.meta, report.trace, None, None, report.prefix_cache, report.io)
    with pytest.raises(ConfigError, match="--model"):
        emit_config(no_model, "lmcache")
    with pytest.raises(ConfigError, match="unknown engine"):
        emit_config(report, "trtllm")


def test_chunk_comes_from_the_recommendation() -> None:
    """The advisor's prefill chunk wins over LMCache's default, and the comment says so."""
    from dataclasses import replace

    from kvadvisor.results.report import Recommendation, StageRecommendation

    rec = Recommendation(
        StageRecommendation("p5e.48xlarge", "nvme-gen4-x4", chunk_tokens=512),
        StageRecommendation(None, None),
    )
    text = emit_config(replace(_report(), recommendation=rec), "lmcache")["lmcache.yaml"]
    assert yaml.safe_load(text)["chunk_size"] == 512
    assert "512 tokens (the advisor's prefill chunk) × 327,680 B/token = 160.0 MiB" in text


def test_analyze_emit_writes_every_engine(tmp_path: Path, monkeypatch) -> None:
    """`analyze --emit ENGINE -o DIR`: the CLI writes each engine's files into DIR."""
    from typer.testing import CliRunner

    import kvadvisor
    import kvadvisor.cli as cli

    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1}\n')
    # The CLI calls the public API; the report stands in for the analysis.
    monkeypatch.setattr(kvadvisor, "analyze", lambda *a, **k: _report())
    out = tmp_path / "configs"
    args = ["analyze", str(trace), "--quiet", "-o", str(out)]
    for engine in ("lmcache", "sglang-hicache", "dynamo-kvbm", "mooncake"):
        args += ["--emit", engine]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == [
        "kvbm.env",
        "lmcache.yaml",
        "mooncake-client.json",
        "mooncake-client.notes.txt",
        "mooncake-master.sh",
        "sglang-hicache.sh",
    ]
    assert yaml.safe_load((out / "lmcache.yaml").read_text())["max_local_cpu_size"] == 85.9


def test_emit_needs_one_directory(tmp_path: Path) -> None:
    """--emit without an -o DIR is a one-line user error."""
    from typer.testing import CliRunner

    import kvadvisor.cli as cli

    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1}\n')
    result = CliRunner().invoke(
        cli.app, ["analyze", str(trace), "--emit", "lmcache", "-o", str(tmp_path / "r.json")]
    )
    assert result.exit_code == 2 and "give exactly one -o DIR" in result.output


def test_sizes_come_from_the_recommendation() -> None:
    """The advisor's per-instance tiers set the sizes; the full curve gives their hit ratios."""
    from dataclasses import replace

    from kvadvisor.results.report import Recommendation, StageRecommendation, Tier
    from kvadvisor.results.series import Series

    tiers = (
        Tier("host-dram-ddr5-spr", "memory", "host DRAM KV pool", 100.0),
        Tier("nvme-gen5-x4", "local_nvme", "capacity tier", 1000.0, devices=8),
    )
    rec = Recommendation(
        StageRecommendation("p5e.48xlarge", "nvme-gen5-x4", tiers=tiers),
        StageRecommendation(None, None),
    )
    curve = Series(
        "token hit ratio (steady state)",
        "LRU cache capacity",
        "tokens",
        "token hit ratio",
        "ratio",
        (16_384.0, 65_536.0, 262_144.0, 1_048_576.0),
        (0.10, 0.35, 0.42, 0.47),
        "step",
    )
    report = _report()
    report = replace(
        report, recommendation=rec, prefix_cache=replace(report.prefix_cache, curve=(curve,))
    )
    files = emit_config(report, "lmcache")
    doc = yaml.safe_load(files["lmcache.yaml"])
    # 100 GiB / 327,680 B = 327,680 tokens → 107.4 GB; 1,000 GiB → 3,276,800 tokens → 1,073.8 GB
    assert doc["max_local_cpu_size"] == 107.4 and doc["max_local_disk_size"] == 1073.8
    text = files["lmcache.yaml"]
    assert (
        "the advisor's prefill host DRAM KV pool (host-dram-ddr5-spr on p5e.48xlarge, "
        "100.0 GiB per instance): 327,680 tokens"
    ) in text
    assert "hit ratio there is 42.0%" in text and "hit ratio there is 47.0%" in text
    assert "# Sizes are per instance, as the advisor recommends for prefill." in text
    env = emit_config(report, "dynamo-kvbm")["kvbm.env"]
    assert "DYN_KVBM_CPU_CACHE_GB=108" in env and "DYN_KVBM_DISK_CACHE_GB=1074" in env
