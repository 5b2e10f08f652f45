"""The storage catalog: KV tier options with bandwidth, IOPS, latency, capacity and I/O unit.

Figures are per device or volume (per client node for shared systems) as their sources publish
them. Cloud disks whose performance grows with size carry their formulas as data in ``per_gib``
(Alibaba ESSD: ``min{base + per_gib × C, max}``; AutoPL's baseline also has a floor), evaluated
by ``StorageSpec.perf_at(capacity_gib)``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvadvisor.catalog.loader import MAX_NUMBER, FieldSpec, check_entries, find_named, load_layered
from kvadvisor.errors import CatalogError
from kvadvisor.yamlio import load_yaml

DATA_DIR = Path(__file__).parent / "data"
STORAGE_FILE = DATA_DIR / "storage.yaml"

# Ordered from fastest and smallest to slowest and largest; ties in rankings follow this order.
CATEGORIES = (
    "memory",
    "cxl",
    "local_nvme",
    "ephemeral",
    "block",
    "parallel_fs",
    "kv_store",
    "object",
)
SSD_CATEGORIES = ("local_nvme", "ephemeral", "block")
PROVIDERS = ("generic", "alibaba", "aws", "gcp", "azure")
FORMULA_TARGETS = ("iops", "mbps", "read_iops", "write_iops", "read_mbps", "write_mbps")
FORMULA_KEYS = {"base", "per_gib", "max", "min"}

STORAGE_SCHEMA: dict[str, FieldSpec] = {
    "category": FieldSpec("str", required=True, choices=CATEGORIES),
    "provider": FieldSpec("str", required=True, choices=PROVIDERS),
    "interface": FieldSpec("str", help="e.g. PCIe 5.0 x4, DDR5-4800, RDMA"),
    "read_mbps": FieldSpec("number", help="sequential read, MB/s (decimal)"),
    "write_mbps": FieldSpec("number", help="sequential write, MB/s (decimal)"),
    "read_iops": FieldSpec("number", help="random read I/O per second at io_unit_bytes"),
    "write_iops": FieldSpec("number", help="random write I/O per second at io_unit_bytes"),
    "read_latency_us": FieldSpec("number", help="read latency, microseconds"),
    "write_latency_us": FieldSpec("number", help="write latency, microseconds"),
    "latency_us": FieldSpec("number", help="published latency when the direction is not given"),
    "capacity_min_gib": FieldSpec("number"),
    "capacity_max_gib": FieldSpec("number"),
    "io_unit_bytes": FieldSpec("int", minimum=1, help="page, block or stripe size"),
    "gds_support": FieldSpec("bool", help="GPUDirect Storage path documented"),
    "shared": FieldSpec("bool", help="one pool reachable from many instances"),
    "per_gib": FieldSpec(
        "mapping", help="size-dependent figures: {target: {base, per_gib, max, min}}"
    ),
    "unconfirmed": FieldSpec("list[str]", help="fields whose figure could not be confirmed"),
    "announced_only": FieldSpec(
        "bool",
        help="a prototype or announced part, not a shipping product: compared, never recommended",
    ),
}


@dataclass(frozen=True)
class StoragePerf:
    """What one device or volume delivers at a given capacity (None = not published)."""

    capacity_gib: float | None
    read_mbps: float | None
    write_mbps: float | None
    read_iops: float | None
    write_iops: float | None


@dataclass(frozen=True)
class StorageSpec:
    """One storage option from the catalog (fields as in STORAGE_SCHEMA)."""

    name: str
    category: str
    provider: str
    source: tuple[str, ...]
    source_text: tuple[str, ...]
    interface: str | None = None
    read_mbps: float | None = None
    write_mbps: float | None = None
    read_iops: float | None = None
    write_iops: float | None = None
    read_latency_us: float | None = None
    write_latency_us: float | None = None
    latency_us: float | None = None
    capacity_min_gib: float | None = None
    capacity_max_gib: float | None = None
    io_unit_bytes: int | None = None
    gds_support: bool | None = None
    shared: bool = False
    per_gib: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    unconfirmed: tuple[str, ...] = ()
    # Prototypes and announcements stay in the catalog for comparison; the advisor ranks them
    # after every shipping option so a recommendation is something one can buy.
    announced_only: bool = False
    notes: str = ""
    display_name: str = ""
    aliases: tuple[str, ...] = ()

    @property
    def effective_read_latency_us(self) -> float | None:
        """Read latency, else the published latency whose direction is not stated."""
        return self.read_latency_us if self.read_latency_us is not None else self.latency_us

    def perf_at(self, capacity_gib: float | None = None) -> StoragePerf:
        """Bandwidth and IOPS of one device/volume of ``capacity_gib`` (clamped to its limits).

        Formulas (``per_gib``) give ``max(min(base + per_gib × C, max), min)``; ``iops`` and
        ``mbps`` apply to both directions, ``read_*``/``write_*`` to one. Fixed figures are used
        where no formula exists.
        """
        cap = capacity_gib
        if cap is not None:
            if self.capacity_min_gib is not None:
                cap = max(cap, self.capacity_min_gib)
            if self.capacity_max_gib is not None:
                cap = min(cap, self.capacity_max_gib)

        def figure(direction: str, kind: str, fixed: float | None) -> float | None:
            formula = self.per_gib.get(f"{direction}_{kind}") or self.per_gib.get(kind)
            if formula is None or cap is None:
                if formula is not None and cap is None:
                    return formula.get("max")  # unsized: the ceiling the formula reaches
                return fixed
            value = formula.get("base", 0.0) + formula["per_gib"] * cap
            if "max" in formula:
                value = min(value, formula["max"])
            if "min" in formula:
                value = max(value, formula["min"])
            return value

        return StoragePerf(
            capacity_gib=cap,
            read_mbps=figure("read", "mbps", self.read_mbps),
            write_mbps=figure("write", "mbps", self.write_mbps),
            read_iops=figure("read", "iops", self.read_iops),
            write_iops=figure("write", "iops", self.write_iops),
        )

    def as_row(self) -> dict[str, Any]:
        """Flat fields for catalog queries and listings (formulas at their ceilings)."""
        perf = self.perf_at(None)
        return {
            "name": self.name,
            "category": self.category,
            "provider": self.provider,
            "read_mbps": perf.read_mbps,
            "write_mbps": perf.write_mbps,
            "read_iops": perf.read_iops,
            "write_iops": perf.write_iops,
            "read_latency_us": self.effective_read_latency_us,
            "write_latency_us": self.write_latency_us,
            "capacity_max_gib": self.capacity_max_gib,
            "capacity_min_gib": self.capacity_min_gib,
            "io_unit_bytes": self.io_unit_bytes,
            "gds_support": self.gds_support,
            "shared": self.shared,
        }


def _check_formulas(
    where: str, per_gib: Mapping[str, Any], unconfirmed: Iterable[str], fields: Mapping[str, Any]
) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for target, formula in per_gib.items():
        at = f"{where}.per_gib.{target}"
        if target not in FORMULA_TARGETS:
            raise CatalogError(f"{at}: unknown target; use one of {', '.join(FORMULA_TARGETS)}")
        if not isinstance(formula, dict) or "per_gib" not in formula:
            raise CatalogError(f"{at}: expected {{base, per_gib, max, min}} with per_gib given")
        extra = set(formula) - FORMULA_KEYS
        if extra:
            raise CatalogError(f"{at}: unknown key(s) {', '.join(sorted(map(str, extra)))}")
        for key, value in formula.items():
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value < 0
                or value > MAX_NUMBER
            ):
                raise CatalogError(
                    f"{at}.{key}: expected a plain non-negative number, got "
                    f"{value!r} ({'MB/s' if 'mbps' in target else 'IOPS'})"
                )
        out[str(target)] = {k: float(v) for k, v in formula.items()}
    for name in unconfirmed:
        if name not in STORAGE_SCHEMA and name not in FORMULA_TARGETS:
            raise CatalogError(f"{where}.unconfirmed: '{name}' is not a field")
    if fields.get("capacity_min_gib") is not None and fields.get("capacity_max_gib") is not None:
        if fields["capacity_min_gib"] > fields["capacity_max_gib"]:
            raise CatalogError(f"{where}: capacity_min_gib is above capacity_max_gib")
    return out


def catalog_kind(path: str | Path) -> str:
    """The ``kind`` a catalog file declares (storage, instances, ...)."""
    data = load_yaml(path, CatalogError)
    kind = data.get("kind") if isinstance(data, dict) else None
    if not isinstance(kind, str):
        raise CatalogError(
            f"{path}: a catalog file starts with 'kind: storage' or 'kind: instances'"
        )
    return kind


# Every kind a --catalog file may declare; storage and instances feed the advisor and plans,
# gpus and models the stage profiler.
CATALOG_KINDS = ("storage", "instances", "gpus", "models")


def catalog_files_by_kind(paths: Iterable[str | Path]) -> dict[str, list[str]]:
    """``paths`` grouped by the kind each declares (every kind a key; each kind read once).

    A kind outside :data:`CATALOG_KINDS` is refused, naming the file and the known kinds.
    """
    out: dict[str, list[str]] = {k: [] for k in CATALOG_KINDS}
    for path in paths:
        kind = catalog_kind(path)
        if kind not in out:
            raise CatalogError(
                f"{path}: unknown catalog kind {kind!r}; expected one of {', '.join(CATALOG_KINDS)}"
            )
        out[kind].append(str(path))
    return out


def parse_storage(data: Any, path: str) -> dict[str, StorageSpec]:
    """Check a parsed storage catalog document and build its specs."""
    entries = check_entries(path, "storage", data, STORAGE_SCHEMA)
    out: dict[str, StorageSpec] = {}
    for name, e in entries.items():
        where = f"{path}: entries.{name}"
        per_gib = _check_formulas(where, e.get("per_gib") or {}, e.get("unconfirmed") or [], e)
        out[name] = StorageSpec(
            name=name,
            category=e["category"],
            provider=e["provider"],
            source=tuple(e["source"]),
            source_text=tuple(e["source_text"]),
            interface=e.get("interface"),
            read_mbps=e.get("read_mbps"),
            write_mbps=e.get("write_mbps"),
            read_iops=e.get("read_iops"),
            write_iops=e.get("write_iops"),
            read_latency_us=e.get("read_latency_us"),
            write_latency_us=e.get("write_latency_us"),
            latency_us=e.get("latency_us"),
            capacity_min_gib=e.get("capacity_min_gib"),
            capacity_max_gib=e.get("capacity_max_gib"),
            io_unit_bytes=e.get("io_unit_bytes"),
            gds_support=e.get("gds_support"),
            shared=bool(e.get("shared", False)),
            per_gib=per_gib,
            unconfirmed=tuple(e.get("unconfirmed") or ()),
            notes=e.get("notes") or "",
            announced_only=bool(e.get("announced_only", False)),
            display_name=e.get("display_name") or name,
            aliases=tuple(e.get("aliases") or ()),
        )
    return out


def load_storage(extra_files: Iterable[str | Path] = ()) -> dict[str, StorageSpec]:
    """The packaged storage catalog, with entries from ``extra_files`` added or overriding."""
    return load_layered(parse_storage, STORAGE_FILE, extra_files)


def find_storage(specs: Mapping[str, StorageSpec], name: str) -> StorageSpec:
    """A storage option by name or alias; unknown names get the closest ones."""
    return find_named(specs, name, "storage option")
