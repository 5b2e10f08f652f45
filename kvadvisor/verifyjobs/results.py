"""`kvadvisor verify --results`: fio's and the benchmarks' outputs judged against the job set.

Pure: the folder's manifest (``verify.json``), fio's parsed JSON documents and the benchmark
traces come in; the verdicts, the measured catalog and the review checks go out.

* A fio document belongs to the job set when every job in it carries the set's description
  (``kvadvisor job-set <id>``), is a phase of the job file it was saved for, and ran the I/O
  size the job file asks for; anything else is a user error naming what does not match.
* A rate phase passes when every direction moved at least ``1 - tolerance`` of its required
  bytes per second (the burst phase's requirement is its always-on rate plus the on excess for
  the on time fio's cycle gives in the measured runtime) and, where the job states a p99
  completion latency target, fio's p99 completion latency is within it.
* The ``max-*`` phases measure; their figures per device (over the tier's ``devices``) become
  the catalog override: bandwidth and IOPS at the KV I/O size, and the median completion
  latency of the p99 phase.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from typing import Any, TypeVar

import numpy as np

from kvadvisor.catalog.models import get_model
from kvadvisor.catalog.storage import STORAGE_SCHEMA
from kvadvisor.errors import CatalogError
from kvadvisor.results.review import PlanReview, ReviewCheck, ReviewReport
from kvadvisor.sections.profile import ProfileOptions, profile_workload
from kvadvisor.trace.model import Trace
from kvadvisor.units import BYTES_PER_MB, US_PER_S, Unit, format_value, plural
from kvadvisor.verifyjobs.fio import fio_jobs, measured_direction
from kvadvisor.verifyjobs.model import (
    DIRECTIONS,
    MANIFEST_VERSION,
    BenchResult,
    Measured,
    PhaseResult,
    PhaseStatus,
    VerifyError,
    VerifyFolder,
    VerifyReport,
)
from kvadvisor.verifyjobs.share import serving_figures
from kvadvisor.vocab import CheckStatus, Severity, Stage, Vocab

V = TypeVar("V", bound=Vocab)

DEFAULT_TOLERANCE = 0.05  # fio's rate limiter lands within about 1%; 5% leaves room for noise
MIN_IOS_TO_JUDGE = 5  # fewer I/Os than this in the runtime: bandwidth cannot be judged
DESCRIPTION = re.compile(r"kvadvisor job-set ([0-9a-f]+)")
# Plan tier kinds as storage catalog categories (a measured inline tier needs one).
KIND_CATEGORIES = {
    "ssd": "local_nvme",
    "block": "block",
    "filesystem": "parallel_fs",
    "pool": "kv_store",
    "object": "object",
}
SOURCE_KEY = "MEASURED"
# What a measured figure holds for: fio's figures are divided by the tier's devices, and a
# shared tier is measured from one node, so its figures are one client's.
MEASURED_SCOPES = {
    "local_nvme": "per_drive",
    "block": "per_volume",
    "ephemeral": "per_volume",
    "memory": "per_socket",
    "cxl": "per_module",
}


def _bw(bytes_per_s: float) -> str:
    return format_value(bytes_per_s, Unit.BYTES_PER_S)


def _s(seconds: float | None) -> str:
    return format_value(seconds, Unit.SECONDS)


def _vocab(kind: type[V], value: Any, key: str, phase: str) -> V:
    """A manifest phase's ``key`` as its enum, or a VerifyError naming the values it takes."""
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(m.value for m in kind)
        raise VerifyError(
            f"manifest phase '{phase}': {key} {value!r} is not one of {allowed}; regenerate "
            "the folder with `kvadvisor verify TRACE --plan PLAN -o DIR`"
        ) from None


def check_manifest(manifest: Any, path: str) -> dict[str, Any]:
    """The manifest's shape, or a VerifyError naming what is wrong."""
    if not isinstance(manifest, dict) or manifest.get("kind") != "kvadvisor-verify":
        raise VerifyError(
            f"{path}: not a kvadvisor verify manifest (no 'kind: kvadvisor-verify'); give the "
            "folder `kvadvisor verify TRACE --plan PLAN -o DIR` wrote"
        )
    if manifest.get("format_version") != MANIFEST_VERSION:
        raise VerifyError(
            f"{path}: manifest format_version {manifest.get('format_version')!r}, this kvadvisor "
            f"reads {MANIFEST_VERSION}; regenerate the folder with this version"
        )
    for key in ("job_set_id", "plan", "fio", "benchmarks", "tiers"):
        if key not in manifest:
            raise VerifyError(f"{path}: manifest has no '{key}'; regenerate the folder")
    _check_shape(manifest, MANIFEST_SHAPE, path, "")
    return manifest


# What the judging reads from the manifest, by type: a hand-edited value of another type was a
# TypeError or KeyError deep in the judging. A dict maps keys to shapes (keys read with .get()
# may be absent), a one-item list is a list of that shape, a tuple is the types allowed.
_NUM = (int, float)
_PHASE = {
    "name": (str,),
    "phase": (str,),
    "severity": (str,),
    "rates_bytes_per_s": {"*": _NUM},
    "bursts?": {"*": {"on_s": _NUM, "off_s": _NUM, "extra_bytes_per_s": _NUM}},
    "device_jobs?": [(str,)],
}
MANIFEST_SHAPE: dict[str, Any] = {
    "job_set_id": (str,),
    "plan": {"slo?": {"*": (int, float, type(None))}, "model?": (str, type(None))},
    "fio": [
        {
            "file": (str,),
            "result": (str,),
            "stage": (str,),
            "tier": (str,),
            "gds": (bool,),
            "io_bytes": (int,),
            "phases": [_PHASE],
        }
    ],
    "benchmarks": [
        {
            "share?": {"replayed?": {"*": (int, float, type(None))}},
            "engine": (str,),
            "result": (str,),
            "script": (str,),
            "requests": (int,),
            "input_tokens_total": (int,),
        }
    ],
    "tiers": [{}],
}


def _check_shape(value: Any, shape: Any, path: str, where: str) -> None:
    def wrong(expected: str) -> VerifyError:
        return VerifyError(
            f"{path}: {where or 'the manifest'}: expected {expected}, got {value!r:.40}; "
            "the manifest was edited: regenerate the folder with `kvadvisor verify`"
        )

    if isinstance(shape, tuple):
        if not isinstance(value, shape) or (bool not in shape and isinstance(value, bool)):
            raise wrong(" or ".join("null" if t is type(None) else t.__name__ for t in shape))
    elif isinstance(shape, list):
        if not isinstance(value, list):
            raise wrong("a list")
        for i, item in enumerate(value):
            _check_shape(item, shape[0], path, f"{where}[{i}]")
    else:
        if not isinstance(value, dict):
            raise wrong("a mapping")
        for key, sub in shape.items():
            if key == "*":
                for k, v in value.items():
                    _check_shape(v, sub, path, f"{where}.{k}")
                continue
            name = key.rstrip("?")
            if name in value and (value[name] is not None or not key.endswith("?")):
                _check_shape(value[name], sub, path, f"{where}.{name}".lstrip("."))
            elif not key.endswith("?"):
                raise VerifyError(f"{path}: {where}.{name} is missing; regenerate the folder")


def _on_time(runtime_s: float, on_s: float, off_s: float) -> float:
    """Seconds on within ``runtime_s`` of fio's cycle: on for ``on_s``, then off for ``off_s``."""
    cycle = on_s + off_s
    if cycle <= 0:
        return runtime_s
    k = math.floor(runtime_s / cycle)
    return k * on_s + min(on_s, runtime_s - k * cycle)


def _required(phase: Mapping[str, Any], direction: str, runtime_s: float) -> float:
    base = float(phase["rates_bytes_per_s"].get(direction, 0.0))
    burst = phase.get("bursts", {}).get(direction)
    if burst is None or runtime_s <= 0:
        return base
    on = _on_time(runtime_s, float(burst["on_s"]), float(burst["off_s"]))
    return base + float(burst["extra_bytes_per_s"]) * on / runtime_s


def _share(read: float, write: float) -> float | None:
    return read / (read + write) if read + write > 0 else None


def _job_io_bytes(job: Mapping[str, Any], doc: Mapping[str, Any]) -> str | None:
    opts = job.get("job options") or {}
    glob = doc.get("global options") or {}
    value = opts.get("bs", glob.get("bs"))
    return None if value is None else str(value)


def _summed(parts: Sequence[Measured], direction: str) -> Measured:
    """The devices of a stripe as one: bandwidth, IOPS and I/Os summed; the worst latency."""
    ios = sum(m.ios for m in parts)
    moved = sum(m.io_bytes * m.ios for m in parts)

    def worst(key: str) -> float | None:
        values = [v for m in parts if (v := getattr(m, key)) is not None]
        return max(values) if values else None

    return Measured(
        direction=direction,
        bytes_per_s=sum(m.bytes_per_s for m in parts),
        iops=sum(m.iops for m in parts),
        io_bytes=moved / ios if ios else 0.0,
        ios=ios,
        runtime_s=max(m.runtime_s for m in parts),
        clat_p50_s=worst("clat_p50_s"),
        clat_p99_s=worst("clat_p99_s"),
        clat_p999_s=worst("clat_p999_s"),
    )


def _measured(jobs: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Measured], tuple]:
    """One job's directions, or a stripe's summed over its device jobs (and each device's)."""
    per = [
        {d: m for d in DIRECTIONS if (m := measured_direction(job, d)) is not None} for job in jobs
    ]
    if len(per) == 1:
        return per[0], ()
    total = {
        d: _summed([x[d] for x in per if d in x], d) for d in DIRECTIONS if any(d in x for x in per)
    }
    return total, tuple(per)


def _judge_phase(
    phase: Mapping[str, Any],
    spec: Mapping[str, Any],
    jobs: Sequence[Mapping[str, Any]],
    tol: float,
) -> PhaseResult:
    measured, devices = _measured(jobs)
    required: dict[str, float] = {}
    reasons: list[str] = []
    targets = {k: float(v) for k, v in (phase.get("latency_target_s") or {}).items()}
    rated = phase["phase"] not in ("max-read", "max-write")
    for direction in DIRECTIONS:
        if direction not in phase["rates_bytes_per_s"] and direction not in phase.get("bursts", {}):
            continue
        m = measured.get(direction)
        runtime = m.runtime_s if m is not None else 0.0
        need = _required(phase, direction, runtime)
        required[direction] = need
        if need <= 0:
            continue
        if m is None:
            reasons.append(f"no {direction} I/O completed")
            continue
        expected_ios = need * runtime / spec["io_bytes"]
        if expected_ios >= MIN_IOS_TO_JUDGE and m.bytes_per_s < (1.0 - tol) * need:
            reasons.append(f"{direction} {_bw(m.bytes_per_s)} below the {_bw(need)} required")
        target = targets.get(direction)
        if target is not None and m.clat_p99_s is not None and m.clat_p99_s > target:
            reasons.append(
                f"{direction} p99 completion latency {_s(m.clat_p99_s)} over the "
                f"{_s(target)} target"
            )
    reads = required.get("read", 0.0), measured.get("read")
    writes = required.get("write", 0.0), measured.get("write")
    return PhaseResult(
        job=phase["name"],
        stage=_vocab(Stage, spec["stage"], "stage", phase["name"]),
        tier=spec["tier"],
        gds=bool(spec["gds"]),
        phase=phase["phase"],
        severity=_vocab(Severity, phase["severity"], "severity", phase["name"]),
        status=(PhaseStatus.FAIL if reasons else PhaseStatus.PASS) if rated else PhaseStatus.INFO,
        measured=measured,
        required_bytes_per_s=required,
        latency_target_s=targets,
        read_share_required=_share(reads[0], writes[0]) if rated else None,
        read_share_measured=_share(
            reads[1].bytes_per_s if reads[1] else 0.0, writes[1].bytes_per_s if writes[1] else 0.0
        ),
        reasons=tuple(reasons),
        devices=devices,
    )


def _job_names(phase: Mapping[str, Any]) -> list[str]:
    """The job names fio reports for a phase: its own, or one per device of a stripe."""
    return list(phase.get("device_jobs") or []) or [phase["name"]]


def judge_fio(
    manifest: Mapping[str, Any],
    docs: Mapping[str, tuple[str, Any]],
    tolerance: float = DEFAULT_TOLERANCE,
) -> tuple[list[PhaseResult], list[str]]:
    """Every phase of every job file with results; the job files that have none.

    ``docs`` maps a job file (manifest ``file``) to (result path, parsed fio JSON).
    """
    set_id = manifest["job_set_id"]
    results: list[PhaseResult] = []
    missing: list[str] = []
    for spec in manifest["fio"]:
        if spec["file"] not in docs:
            missing.append(spec["file"])
            continue
        path, doc = docs[spec["file"]]
        phases = {p["name"]: p for p in spec["phases"]}
        names = {n: p for p in spec["phases"] for n in _job_names(p)}
        by_name: dict[str, Mapping[str, Any]] = {}
        for job in fio_jobs(doc, path):
            name = job["jobname"]
            found = DESCRIPTION.search(str(job.get("desc") or ""))
            if found is None:
                raise VerifyError(
                    f"{path}: job '{name}' carries no kvadvisor job set (description); it is "
                    f"not from this folder's job set {set_id}"
                )
            if found.group(1) != set_id:
                raise VerifyError(
                    f"{path}: job '{name}' ran job set {found.group(1)}, this folder's is "
                    f"{set_id}: rerun ./run-fio.sh {spec['file']} from this folder"
                )
            if name not in names:
                raise VerifyError(
                    f"{path}: job '{name}' is not a phase of {spec['file']} (its phases: "
                    f"{', '.join(names)})"
                )
            bs = _job_io_bytes(job, doc)
            if bs is not None and bs != str(spec["io_bytes"]):
                raise VerifyError(
                    f"{path}: job '{name}' ran bs={bs}, {spec['file']} asks for "
                    f"bs={spec['io_bytes']}: the job file was changed; rerun it as generated"
                )
            by_name[name] = job
        for phase in phases.values():
            wanted = _job_names(phase)
            absent = [n for n in wanted if n not in by_name]
            if not absent:
                jobs = [by_name[n] for n in wanted]
                results.append(_judge_phase(phase, spec, jobs, tolerance))
            else:
                missing.append(
                    f"{spec['file']} phase {phase['phase']} (not in {path}: {', '.join(absent)})"
                    if len(wanted) > 1
                    else f"{spec['file']} phase {phase['phase']} (not in {path})"
                )
    return results, missing


# --- benchmarks -------------------------------------------------------------------------------


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def same_model(served: str, plan_model: str) -> bool:
    """Whether a benchmark's model id is the plan's catalog model.

    The id resolves through the model catalog's names and HF aliases (whole, or its last path
    component); failing that, the catalog model's display name must open its last component
    ("Llama-3.1-70B" for "/models/Llama-3.1-70B-Instruct").
    """
    want = get_model(plan_model)
    last = served.rstrip("/").rsplit("/", 1)[-1]
    for candidate in (served, last):
        try:
            return get_model(candidate).name == want.name
        except CatalogError:
            continue
    return _norm(last).startswith(_norm(want.display_name)) or _norm(last) == _norm(want.name)


def _p99(trace: Trace, column: str) -> float | None:
    if not trace.has(column):
        return None
    values = trace.column_np(column).astype(np.float64)
    values = values[np.isfinite(values)]
    return float(np.percentile(values, 99)) if values.size else None


def calibrate_bench(manifest: Mapping[str, Any], trace: Trace) -> dict[str, Any] | None:
    """Fit the performance model's efficiency factors to a benchmark's measured latencies.

    The stage profiler's calibration (:mod:`kvadvisor.perfmodel.calibrate`: robust least
    squares on prefill latency and decode time per step, every fifth row held out) with the
    plan's model, its prefill GPU and TP on one instance; its held-out error before and after
    the fit is the figure to read. None when the plan has no catalog model or GPU, or the
    output has too few measured rows.
    """
    plan = manifest["plan"]
    stages = plan.get("stages") or {}
    gpu = next((s.get("gpu") for s in stages.values() if s.get("gpu")), None)
    if plan.get("model") is None or gpu is None:
        return None
    options = ProfileOptions(
        model=plan["model"],
        gpu=gpu,
        tp=int(plan["tp"]),
        kv_dtype=plan["kv_dtype"],
        weight_dtype=plan["weight_dtype"],
    )
    cal = profile_workload(trace, options).stage_split.calibration
    return None if cal is None else asdict(cal)


def judge_bench(
    manifest: Mapping[str, Any],
    engine: str,
    path: str,
    trace: Trace,
    calibration: dict[str, Any] | None = None,
    span_s: float | None = None,
) -> BenchResult:
    """A benchmark's latencies against the plan's SLO; refuses another run's or model's output."""
    spec = next(b for b in manifest["benchmarks"] if b["engine"] == engine)
    plan_model = manifest["plan"].get("model")
    if plan_model is not None and trace.has("model"):
        for served in sorted(set(trace.table["model"].drop_null().to_pylist())):
            if not same_model(str(served), plan_model):
                raise VerifyError(
                    f"{path}: benchmark of model '{served}', the plan serves '{plan_model}'; "
                    "benchmark the plan's model (or fix the plan's model.name)"
                )
    if trace.requests != spec["requests"]:
        raise VerifyError(
            f"{path}: {format_value(trace.requests, Unit.REQUESTS)}, this folder's {engine} "
            f"benchmark replays {format_value(spec['requests'], Unit.COUNT)}: the output is "
            f"from another run; rerun {spec['script']}"
        )
    slo = manifest["plan"].get("slo") or {}
    ttft, tpot = _p99(trace, "ttft_s"), _p99(trace, "tpot_s")
    reasons = []
    for what, value, limit in (
        ("TTFT", ttft, slo.get("ttft_p99_s")),
        ("TPOT", tpot, slo.get("tpot_p99_s")),
    ):
        if value is not None and limit is not None and value > limit:
            reasons.append(f"{what} p99 {_s(value)} over the SLO {_s(limit)}")
    completed = trace.requests - trace.failed_requests
    if completed < trace.requests:
        reasons.append(f"{plural(trace.requests - completed, 'request')} failed")
    inputs = float(trace.column_np("input_tokens").sum())
    ratio = inputs / spec["input_tokens_total"] if spec["input_tokens_total"] else None
    share = spec.get("share") or {}
    return BenchResult(
        engine=engine,
        path=path,
        requests=trace.requests,
        completed=completed,
        ttft_p99_s=ttft,
        tpot_p99_s=tpot,
        ttft_slo_s=slo.get("ttft_p99_s"),
        tpot_slo_s=slo.get("tpot_p99_s"),
        status=CheckStatus.FAIL if reasons else CheckStatus.PASS,
        input_tokens_ratio=ratio,
        calibration=calibration,
        reasons=tuple(reasons),
        figures=bench_figures(trace, span_s),
        replayed=share.get("replayed"),
    )


def bench_figures(trace: Trace, span_s: float | None = None) -> dict[str, float | None]:
    """A benchmark output's serving figures; a failed request counts as not completed.

    ``span_s``: the run's seconds by the tool's clock, for an output without start times
    (its arrivals are placeholders, so the span from the first arrival cannot be measured).
    """

    def column(name: str) -> np.ndarray:
        if not trace.has(name):
            return np.full(trace.requests, np.nan)
        return trace.column_np(name).astype(np.float64)

    e2e = column("e2e_s")
    if trace.has("ok"):
        e2e = np.where(trace.column_np("ok").astype(bool), e2e, np.nan)
    return serving_figures(
        column("arrival_s"),
        column("ttft_s"),
        column("tpot_s"),
        e2e,
        column("output_tokens"),
        span_s=None if trace.arrivals_measured else span_s,
    )


# --- the measured catalog ---------------------------------------------------------------------


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


# Figures a measured entry replaces or drops: what the datasheet said about speed no longer
# stands beside the measurement (a size formula, a per-client figure, "unconfirmed" marks).
FIGURE_FIELDS = frozenset(
    {
        "read_mbps",
        "write_mbps",
        "read_iops",
        "write_iops",
        "read_latency_us",
        "write_latency_us",
        "latency_us",
        "per_gib",
        "unconfirmed",
        "client_read_mbps",
        "client_write_mbps",
    }
)


def _figures(tier: Mapping[str, Any], phases: Sequence[PhaseResult]) -> dict[str, float]:
    """Per-device bandwidth, IOPS and latency of one tier from its max-* and p99 phases."""
    by_phase = {
        p.phase: p
        for p in phases
        if p.stage == tier["stage"] and p.tier == tier["tier"] and not p.gds
    }
    devices = max(int(tier["devices"]), 1)
    figures: dict[str, float] = {}
    for direction in DIRECTIONS:
        m = by_phase.get(f"max-{direction}")
        got = None if m is None else m.measured.get(direction)
        if got is None:
            continue
        figures[f"{direction}_mbps"] = round(got.bytes_per_s / devices / BYTES_PER_MB, 1)
        figures[f"{direction}_iops"] = round(got.iops / devices, 1)
        p99 = by_phase.get("p99")
        lat = None if p99 is None else p99.measured.get(direction)
        if lat is not None and lat.clat_p50_s is not None:
            figures[f"{direction}_latency_us"] = round(lat.clat_p50_s * US_PER_S, 1)
    return figures


def measured_catalog(
    manifest: Mapping[str, Any],
    phases: Sequence[PhaseResult],
    generated_at: str,
    base: Mapping[str, Mapping[str, Any]] | None = None,
    base_sources: Mapping[str, str] | None = None,
    schema_fields: Sequence[str] = (),
) -> dict[str, Any] | None:
    """A storage catalog (``kind: storage``) of the measured tiers, to use with ``--catalog``.

    An entry takes the name of the catalog entry the plan's tier names, so plans naming it
    get the measured figures; a tier given inline gets a new name to put in the plan. ``base``
    holds the catalog entries as written (name: raw fields) and ``base_sources`` their
    citations: a measured entry keeps every field of its base but the figures
    (:data:`FIGURE_FIELDS`), citing the base's sources beside the measurement. An ``as_of``
    (the day read) is written when the catalog schema has that field (``schema_fields``).
    """
    set_id = manifest["job_set_id"]
    base, base_sources = base or {}, base_sources or {}
    sources = {
        SOURCE_KEY: f"kvadvisor verify --results, job set {set_id}, read {generated_at}: "
        "fio JSON output of the generated jobs"
    }
    entries: dict[str, dict[str, Any]] = {}
    for tier in manifest["tiers"]:
        figures = _figures(tier, phases)
        if not figures:
            continue
        name = tier.get("catalog_name") or _slug(
            f"measured-{manifest['plan']['name']}-{tier['stage']}-{tier['tier']}"
        )
        raw = base.get(name)
        if raw is not None:
            entry = {k: v for k, v in raw.items() if k not in FIGURE_FIELDS}
            cited = [
                str(x)
                for x in (
                    [raw["source"]]
                    if isinstance(raw.get("source"), str)
                    else raw.get("source") or []
                )
            ]
        else:
            entry = dict(tier.get("catalog_entry") or {})
            entry.setdefault("category", KIND_CATEGORIES.get(tier["kind"], "local_nvme"))
            entry.setdefault("provider", "generic")
            cited = []
        price = raw.get("price") if raw is not None else None
        priced: list[str] = []
        if isinstance(price, Mapping):  # the price keeps its own citations
            given = price.get("source")
            priced = [str(x) for x in ([given] if isinstance(given, str) else given or [])]
        sources.update({c: base_sources[c] for c in [*cited, *priced] if c in base_sources})
        entry["display_name"] = f"{entry.get('display_name', name)} (measured)"
        entry.update(figures)
        if "scope" in schema_fields:
            entry["scope"] = MEASURED_SCOPES.get(entry.get("category", ""), "per_client")
        entry["source"] = [SOURCE_KEY, *cited]
        if "as_of" in schema_fields:
            entry["as_of"] = generated_at[:10]
        entry["notes"] = (
            f"Measured by kvadvisor verify, job set {set_id}: {tier['stage']} tier "
            f"'{tier['tier']}' with fio at {format_value(tier['io']['io_bytes'], Unit.BYTES)} "
            f"I/Os (the KV chunk piece), queue depth {tier['iodepth']} per rank; bandwidth and "
            f"IOPS per device over {max(int(tier['devices']), 1)} device(s), IOPS at that I/O "
            "size (not 4 KiB); latency: median completion latency at the p99 rate. Other fields: "
            + ("the catalog entry it replaces." if raw is not None else "the plan's tier.")
        )
        if name in entries:  # two tiers on one catalog device: keep the lower figure
            for key, value in figures.items():
                entries[name][key] = min(entries[name].get(key, value), value)
            continue
        entries[name] = entry
    if not entries:
        return None
    return {
        "kind": "storage",
        "description": f"Storage figures measured on your hardware (kvadvisor verify, job set "
        f"{set_id}, plan '{manifest['plan']['name']}')",
        "sources": sources,
        "entries": entries,
    }


# --- as review checks --------------------------------------------------------------------------


def _phase_message(p: PhaseResult) -> str:
    parts = []
    for direction, m in sorted(p.measured.items()):
        need = p.required_bytes_per_s.get(direction)
        head = f"{direction} {_bw(m.bytes_per_s)}"
        if need:
            head += f" of {_bw(need)}"
        lat = (
            "" if m.clat_p99_s is None else f", p99 {_s(m.clat_p99_s)} / p99.9 {_s(m.clat_p999_s)}"
        )
        iops, size = format_value(m.iops, Unit.IOPS), format_value(m.io_bytes, Unit.BYTES)
        parts.append(head + f" ({iops} at {size}{lat})")
    if p.devices:
        each = "; ".join(
            f"{d} " + ", ".join(_bw(dev[d].bytes_per_s) if d in dev else "–" for dev in p.devices)
            for d in sorted(p.measured)
        )
        parts.append(f"summed over {len(p.devices)} devices ({each})")
    text = f"fio {p.phase} on '{p.tier}'{' (GDS)' if p.gds else ''}: " + (
        "; ".join(parts) or "no I/O"
    )
    return text + (": " + "; ".join(p.reasons) if p.reasons else "")


def review_checks(report: VerifyReport) -> tuple[ReviewCheck, ...]:
    """The verify verdicts as review checks (VF01 fio phases, VF02 missing, VF03 benchmarks)."""
    source = "kvadvisor verify: fio and serving-benchmark results against the job set"
    out: list[ReviewCheck] = []
    for p in report.phases:
        subject = f"{p.tier}.{p.phase}" + (".gds" if p.gds else "")
        evidence: dict[str, Any] = {
            f"{d}_bytes_per_s": m.bytes_per_s for d, m in p.measured.items()
        } | {f"{d}_required_bytes_per_s": v for d, v in p.required_bytes_per_s.items()}
        for d, m in p.measured.items():
            evidence[f"{d}_clat_p99_s"] = m.clat_p99_s
            evidence[f"{d}_clat_p999_s"] = m.clat_p999_s
        out.append(
            ReviewCheck(
                "VF01",
                "verify.fio_phase",
                p.stage,
                # A measurement-only phase informs; it has nothing to pass or fail.
                Severity.INFO if p.status is PhaseStatus.INFO else p.severity,
                CheckStatus.FAIL if p.status is PhaseStatus.FAIL else CheckStatus.PASS,
                _phase_message(p),
                evidence,
                source,
                subject,
            )
        )
    for item in report.missing:
        out.append(
            ReviewCheck(
                "VF02",
                "verify.fio_missing",
                Stage.BOTH,
                Severity.WARNING,
                CheckStatus.SKIP,
                f"no fio result for {item}: run ./run-fio.sh and copy results/ back",
                {},
                source,
                _slug(item),
            )
        )
    for b in report.benches:
        out.append(
            ReviewCheck(
                "VF03",
                "verify.bench_slo",
                Stage.BOTH,
                Severity.ERROR,
                b.status,
                f"{b.engine} benchmark, {format_value(b.completed, Unit.COUNT)}/"
                f"{format_value(b.requests, Unit.REQUESTS)}: TTFT p99 {_s(b.ttft_p99_s)}, "
                f"TPOT p99 {_s(b.tpot_p99_s)}" + (": " + "; ".join(b.reasons) if b.reasons else ""),
                {
                    "ttft_p99_s": b.ttft_p99_s,
                    "tpot_p99_s": b.tpot_p99_s,
                    "ttft_slo_s": b.ttft_slo_s,
                    "tpot_slo_s": b.tpot_slo_s,
                },
                source,
                b.engine,
            )
        )
    return tuple(out)


def attach(review: ReviewReport, report: VerifyReport, trace_sha256: str | None) -> ReviewReport:
    """The review with the verify checks added to the plan the folder was generated for."""
    names = [p.name for p in review.plans]
    if report.plan not in names:
        raise VerifyError(
            f"the verify folder was generated for plan '{report.plan}', not for "
            f"{', '.join(repr(n) for n in names)}; give that plan with --plan"
        )
    want = report.trace_sha256
    if want and trace_sha256 and want != trace_sha256:
        raise VerifyError(
            "the verify folder was generated from another trace (sha256 "
            f"{want[:12]}…, this one {trace_sha256[:12]}…): its demand is not this trace's"
        )
    extra = review_checks(report)
    plans: list[PlanReview] = [
        replace(p, checks=p.checks + extra) if p.name == report.plan else p for p in review.plans
    ]
    return replace(review, plans=tuple(plans))


def fails(report: VerifyReport, fail_on: str | Severity) -> bool:
    """Whether a failed phase or benchmark is at least ``fail_on`` severe."""
    floor = Severity(fail_on).rank
    return any(
        c.status is CheckStatus.FAIL and c.severity.rank >= floor for c in review_checks(report)
    )


def make_report(
    manifest: Mapping[str, Any],
    phases: Sequence[PhaseResult],
    missing: Sequence[str],
    benches: Sequence[BenchResult],
    generated_at: str,
    notes: Sequence[str] = (),
    base: tuple[Mapping[str, Any], Mapping[str, str]] | None = None,
) -> VerifyReport:
    """The verify report with its measured catalog (``base``: raw entries and sources)."""
    entries, cites = base or ({}, {})
    return VerifyReport(
        job_set_id=manifest["job_set_id"],
        plan=manifest["plan"]["name"],
        phases=tuple(phases),
        benches=tuple(benches),
        catalog=measured_catalog(
            manifest, phases, generated_at, entries, cites, tuple(STORAGE_SCHEMA)
        ),
        missing=tuple(missing),
        trace_sha256=(manifest.get("trace") or {}).get("sha256"),
        notes=tuple(notes),
        inputs=tuple(
            [p for j in manifest["fio"] for p in (j["file"], j["result"])]
            + [b[k] for b in manifest["benchmarks"] for k in ("script", "dataset", "result")]
        ),
    )


def verify_results(
    folder: VerifyFolder,
    generated_at: str,
    tolerance: float = DEFAULT_TOLERANCE,
    base: tuple[Mapping[str, Any], Mapping[str, str]] | None = None,
) -> VerifyReport:
    """Judge everything a verify folder holds (pure: the folder was read by the loader).

    ``base``: the storage catalog entries as written, and their sources (for the measured
    catalog's entries to keep their other fields).
    """
    manifest = folder.manifest
    phases, missing = judge_fio(manifest, folder.fio, tolerance)
    benches = []
    notes = list(folder.notes)
    for spec in manifest["benchmarks"]:
        if spec["engine"] not in folder.benches:
            continue
        path, trace = folder.benches[spec["engine"]]
        # Refuse another run's output before spending a calibration on it.
        judge_bench(manifest, spec["engine"], path, trace)
        cal = calibrate_bench(manifest, trace)
        if cal is None:
            notes.append(
                f"{path}: no calibration (needs the plan's catalog model and GPU and at least "
                "10 requests with measured TTFT and decode time)"
            )
        span = folder.bench_spans.get(spec["engine"])
        benches.append(judge_bench(manifest, spec["engine"], path, trace, cal, span))
    return make_report(manifest, phases, missing, benches, generated_at, notes, base)
