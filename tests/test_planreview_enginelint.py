"""Engine lint EL09-EL31: each rule fires on the settings built to break it, passes when fixed.

The lint is YAML rules (rules/lint/) over the stage's and engines' facts, run by the review.
The stage: 8 GPUs, 1 TB of host memory, TP 2 (4 engine instances, 8 ranks), a 100 GB GPU KV
pool, an 800 GB NVMe tier and, where a case says so, a 10 TB shared file system.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from kvadvisor.plan import check_plan
from kvadvisor.planreview.demand import TraceReplay
from kvadvisor.planreview.perf import PlanPerf
from kvadvisor.planreview.review import review_plan

GIB = 1024**3
BASE: dict[str, Any] = {
    "name": "lint",
    "model": {"kv_bytes_per_token": 327_680, "tp": 2},
    "stages": {
        "prefill": {
            "count": 2,
            "gpus_per_instance": 8,
            "host_memory": "1 TB",
            "gpu_kv_pool": "100 GB",
            "tiers": [
                {"name": "host", "storage": {"kind": "dram"}, "capacity": "800 GB"},
                {"name": "nvme", "storage": {"kind": "ssd"}, "capacity": "800 GB"},
            ],
        }
    },
}
FS_TIERS = [
    {"name": "host", "storage": {"kind": "dram"}, "capacity": "800 GB"},
    {"name": "lustre", "storage": {"kind": "filesystem"}, "capacity": "10 TB"},
]
MASTER = {"master_server_address": "m:50051", "metadata_server": "http://m:8080/metadata"}
CLIENT = {"local_hostname": "n1", **MASTER}

# (code, engine settings, stage fields, expected status). Each pair differs in one setting.
CASES = [
    # 8 ranks x 120 GiB = 1.03 TB > 1 TB; 8 x 100 GiB = 859 GB fits.
    ("EL09", {"lmcache": {"max_local_cpu_size": 120}}, {}, "fail"),
    ("EL09", {"lmcache": {"max_local_cpu_size": 100}}, {}, "pass"),
    # 4 instances x 300 GB = 1.2 TB > 1 TB; x 200 GB = 800 GB.
    ("EL09", {"dynamo-kvbm": {"DYN_KVBM_CPU_CACHE_GB": 300}}, {}, "fail"),
    ("EL09", {"dynamo-kvbm": {"DYN_KVBM_CPU_CACHE_GB": 200}}, {}, "pass"),
    # 4 instances x 250 GiB = 1.07 TB; x 200 GiB = 859 GB.
    ("EL09", {"vllm": {"kv-offloading-size": 250}}, {}, "fail"),
    ("EL09", {"vllm": {"kv-offloading-size": 200}}, {}, "pass"),
    (
        "EL09",
        {
            "vllm": {
                "kv-transfer-config": {
                    "kv_connector": "OffloadingConnector",
                    "kv_role": "kv_both",
                    "kv_connector_extra_config": {"cpu_bytes_to_use": 300 * 10**9},
                }
            }
        },
        {},
        "fail",
    ),
    # A store segment of 995 GB + 8 ranks x (0 + 1 GiB buffer) > 1 TB; 900 GB fits.
    (
        "EL09",
        {
            "mooncake": {
                "host": "n1",
                "global_segment_size": 995 * 10**9,
                "client": {**CLIENT, "global_segment_size": 0},
            }
        },
        {},
        "fail",
    ),
    (
        "EL09",
        {
            "mooncake": {
                "host": "n1",
                "global_segment_size": 900 * 10**9,
                "client": {**CLIENT, "global_segment_size": 0},
            }
        },
        {},
        "pass",
    ),
    # Disk: 8 ranks x 100 GiB = 859 GB > 800 GB; x 90 GiB = 773 GB.
    ("EL10", {"lmcache": {"local_disk": "file:///d/", "max_local_disk_size": 100}}, {}, "fail"),
    ("EL10", {"lmcache": {"local_disk": "file:///d/", "max_local_disk_size": 90}}, {}, "pass"),
    ("EL10", {"dynamo-kvbm": {"DYN_KVBM_DISK_CACHE_GB": 250}}, {}, "fail"),
    ("EL10", {"dynamo-kvbm": {"DYN_KVBM_DISK_CACHE_GB": 200}}, {}, "pass"),
    # On a shared file system: 2 instances x 4 engine instances x 1,300 GB > 10 TB.
    ("EL10", {"dynamo-kvbm": {"DYN_KVBM_DISK_CACHE_GB": 1300}}, {"tiers": FS_TIERS}, "fail"),
    ("EL10", {"dynamo-kvbm": {"DYN_KVBM_DISK_CACHE_GB": 1200}}, {"tiers": FS_TIERS}, "pass"),
    ("EL10", {"mooncake": {"MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES": 9 * 10**11}}, {}, "fail"),
    ("EL10", {"mooncake": {"MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES": 8 * 10**11}}, {}, "pass"),
    ("EL11", {"sglang-hicache": {"disaggregation-ib-device": "<FILL:rdma>"}}, {}, "fail"),
    ("EL11", {"sglang-hicache": {"disaggregation-ib-device": "mlx5_0"}}, {}, "pass"),
    ("EL12", {"vllm": {"tensor-parallel-size": 16}}, {}, "fail"),
    ("EL12", {"sglang-hicache": {"tp-size": 2, "dp-size": 8}}, {}, "fail"),
    ("EL12", {"sglang-hicache": {"tp-size": 2, "dp-size": 4}}, {}, "pass"),
    ("EL12", {"vllm": {"tensor-parallel-size": 4}}, {}, "fail"),  # plan's model.tp is 2
    ("EL13", {"lmcache": {"local_disk": "file:///d/"}}, {}, "fail"),
    ("EL13", {"lmcache": {"local_disk": "file:///d/", "max_local_disk_size": 10}}, {}, "pass"),
    ("EL14", {"lmcache": {"enable_pd": True, "remote_url": "fs://h:0/x"}}, {}, "fail"),
    ("EL14", {"lmcache": {"enable_pd": True}}, {}, "pass"),
    ("EL15", {"lmcache": {"remote_url": "/mnt/fsx/lmcache"}}, {}, "fail"),
    ("EL15", {"lmcache": {"remote_url": "fs://localhost:0/mnt/fsx/lmcache"}}, {}, "pass"),
    (
        "EL16",
        {
            "vllm": {
                "kv-offloading-size": 10,
                "kv-transfer-config": {"kv_connector": "NixlConnector", "kv_role": "kv_both"},
            }
        },
        {},
        "fail",
    ),
    ("EL16", {"vllm": {"kv-offloading-size": 10}}, {}, "pass"),
    ("EL17", {"vllm": {"kv-offloading-backend": "native"}}, {}, "fail"),
    ("EL17", {"vllm": {"kv-offloading-backend": "native", "kv-offloading-size": 1}}, {}, "pass"),
    ("EL18", {"vllm": {"max-num-batched-tokens": 64, "max-num-seqs": 128}}, {}, "fail"),
    ("EL18", {"vllm": {"max-num-batched-tokens": 64, "max-num-seqs": 64}}, {}, "pass"),
    ("EL19", {"vllm": {"gpu-memory-utilization": 1.2}}, {}, "fail"),
    ("EL19", {"vllm": {"gpu-memory-utilization": 0.9}}, {}, "pass"),
    (
        "EL20",
        {"vllm": {"kv-transfer-config": {"kv_connector": "NixlConnectr", "kv_role": "kv_both"}}},
        {},
        "fail",
    ),
    (
        "EL20",
        {"vllm": {"kv-transfer-config": {"kv_connector": "NixlConnector", "kv_role": "kv_both"}}},
        {},
        "pass",
    ),
    (
        "EL21",
        {
            "sglang-hicache": {
                "hicache-storage-backend": "mooncake",
                "hicache-mem-layout": "page_head",
            }
        },
        {},
        "fail",
    ),
    # SGLang turns layer_first into page_first for mooncake by itself (hicache_hook.py).
    (
        "EL21",
        {
            "sglang-hicache": {
                "hicache-storage-backend": "mooncake",
                "hicache-mem-layout": "layer_first",
            }
        },
        {},
        "pass",
    ),
    ("EL21", {"sglang-hicache": {"hicache-storage-backend": "mooncake"}}, {}, "pass"),
    (
        "EL21",
        {"sglang-hicache": {"hicache-mem-layout": "page_first", "hicache-io-backend": "direct"}},
        {},
        "fail",
    ),
    # 100 GB pool / 8 ranks = 12.5 GB per rank.
    ("EL22", {"sglang-hicache": {"hicache-size": 12}}, {}, "fail"),
    ("EL22", {"sglang-hicache": {"hicache-size": 13}}, {}, "pass"),
    ("EL23", {"sglang-hicache": {"hicache-storage-backend": "file"}}, {}, "fail"),
    (
        "EL23",
        {
            "sglang-hicache": {
                "hicache-storage-backend": "file",
                "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR": "/mnt/nvme/hicache",
            }
        },
        {},
        "pass",
    ),
    (
        "EL24",
        {"sglang-hicache": {"disaggregation-decode-enable-offload-kvcache": True}},
        {},
        "fail",
    ),
    (
        "EL24",
        {
            "sglang-hicache": {
                "disaggregation-decode-enable-offload-kvcache": True,
                "disaggregation-mode": "decode",
                "hicache-storage-backend": "mooncake",
            }
        },
        {},
        "pass",
    ),
    ("EL25", {"sglang-hicache": {"hicache-size": 20}}, {}, "fail"),
    (
        "EL25",
        {"sglang-hicache": {"hicache-size": 20, "enable-hierarchical-cache": True}},
        {},
        "pass",
    ),
    ("EL26", {"dynamo-kvbm": {"DYN_KVBM_DISK_CACHE_GB": 100}}, {}, "fail"),
    (
        "EL26",
        {"dynamo-kvbm": {"DYN_KVBM_DISK_CACHE_GB": 100, "DYN_KVBM_DISK_CACHE_DIR": "/mnt/nvme"}},
        {},
        "pass",
    ),
    ("EL27", {"dynamo-kvbm": {"DYN_KVBM_DISK_CACHE_GB": 100}}, {"tiers": FS_TIERS}, "fail"),
    (
        "EL27",
        {
            "dynamo-kvbm": {
                "DYN_KVBM_DISK_CACHE_GB": 100,
                "DYN_KVBM_DISK_ZEROFILL_FALLBACK": True,
            }
        },
        {"tiers": FS_TIERS},
        "pass",
    ),
    (
        "EL28",
        {"dynamo-kvbm": {"disaggregation-mode": "prefill", "connector": ["kvbm"]}},
        {},
        "fail",
    ),
    (
        "EL28",
        {"dynamo-kvbm": {"disaggregation-mode": "prefill", "connector": ["kvbm", "nixl"]}},
        {},
        "pass",
    ),
    (
        "EL29",
        {"mooncake": {"client": {"local_hostname": "n1", **MASTER, "metadata_server": ""}}},
        {},
        "fail",
    ),
    ("EL29", {"mooncake": {"client": CLIENT}}, {}, "pass"),
    ("EL30", {"mooncake": {"host": "n1", "enable_offload": True}}, {}, "fail"),
    (
        "EL30",
        {
            "mooncake": {
                "host": "n1",
                "enable_offload": True,
                "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH": "/nvme/mc",
                "MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES": 10**11,
            }
        },
        {},
        "pass",
    ),
    ("EL31", {"mooncake": {"master": {"eviction_ratio": 1.5}}}, {}, "fail"),
    ("EL31", {"mooncake": {"eviction_ratio": 0.1}}, {}, "pass"),
]


# One request: the lint reads the plan only, but runs where the review runs every rule.
REPLAY = TraceReplay(np.zeros(1), np.array([16]), np.array([16]), 0, None)
LINT = {f"EL{n:02d}" for n in (*range(1, 8), *range(9, 32))}


def _lint(engines: dict[str, Any], fields: dict[str, Any], codes: set[str] = LINT):
    doc = copy.deepcopy(BASE)
    stage = doc["stages"]["prefill"]
    stage.update(copy.deepcopy(fields))
    stage["engines"] = engines
    plan = check_plan("plan.yaml", doc)
    review = review_plan(plan, REPLAY, PlanPerf(327_680))
    return [c for c in review.checks if c.code in codes]


@pytest.mark.parametrize(
    ("code", "engines", "fields", "expected"),
    CASES,
    ids=[f"{c[0]}-{c[3]}-{i}" for i, c in enumerate(CASES)],
)
def test_engine_lint_case(code, engines, fields, expected) -> None:
    """The check fails on the broken settings and passes on the fixed ones."""
    found = [c for c in _lint(engines, fields) if c.code == code]
    assert len(found) == 1, [(c.code, c.subject, c.status) for c in _lint(engines, fields)]
    assert found[0].status == expected, found[0].message
    assert found[0].source


def test_every_new_check_has_a_failing_and_a_passing_case() -> None:
    """EL09-EL31 each appear failing and passing."""
    fails = {c[0] for c in CASES if c[3] == "fail"}
    passes = {c[0] for c in CASES if c[3] == "pass"}
    codes = {f"EL{n:02d}" for n in range(9, 32)}
    assert fails == codes
    assert passes == codes


def test_checks_absent_without_their_settings() -> None:
    """A plan without engine settings gets no engine lint at all: the rules do not apply."""
    assert _lint({}, {}) == []


def test_a_small_budget_alone_starts() -> None:
    """`vllm serve` caps its default max_num_seqs at the token budget: 64 alone is no EL18."""
    assert [
        c for c in _lint({"vllm": {"max-num-batched-tokens": 64}}, {}) if c.code == "EL18"
    ] == []


def test_kvbm_host_below_device_is_per_engine_instance() -> None:
    """EL01 compares KVBM's per-instance cache with one TP group's pool, not the instance's."""
    # 100 GB over 4 TP groups = 25 GB per engine instance: 30 GB passes, 20 GB fails.
    for gb, status in ((30, "pass"), (20, "fail")):
        (el01,) = _lint({"dynamo-kvbm": {"DYN_KVBM_CPU_CACHE_GB": gb}}, {}, {"EL01"})
        assert el01.status == status, el01.message


def test_a_setting_is_quoted_as_the_plan_writes_it() -> None:
    """EL09 says how the demand adds up with the plan's own numbers, every digit of them."""
    # 8 ranks x 123.456 GiB = 1.06 TB > 1 TB: fails, and ':g' would have kept only 123.456;
    # 1234567.5 would have read 1.23457e+06.
    (el09,) = _lint({"lmcache": {"max_local_cpu_size": 123.456}}, {}, {"EL09"})
    assert el09.status == "fail" and "max_local_cpu_size 123.456 GiB x 8 ranks" in el09.message
    (el09,) = _lint({"lmcache": {"max_local_cpu_size": 1234567.5}}, {}, {"EL09"})
    assert "max_local_cpu_size 1234567.5 GiB x 8 ranks" in el09.message
    (el09,) = _lint({"dynamo-kvbm": {"DYN_KVBM_CPU_CACHE_GB": 300}}, {}, {"EL09"})
    assert "DYN_KVBM_CPU_CACHE_GB 300 x 4 instances" in el09.message


def test_a_kvbm_decode_worker_role_alone_is_not_kvbm() -> None:
    """A decode worker's --disaggregation-mode beside NIXL alone runs no KVBM: no EL01/EL02."""
    nixl = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
    role = {"dynamo-kvbm": {"disaggregation-mode": "decode"}, "vllm": {"kv-transfer-config": nixl}}
    assert _lint(role, {}, {"EL01", "EL02"}) == []
    # The same worker with KVBM's connector, or a plan's plain KVBM block, is KVBM's.
    kvbm = {**nixl, "kv_connector": "DynamoConnector"}
    with_kvbm = {**role, "vllm": {"kv-transfer-config": kvbm}}
    assert [c.code for c in _lint(with_kvbm, {}, {"EL01"})] == ["EL01"]
    assert [c.code for c in _lint({"dynamo-kvbm": {}}, {}, {"EL01"})] == ["EL01"]
