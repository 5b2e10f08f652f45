"""Plan files: units, schema checks with suggestions, catalog names, hostile YAML."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from kvadvisor.plan import PlanError, check_plan, engine_settings_table, load_plan
from kvadvisor.units.parse import QuantityError, parse_quantity

GOOD: dict[str, Any] = {
    "name": "good",
    "model": {"name": "llama-3.1-70b", "kv_bytes_per_token": 327680, "tp": 8},
    "slo": {"ttft_p99": "2 s", "tpot_p99": "50 ms"},
    "traffic": {"scale": 3},
    "stages": {
        "prefill": {
            "count": 8,
            "gpus_per_instance": 8,
            "host_memory": "2048 GiB",
            "gpu_kv_pool": "400 GB",
            "engines": {"vllm": {"block-size": 16}, "lmcache": {"chunk_size": 256}},
            "tiers": [
                {
                    "name": "host",
                    "storage": {
                        "kind": "dram",
                        "read_bandwidth": "50 GB/s",
                        "write_bandwidth": "50 GB/s",
                    },
                    "capacity": "1 TB",
                },
                {
                    "name": "nvme",
                    "storage": {
                        "kind": "ssd",
                        "read_bandwidth": "6.8 GB/s",
                        "write_bandwidth": "4 GB/s",
                        "latency": "80 us",
                        "read_iops": 1_000_000,
                    },
                    "capacity": "2 TB",
                    "devices": 8,
                },
            ],
        },
        "decode": {"count": 4},
    },
}


def _with(path: list[Any], value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(GOOD)
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


def test_good_plan_in_base_units() -> None:
    """Quantities become bytes, bytes/s and seconds; decimal and binary prefixes differ."""
    plan = check_plan("good.yaml", GOOD)
    pre = plan.stage("prefill")
    assert pre is not None and plan.stage("decode") is not None
    assert pre.host_memory_bytes == 2048 * 1024**3
    assert pre.gpu_kv_pool_bytes == 400e9
    host, nvme = pre.tiers
    assert host.capacity_bytes == 1e12 and nvme.capacity_bytes == 2e12
    assert nvme.storage.read_bytes_per_s == 6.8e9 and nvme.storage.latency_s == pytest.approx(80e-6)
    assert nvme.devices == 8 and not nvme.shared
    assert plan.slo.ttft_p99_s == 2.0 and plan.slo.tpot_p99_s == pytest.approx(0.05)
    assert plan.traffic_scale == 3.0
    assert pre.engines["lmcache"] == {"chunk_size": 256}


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (
            ["stages", "prefill", "cuont"],
            2,
            "stages.prefill.cuont: unknown field; did you mean 'count'?",
        ),
        (["model", "kv_byte_per_token"], 1, "did you mean 'kv_bytes_per_token'?"),
        (
            ["stages", "prefill", "tiers", 1, "capacity"],
            "2 TB/s",
            "capacity: 'TB/s' is a rate unit; a size takes one of",
        ),
        (
            ["stages", "prefill", "tiers", 0, "storage", "read_bandwidth"],
            "50 GB",
            "read_bandwidth: 'GB' is a size unit; a rate takes one of",
        ),
        (["slo", "ttft_p99"], "2 GB", "slo.ttft_p99: 'GB' is a size unit"),
        (["stages", "prefill", "tiers", 1, "capacity"], 2000, "needs a unit, e.g. '2 TB'"),
        (["stages", "prefill", "tiers", 1, "capacity"], "-2 TB", "must not be negative"),
        (["stages", "prefill", "gpu_kv_pool"], "-1 GiB", "must not be negative"),
        (["stages", "prefill", "count"], -1, "count: must be >= 1"),
        (["traffic", "scale"], 0, "traffic.scale: must be more than 0, got 0"),
        (
            ["stages", "prefill", "engines", "lmcache", "chunk_sise"],
            256,
            "engines.lmcache.chunk_sise: unknown field; did you mean 'chunk_size'?",
        ),
        (
            ["stages", "prefill", "engines", "sglang-hicache"],
            {"hicache-ratoi": 2},
            "did you mean 'hicache-ratio'?",
        ),
        (
            ["stages", "prefill", "engines", "dynamo-kvbm"],
            {"DYN_KVBM_CPU_CACHE_GB": "100 GB"},
            "expected a number, got '100 GB' (in GB per engine instance, as dynamo-kvbm takes it)",
        ),
        (["stages", "prefill", "engines", "lmcahce"], {}, "did you mean 'lmcache'?"),
        (["stages", "prefill", "tiers", 0, "storage", "kind"], "nvme", "must be one of"),
        (["stages", "prefil"], {}, "did you mean 'prefill'?"),
    ],
)
def test_invalid_plan_names_the_field_and_the_fix(path, value, expected) -> None:
    """Each mistake is one line naming file, key path and the fix."""
    with pytest.raises(PlanError) as err:
        check_plan("plan.yaml", _with(path, value))
    message = str(err.value)
    assert message.startswith("plan.yaml: ")
    assert expected in message
    assert "\n" not in message


def test_catalog_names_resolve_and_suggest() -> None:
    """A storage name is looked up in the catalog; a misspelt one gets the closest names."""
    plan = check_plan("p.yaml", _with(["stages", "prefill", "tiers", 1, "storage"], "nvme-gen5-x4"))
    tier = plan.stages[0].tiers[1]
    assert tier.storage.catalog_name == "nvme-gen5-x4" and tier.storage.kind == "ssd"
    # Samsung PM1743 class figures: 13,000 MB/s read, 6,600 MB/s write (catalog, with sources).
    assert tier.storage.read_bytes_per_s == 13_000e6 and tier.storage.write_bytes_per_s == 6_600e6
    assert tier.storage.source
    with pytest.raises(PlanError) as err:
        check_plan("p.yaml", _with(["stages", "prefill", "tiers", 1, "storage"], "nvme-gen5-x5"))
    message = str(err.value)
    assert "stages.prefill.tiers[1].storage: unknown storage option 'nvme-gen5-x5'" in message
    assert "did you mean 'nvme-gen5-x4'" in message


def test_cloud_disk_scales_with_its_size() -> None:
    """ESSD PL1 bandwidth is min(120 + 0.5 MB/s per GiB, 350 MB/s): 220 MB/s at 200 GiB."""
    tier = {"name": "essd", "storage": "alibaba-essd-pl1", "capacity": "200 GiB"}
    plan = check_plan("p.yaml", _with(["stages", "prefill", "tiers"], [tier]))
    cap = plan.stages[0].tiers[0].storage
    assert cap.kind == "block"
    assert cap.read_bytes_per_s == pytest.approx(220e6)
    assert cap.read_iops == pytest.approx(1800 + 50 * 200)
    assert cap.latency_s == pytest.approx(200e-6)


def test_instance_and_model_from_catalogs() -> None:
    """p5e.48xlarge: 8 × H200, 2,048 GiB host memory, 10,000 MB/s EBS cap; the model by HF id."""
    doc = _with(["stages", "prefill", "instance"], "p5e.48xlarge")
    del doc["stages"]["prefill"]["gpus_per_instance"]
    del doc["stages"]["prefill"]["host_memory"]
    doc["model"] = {"name": "meta-llama/Llama-3.1-70B-Instruct", "tp": 8}
    plan = check_plan("p.yaml", doc)
    pre = plan.stages[0]
    assert pre.instance == "p5e.48xlarge" and pre.gpus_per_instance == 8
    assert pre.gpu is not None and pre.gpu.name == "h200"
    assert pre.host_memory_bytes == 2048 * 1024**3
    assert pre.disk_bandwidth_cap_bytes_per_s == 10_000e6
    assert plan.model.name == "llama-3.1-70b" and plan.model.spec is not None
    with pytest.raises(PlanError, match=r"model.name: unknown model 'llama-3.1-71b'; did you mean"):
        check_plan("p.yaml", _with(["model", "name"], "llama-3.1-71b"))
    with pytest.raises(PlanError, match=r"stages.prefill.instance: unknown instance 'p5e.48xlrge'"):
        check_plan("p.yaml", _with(["stages", "prefill", "instance"], "p5e.48xlrge"))


def test_model_needs_name_or_kv_bytes() -> None:
    """A plan without any way to size the KV is refused."""
    with pytest.raises(PlanError, match="give a catalog model name or kv_bytes_per_token"):
        check_plan("p.yaml", _with(["model"], {"tp": 8}))


def test_hostile_yaml_runs_nothing(tmp_path: Path) -> None:
    """A python object tag is refused by the safe loader: one line, nothing executed."""
    marker = tmp_path / "ran"
    bad = tmp_path / "plan.yaml"
    bad.write_text(f"name: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(PlanError) as err:
        load_plan(bad)
    assert "invalid YAML" in str(err.value) and not marker.exists()


def test_not_a_mapping(tmp_path: Path) -> None:
    """A list at the top level is not a plan."""
    path = tmp_path / "plan.yaml"
    path.write_text("- a\n- b\n")
    with pytest.raises(PlanError, match="expected a mapping"):
        load_plan(path)


def test_engine_table_lists_sources() -> None:
    """Every documented setting names a source key that the table defines."""
    table = engine_settings_table()
    for engine, spec in table["engines"].items():
        for name, setting in spec["settings"].items():
            assert setting["source"] in table["sources"], (engine, name)


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        ("2 TB", "size", 2e12),
        ("512 GiB", "size", 512 * 1024**3),
        ("1.5TB", "size", 1.5e12),
        ("5 GB/s", "rate", 5e9),
        ("800 MiB/s", "rate", 800 * 1024**2),
        ("250 ms", "time", 0.25),
        ("80 us", "time", 80e-6),
        ("2 s", "time", 2.0),
        ("0 B", "size", 0.0),
    ],
)
def test_quantities(text, kind, value) -> None:
    """Units convert through the named constants."""
    assert parse_quantity(text, kind) == pytest.approx(value)


@pytest.mark.parametrize("text", ["2 Tb", "two TB", "2", "TB", "2 TB TB"])
def test_bad_quantities(text) -> None:
    """Unknown units and malformed text are refused."""
    with pytest.raises(QuantityError):
        parse_quantity(text, "size")
