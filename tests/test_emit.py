"""Engine configurations: sizes per engine scope, backends per tier kind, headers and reasons.

Reports are built in code (emit_fixtures.py). Expected values are computed by hand from the
engines' scopes (tests/fixtures/engine_keys/ names the source of each).
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from emit_fixtures import FSX, GB, GIB, HOST, HOST_GIB, HOST_TIER_GIB, NVME, POOL
from emit_fixtures import emit_report as _report

from kvadvisor.emit import TARGETS, emit_all, emit_config
from kvadvisor.errors import ConfigError
from kvadvisor.plan import engine_settings_table
from kvadvisor.plan.engine_files import read_engine_file

TABLE = engine_settings_table()


def _prose(text: str) -> str:
    """The comments of a file as one line (reasons wrap over several comment lines)."""
    return " ".join(x.strip().lstrip("#").strip() for x in text.splitlines() if "#" in x)


def _settings(files: dict[str, str], stage: str) -> dict[str, dict]:
    """Read the stage's files back the way a plan's engine_files are read."""
    out: dict[str, dict] = {}
    for name, text in sorted(files.items()):
        shared = name in ("mooncake-master.sh", "mooncake-client.json")
        if name.endswith(".txt") or not (stage in name or shared):
            continue
        for engine, settings in read_engine_file(name, text, TABLE).items():
            out.setdefault(engine, {}).update(settings)
    return out


def test_lmcache_sizes_per_worker_process() -> None:
    """1,600 GiB host tier / 8 ranks = 200 GiB; 8,000 GiB of NVMe / 8 = 1,000 GiB per worker."""
    files = emit_config(_report(), "lmcache")
    doc = yaml.safe_load(files["lmcache-prefill.yaml"])
    assert doc["max_local_cpu_size"] == 200.0 and doc["max_local_disk_size"] == 1000.0
    assert doc["local_disk"] == "file://<FILL:/absolute/local-disk/mount>/lmcache/"
    assert doc["chunk_size"] == 256 and doc["local_cpu"] is True
    text = _prose(files["lmcache-prefill.yaml"])
    assert "1.56 TiB per instance / 8 ranks = 200 GiB, GiB per worker process" in text
    # One replica of TP 2 holds 200 GiB x 2 ranks / 327,680 B = 1,310,720 tokens; 4 replicas hold
    # 5,242,880 tokens, where the step curve reads 47% (the 1,048,576-token point).
    assert "one replica keeps 1.31M tokens there, the 4 replica(s) of the stage 5.24M" in text
    assert "steady prefix hit ratio at 5.24M tokens is 47.0% (unbounded 48.0%" in text


def test_sglang_hicache_size_is_whole_gb_per_rank() -> None:
    """200 GiB per rank = 214.7 GB, rounded down to 214; TP 2 x DP 4 fill the 8 GPUs."""
    files = emit_config(_report(), "sglang-hicache")
    flags = _settings(files, "prefill")["sglang-hicache"]
    assert flags["hicache-size"] == 214 and flags["tp-size"] == 2 and flags["dp-size"] == 4
    # The L3 settings SGLang's best practices give with a storage backend.
    assert flags["hicache-storage-backend"] == "file"
    assert flags["hicache-mem-layout"] == "page_first" and flags["hicache-io-backend"] == "kernel"
    assert flags["hicache-storage-prefetch-policy"] == "wait_complete"
    assert flags["SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"].startswith("<FILL:")
    assert flags["disaggregation-mode"] == "prefill"
    assert flags["disaggregation-transfer-backend"] == "mooncake"


def test_kvbm_sizes_per_engine_instance() -> None:
    """TP 2: 4 engine instances; 1,600 GiB / 4 = 429.5 GB -> 429; NVMe 2,000 GiB -> 2,147 GB."""
    files = emit_config(_report(), "dynamo-kvbm")
    env = _settings(files, "prefill")["dynamo-kvbm"]
    assert env["DYN_KVBM_CPU_CACHE_GB"] == 429 and env["DYN_KVBM_DISK_CACHE_GB"] == 2147
    assert env["disaggregation-mode"] == "prefill"
    # Dynamo rejects --connector for vLLM now (args.py@000a36a): KVBM's DynamoConnector and
    # NIXL go in vLLM's --kv-transfer-config, nested under Dynamo's PdConnector.
    transfer = _settings(files, "prefill")["vllm"]["kv-transfer-config"]
    assert transfer["kv_connector"] == "PdConnector"
    assert transfer["kv_connector_module_path"] == "kvbm.vllm_integration.connector"
    assert [c["kv_connector"] for c in transfer["kv_connector_extra_config"]["connectors"]] == [
        "DynamoConnector",
        "NixlConnector",
    ]
    decode = _settings(files, "decode")
    # The decode workers name their role (args.py@000a36a: without it they run as aggregated
    # workers and publish KV events) and run no KVBM: no DYN_KVBM_* beside the role.
    assert decode["dynamo-kvbm"] == {"disaggregation-mode": "decode"}
    assert decode["vllm"]["kv-transfer-config"] == {
        "kv_connector": "NixlConnector",
        "kv_role": "kv_both",
    }
    assert "kvbm-decode.env" not in files  # KVBM runs on prefill workers (kvbm-guide.md)


def test_kvbm_aggregated_workers_take_dynamos_default_role() -> None:
    """Aggregated: no --disaggregation-mode (Dynamo's default, agg), KVBM's connector alone."""
    files = emit_config(_report(tp=4, decode=None), "dynamo-kvbm")
    flags = _settings(files, "serving")
    assert "disaggregation-mode" not in flags["dynamo-kvbm"]
    assert flags["dynamo-kvbm"]["DYN_KVBM_CPU_CACHE_GB"] > 0
    assert flags["vllm"]["kv-transfer-config"]["kv_connector"] == "DynamoConnector"
    assert "--disaggregation-mode" not in files["dynamo-serving.sh"]


def test_vllm_aggregated_uses_native_offloading() -> None:
    """One stage only: --kv-offloading-size is GiB per vLLM instance (all its TP ranks)."""
    files = emit_config(_report(tp=4, decode=None), "vllm")
    assert list(files) == ["vllm-serving.sh", "vllm-router.sh"]
    flags = _settings(files, "serving")["vllm"]
    # TP 4: 2 instances per node, 1,600 GiB / 2 = 800 GiB each.
    assert flags["kv-offloading-backend"] == "native" and flags["kv-offloading-size"] == 800
    assert flags["tensor-parallel-size"] == 4 and flags["block-size"] == 16
    assert flags["enable-prefix-caching"] is True
    # 10,000 mean prompt tokens, rounded up to the 16-token block.
    assert flags["max-num-batched-tokens"] == 10_000
    assert "kv-transfer-config" not in flags


@pytest.mark.parametrize(
    ("gpu", "gpu_gib", "budget"),
    [("h200", 141.0, 8192), ("a100", 80.0, 2048), ("l40s", 44.5, 2048)],
)
def test_vllm_decode_budget_is_vllm_serves_default_for_the_gpu(gpu, gpu_gib, budget) -> None:
    """The vllm serve default: 8,192 tokens on GPUs of 70 GiB or more but the A100, else 2,048."""
    report = _report()
    rec = report.recommendation
    decode = replace(rec.decode, gpu=gpu, gpu_memory_gib=gpu_gib)
    report = replace(report, recommendation=replace(rec, decode=decode))
    flags = _settings(emit_config(report, "vllm"), "decode")["vllm"]
    assert flags["max-num-batched-tokens"] == budget


def test_vllm_disaggregated_keeps_the_pd_connector() -> None:
    """P/D: NixlConnector and OffloadingConnector under MultiConnector, no --kv-offloading-size."""
    flags = _settings(emit_config(_report(), "vllm"), "prefill")["vllm"]
    assert "kv-offloading-size" not in flags
    cfg = flags["kv-transfer-config"]
    assert cfg["kv_connector"] == "MultiConnector"
    nixl, offload = cfg["kv_connector_extra_config"]["connectors"]
    assert nixl == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
    # 400 GiB per TP-2 instance, in bytes.
    assert offload["kv_connector_extra_config"]["cpu_bytes_to_use"] == 400 * GIB


def test_mooncake_pool_per_node_and_complete_client() -> None:
    """The store service gives the node's host tier in bytes; the client JSON is complete."""
    files = emit_config(_report(), "mooncake")
    store = _settings(files, "prefill")["mooncake"]
    assert store["global_segment_size"] == int(HOST_TIER_GIB * GIB)
    assert store["MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES"] == int(8000 * GIB)
    assert store["enable_offload"] is True
    client = json.loads(files["mooncake-client.json"])
    assert set(client) >= {
        "local_hostname",
        "metadata_server",
        "master_server_address",
        "protocol",
        "device_name",
        "global_segment_size",
        "local_buffer_size",
    }
    assert client["global_segment_size"] == 0 and client["protocol"] == "rdma"
    assert client["master_server_address"] == "<FILL:mooncake-master-host>:50051"
    master = store["master"]
    # 10 GB peak write in 1 s over the fleet's 2 x 1,600 GiB pool: 0.29%, floored at 0.05.
    assert master["eviction_ratio"] == 0.05 and master["enable_http_metadata_server"] is True


@pytest.mark.parametrize(
    ("tier", "lmcache_key", "lmcache_value", "hicache_backend"),
    [
        (NVME, "local_disk", "file://<FILL:/absolute/local-disk/mount>/lmcache/", "file"),
        (FSX, "remote_url", "fs://localhost:0<FILL:/absolute/shared-fs/mount>/lmcache/", "file"),
        (POOL, "remote_url", "mooncakestore://<FILL:mooncake-master-host>:50051/", "mooncake"),
    ],
    ids=["local-nvme", "shared-fs", "pool"],
)
def test_tier_kind_picks_the_backend(tier, lmcache_key, lmcache_value, hicache_backend) -> None:
    """A disk of the node, a shared file system and a pool each get the engine's own backend."""
    report = _report(prefill=(HOST, tier))
    lm = yaml.safe_load(emit_config(report, "lmcache")["lmcache-prefill.yaml"])
    assert lm[lmcache_key] == lmcache_value
    sg = emit_config(report, "sglang-hicache")
    flags = _settings(sg, "prefill")["sglang-hicache"]
    assert flags["hicache-storage-backend"] == hicache_backend
    if hicache_backend == "mooncake":
        assert flags["SGLANG_HICACHE_MOONCAKE_CONFIG_PATH"] == "sglang-mooncake-prefill.json"
        assert json.loads(sg["sglang-mooncake-prefill.json"])["global_segment_size"] == 0
        assert flags["hicache-storage-prefetch-policy"] == "timeout"


def test_kvbm_on_a_shared_file_system() -> None:
    """KVBM's disk cache is private per instance: 100,000 GiB over 4 instances, zero-fill on."""
    env = _settings(emit_config(_report(prefill=(HOST, FSX)), "dynamo-kvbm"), "prefill")
    kvbm = env["dynamo-kvbm"]
    assert kvbm["DYN_KVBM_DISK_CACHE_GB"] == int(100_000 / 4 * GIB // GB)
    assert kvbm["DYN_KVBM_DISK_ZEROFILL_FALLBACK"] is True


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_per_rank_sizes_fit_the_host_and_disks(tp) -> None:
    """TP 1, 2, 4, 8 on an 8-GPU instance: each engine's size x its units per instance fits.

    Units per instance by the engines' sources: LMCache and SGLang one per rank (8), KVBM and
    vLLM one per engine instance (8 / TP), a Mooncake store one per node (plus one 1 GiB client
    buffer per rank). Totals must fit 2,048 GiB of host memory and 8,000 GiB of NVMe, and use at
    least 99% of the 1,600 GiB host tier (sizes are rounded down, never up).
    """
    host, tier, disk = HOST_GIB * GIB, HOST_TIER_GIB * GIB, 8000 * GIB
    report = _report(tp=tp)
    replicas = 8 // tp
    lm = _settings(emit_config(report, "lmcache"), "prefill")["lmcache"]
    sg = _settings(emit_config(report, "sglang-hicache"), "prefill")["sglang-hicache"]
    kv = _settings(emit_config(report, "dynamo-kvbm"), "prefill")["dynamo-kvbm"]
    vl = _settings(emit_config(_report(tp=tp, decode=None), "vllm"), "serving")["vllm"]
    mc = _settings(emit_config(report, "mooncake"), "prefill")["mooncake"]
    hosts = {
        "lmcache": lm["max_local_cpu_size"] * GIB * 8,
        "sglang": sg["hicache-size"] * GB * sg["tp-size"] * sg["dp-size"],
        "kvbm": kv["DYN_KVBM_CPU_CACHE_GB"] * GB * replicas,
        "vllm": vl["kv-offloading-size"] * GIB * replicas,
        "mooncake": mc["global_segment_size"],
    }
    for engine, total in hosts.items():
        assert 0.99 * tier <= total <= tier <= host, (engine, total)
    assert mc["global_segment_size"] + 8 * mc["client"]["local_buffer_size"] <= host
    disks = {
        "lmcache": lm["max_local_disk_size"] * GIB * 8,
        "kvbm": kv["DYN_KVBM_DISK_CACHE_GB"] * GB * replicas,
        "mooncake": mc["MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES"],
    }
    for engine, total in disks.items():
        assert 0.99 * disk <= total <= disk, (engine, total)
    assert sg["tp-size"] * sg["dp-size"] == 8 and vl["tensor-parallel-size"] == tp


def test_tp_over_the_instance_is_refused() -> None:
    """TP 16 on an 8-GPU instance, or weights that fill the GPUs: one clear error each."""
    with pytest.raises(ConfigError, match="--tp 16 does not fit one p5e.48xlarge"):
        emit_config(_report(tp=16), "vllm")
    heavy = _report(tp=1)
    memory = replace(heavy.model.memory, weight_bytes_per_gpu=140 * GIB)
    heavy = replace(heavy, model=replace(heavy.model, memory=memory))
    with pytest.raises(ConfigError, match="leave no GPU memory for KV .* at TP 1"):
        emit_config(heavy, "vllm")


def test_hicache_host_pool_must_exceed_the_device_pool() -> None:
    """SGLang asserts host pool > device pool per rank: a small host tier is refused."""
    small = replace(HOST, capacity_gib=400.0)  # 50 GiB per rank < the device pool per rank
    with pytest.raises(ConfigError, match="not larger than the rank's GPU KV pool"):
        emit_config(_report(prefill=(small, NVME)), "sglang-hicache")


def test_kvbm_host_below_device_pool_is_refused() -> None:
    """KVBM with less host cache than its device pool churns (kvbm-guide.md): refused."""
    small = replace(HOST, capacity_gib=400.0)  # 100 GiB per instance < ~150 GiB device pool
    with pytest.raises(ConfigError, match="KVBM would churn"):
        emit_config(_report(prefill=(small, NVME)), "dynamo-kvbm")


def test_missing_deployment_is_a_user_error() -> None:
    """No model or no recommended deployment: one clear error, never invented sizes."""
    report = _report()
    with pytest.raises(ConfigError, match="--model"):
        emit_config(replace(report, model=None), "lmcache")
    with pytest.raises(ConfigError, match="recommended deployment"):
        emit_config(replace(report, recommendation=None), "lmcache")
    with pytest.raises(ConfigError, match="unknown engine"):
        emit_config(report, "trtllm")


def test_without_hashes_the_reasons_say_reuse_is_unknown() -> None:
    """Sizes still come from the deployment; the comment says reuse is not measured."""
    text = emit_config(_report(hashes=False), "lmcache")["lmcache-prefill.yaml"]
    assert yaml.safe_load(text)["max_local_cpu_size"] == 200.0
    assert "prefix reuse unknown: trace.parquet has no block hashes" in _prose(text)


ALL_FILES = emit_all(_report(), list(TARGETS), "kvadvisor analyze trace.parquet --emit all -o d")


@pytest.mark.parametrize("name", sorted(ALL_FILES))
def test_every_file_starts_with_the_header(name) -> None:
    """Trace, deployment and command at the top of every file (JSON: in its notes file)."""
    if name.endswith(".json"):
        name = name.replace(".json", ".notes.txt")
    text = ALL_FILES[name]
    for line in (
        "# trace: trace.parquet (100 requests, sha256 abababababab)",
        "# deployment: disaggregated (TP as given (--tp)); prefill: 1 x p5e.48xlarge (8 x h200, "
        "2 TiB host memory), TP 2 x 4 replica(s) per instance = 8 ranks per instance",
        "# command: kvadvisor analyze trace.parquet --emit all -o d",
    ):
        assert line in text, (name, line)


@pytest.mark.parametrize(
    "name", sorted(n for n in ALL_FILES if n.endswith((".sh", ".yaml", ".env")))
)
def test_every_setting_has_its_reason_above(name, tmp_path) -> None:
    """Each setting line (flag, key) sits under a comment; bash accepts the scripts."""
    lines = ALL_FILES[name].splitlines()
    if name.endswith(".sh"):
        start = next(i for i, x in enumerate(lines) if x.endswith("=("))
        body = lines[start + 1 : lines.index(")", start)]
        settings = [i for i, x in enumerate(body) if x.strip().startswith(("--", "'--"))]
        assert settings
        for i in settings:
            assert body[i - 1].strip().startswith("#"), body[i]
        if shutil.which("bash"):
            script = tmp_path / name
            script.write_text(ALL_FILES[name])
            assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
            assert shlex.split("\n".join(body), comments=True)
    elif not name.startswith("plan"):
        for i, line in enumerate(lines):
            if line and not line.startswith("#"):
                assert lines[i - 1].startswith("#"), line


def test_analyze_emit_writes_every_target(tmp_path: Path, monkeypatch) -> None:
    """`analyze --emit ENGINE -o DIR`: the CLI writes each target's files into DIR."""
    from typer.testing import CliRunner

    import kvadvisor
    import kvadvisor.cli as cli

    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1}\n')
    # The CLI calls the public API; the report stands in for the analysis.
    monkeypatch.setattr(kvadvisor, "analyze", lambda *a, **k: _report())
    out = tmp_path / "configs"
    args = ["analyze", str(trace), "--quiet", "-o", str(out)]
    for target in TARGETS:
        args += ["--emit", target]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == sorted(ALL_FILES)
    plan = yaml.safe_load((out / "plan-dynamo-kvbm.yaml").read_text())
    assert plan["stages"]["prefill"]["engine_files"] == [
        "dynamo-frontend.sh",  # the router every stage sits behind
        "dynamo-prefill.sh",
        "kvbm-prefill.env",
    ]
    head = (out / "vllm-prefill.sh").read_text()
    assert f"# command: kvadvisor analyze {trace} -o {out} --quiet --emit lmcache" in head


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
