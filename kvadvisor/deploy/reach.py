"""How much bandwidth and IOPS one node reaches on a storage option, through every cap on the path.

Per node, by the scope the catalog figure holds for:

* ``per_drive`` / ``per_volume``: one device's figure (at its size) x devices; block volumes are
  then capped by the instance's disk bandwidth and IOPS caps (``disk_cap_*``);
* ``per_client``: the figure is what one client node reaches; it is not multiplied;
* ``whole_pool`` (and ``per_tib``, the pool at its provisioned size): the pool's figure shared
  by ``clients`` nodes;
* a shared system is reached over a NIC: the node's share never exceeds that NIC's bandwidth
  (the back-end fabric or the front-end NIC, :func:`kvadvisor.deploy.access.access`).

Every figure used that the catalog marks unconfirmed is named in ``Reach.unconfirmed``, so a
verdict built on it can say so.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvadvisor.catalog.instances import InstanceSpec
from kvadvisor.catalog.storage import StorageSpec
from kvadvisor.deploy.access import Via, access
from kvadvisor.units import BYTES_PER_MB, Unit, format_value

BITS_PER_BYTE = 8
BYTES_PER_GBIT = 1e9 / BITS_PER_BYTE


@dataclass(frozen=True)
class Reach:
    """What one node reaches on a storage option (None = not published), and what bounds it."""

    read_bytes_per_s: float | None
    write_bytes_per_s: float | None
    read_iops: float | None
    write_iops: float | None
    read_limit: str
    write_limit: str
    capped: bool
    unconfirmed: tuple[str, ...] = ()


def nic_bytes_per_s(instance: InstanceSpec, via: str | None) -> float | None:
    """The NIC bandwidth a path uses, bytes per second (None when the catalog lacks it)."""
    gbit = (
        instance.backend_network_gbit
        if via == Via.BACKEND
        else instance.frontend_network_gbit
        if via == Via.FRONTEND
        else None
    )
    return None if gbit is None else gbit * BYTES_PER_GBIT


def _bound(
    value: float | None, cap: float | None, own: str, cap_text: str
) -> tuple[float | None, str, bool]:
    """``value`` capped at ``cap``, the text of whichever bounds it, and whether the cap did."""
    if value is None:
        return None, f"{own} not published", False
    if cap is not None and cap < value:
        return cap, cap_text, True
    return value, own, False


def reach(
    instance: InstanceSpec,
    spec: StorageSpec,
    devices: int = 1,
    device_gib: float | None = None,
    clients: int = 1,
) -> Reach:
    """Bandwidth and IOPS one node of ``instance`` reaches on ``spec`` with ``devices`` of it.

    ``device_gib`` sizes one device, volume or (for pools) the whole pool; ``clients`` is the
    number of nodes sharing a pool. Bandwidths in bytes per second.
    """
    acc = access(instance, spec)
    perf = spec.perf_at(device_gib)
    unconfirmed = [
        f"{spec.name}.{name}"
        for name in ("read_mbps", "write_mbps", "read_iops", "write_iops")
        if spec.is_unconfirmed(name) and getattr(perf, name) is not None
    ]

    def rate(mbps: float | None) -> float | None:
        return None if mbps is None else mbps * BYTES_PER_MB

    scope = spec.result_scope
    if scope in ("per_drive", "per_volume"):
        n = max(1, devices)
        what = f"{n} x {spec.name}"
        values = {
            "read": rate(perf.read_mbps and perf.read_mbps * n),
            "write": rate(perf.write_mbps and perf.write_mbps * n),
        }
        iops = {
            "read": None if perf.read_iops is None else perf.read_iops * n,
            "write": None if perf.write_iops is None else perf.write_iops * n,
        }
    elif scope == "whole_pool":
        share = max(1, clients)
        what = f"{spec.name} shared by {share} node(s)"
        values = {
            "read": None if perf.read_mbps is None else rate(perf.read_mbps) / share,
            "write": None if perf.write_mbps is None else rate(perf.write_mbps) / share,
        }
        iops = {
            "read": None if perf.read_iops is None else perf.read_iops / share,
            "write": None if perf.write_iops is None else perf.write_iops / share,
        }
    else:  # per_client, and per-socket/module/superchip figures: what one node reaches
        what = f"{spec.name} per {scope.removeprefix('per_')}"
        values = {"read": rate(perf.read_mbps), "write": rate(perf.write_mbps)}
        iops = {"read": perf.read_iops, "write": perf.write_iops}
    # A published per-client limit bounds a pool's share too.
    clients_cap = {"read": rate(spec.client_read_mbps), "write": rate(spec.client_write_mbps)}

    bw_cap, bw_text, iops_cap, iops_text = None, "", None, ""
    if acc.ok and acc.via == Via.VOLUMES:
        if instance.disk_cap_mbps is not None:
            bw_cap = instance.disk_cap_mbps * BYTES_PER_MB
            bw_text = f"{instance.name} disk cap {format_value(bw_cap, Unit.BYTES_PER_S)}"
            if "disk_cap_mbps" in instance.unconfirmed:
                unconfirmed.append(f"{instance.name}.disk_cap_mbps")
        if instance.disk_cap_iops is not None:
            iops_cap = instance.disk_cap_iops
            iops_text = f"{instance.name} disk cap {format_value(iops_cap, Unit.IOPS)}"
    elif acc.ok and acc.via in (Via.FRONTEND, Via.BACKEND):
        field = "backend_network_gbit" if acc.via == Via.BACKEND else "frontend_network_gbit"
        bw_cap = nic_bytes_per_s(instance, acc.via)
        if bw_cap is None:
            unconfirmed.append(f"{instance.name}.{field}")
        else:
            bw_text = f"{instance.name} {acc.via} {format_value(bw_cap, Unit.BYTES_PER_S)}"
            if field in instance.unconfirmed:
                unconfirmed.append(f"{instance.name}.{field}")

    capped = False
    limits: dict[str, str] = {}
    out: dict[str, float | None] = {}
    for d in ("read", "write"):
        value, text, hit = values[d], what, False
        if clients_cap[d] is not None and value is not None and clients_cap[d] < value:
            value, text, hit = clients_cap[d], f"{spec.name} per-client limit", True
        value, text, hit2 = _bound(value, bw_cap, text, bw_text)
        out[d], limits[d] = value, text
        capped = capped or hit or hit2
    iops_out = {}
    for d in ("read", "write"):
        value, _, hit = _bound(iops[d], iops_cap, "", iops_text)
        iops_out[d] = value
        capped = capped or hit
    return Reach(
        read_bytes_per_s=out["read"],
        write_bytes_per_s=out["write"],
        read_iops=iops_out["read"],
        write_iops=iops_out["write"],
        read_limit=limits["read"],
        write_limit=limits["write"],
        capped=capped,
        unconfirmed=tuple(dict.fromkeys(unconfirmed)),
    )
