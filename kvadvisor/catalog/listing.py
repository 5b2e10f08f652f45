"""Text for people about catalog entries: a table per kind and one entry in full."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from typing import Any

from kvadvisor.catalog.gpus import GpuSpec
from kvadvisor.catalog.instances import InstanceSpec
from kvadvisor.catalog.models import ModelSpec
from kvadvisor.catalog.storage import Price, StorageSpec
from kvadvisor.units.format import number, usd

PARAMS_PER_BILLION = 1e9

SCOPE_WORDS = {
    "per_drive": "drive",
    "per_volume": "volume",
    "per_client": "client",
    "per_tib": "TiB",
    "whole_pool": "pool",
    "per_socket": "socket",
    "per_module": "module",
    "per_superchip": "superchip",
}


# A table cell keeps four significant digits of a catalog figure (989.4 TFLOPS, 0.55 DWPD);
# whole figures keep every digit (14,000 MB/s). The column header names the unit.
TABLE_DIGITS = 4


def _num(value: float | None) -> str:
    return "-" if value is None else number(value, TABLE_DIGITS)


def _price_text(price: Price | None) -> str:
    """A short price cell: the figure and its unit, '-' when none, 'n/o' when not offered."""
    if price is None:
        return "-"
    if not price.offered:
        return "n/o"
    for key, unit in (
        ("usd_per_hour", "/h"),
        ("usd_per_gb_month", "/GB-mo"),
        ("usd_per_gib_month", "/GiB-mo"),
        ("usd_per_gib_hour", "/GiB-h"),
        ("usd_each", " each"),
    ):
        value = getattr(price, key)
        if value is not None:
            mark = "~" if price.unconfirmed else ""
            return f"{mark}{usd(value)}{unit}"
    return "-"


def storage_rows(specs: Mapping[str, StorageSpec]) -> list[tuple[str, ...]]:
    """The header and a row per storage option (formula figures at their ceilings, per scope)."""
    rows = [
        (
            "name",
            "kind",
            "provider",
            "per",
            "read MB/s",
            "write MB/s",
            "read IOPS",
            "read lat us",
            "DWPD",
            "GDS",
            "price",
        )
    ]
    for spec in specs.values():
        r = spec.as_row()
        gds = "-" if r["gds_support"] is None else ("yes" if r["gds_support"] else "no")
        per_tib = spec.scope == "per_tib"
        rows.append(
            (
                spec.name,
                spec.kind,
                spec.provider + (" (built-in)" if spec.built_in else ""),
                SCOPE_WORDS.get(spec.scope, spec.scope),
                _num(spec.read_mbps if per_tib else r["read_mbps"]),
                _num(spec.write_mbps if per_tib else r["write_mbps"]),
                _num(r["read_iops"]),
                _num(r["read_latency_us"]),
                _num(spec.endurance_dwpd),
                gds,
                _price_text(spec.price),
            )
        )
    return rows


def instances_rows(specs: Mapping[str, InstanceSpec]) -> list[tuple[str, ...]]:
    """The header and one row per instance size."""
    rows = [
        (
            "name",
            "provider",
            "GPUs",
            "GPU GiB",
            "TFLOPS/GPU",
            "host GiB",
            "DRAM",
            "own NVMe",
            "disk cap MB/s",
            "front Gbit/s",
            "back Gbit/s",
            "$/h",
        )
    ]
    for s in specs.values():
        unit = "part" if s.local_nvme_partitions else "x"
        nvme = (
            f"{s.local_nvme_count} {unit} {_num(s.local_nvme_each_gb)} GB"
            if s.local_nvme_count
            else (f"{s.drive_bays} bays" if s.drive_bays else "-")
        )
        rows.append(
            (
                s.name,
                s.provider,
                f"{s.gpu_count} x {s.gpu}",
                _num(s.gpu_memory_gib),
                _num(s.gpu_bf16_tflops),
                _num(s.host_memory_gib),
                s.host_memory_type or "-",
                nvme,
                _num(s.disk_cap_mbps),
                _num(s.frontend_network_gbit),
                _num(s.backend_network_gbit),
                _price_text(s.price),
            )
        )
    return rows


def gpus_rows(specs: Mapping[str, GpuSpec]) -> list[tuple[str, ...]]:
    """The header and one row per GPU; '~' marks a figure the catalog lists as unconfirmed."""
    rows: list[tuple[str, ...]] = [
        ("name", "BF16 TFLOPS", "FP8 TFLOPS", "memory GB", "HBM GB/s", "host link", "NVLink")
    ]
    for g in specs.values():

        def cell(field: str, g: GpuSpec = g) -> str:
            text = _num(getattr(g, field))
            return f"~{text}" if field in g.unconfirmed and text != "-" else text

        kind = g.host_link or (f"Gen{g.pcie_gen}" if g.pcie_gen else "")
        link = f"{kind} {cell('pcie_gbps')} GB/s".strip()
        rows.append(
            (
                g.name,
                cell("bf16_dense_tflops"),
                cell("fp8_dense_tflops"),
                cell("memory_gb"),
                cell("memory_bandwidth_gbps"),
                link,
                cell("nvlink_gbps"),
            )
        )
    return rows


def models_rows(specs: Mapping[str, ModelSpec]) -> list[tuple[str, ...]]:
    """The header and one row per model: shape and KV bytes per token in BF16."""
    rows: list[tuple[str, ...]] = [
        ("name", "attention", "layers", "KV heads", "head dim", "params B", "active B")
    ]
    for m in specs.values():
        rows.append(
            (
                m.name,
                m.attention,
                str(m.layers),
                str(m.kv_heads),
                str(m.head_dim),
                _num(m.total_params / PARAMS_PER_BILLION),
                _num(m.active_params / PARAMS_PER_BILLION),
            )
        )
    return rows


def table_text(rows: list[tuple[str, ...]]) -> str:
    """Rows as aligned columns, one line each whatever their width (for a file or a pager)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return (
        "\n".join(
            "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
        )
        + "\n"
    )


def _exact(value: float) -> str:
    """A catalog figure as its YAML records it: ``catalog show`` echoes the data, key by key."""
    return format(value, "g")  # exact: the figure as recorded (the key names the unit)


def _value_text(value: Any) -> str:
    if isinstance(value, tuple):
        return ", ".join(_exact(v) if isinstance(v, float) else str(v) for v in value)
    return str(value)


def entry_text(spec: StorageSpec | InstanceSpec | GpuSpec | ModelSpec) -> str:
    """Every field of one entry that has a value, its price with source, then its sources."""
    lines = [spec.name]
    skip = {"name", "source", "source_text", "notes", "price"}
    for f in fields(spec):
        value = getattr(spec, f.name)
        if f.name in skip or value in (None, (), {}, "") or value is False:
            continue
        if f.name == "per_gib":
            for target, formula in value.items():
                # The formula's coefficients as the catalog's YAML records them.
                base, slope = _exact(formula.get("base", 0)), _exact(formula["per_gib"])
                text = f"{base} + {slope} x C"
                text += f", at most {_exact(formula['max'])}" if "max" in formula else ""
                text += f", at least {_exact(formula['min'])}" if "min" in formula else ""
                lines.append(f"  per_gib.{target}: {text} (C = capacity in GiB)")
            continue
        lines.append(f"  {f.name}: {_value_text(value)}")
    if isinstance(spec, InstanceSpec):
        lines.append(f"  gpu_memory_total_gib: {_exact(spec.gpu_memory_total_gib)}")
    price = getattr(spec, "price", None)
    if is_dataclass(price):
        for f in fields(price):
            value = getattr(price, f.name)
            if f.name in ("source_text",) or value in (None, (), ""):
                continue
            if f.name in ("unconfirmed",) and not value:
                continue
            if f.name == "offered" and value:
                continue
            lines.append(f"  price.{f.name}: {_value_text(value)}")
    if spec.notes:
        lines.append(f"  notes: {spec.notes}")
    lines.append("  sources:")
    texts = spec.source_text if hasattr(spec, "source_text") else spec.source
    keys = spec.source if hasattr(spec, "source_text") else ("",) * len(texts)
    lines += [
        f"    [{key}] {text}" if key else f"    {text}"
        for key, text in zip(keys, texts, strict=True)
    ]
    if is_dataclass(price) and price.source:
        lines += [
            f"    [{key}] {text} (price)"
            for key, text in zip(price.source, price.source_text, strict=False)
        ]
    return "\n".join(lines) + "\n"
