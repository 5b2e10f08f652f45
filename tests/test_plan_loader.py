"""Plan files: units, schema checks with suggestions, catalog names, hostile YAML."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from kvadvisor.catalog.loader import FieldSpec, check_entries
from kvadvisor.plan import PlanCatalogs, PlanError, check_plan, engine_settings_table, load_plan
from kvadvisor.plan.quantity import QuantityError, parse_quantity

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
                {"name": "host", "storage": {"kind": "dram", "read_bandwidth": "50 GB/s",
                                             "write_bandwidth": "50 GB/s"}, "capacity": "1 TB"},
                {"name": "nvme", "storage": {"kind": "ssd", "read_bandwidth": "6.8 GB/s",
                                             "write_bandwidth": "4 GB/s", "latency": "80 us",
                                             "read_iops": 1_000_000}, "capacity": "2 TB",
                 "devices": 8},
            ],
        },
        "decode": {"count": 4},
    },
}

# A tiny storage catalog in the shape the catalog loader checks (the real one ships elsewhere).
STORAGE = check_entries(
    "test-storage.yaml", "storage",
    {"kind": "storage", "sources": {"S1": "test figures"},
     "entries": {"nvme-gen5": {"kind": "ssd", "read_gbps": 14.0, "write_gbps": 10.0,
                               "latency_us": 60.0, "source": ["S1"]},
                 "host-dram": {"kind": "dram", "read_gbps": 100.0, "write_gbps": 100.0,
                               "source": ["S1"]}}},
    {"kind": FieldSpec("str"), "read_gbps": FieldSpec("number"), "write_gbps": FieldSpec("number"),
     "latency_us": FieldSpec("number")},
)


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
        (["stages", "prefill", "cuont"], 2,
         "stages.prefill.cuont: unknown field; did you mean 'count'?"),
        (["model", "kv_byte_per_token"], 1, "did you mean 'kv_bytes_per_token'?"),
        (["stages", "prefill", "tiers", 1, "capacity"], "2 TB/s",
         "capacity: 'TB/s' is a rate unit; a size takes one of"),
        (["stages", "prefill", "tiers", 0, "storage", "read_bandwidth"], "50 GB",
         "read_bandwidth: 'GB' is a size unit; a rate takes one of"),
        (["slo", "ttft_p99"], "2 GB", "slo.ttft_p99: 'GB' is a size unit"),
        (["stages", "prefill", "tiers", 1, "capacity"], 2000, "needs a unit, e.g. '2 TB'"),
        (["stages", "prefill", "tiers", 1, "capacity"], "-2 TB", "must not be negative"),
        (["stages", "prefill", "gpu_kv_pool"], "-1 GiB", "must not be negative"),
        (["stages", "prefill", "count"], -1, "count: must be >= 1"),
        (["traffic", "scale"], 0, "traffic.scale: must be > 0"),
        (["stages", "prefill", "engines", "lmcache", "chunk_sise"], 256,
         "engines.lmcache.chunk_sise: unknown field; did you mean 'chunk_size'?"),
        (["stages", "prefill", "engines", "sglang-hicache"], {"hicache-ratoi": 2},
         "did you mean 'hicache-ratio'?"),
        (["stages", "prefill", "engines", "dynamo-kvbm"], {"DYN_KVBM_CPU_CACHE_GB": "100 GB"},
         "expected a plain number (in GB, as dynamo-kvbm takes it)"),
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
    catalogs = PlanCatalogs(storage=STORAGE)
    plan = check_plan("p.yaml", _with(["stages", "prefill", "tiers", 1, "storage"], "nvme-gen5"),
                      catalogs)
    tier = plan.stages[0].tiers[1]
    assert tier.storage.catalog_name == "nvme-gen5"
    assert tier.storage.read_bytes_per_s == 14e9 and tier.storage.write_bytes_per_s == 10e9
    assert tier.storage.latency_s == pytest.approx(60e-6)
    assert tier.storage.source == ("test figures",)
    with pytest.raises(PlanError) as err:
        check_plan("p.yaml", _with(["stages", "prefill", "tiers", 1, "storage"], "nvme-gen4"),
                   catalogs)
    assert "unknown storage 'nvme-gen4'; did you mean nvme-gen5" in str(err.value)
    assert "stages.prefill.tiers[1].storage" in str(err.value)


def test_instance_name_without_catalog_is_refused() -> None:
    """Without an instance catalog a name cannot be checked: say so, do not guess."""
    with pytest.raises(PlanError, match="no instance catalog is loaded"):
        check_plan("p.yaml", _with(["stages", "prefill", "instance"], "p5e.48xlarge"))


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
    [("2 TB", "size", 2e12), ("512 GiB", "size", 512 * 1024**3), ("1.5TB", "size", 1.5e12),
     ("5 GB/s", "rate", 5e9), ("800 MiB/s", "rate", 800 * 1024**2), ("250 ms", "time", 0.25),
     ("80 us", "time", 80e-6), ("2 s", "time", 2.0), ("0 B", "size", 0.0)],
)
def test_quantities(text, kind, value) -> None:
    """Units convert through the named constants."""
    assert parse_quantity(text, kind) == pytest.approx(value)


@pytest.mark.parametrize("text", ["2 Tb", "two TB", "2", "TB", "2 TB TB"])
def test_bad_quantities(text) -> None:
    """Unknown units and malformed text are refused."""
    with pytest.raises(QuantityError):
        parse_quantity(text, "size")
