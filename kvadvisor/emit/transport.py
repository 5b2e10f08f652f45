"""KV transfer settings per fabric: Mooncake's protocol and NICs, NIXL's backend, SGLang's env.

The stage's ``transport`` comes from the fabric catalog through the verdict: InfiniBand and
RoCE take Mooncake's ``rdma`` protocol with the RDMA NICs named; AWS EFA takes ``efa`` (libfabric,
devices found by Mooncake itself) and NIXL's ``LIBFABRIC`` backend; TCPX, TCPXO and plain
Ethernet take ``tcp`` and name no NICs (NIXL's ``UCX`` runs over TCP there). Every engine that
moves KV over the network takes its words from here: vLLM's NixlConnector (also Dynamo's and
LMCache's P/D transfer) and MooncakeConnector, SGLang's Mooncake transfer engine, the Mooncake
store and client, LMCache's Mooncake Store backend. A report without a transport (one that
predates it) keeps the RDMA settings, with the NICs as a placeholder to fill.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvadvisor.emit.text import Setting, placeholder
from kvadvisor.results.verdict import Transport
from kvadvisor.units import Unit, format_value

# Mooncake's default protocol, and SGLang's when MOONCAKE_PROTOCOL is unset (fabrics.yaml F4).
DEFAULT_PROTOCOL = "rdma"
DEFAULT_NIXL_BACKEND = "UCX"  # vLLM NixlConnector's default backends list (fabrics.yaml F3)
RDMA_DEVICES_HINT = "mlx5_0,mlx5_1"
SOURCES = (
    "Mooncake transfer_engine_py.cpp and efa_transport.md @3b5a594; NIXL plugins UCX, LIBFABRIC "
    "@8770b65; SGLang mooncake_transfer_engine.py @00157bd"
)
# vLLM MooncakeConnector's kv_connector_extra_config (fabrics.yaml F8): its protocol key and
# default; it discovers every RDMA device when device_name is empty.
MOONCAKE_CONNECTOR_PROTOCOL_KEY = "mooncake_protocol"


@dataclass(frozen=True)
class TransferPlan:
    """What one stage's KV transfer engines are told, and in what words."""

    fabric: str  # the fabric's display name, or "unknown"
    protocol: str  # Mooncake transfer engine protocol: rdma | efa | tcp
    devices: str | None  # the NICs to name (a placeholder), None: name none
    nixl_backend: str  # UCX | LIBFABRIC
    why: str


def transfer_plan(t: Transport | None) -> TransferPlan:
    """A stage's transfer settings from its fabric (RDMA with a NIC placeholder if unknown)."""
    if t is None:
        return TransferPlan(
            "unknown",
            DEFAULT_PROTOCOL,
            placeholder(f"rdma-devices, e.g. {RDMA_DEVICES_HINT}"),
            DEFAULT_NIXL_BACKEND,
            "the report names no fabric for this instance: RDMA assumed; use tcp without RDMA NICs",
        )
    devices = placeholder(f"rdma-devices, e.g. {t.device_hint}") if t.device_hint else None
    if t.mooncake_protocol == "efa":
        why = (
            f"{t.display_name}: Mooncake's efa transport (libfabric; it finds the EFA devices "
            "itself, mlx5 RDMA devices do not exist here) and NIXL's LIBFABRIC backend"
        )
    elif t.rdma:
        why = f"{t.display_name}: RDMA verbs on the named NICs"
    else:
        why = (
            f"{t.display_name} has no RDMA verbs: KV moves over TCP, so no RDMA NIC is named "
            f"(the replay derates this link to {format_value(t.link_efficiency, Unit.RATIO)} "
            "of line rate)"
        )
    return TransferPlan(
        t.display_name, t.mooncake_protocol, devices, t.nixl_backend, f"{why} ({SOURCES})"
    )


def nixl_connector(transport: Transport | None) -> dict[str, Any]:
    """The NixlConnector of vLLM, its NIXL backend named when not UCX (the default)."""
    conn: dict[str, Any] = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
    backend = transfer_plan(transport).nixl_backend
    if backend != DEFAULT_NIXL_BACKEND:
        conn["kv_connector_extra_config"] = {"backends": [backend]}
    return conn


def mooncake_connector(role: str, transport: Transport | None) -> dict[str, Any]:
    """VLLM's MooncakeConnector, its protocol named when not rdma (its default)."""
    conn: dict[str, Any] = {"kv_connector": "MooncakeConnector", "kv_role": role}
    protocol = transfer_plan(transport).protocol
    if protocol != DEFAULT_PROTOCOL:
        conn["kv_connector_extra_config"] = {MOONCAKE_CONNECTOR_PROTOCOL_KEY: protocol}
    return conn


def sglang_transfer(transport: Transport | None) -> tuple[list[Setting], list[Setting]]:
    """(environment, flags) of SGLang's Mooncake P/D transfer on the stage's fabric."""
    plan = transfer_plan(transport)
    env: list[Setting] = []
    flags: list[Setting] = []
    if plan.protocol != DEFAULT_PROTOCOL:
        env.append(Setting("MOONCAKE_PROTOCOL", plan.protocol, plan.why))
    if plan.devices is not None:
        flags.append(Setting("disaggregation-ib-device", plan.devices, plan.why))
    return env, flags


def mooncake_client_transport(transport: Transport | None) -> dict[str, Any]:
    """The Mooncake client configuration's ``protocol`` and ``device_name`` keys.

    With no fabric known: RDMA, and a placeholder for its NICs.
    """
    plan = transfer_plan(transport)
    return {"protocol": plan.protocol, "device_name": plan.devices or ""}


def mooncake_store_settings(transport: Transport | None) -> list[Setting]:
    """mooncake_client's --protocol and, on RDMA, --device_names."""
    plan = transfer_plan(transport)
    out = [Setting("protocol", plan.protocol, plan.why)]
    if plan.devices is not None:
        out.append(Setting("device_names", plan.devices, "the RDMA NICs"))
    return out
