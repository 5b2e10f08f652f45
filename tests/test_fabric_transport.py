"""Transport per fabric: back-end networks, KV transfer settings per fabric, the derated link.

The instance catalog says what each back-end network is; the engine files carry the transfer
settings of each (EFA, InfiniBand, TCPX, Ethernet); the replay derates TCP links.

Expected settings come from the engines' sources (kvadvisor/catalog/data/fabrics.yaml F1-F4:
Mooncake's protocols rdma/efa/tcp, NIXL's UCX and LIBFABRIC backends, SGLang's
MOONCAKE_PROTOCOL); the derating is Mooncake's TCP figure, 87 GB/s / 2.4 over 4 x 200 Gbps.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from emit_fixtures import HOST, POOL
from emit_fixtures import emit_report as _report
from plan_documents import plan_of

from kvadvisor.advice.verdicts import LINK_BUSY_WARNING, link_notes, transport_of
from kvadvisor.catalog.fabrics import load_fabrics
from kvadvisor.catalog.instances import load_instances
from kvadvisor.emit.context import EmitContext
from kvadvisor.emit.deployment import deployment_from_report
from kvadvisor.emit.writers import EMITTERS
from kvadvisor.engines.router import is_router_file
from kvadvisor.fleet.fromplan import resolve_plan  # the test reads the resolved link rate
from kvadvisor.plan import engine_settings_table
from kvadvisor.plan.engine_files import read_engine_file
from kvadvisor.results.verdict import LinkChoice

TABLE = engine_settings_table()
INSTANCES = load_instances()
# Mooncake README: the RDMA transfer engine moves 87 GB/s over 4 x 200 Gbps (100 GB/s), 2.4x TCP.
TCP_SHARE = 87.0 / 2.4 / (4 * 200 / 8)
# One instance per fabric the issue names, from the catalog as the providers describe them.
FABRIC_INSTANCES = {
    "efa": "p5e.48xlarge",  # AWS EFA v2, 32 cards
    "infiniband": "Standard_ND96isr_H100_v5",  # Azure, 8 x 400 Gb NDR
    "tcpx": "a3-highgpu-8g",  # GCP A3 High, GPUDirect-TCPX
    "ethernet": "g6.48xlarge",  # AWS G6: no back-end network, its 100 Gbit ENA NIC
}


def test_every_back_end_network_says_what_it_is() -> None:
    """Each instance with a back-end network names its fabric; the text agrees with the kind."""
    kinds = {
        "EFA": "efa",
        "TCPXO": "tcpxo",
        "TCPX": "tcpx",
        "RoCE": "roce",
        "InfiniBand": "infiniband",
    }
    for spec in INSTANCES.values():
        if not spec.backend_network_gbit:
            assert spec.fabric.name == "ethernet", spec.name
            continue
        assert spec.backend_fabric in load_fabrics(), spec.name
        text = spec.backend_network or ""
        named = next((k for word, k in kinds.items() if word in text), None)
        if named is not None:
            assert spec.fabric.name == named, (spec.name, text)
    assert {n: INSTANCES[i].fabric.name for n, i in FABRIC_INSTANCES.items()} == {
        n: n for n in FABRIC_INSTANCES
    }


def test_only_rdma_fabrics_name_nics_and_tcp_ones_are_derated() -> None:
    """RDMA fabrics keep the line rate; TCP ones move KV at Mooncake's TCP share."""
    for f in load_fabrics().values():
        assert (f.device_hint is not None) == (f.rdma and f.mooncake_protocol == "rdma"), f.name
        assert f.link_efficiency == (1.0 if f.rdma else pytest.approx(TCP_SHARE)), f.name
        assert f.source, f.name
    efa = load_fabrics()["efa"]
    assert (efa.mooncake_protocol, efa.nixl_backend) == ("efa", "LIBFABRIC")


def _context(fabric: str, decode_tiers=(HOST,), prefill_tiers=(HOST, POOL)) -> EmitContext:
    """A disaggregated deployment on the fabric's instance (the emit fixtures' sizes)."""
    report = _report(prefill=prefill_tiers, decode=decode_tiers)
    plan, facts = deployment_from_report(report)
    transport = transport_of(INSTANCES[FABRIC_INSTANCES[fabric]])
    stages = {k: replace(f, transport=transport) for k, f in facts.stages.items()}
    return EmitContext(
        report, plan, replace(facts, stages=stages), "kvadvisor analyze t --emit all"
    )


def _settings(files: dict[str, str], engine: str) -> dict[str, dict]:
    """Every emitted file of ``engine`` read back as a plan reads engine files, by file."""
    out = {}
    for name, text in files.items():
        if name.endswith(".txt") or is_router_file(name):
            continue
        for eng, settings in read_engine_file(name, text, TABLE).items():
            if eng == engine:
                out[name] = settings
    return out


# (fabric, Mooncake protocol, NICs named, NIXL backends in vLLM's connector, SGLang env)
EXPECTED = [
    ("efa", "efa", False, ["LIBFABRIC"], "efa"),
    ("infiniband", "rdma", True, None, None),
    ("tcpx", "tcp", False, None, "tcp"),
    ("ethernet", "tcp", False, None, "tcp"),
]


@pytest.mark.parametrize(("fabric", "protocol", "nics", "nixl", "sglang_env"), EXPECTED)
def test_sglang_pd_transfer_follows_the_fabric(fabric, protocol, nics, nixl, sglang_env) -> None:
    """--disaggregation-ib-device only on RDMA verbs; MOONCAKE_PROTOCOL off the rdma default."""
    settings = _settings(EMITTERS["sglang-hicache"](_context(fabric)), "sglang-hicache")
    for name in ("sglang-prefill.sh", "sglang-decode.sh"):
        s = settings[name]
        assert s["disaggregation-transfer-backend"] == "mooncake"
        assert ("disaggregation-ib-device" in s) == nics, name
        assert s.get("MOONCAKE_PROTOCOL") == sglang_env, name


@pytest.mark.parametrize(("fabric", "protocol", "nics", "nixl", "sglang_env"), EXPECTED)
def test_mooncake_store_and_client_follow_the_fabric(fabric, protocol, nics, nixl, sglang_env):
    """The store's --protocol and the client JSON's protocol; mlx5 NICs only on RDMA verbs."""
    files = EMITTERS["mooncake"](_context(fabric))
    settings = _settings(files, "mooncake")
    store = settings["mooncake-store-prefill.sh"]
    assert store["protocol"] == protocol
    assert ("device_names" in store) == nics
    client = json.loads(files["mooncake-client.json"])
    assert client["protocol"] == protocol
    assert ("mlx5" in client["device_name"]) == nics
    if not nics:
        assert client["device_name"] == ""
        lines = [
            line
            for n, t in files.items()
            if n.endswith((".sh", ".json"))
            for line in t.splitlines()
            if not line.lstrip().startswith("#")
        ]
        assert not [line for line in lines if "mlx5" in line]


@pytest.mark.parametrize(("fabric", "protocol", "nics", "nixl", "sglang_env"), EXPECTED)
def test_vllm_nixl_backend_follows_the_fabric(fabric, protocol, nics, nixl, sglang_env) -> None:
    """NixlConnector names LIBFABRIC on EFA; elsewhere vLLM's default (UCX) stands."""
    for engine, name in (("vllm", "vllm-decode.sh"), ("lmcache", "vllm-lmcache-decode.sh")):
        settings = _settings(EMITTERS[engine](_context(fabric)), "vllm")
        transfer = settings[name]["kv-transfer-config"]
        connectors = transfer.get("kv_connector_extra_config", {}).get("connectors", [transfer])
        nixl_conn = next(c for c in connectors if c["kv_connector"] == "NixlConnector")
        assert nixl_conn.get("kv_connector_extra_config", {}).get("backends") == nixl, engine


@pytest.mark.parametrize(("fabric", "protocol", "nics", "nixl", "sglang_env"), EXPECTED)
def test_dynamo_kvbm_nixl_backend_follows_the_fabric(fabric, protocol, nics, nixl, sglang_env):
    """Dynamo workers: NIXL in --kv-transfer-config (not --connector), its backend per fabric.

    Prefill runs KVBM's DynamoConnector beside NixlConnector under PdConnector (Dynamo
    args.py@000a36a, _connector_to_kv_transfer_json); decode NixlConnector alone.
    """
    files = EMITTERS["dynamo-kvbm"](_context(fabric))
    settings = _settings(files, "vllm")
    prefill = settings["dynamo-prefill.sh"]["kv-transfer-config"]
    assert prefill["kv_connector"] == "PdConnector"
    dynamo, nixl_conn = prefill["kv_connector_extra_config"]["connectors"]
    assert dynamo["kv_connector"] == "DynamoConnector"
    decode = settings["dynamo-decode.sh"]["kv-transfer-config"]
    for conn in (nixl_conn, decode):
        assert conn["kv_connector"] == "NixlConnector"
        assert conn.get("kv_connector_extra_config", {}).get("backends") == nixl
    for name in ("dynamo-prefill.sh", "dynamo-decode.sh"):
        assert "connector" not in _settings(files, "dynamo-kvbm").get(name, {})


@pytest.mark.parametrize(("fabric", "protocol", "nics", "nixl", "sglang_env"), EXPECTED)
def test_vllm_mooncake_connector_protocol_follows_the_fabric(
    fabric, protocol, nics, nixl, sglang_env
):
    """The MooncakeConnector of vLLM takes mooncake_protocol (default rdma) off RDMA verbs."""
    settings = _settings(EMITTERS["mooncake"](_context(fabric)), "vllm")
    for name in ("vllm-mooncake-prefill.sh", "vllm-mooncake-decode.sh"):
        transfer = settings[name]["kv-transfer-config"]
        (conn,) = [
            c
            for c in transfer["kv_connector_extra_config"]["connectors"]
            if c["kv_connector"] == "MooncakeConnector"
        ]
        extra = conn.get("kv_connector_extra_config", {})
        assert extra.get("mooncake_protocol", "rdma") == protocol, name
        assert ("mooncake_protocol" in extra) == (protocol != "rdma"), name


@pytest.mark.parametrize(("fabric", "protocol", "nics", "nixl", "sglang_env"), EXPECTED)
def test_lmcache_mooncake_store_protocol_follows_the_fabric(
    fabric, protocol, nics, nixl, sglang_env
):
    """LMCache's mooncakestore:// backend: extra_config names the protocol (its default is tcp).

    Without it LMCache's Mooncake Store client would move KV over TCP on an RDMA fabric, and fail
    at start for want of local_hostname, metadata_server and master_server_address (F9).
    """
    ctx = _context(fabric, prefill_tiers=(HOST, POOL), decode_tiers=(HOST, POOL))
    settings = _settings(EMITTERS["lmcache"](ctx), "lmcache")
    for name in ("lmcache-prefill.yaml", "lmcache-decode.yaml"):
        s = settings[name]
        assert s["remote_url"].startswith("mooncakestore://")
        extra = s["extra_config"]
        assert extra["protocol"] == protocol, name
        assert ("mlx5" in extra["device_name"]) == nics, name
        assert {"local_hostname", "metadata_server", "master_server_address"} <= set(extra)
        assert extra["global_segment_size"] == 0  # the pool's memory is the store nodes'


def _pd_doc(instance: str, **link) -> dict:
    return {
        "name": "pd",
        "model": {"name": "qwen3-32b", "tp": 4},
        "topology": "disaggregated",
        **({"pd_link": link} if link else {}),
        "stages": {
            "prefill": {"instance": instance, "count": 1},
            "decode": {"instance": instance, "count": 1},
        },
    }


@pytest.mark.parametrize("fabric", sorted(FABRIC_INSTANCES))
def test_replay_link_is_derated_on_tcp_fabrics(fabric) -> None:
    """The P-to-D link enters the replay at line rate x the fabric's share (TCP: Mooncake's)."""
    spec = INSTANCES[FABRIC_INSTANCES[fabric]]
    gbit = spec.backend_network_gbit or spec.frontend_network_gbit
    dep, notes = resolve_plan(plan_of(_pd_doc(spec.name)))
    share = 1.0 if fabric in ("efa", "infiniband") else TCP_SHARE
    assert dep.link.bytes_per_s == pytest.approx(gbit * 1e9 / 8 * share)
    assert any("P-to-D link" in n and ("no RDMA" in n) != (share == 1.0) for n in notes)


def test_a_plan_efficiency_or_bandwidth_overrides_the_fabric() -> None:
    """The plan's own efficiency wins; a plan bandwidth is taken as given (no fabric share)."""
    dep, _ = resolve_plan(plan_of(_pd_doc("a3-highgpu-8g", efficiency=0.5)))
    assert dep.link.bytes_per_s == pytest.approx(1000e9 / 8 * 0.5)
    dep, _ = resolve_plan(plan_of(_pd_doc("a3-highgpu-8g", bandwidth="25 GB/s")))
    assert dep.link.bytes_per_s == pytest.approx(25e9)


def test_a_link_above_80_percent_at_p99_is_a_warning() -> None:
    """The verdict warns above 80% of the link's rate at p99, not at or below it."""

    def link(p99_share: float) -> LinkChoice:
        return LinkChoice(50e9, "x", 50e9 * p99_share, 50e9, p99_share)

    assert LINK_BUSY_WARNING == 0.8
    assert link_notes(link(0.8)) == ()
    (note,) = link_notes(link(0.85))
    assert note.startswith("warning: the P-to-D link runs at 85.0% of its 50 GB/s")
