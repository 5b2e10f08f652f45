"""Text for people about catalog entries: a table per kind and one entry in full."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields

from kvadvisor.catalog.instances import InstanceSpec
from kvadvisor.catalog.storage import StorageSpec


def _num(value: float | None, fmt: str = ",.0f") -> str:
    return "-" if value is None else format(value, fmt)


def storage_table(specs: Mapping[str, StorageSpec]) -> str:
    """One line per storage option (formula figures at their ceilings)."""
    rows = [
        (
            "name",
            "category",
            "provider",
            "read MB/s",
            "write MB/s",
            "read IOPS",
            "read lat us",
            "GDS",
        )
    ]
    for spec in specs.values():
        r = spec.as_row()
        gds = "-" if r["gds_support"] is None else ("yes" if r["gds_support"] else "no")
        rows.append(
            (
                spec.name,
                spec.category,
                spec.provider,
                _num(r["read_mbps"]),
                _num(r["write_mbps"]),
                _num(r["read_iops"]),
                _num(r["read_latency_us"]),
                gds,
            )
        )
    return _table(rows)


def instances_table(specs: Mapping[str, InstanceSpec]) -> str:
    """One line per instance size."""
    rows = [
        (
            "name",
            "provider",
            "GPUs",
            "GPU GiB",
            "TFLOPS/GPU",
            "HBM GB/s",
            "host GiB",
            "local NVMe",
            "disk cap MB/s",
        )
    ]
    for s in specs.values():
        nvme = (
            f"{s.local_nvme_count} x {s.local_nvme_each_gb:,.0f} GB" if s.local_nvme_count else "-"
        )
        rows.append(
            (
                s.name,
                s.provider,
                f"{s.gpu_count} x {s.gpu}",
                _num(s.gpu_memory_gib, ",.1f"),
                _num(s.gpu_bf16_tflops, ",.1f"),
                _num(s.gpu_memory_bandwidth_gbps),
                _num(s.host_memory_gib),
                nvme,
                _num(s.disk_cap_mbps),
            )
        )
    return _table(rows)


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return (
        "\n".join(
            "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
        )
        + "\n"
    )


def entry_text(spec: StorageSpec | InstanceSpec) -> str:
    """Every field of one entry that has a value, then its sources."""
    lines = [spec.name]
    skip = {"name", "source", "source_text", "notes"}
    for f in fields(spec):
        value = getattr(spec, f.name)
        if f.name in skip or value in (None, (), {}, ""):
            continue
        if f.name == "per_gib":
            for target, formula in value.items():
                parts = " + ".join(
                    p for p in (f"{formula.get('base', 0):g}", f"{formula['per_gib']:g} x C") if p
                )
                text = f"{parts}" + (f", at most {formula['max']:g}" if "max" in formula else "")
                text += f", at least {formula['min']:g}" if "min" in formula else ""
                lines.append(f"  per_gib.{target}: {text} (C = capacity in GiB)")
            continue
        lines.append(f"  {f.name}: {', '.join(value) if isinstance(value, tuple) else value}")
    if isinstance(spec, InstanceSpec):
        lines.append(f"  gpu_memory_total_gib: {spec.gpu_memory_total_gib:g}")
    if spec.notes:
        lines.append(f"  notes: {spec.notes}")
    lines.append("  sources:")
    pairs = zip(spec.source, spec.source_text, strict=True)
    lines += [f"    [{key}] {text}" for key, text in pairs]
    return "\n".join(lines) + "\n"
