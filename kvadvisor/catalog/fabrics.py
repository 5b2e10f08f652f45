"""GPU back-end networks and the KV transfer settings each takes (the fabric catalog)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from kvadvisor.catalog.loader import check_entries
from kvadvisor.catalog.storage import DATA_DIR
from kvadvisor.checker import Field
from kvadvisor.errors import CatalogError
from kvadvisor.io.yamlio import load_yaml

FABRICS_FILE = DATA_DIR / "fabrics.yaml"
# What an instance without a back-end network moves KV over: its front-end NIC.
FRONTEND_FABRIC = "ethernet"
# What a back-end network whose kind an instance entry does not give is taken as.
UNSTATED_BACKEND = "rdma"
MOONCAKE_PROTOCOLS = ("rdma", "efa", "tcp")  # Mooncake transfer engine (fabrics.yaml F1)
NIXL_BACKENDS = ("UCX", "LIBFABRIC")  # NIXL plugin names (fabrics.yaml F2)

FABRIC_SCHEMA: dict[str, Field] = {
    "rdma": Field("bool", required=True, help="the transfer engines move KV by RDMA"),
    "mooncake_protocol": Field("str", required=True, choices=MOONCAKE_PROTOCOLS),
    "nixl_backend": Field("str", required=True, choices=NIXL_BACKENDS),
    "device_hint": Field("str", help="example RDMA NIC names (`ibv_devices` lists them)"),
    "link_efficiency": Field(
        "number", required=True, positive=True, help="share of the line rate a KV transfer reaches"
    ),
}


@dataclass(frozen=True)
class FabricSpec:
    """One back-end network kind and the KV transfer settings it takes."""

    name: str
    display_name: str
    rdma: bool
    mooncake_protocol: str
    nixl_backend: str
    device_hint: str | None
    link_efficiency: float
    source: tuple[str, ...]
    notes: str = ""
    aliases: tuple[str, ...] = ()


def parse_fabrics(data: Any, path: str) -> dict[str, FabricSpec]:
    """Check a parsed fabric catalog and build its specs."""
    out = {}
    for name, e in check_entries(path, "fabrics", data, FABRIC_SCHEMA).items():
        if e["link_efficiency"] > 1:
            raise CatalogError(f"{path}: entries.{name}.link_efficiency: a share, at most 1")
        if e.get("device_hint") and not e["rdma"]:
            raise CatalogError(f"{path}: entries.{name}.device_hint: only RDMA NICs are named")
        out[name] = FabricSpec(
            name=name,
            display_name=e.get("display_name", name),
            rdma=e["rdma"],
            mooncake_protocol=e["mooncake_protocol"],
            nixl_backend=e["nixl_backend"],
            device_hint=e.get("device_hint"),
            link_efficiency=float(e["link_efficiency"]),
            source=tuple(e["source_text"]),
            notes=e.get("notes") or "",
        )
    for needed in (FRONTEND_FABRIC, UNSTATED_BACKEND):
        if needed not in out:
            raise CatalogError(f"{path}: needs an '{needed}' entry")
    return out


@lru_cache(maxsize=2)
def load_fabrics(path: str | Path | None = None) -> dict[str, FabricSpec]:
    """The packaged fabric catalog (or ``path``), by name."""
    p = Path(path or FABRICS_FILE)
    return parse_fabrics(load_yaml(p, CatalogError), str(p))
