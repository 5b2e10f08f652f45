"""The storage catalog: KV tier options, what each figure holds for, where it can be used, price.

Every figure holds for a stated ``scope``: one drive, one volume, one client node, one TiB
provisioned, the whole pool, one CPU socket. Cloud disks whose performance grows with size carry
their formulas as data in ``per_gib`` (Alibaba ESSD: ``min{base + per_gib × C, max}``), and
file systems sold per TiB of throughput (``scope: per_tib``) become such formulas too, so
``StorageSpec.perf_at(capacity_gib)`` gives one volume's or one file system's figures at a size.
Which instances can use an option is data (``available_on``, ``families``, ``built_in``); the
check that pairs them is :mod:`kvadvisor.deploy`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvadvisor.catalog.loader import (
    CatalogChecker,
    check_entries,
    find_named,
    load_layered,
)
from kvadvisor.checker import MAX_NUMBER, Field, did_you_mean, with_hint
from kvadvisor.errors import CatalogError
from kvadvisor.io.yamlio import load_yaml
from kvadvisor.units import BYTES_PER_GB, BYTES_PER_GIB

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
# The kind of storage each category is, in the words the docs and listings use.
KINDS = {
    "memory": "memory",
    "cxl": "memory",
    "local_nvme": "drive",
    "ephemeral": "block volume",
    "block": "block volume",
    "parallel_fs": "shared file system",
    "kv_store": "KV pool",
    "object": "object store",
}
SHARED_CATEGORIES = ("parallel_fs", "kv_store", "object")
# Who sells an option: a cloud, or "generic" (bought or run by the user).
PROVIDERS = ("generic", "alibaba", "aws", "gcp", "azure")
# Where an option can be used: a cloud's instances, or the user's own servers.
DEPLOYMENTS = ("alibaba", "aws", "gcp", "azure", "onprem")
SCOPES = (
    "per_drive",
    "per_volume",
    "per_client",
    "per_tib",
    "whole_pool",
    "per_socket",
    "per_module",
    "per_superchip",
)
# The scope a figure holds for when an entry does not say (files written before scopes).
DEFAULT_SCOPE = {
    "memory": "per_socket",
    "cxl": "per_module",
    "local_nvme": "per_drive",
    "ephemeral": "per_volume",
    "block": "per_volume",
    "parallel_fs": "whole_pool",
    "kv_store": "per_client",
    "object": "per_client",
}
FORMULA_TARGETS = ("iops", "mbps", "read_iops", "write_iops", "read_mbps", "write_mbps")
FORMULA_KEYS = {"base", "per_gib", "max", "min"}
GIB_PER_TIB = 1024

# What kind of rate a price figure is: only on-demand rates are compared with one another by
# default (issue 25); a calendar (DWS), reservation or capacity-block rate is ranked apart.
PRICE_KINDS = ("on_demand", "calendar", "reservation", "capacity_block", "spot", "purchase")
PRICE_FIELDS: dict[str, Field] = {
    "kind": Field(
        "str",
        choices=PRICE_KINDS,
        help="the kind of rate (default on_demand): say it from the source",
    ),
    "usd_per_hour": Field("number", help="flat price per hour"),
    "usd_per_gb_month": Field("number", help="per GB (decimal) provisioned per month"),
    "usd_per_gib_month": Field("number", help="per GiB provisioned per month"),
    "usd_per_gib_hour": Field("number", help="per GiB provisioned per hour"),
    "usd_each": Field("number", help="one drive or module, street price"),
    "usd_per_provisioned_iops_month": Field("number", help="IOPS above included_iops"),
    "usd_per_provisioned_mibps_month": Field("number", help="MiB/s above included_mibps"),
    "included_iops": Field("number", help="IOPS included in the capacity price"),
    "included_mibps": Field("number", help="MiB/s included in the capacity price"),
    "region": Field("str", help="the region the price holds for"),
    "capacity_gb": Field("number", help="the drive size usd_each is for"),
    "as_of": Field("date"),
    "source": Field("list[str]", help="keys of `sources`"),
    "unconfirmed": Field("bool", help="the figure is secondary or approximate"),
    "offered": Field("bool", help="false: not sold this way (say how in note)"),
    "note": Field("str"),
}
PRICE_FIGURES = tuple(k for k in PRICE_FIELDS if k.startswith("usd_"))

STORAGE_SCHEMA: dict[str, Field] = {
    "as_of": Field("date", required=True, help="when the figures were checked"),
    "category": Field("str", required=True, choices=CATEGORIES),
    "provider": Field("str", required=True, choices=PROVIDERS),
    "scope": Field("str", choices=SCOPES, help="what the bandwidth/IOPS figures hold for"),
    "available_on": Field(
        "list[str]", choices=DEPLOYMENTS, help="where it can be used; default: its provider"
    ),
    "families": Field("list[str]", help="only these instance families (default: all)"),
    "built_in": Field("bool", help="comes with an instance; not bought on its own"),
    "interface": Field("str", help="e.g. PCIe 5.0 x4, DDR5-4800, RDMA"),
    "read_mbps": Field("number", help="sequential read, MB/s (decimal), for its scope"),
    "write_mbps": Field("number", help="sequential write, MB/s (decimal), for its scope"),
    "read_iops": Field("number", help="random read I/O per second at io_unit_bytes"),
    "write_iops": Field("number", help="random write I/O per second at io_unit_bytes"),
    "client_read_mbps": Field("number", help="what one client node reaches, MB/s"),
    "client_write_mbps": Field("number", help="what one client node reaches, MB/s"),
    "client_network": Field(
        "str", choices=("frontend", "backend"), help="the client NIC a shared system uses"
    ),
    "read_latency_us": Field("number", help="random read latency, microseconds"),
    "write_latency_us": Field("number", help="write latency, microseconds"),
    "latency_us": Field("number", help="published latency when the direction is not given"),
    "capacity_min_gib": Field("number"),
    "capacity_max_gib": Field("number"),
    "capacity_step_gib": Field("number", help="sizes come in steps of this"),
    "capacities_gb": Field("list[number]", help="the sizes a drive is sold in, GB"),
    "endurance_dwpd": Field("number", help="drive writes per day over the warranty"),
    "warranty_years": Field("number"),
    "io_unit_bytes": Field("int", minimum=1, help="page, block or stripe size"),
    "gds_support": Field("bool", help="GPUDirect Storage path documented"),
    "shared": Field("bool", help="one pool reachable from many instances"),
    "per_gib": Field("mapping", help="size-dependent figures: {target: {base, per_gib, max, min}}"),
    "price": Field("mapping", fields=PRICE_FIELDS, help="what it costs, with source"),
    "unconfirmed": Field("list[str]", help="fields whose figure could not be confirmed"),
    "announced_only": Field(
        "bool",
        help="a prototype or announced part, not a shipping product: compared, never recommended",
    ),
}


@dataclass(frozen=True)
class Price:
    """What something costs, with where and when that price was read (None = not published)."""

    usd_per_hour: float | None = None
    usd_per_gb_month: float | None = None
    usd_per_gib_month: float | None = None
    usd_per_gib_hour: float | None = None
    usd_each: float | None = None
    usd_per_provisioned_iops_month: float | None = None
    usd_per_provisioned_mibps_month: float | None = None
    included_iops: float | None = None
    included_mibps: float | None = None
    capacity_gb: float | None = None
    region: str | None = None
    as_of: str | None = None
    source: tuple[str, ...] = ()
    source_text: tuple[str, ...] = ()
    unconfirmed: bool = False
    offered: bool = True
    note: str = ""
    kind: str = "on_demand"  # one of PRICE_KINDS

    @property
    def known(self) -> bool:
        """Whether any price figure is given."""
        return any(getattr(self, k) is not None for k in PRICE_FIGURES)


def parse_price(
    where: str, raw: Mapping[str, Any] | None, problems: CatalogChecker
) -> Price | None:
    """A checked price record; a figure needs its source and date, no figure needs a reason."""
    if not raw:
        return None
    has_figure = any(raw.get(k) is not None for k in PRICE_FIGURES)
    if has_figure:
        for key in ("source", "as_of"):
            if raw.get(key) is None:
                problems.add(f"{where}.{key}", "is required with a price figure")
    elif not raw.get("note"):
        problems.add(where, "no price figure: say why in 'note' (not published, not offered)")
    return Price(
        **{
            k: raw.get(k)
            for k in PRICE_FIELDS
            if k not in ("source", "unconfirmed", "offered", "kind")
        },
        kind=str(raw.get("kind") or "on_demand"),
        source=tuple(raw.get("source") or ()),
        source_text=tuple(raw.get("source_text") or ()),
        unconfirmed=bool(raw.get("unconfirmed", False)),
        offered=bool(raw.get("offered", True)),
    )


@dataclass(frozen=True)
class StoragePerf:
    """What one device, volume or pool delivers at a given capacity (None = not published)."""

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
    as_of: str | None = None
    scope: str = "per_drive"
    available_on: tuple[str, ...] = ()
    families: tuple[str, ...] = ()
    built_in: bool = False
    interface: str | None = None
    read_mbps: float | None = None
    write_mbps: float | None = None
    read_iops: float | None = None
    write_iops: float | None = None
    client_read_mbps: float | None = None
    client_write_mbps: float | None = None
    client_network: str = "frontend"
    read_latency_us: float | None = None
    write_latency_us: float | None = None
    latency_us: float | None = None
    capacity_min_gib: float | None = None
    capacity_max_gib: float | None = None
    capacity_step_gib: float | None = None
    capacities_gb: tuple[float, ...] = ()
    endurance_dwpd: float | None = None
    warranty_years: float | None = None
    io_unit_bytes: int | None = None
    gds_support: bool | None = None
    shared: bool = False
    per_gib: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    price: Price | None = None
    unconfirmed: tuple[str, ...] = ()
    # Prototypes and announcements stay in the catalog for comparison; the advisor ranks them
    # after every shipping option so a recommendation is something one can buy.
    announced_only: bool = False
    notes: str = ""
    display_name: str = ""
    aliases: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        """Drive, block volume, shared file system, KV pool, memory or object store."""
        return KINDS[self.category]

    @property
    def result_scope(self) -> str:
        """What :meth:`perf_at` figures hold for (per-TiB figures become the whole pool's)."""
        return "whole_pool" if self.scope == "per_tib" else self.scope

    @property
    def largest_device_bytes(self) -> float | None:
        """The largest drive or volume sold, bytes (None: unknown, or not sold per device)."""
        if self.result_scope not in ("per_drive", "per_volume"):
            return None
        if self.capacities_gb:
            return max(self.capacities_gb) * BYTES_PER_GB
        if self.capacity_max_gib is not None:
            return self.capacity_max_gib * BYTES_PER_GIB
        return None

    @property
    def effective_read_latency_us(self) -> float | None:
        """Read latency, else the published latency whose direction is not stated."""
        return self.read_latency_us if self.read_latency_us is not None else self.latency_us

    def is_unconfirmed(self, *names: str) -> bool:
        """Whether any of the named figures is listed as unconfirmed."""
        return any(n in self.unconfirmed for n in names)

    def perf_at(self, capacity_gib: float | None = None) -> StoragePerf:
        """Bandwidth and IOPS of one device/volume/pool of ``capacity_gib`` (within its limits).

        Formulas (``per_gib``) give ``max(min(base + per_gib × C, max), min)``; ``iops`` and
        ``mbps`` apply to both directions, ``read_*``/``write_*`` to one. Fixed figures are used
        where no formula exists. Unsized, a formula gives its ceiling (None when it has none).
        """
        cap = capacity_gib
        if cap is not None:
            if self.capacity_min_gib is not None:
                cap = max(cap, self.capacity_min_gib)
            if self.capacity_max_gib is not None:
                cap = min(cap, self.capacity_max_gib)

        def figure(direction: str, kind: str, fixed: float | None) -> float | None:
            formula = self.per_gib.get(f"{direction}_{kind}") or self.per_gib.get(kind)
            if formula is None:
                return None if self.scope == "per_tib" else fixed
            if cap is None:
                return formula.get("max")  # unsized: the ceiling the formula reaches
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
            "kind": self.kind,
            "provider": self.provider,
            "scope": self.scope,
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
            "endurance_dwpd": self.endurance_dwpd,
            "built_in": self.built_in,
        }


def _check_formulas(
    where: str, per_gib: Mapping[str, Any], problems: CatalogChecker
) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for target, formula in per_gib.items():
        at = f"{where}.per_gib.{target}"
        if target not in FORMULA_TARGETS:
            problems.add(at, f"unknown target; use one of {', '.join(FORMULA_TARGETS)}")
            continue
        if not isinstance(formula, dict) or "per_gib" not in formula:
            problems.add(at, "expected {base, per_gib, max, min} with per_gib given")
            continue
        extra = set(formula) - FORMULA_KEYS
        if extra:
            problems.add(at, f"unknown key(s) {', '.join(sorted(map(str, extra)))}")
            continue
        good = True
        for key, value in formula.items():
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value < 0
                or value > MAX_NUMBER
            ):
                problems.add(
                    f"{at}.{key}",
                    f"expected a plain non-negative number, got {value!r} "
                    f"({'MB/s' if 'mbps' in target else 'IOPS'})",
                )
                good = False
        if good:
            out[str(target)] = {k: float(v) for k, v in formula.items()}
    return out


def _per_tib_formulas(e: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Per-TiB figures as per-GiB formulas: the pool delivers figure × TiB provisioned."""
    out: dict[str, dict[str, float]] = {}
    for target in ("read_mbps", "write_mbps", "read_iops", "write_iops"):
        per_tib = e.get(target)
        if per_tib is None:
            continue
        formula = {"base": 0.0, "per_gib": per_tib / GIB_PER_TIB}
        if e.get("capacity_max_gib") is not None:
            formula["max"] = per_tib * e["capacity_max_gib"] / GIB_PER_TIB
        out[target] = formula
    return out


def _cross_checks(where: str, e: Mapping[str, Any], problems: CatalogChecker) -> None:
    for name in e.get("unconfirmed") or []:
        if name not in STORAGE_SCHEMA and name not in FORMULA_TARGETS:
            problems.add(f"{where}.unconfirmed", f"'{name}' is not a field")
    low, high = e.get("capacity_min_gib"), e.get("capacity_max_gib")
    if low is not None and high is not None and low > high:
        problems.add(where, "capacity_min_gib is above capacity_max_gib")
    if e.get("scope") == "per_tib" and e.get("per_gib"):
        problems.add(where, "scope per_tib derives the per-GiB formulas; give one or the other")
    if e.get("built_in") and e.get("provider") == "generic":
        problems.add(where, "a built-in drive comes with a cloud instance; name its provider")


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
# gpus, models and efficiency (the step-time model's per-GPU coefficients) the stage profiler.
CATALOG_KINDS = ("storage", "instances", "gpus", "models", "efficiency")


def catalog_files_by_kind(paths: Iterable[str | Path]) -> dict[str, list[str]]:
    """``paths`` grouped by the kind each declares (every kind a key; each kind read once).

    A kind outside :data:`CATALOG_KINDS` is refused, naming the file and the known kinds.
    """
    out: dict[str, list[str]] = {k: [] for k in CATALOG_KINDS}
    for path in paths:
        kind = catalog_kind(path)
        if kind not in out:
            raise CatalogError(
                with_hint(
                    f"{path}: unknown catalog kind {kind!r}; expected one of "
                    f"{', '.join(CATALOG_KINDS)}",
                    did_you_mean(str(kind), CATALOG_KINDS),
                )
            )
        out[kind].append(str(path))
    return out


def parse_storage(
    data: Any, path: str, lines: Mapping[str, int] | None = None
) -> dict[str, StorageSpec]:
    """Check a parsed storage catalog document (every problem at once) and build its specs."""
    problems = CatalogChecker(path, lines)
    entries = check_entries(path, "storage", data, STORAGE_SCHEMA, problems)
    out: dict[str, StorageSpec] = {}
    for name, e in entries.items():
        where = f"entries.{name}"
        _cross_checks(where, e, problems)
        per_gib = _check_formulas(where, e.get("per_gib") or {}, problems)
        scope = e.get("scope") or DEFAULT_SCOPE.get(e.get("category", ""), "per_drive")
        if scope == "per_tib":
            per_gib = _per_tib_formulas(e)
        provider = e.get("provider", "generic")
        default_on = ("onprem",) if provider == "generic" else (provider,)
        out[name] = StorageSpec(
            name=name,
            category=e.get("category", "local_nvme"),
            provider=provider,
            source=tuple(e.get("source") or ()),
            source_text=tuple(e["source_text"]),
            as_of=e.get("as_of"),
            scope=scope,
            available_on=tuple(e.get("available_on") or default_on),
            families=tuple(e.get("families") or ()),
            built_in=bool(e.get("built_in", False)),
            interface=e.get("interface"),
            read_mbps=e.get("read_mbps"),
            write_mbps=e.get("write_mbps"),
            read_iops=e.get("read_iops"),
            write_iops=e.get("write_iops"),
            client_read_mbps=e.get("client_read_mbps"),
            client_write_mbps=e.get("client_write_mbps"),
            client_network=e.get("client_network") or "frontend",
            read_latency_us=e.get("read_latency_us"),
            write_latency_us=e.get("write_latency_us"),
            latency_us=e.get("latency_us"),
            capacity_min_gib=e.get("capacity_min_gib"),
            capacity_max_gib=e.get("capacity_max_gib"),
            capacity_step_gib=e.get("capacity_step_gib"),
            capacities_gb=tuple(e.get("capacities_gb") or ()),
            endurance_dwpd=e.get("endurance_dwpd"),
            warranty_years=e.get("warranty_years"),
            io_unit_bytes=e.get("io_unit_bytes"),
            gds_support=e.get("gds_support"),
            shared=bool(e.get("shared", e.get("category") in SHARED_CATEGORIES)),
            per_gib=per_gib,
            price=parse_price(f"{where}.price", e.get("price"), problems),
            unconfirmed=tuple(e.get("unconfirmed") or ()),
            notes=e.get("notes") or "",
            announced_only=bool(e.get("announced_only", False)),
            display_name=e.get("display_name") or name,
            aliases=tuple(e.get("aliases") or ()),
        )
    problems.raise_if_any()
    return out


def load_storage(extra_files: Iterable[str | Path] = ()) -> dict[str, StorageSpec]:
    """The packaged storage catalog, with entries from ``extra_files`` added or overriding."""
    return load_layered(parse_storage, STORAGE_FILE, extra_files)


def find_storage(specs: Mapping[str, StorageSpec], name: str) -> StorageSpec:
    """A storage option by name or alias; unknown names get the closest ones."""
    return find_named(specs, name, "storage option", "storage")
