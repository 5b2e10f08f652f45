"""`kvadvisor verify TRACE --plan`: from the plan's replay, the jobs that test it for real.

The replay is the review's (:mod:`kvadvisor.planreview.demand`): the same tier flows its checks
judge become the demand each fio job reproduces, so a job that holds its rates on the user's
hardware confirms the review's bandwidth verdicts there. Pure: takes the trace's replayed
arrays (the pipeline replays it) and returns the files as text.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from kvadvisor.catalog.storage import StorageSpec
from kvadvisor.plan.model import Plan
from kvadvisor.planreview.demand import TraceReplay, plan_times, stage_tiers
from kvadvisor.planreview.perf import plan_perf
from kvadvisor.trace.model import Trace
from kvadvisor.verifyjobs.bench import bench_datasets, bench_runs
from kvadvisor.verifyjobs.demand import tier_demands
from kvadvisor.verifyjobs.fio import job_file, over_limit, saturated
from kvadvisor.verifyjobs.model import (
    MANIFEST_NAME,
    MANIFEST_VERSION,
    FioJobFile,
    ReplayedTier,
    RoutedShare,
    TierDemand,
    VerifySet,
)
from kvadvisor.verifyjobs.readme import readme, run_fio_script
from kvadvisor.vocab import Stage

PLACEHOLDER = "@JOBSET@"


@dataclass(frozen=True)
class VerifyOptions:
    """Knobs of the generation (docs/verify.md).

    ``bench_instances``: how many instances' share of the load one benchmarked endpoint takes
    (arrivals are slowed by it); None means the prefill stage's count (else the first stage's).
    ``bench_requests``: replay only the first N requests (None: all).
    """

    window_s: float = 1.0
    warmup_fraction: float = 0.5
    bench_instances: int | None = None
    bench_requests: int | None = None


def _bench_share(
    plan: Plan, options: VerifyOptions, share: RoutedShare | None, requests: int
) -> tuple[float, Any, dict[str, Any], str]:
    """What the benchmarks replay: (time factor, trace rows or None, manifest entry, title).

    One node's routed share at the plan's arrival times when the closed-loop replay ran and
    ``--bench-instances`` is not given; else every request, its arrivals slowed by the
    instances one endpoint stands for.
    """
    if share is not None and options.bench_instances is None:
        doc = {
            "from": "routed",
            "stage": share.stage,
            "router": share.router,
            "instance": share.instance,
            "instances": share.instances,
            "share_requests": share.share_requests,
            "trace_requests": requests,
            "replayed": share.replayed,
        }
        which = (
            f"The requests the replay's {share.router} router sent to {share.stage} instance "
            f"{share.instance} of {share.instances} ({share.share_requests} of {requests}), "
            "at the plan's arrival times."
        )
        return 1.0 / plan.traffic_scale, share.rows, doc, which
    stage = plan.stage(Stage.PREFILL) or plan.stages[0]
    instances = options.bench_instances or stage.count
    why = (
        "--bench-instances was given"
        if options.bench_instances is not None
        else "no closed-loop replay: which requests a node serves is not known"
    )
    doc = {"from": "slowed", "instances": instances, "trace_requests": requests, "why": why}
    which = f"Every request, arrivals slowed for one of {instances} instances ({why})."
    return instances / plan.traffic_scale, None, doc, which


# Catalog fields a measured override entry keeps from the entry it replaces.
KEPT_FIELDS = (
    "category",
    "provider",
    "display_name",
    "interface",
    "io_unit_bytes",
    "gds_support",
    "shared",
    "capacity_min_gib",
    "capacity_max_gib",
    "capacity_step_gib",
    "capacities_gb",
    "available_on",
    "families",
    "built_in",
    "client_network",
)


def _tier_dict(d: TierDemand, storage: Mapping[str, StorageSpec]) -> dict[str, Any]:
    out = asdict(d)
    out["io"] = out.pop("shape")
    out["io"]["io_bytes"] = d.shape.io_bytes
    spec = storage.get(d.catalog_name) if d.catalog_name else None
    out["catalog_entry"] = (
        None
        if spec is None
        else {
            k: list(v) if isinstance(v, tuple) else v
            for k in KEPT_FIELDS
            if (v := getattr(spec, k)) is not None and v != ()
        }
    )
    return out


def _job_dict(j: FioJobFile) -> dict[str, Any]:
    return {
        "file": j.path,
        "result": j.result,
        "stage": j.stage,
        "tier": j.tier,
        "gds": j.gds,
        "io_bytes": j.io_bytes,
        "numjobs": j.numjobs,
        "iodepth": j.iodepth,
        "devices": j.devices,
        "phases": [
            {
                "name": p.name,
                "phase": p.phase,
                "severity": p.severity.value,
                "rates_bytes_per_s": p.rates_bytes_per_s,
                "latency_target_s": p.latency_target_s,
                "device_jobs": list(p.device_jobs),
                "bursts": {
                    k: {"extra_bytes_per_s": a, "on_s": on, "off_s": off}
                    for k, (a, on, off) in p.bursts.items()
                },
            }
            for p in j.phases
        ],
    }


def _job_set_id(files: Mapping[str, str]) -> str:
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.encode())
        digest.update(b"\0")
        digest.update(files[path].encode())
    return digest.hexdigest()[:12]


def verify_plan(
    trace: Trace,
    replay: TraceReplay,
    plan: Plan,
    storage: Mapping[str, StorageSpec],
    options: VerifyOptions,
    *,
    version: str,
    trace_sha256: str | None = None,
    replay_notes: tuple[str, ...] = (),
    replayed: Mapping[tuple[str, str], ReplayedTier] | None = None,
    share: RoutedShare | None = None,
) -> VerifySet:
    """The verify folder's files for ``plan`` against ``trace`` and its replay (pure).

    ``replay`` is the review's (open loop: prefix hits at arrival); ``replayed`` the tiers of
    the closed-loop replay of the plan, which take precedence where given; ``share`` the
    requests the closed-loop replay routed to one node, which the benchmarks replay.
    """
    perf = plan_perf(plan)
    times, span = plan_times(plan, replay)
    flows = {
        stage.stage: stage_tiers(stage, replay, perf, times, span, options.window_s)
        for stage in plan.stages
    }
    tiers = tier_demands(
        plan,
        flows,
        times,
        span,
        replay.input_tokens,
        replay.output_tokens,
        perf.kv_bytes_per_token,
        storage,
        options.window_s,
        replayed,
    )
    jobs = _fio_jobs(plan, trace, tiers)
    factor, rows, share_doc, which = _bench_share(plan, options, share, trace.requests)
    datasets, _, block, totals = bench_datasets(trace, factor, options.bench_requests, rows)
    benches, scripts = bench_runs(totals, block, trace.source_path, which)
    notes = [*replay_notes, *_tier_notes(tiers)]
    manifest = _manifest(
        plan,
        trace,
        options,
        storage,
        tiers,
        jobs,
        perf.kv_bytes_per_token,
        version=version,
        trace_sha256=trace_sha256,
        bench=[
            {**asdict(b), "time_factor": factor, "chunk_hash_size": block, "share": share_doc}
            for b in benches
        ],
        notes=notes,
    )
    files = {j.path: j.text for j in jobs}
    files.update(datasets)
    files.update(scripts)
    files["run-fio.sh"] = run_fio_script(jobs)
    files["README.md"] = readme(plan, trace, tiers, jobs, benches, which, notes)
    files[MANIFEST_NAME] = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    job_set = _job_set_id(files)
    files = {path: text.replace(PLACEHOLDER, job_set) for path, text in files.items()}
    manifest["job_set_id"] = job_set
    return VerifySet(
        job_set_id=job_set,
        files=files,
        manifest=manifest,
        tiers=tiers,
        jobs=tuple(replace(j, text=files[j.path]) for j in jobs),
        benches=benches,
        notes=tuple(notes),
    )


def _fio_jobs(plan: Plan, trace: Trace, tiers: tuple[TierDemand, ...]) -> list[FioJobFile]:
    """One fio job file a tier that has one, plus its GPUDirect variant where the tier allows."""
    header = [
        f"kvadvisor verify: plan '{plan.name}' against {trace.source_path}",
        "job set @JOBSET@ (verify.json); run it with ../run-fio.sh (README.md says where)",
    ]
    jobs: list[FioJobFile] = []
    for d in tiers:
        if d.skipped is not None:
            continue
        where = [
            f"stage {d.stage}, tier '{d.tier}' ({d.kind}"
            + (f", {d.catalog_name}" if d.catalog_name else "")
            + (f" x {d.devices} devices" if d.devices > 1 else "")
            + (", shared: rates are the whole pool's" if d.shared else ", per instance")
            + ")"
        ]
        jobs.append(job_file(d, PLACEHOLDER, header + where, gds=False))
        if d.gds:
            jobs.append(job_file(d, PLACEHOLDER, header + where, gds=True))
    return jobs


def _tier_notes(tiers: tuple[TierDemand, ...]) -> list[str]:
    """Why a tier has no job or no GPUDirect variant, and where it cannot carry its share."""
    notes: list[str] = []
    for d in tiers:
        if d.skipped is not None:
            notes.append(f"{d.stage} tier '{d.tier}': no fio job: {d.skipped}")
        elif not d.gds:
            notes.append(f"{d.stage} tier '{d.tier}': no GPUDirect variant: {d.gds_from}")
        for problem in over_limit(d) if d.skipped is None else []:
            notes.append(
                f"{d.stage} tier '{d.tier}': {problem} ({d.device_limits_from}): the plan's "
                "tier cannot carry its share; add devices or a faster volume"
            )
        if d.skipped is None and saturated(d):
            notes.append(
                f"{d.stage} tier '{d.tier}' saturates in the replay ({', '.join(saturated(d))} "
                "at its planned capability): its jobs test that capability, and the traffic asks "
                "for more (the open-loop figures in its job file)"
            )
    return notes


def _manifest(
    plan: Plan,
    trace: Trace,
    options: VerifyOptions,
    storage: Mapping[str, StorageSpec],
    tiers: tuple[TierDemand, ...],
    jobs: list[FioJobFile],
    kv_bytes_per_token: int,
    *,
    version: str,
    trace_sha256: str | None,
    bench: list[dict[str, Any]],
    notes: list[str],
) -> dict[str, Any]:
    """verify.json: plan, trace, tier demands, jobs and benchmarks (job set id a placeholder)."""
    manifest: dict[str, Any] = {
        "kind": "kvadvisor-verify",
        "format_version": MANIFEST_VERSION,
        "kvadvisor_version": version,
        "job_set_id": PLACEHOLDER,
        "plan": {
            "name": plan.name,
            "path": plan.path,
            "model": plan.model.name,
            "kv_bytes_per_token": kv_bytes_per_token,
            "tp": plan.model.tp,
            "kv_dtype": plan.model.kv_dtype,
            "weight_dtype": plan.model.weight_dtype,
            "traffic_scale": plan.traffic_scale,
            "slo": {"ttft_p99_s": plan.slo.ttft_p99_s, "tpot_p99_s": plan.slo.tpot_p99_s},
            "stages": {
                s.stage: {
                    "instance": s.instance,
                    "count": s.count,
                    "gpu": None if s.gpu is None else s.gpu.name,
                }
                for s in plan.stages
            },
        },
        "trace": {
            "path": trace.source_path,
            "sha256": trace_sha256,
            "requests": trace.requests,
            "block_tokens": trace.block_tokens,
        },
        "window_s": options.window_s,
        "warmup_fraction": options.warmup_fraction,
        "tiers": [_tier_dict(d, storage) for d in tiers],
        "fio": [_job_dict(j) for j in jobs],
        "benchmarks": bench,
        "notes": notes,
    }
    return manifest
