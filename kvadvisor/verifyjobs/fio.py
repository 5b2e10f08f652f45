"""fio job files that reproduce a tier's KV I/O, and fio's JSON output read back.

A job file holds one tier of one stage; its phases run one after another (``stonewall``), each
reported by fio as one entry (``group_reporting``) named ``<stage>.<tier>.<phase>``:

* ``max-write``/``max-read``: no rate limit, the KV I/O size and queue depth: what the tier does
  under this traffic (the figures of the catalog override);
* ``p99``: every direction capped at its p99 window rate, read/write mix as those rates say;
* ``peak``: the same at the peak window rate (only when the peak is above the p99);
* ``burst``: an always-on job at the off-window rate, plus per direction a job adding the
  on-window excess for ``on_s`` seconds every ``on_s + off_s`` (fio ``thinktime_iotime`` and
  ``thinktime``, with ``rate_ignore_thinktime`` so an off phase is not caught up afterwards).

Rates are per instance (per pool for shared tiers) and fio's ``rate`` is per job, so each is
divided over ``numjobs`` (the ranks that write, times the queue depth for the synchronous
``libcufile`` engine). The directory, file size and runtime come from the environment
(``KVADVISOR_FIO_DIR``, ``KVADVISOR_FIO_SIZE``, ``KVADVISOR_FIO_RUNTIME``; fio expands
``${VAR}``), so the same file runs on the target host and in a quick local check.

A **striped** tier (``devices`` > 1 of a drive or block volume: 4 io2 volumes, 8 NVMe drives)
gets one job section per device in every phase, each on its own device path
(``filename=${KVADVISOR_FIO_DEV_<i>}``: the volume's block device, or a file on a file system of
that volume alone) at 1/N of the tier's rates and queue depth, in its own reporting group
(``new_group``) so fio reports each device; the devices of a phase run at once and their sum is
judged against the tier's rates. Each device's share is
stated beside one device's rated limit (the plan's storage figures per device or volume).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from kvadvisor.quoting import comment
from kvadvisor.units import Unit, format_value
from kvadvisor.units.format import count, duration
from kvadvisor.verifyjobs.model import (
    DIRECTIONS,
    FioJobFile,
    FioPhase,
    Measured,
    TierDemand,
    VerifyError,
)
from kvadvisor.vocab import Severity

PEAK_ABOVE_P99 = 1.01  # a peak within 1% of the p99 adds no phase
SATURATED = 0.95  # a closed-loop p99 this close to the capability means the tier is the limit
PERCENTILES = "50:99:99.9"
SLUG_CHARS = 64  # longest tier name in a job file's name
NS_PER_S = 1e9
MS_PER_S = 1000.0
ENV_DIR, ENV_SIZE, ENV_RUNTIME = "KVADVISOR_FIO_DIR", "KVADVISOR_FIO_SIZE", "KVADVISOR_FIO_RUNTIME"
# Kinds whose ``devices`` are separate drives or volumes, each its own block device; a file
# system's or a pool's devices sit behind one mount.
STRIPED_KINDS = frozenset({"ssd", "block"})


def stripes(d: TierDemand) -> int:
    """How many device jobs a tier's phases run: its ``devices`` for drives and volumes, else 1."""
    return d.devices if d.devices > 1 and d.kind in STRIPED_KINDS else 1


ENV_DEV = "KVADVISOR_FIO_DEV"


def device_env(i: int) -> str:
    """The environment variable naming device ``i``'s path (its block device, or a file on it)."""
    return f"{ENV_DEV}_{i}"


def device_job(name: str, i: int) -> str:
    """The job name fio reports for device ``i`` of a phase."""
    return f"{name}.dev{i}"


def slug(name: str) -> str:
    """A tier name as fio job and file names may carry it: letters, digits, '_' and '-'.

    At most SLUG_CHARS of them: a longer name keeps its start and a digest of the whole, so the
    job file's name stays far under the file system's 255 bytes and two names stay apart.
    """
    text = re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-") or "tier"
    if len(text) <= SLUG_CHARS:
        return text
    digest = hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"{text[: SLUG_CHARS - 9].rstrip('-')}-{digest}"


def job_stem(demand: TierDemand, gds: bool = False) -> str:
    """``<stage>.<tier>`` (``.gds`` for the GPUDirect variant): the job file's and names' stem."""
    return f"{demand.stage}.{slug(demand.tier)}" + (".gds" if gds else "")


def _rate(value: float) -> str:
    return format_value(value, Unit.BYTES_PER_S)


def _rw(rates: Mapping[str, float], io_bytes: int) -> list[str]:
    """``rw`` (and ``rwmixread`` by I/O count) for the directions with a positive rate."""
    read, write = rates.get("read", 0.0), rates.get("write", 0.0)
    if read > 0 and write > 0:
        share = round(100 * read / (read + write))
        return ["rw=randrw", f"rwmixread={min(max(share, 1), 99)}"]
    return ["rw=randread"] if read > 0 else ["rw=randwrite"]


def _rate_option(rates: Mapping[str, float], numjobs: int) -> str:
    """The ``rate=read,write`` option per job (bytes per second, at least 1)."""

    def per_job(direction: str) -> str:
        value = rates.get(direction, 0.0)
        return "" if value <= 0 else str(max(int(math.ceil(value / numjobs)), 1))

    read, write = per_job("read"), per_job("write")
    return f"rate={read},{write}"


def _phases(d: TierDemand) -> list[FioPhase]:
    stem = f"{d.stage}.{slug(d.tier)}"
    dirs = {x.direction: x for x in d.directions()}
    targets = {k: v.latency_target_s for k, v in dirs.items() if v.latency_target_s is not None}
    out: list[FioPhase] = []
    for direction in ("write", "read"):
        if direction in dirs:
            out.append(
                FioPhase(
                    f"{stem}.max-{direction}",
                    f"max-{direction}",
                    {},
                    {},
                    Severity.INFO,
                    what=f"{direction}s with no rate limit: what the tier does at this I/O size "
                    "and queue depth (the catalog override's figures)",
                )
            )
    p99 = {k: v.p99_bytes_per_s for k, v in dirs.items()}
    out.append(
        FioPhase(
            f"{stem}.p99",
            "p99",
            p99,
            targets,
            Severity.ERROR,
            what="each direction at its p99 window rate (the two need not coincide: conservative)",
        )
    )
    peak = {k: v.peak_bytes_per_s for k, v in dirs.items()}
    if any(peak[k] > p99[k] * PEAK_ABOVE_P99 for k in dirs):
        out.append(
            FioPhase(
                f"{stem}.peak",
                "peak",
                peak,
                targets,
                Severity.WARNING,
                what="each direction at its peak window rate: a miss here means bursts queue",
            )
        )
    bursts = {
        k: (v.burst.on_bytes_per_s - v.burst.off_bytes_per_s, v.burst.on_s, v.burst.off_s)
        for k, v in dirs.items()
        if v.burst is not None
    }
    if bursts:
        base = {
            k: (v.burst.off_bytes_per_s if v.burst is not None else v.mean_bytes_per_s)
            for k, v in dirs.items()
        }
        out.append(
            FioPhase(
                f"{stem}.burst",
                "burst",
                base,
                targets,
                Severity.ERROR,
                bursts=bursts,
                what="the measured on/off pattern: the off-window rate always, plus the "
                "on-window excess while on",
            )
        )
    return out


def _phase_lines(
    p: FioPhase, io_bytes: int, numjobs: int, first: bool, devices: int = 1
) -> list[str]:
    """A phase's comment lines and job sections: one set, or one per device of a stripe."""
    lines = [comment(f"{p.phase}: {p.what}", ";")]
    each = "" if devices == 1 else f" in all, {_share(devices)} of it on each device"
    for direction in DIRECTIONS:
        if direction in p.rates_bytes_per_s:
            rate = p.rates_bytes_per_s[direction]
            held = f"{_rate(rate)} ({format_value(rate / io_bytes, Unit.IOPS)})"
            if direction in p.bursts:
                add, on_s, off_s = p.bursts[direction]
                on = (
                    f"{_rate(rate + add)} for {duration(on_s)} on, {_rate(rate)} for "
                    f"{duration(off_s)} off"
                )
                held = on
            target = p.latency_target_s.get(direction)
            lat = "" if target is None else f"; p99 completion latency <= {duration(target)}"
            lines.append(comment(f"  must hold {direction} {held}{each}{lat}", ";"))
    if devices == 1:
        return lines + _sections(p, p.name, io_bytes, numjobs, [] if first else ["stonewall"])
    for i in range(devices):
        # The devices of a phase run at once; each its own reporting group, so fio reports it.
        # Each job opens its device's path itself (no [global] directory): the volume's block
        # device, as the stripe's volumes are on the target host, or a file on that volume.
        opts = (["stonewall"] if i == 0 and not first else []) + [
            "new_group",
            f"filename=${{{device_env(i)}}}",
        ]
        scaled = replace(
            p,
            rates_bytes_per_s={k: v / devices for k, v in p.rates_bytes_per_s.items()},
            bursts={k: (a / devices, on, off) for k, (a, on, off) in p.bursts.items()},
        )
        lines += ([] if i == 0 else [""]) + _sections(
            scaled, device_job(p.name, i), io_bytes, numjobs, opts
        )
    return lines


def _share(devices: int) -> str:
    return f"1/{devices}"


def _sections(p: FioPhase, name: str, io_bytes: int, numjobs: int, opts: list[str]) -> list[str]:
    """The job sections of one phase (on one device): its rates, and a burst's on jobs."""
    name_lines = [f"[{name}]", *opts]
    if not p.rates_bytes_per_s:  # max-read / max-write
        return name_lines + _rw({p.phase.split("-")[1]: 1.0}, io_bytes)
    base = {k: v for k, v in p.rates_bytes_per_s.items() if v > 0}
    body: list[str] = []
    if base:
        body = name_lines + _rw(base, io_bytes) + [_rate_option(base, numjobs)]
    # the on jobs join the phase's group: no new_group, the device's path kept
    dir_opts = [o for o in opts if o.startswith("filename=")]
    for direction, (add, on_s, off_s) in sorted(p.bursts.items()):
        if not body:  # a burst phase whose off windows carry nothing: the on jobs alone
            body = list(name_lines)
        else:
            body += ["", f"[{name}.on-{direction}]", *dir_opts]
        body += _rw({direction: add}, io_bytes) + [
            _rate_option({direction: add}, numjobs),
            f"thinktime={max(int(round(off_s * MS_PER_S)), 1)}ms",
            f"thinktime_iotime={max(int(round(on_s * MS_PER_S)), 1)}ms",
            "rate_ignore_thinktime=1",
        ]
    return body


def saturated(d: TierDemand) -> list[str]:
    """Directions whose closed-loop p99 reaches 95% of the plan's capability for the tier."""
    out = []
    for x in d.directions():
        cap = d.capability_bytes_per_s.get(x.direction)
        if d.open_loop and cap and x.p99_bytes_per_s >= SATURATED * cap:
            out.append(x.direction)
    return out


def _open_loop_lines(d: TierDemand) -> list[str]:
    """The open-loop demand, as comment text (no prefix)."""
    if not d.open_loop:
        return []
    parts = [
        f"{k} p99 {_rate(p99)}, peak {_rate(peak)}"
        for k, (p99, peak) in sorted(d.open_loop.items())
    ]
    lines = [f"without queueing (open loop) the traffic would ask: {'; '.join(parts)}"]
    full = saturated(d)
    if full:
        lines.append(
            f"the replay saturates the tier ({', '.join(full)} at its planned capability): "
            "these jobs test that capability; the traffic asks for more"
        )
    return lines


def over_limit(d: TierDemand) -> list[str]:
    """Where one device's share of the tier's peak demand is above one device's rated limit."""
    n = stripes(d)
    out = []
    for x in d.directions():
        share = x.peak_bytes_per_s / n
        limit = d.device_limits.get(f"{x.direction}_bytes_per_s")
        if limit and share > limit:
            out.append(
                f"{x.direction} {_rate(share)} per device at the peak, above one device's "
                f"{_rate(limit)}"
            )
        iops = d.device_limits.get(f"{x.direction}_iops")
        if iops and share / d.shape.io_bytes > iops:
            out.append(
                f"{x.direction} {format_value(share / d.shape.io_bytes, Unit.IOPS)} per device "
                f"at the peak, above one device's {format_value(iops, Unit.IOPS)}"
            )
    return out


def _stripe_lines(d: TierDemand, iodepth: int) -> list[str]:
    """What a striped tier's job file states: the device jobs, one device's share and limits."""
    n = stripes(d)
    if n == 1:
        return []
    limits = d.device_limits
    rated = [
        f"{k} {_rate(limits[f'{k}_bytes_per_s'])}"
        for k in DIRECTIONS
        if f"{k}_bytes_per_s" in limits
    ] + [
        f"{k} {format_value(limits[f'{k}_iops'], Unit.IOPS)}"
        for k in DIRECTIONS
        if f"{k}_iops" in limits
    ]
    shares = [
        f"{x.direction} p99 {_rate(x.p99_bytes_per_s / n)}, peak {_rate(x.peak_bytes_per_s / n)}"
        for x in d.directions()
    ]
    return [
        f"striped over {n} devices: every phase runs one job per device at once, on "
        f"${{{device_env(0)}}} .. ${{{device_env(n - 1)}}} (each volume's block device, whose "
        "data it overwrites, or a file on a file system of that volume alone), "
        f"each at 1/{n} of the tier's rates with queue depth {iodepth} per rank (the tier's "
        f"{d.iodepth} over the devices); fio reports each device, and their sum is judged "
        "against the tier's rates",
        f"one device's share: {'; '.join(shares) or 'none'}; one device's rated limit: "
        f"{', '.join(rated) or 'not stated'} ({d.device_limits_from})",
        *(f"over the limit: {x}: the plan's tier cannot carry it" for x in over_limit(d)),
    ]


def job_file(d: TierDemand, job_set_id: str, header: list[str], *, gds: bool) -> FioJobFile:
    """The fio job file for one tier (plain libaio, or the libcufile GPUDirect variant)."""
    stem = job_stem(d, gds)
    s = d.shape
    n = stripes(d)
    phases = [
        FioPhase(
            p.name + (".gds" if gds else ""),
            p.phase,
            p.rates_bytes_per_s,
            p.latency_target_s,
            p.severity,
            p.bursts,
            p.what,
            device_jobs=tuple(device_job(p.name + (".gds" if gds else ""), i) for i in range(n))
            if n > 1
            else (),
        )
        for p in _phases(d)
    ]
    # Each device of a stripe holds its share of the requests in flight.
    depth = max(math.ceil(d.iodepth / n), 1)
    # libcufile is synchronous (one I/O in flight per job): the queue depth becomes jobs.
    numjobs = s.writers * (depth if gds else 1)
    iodepth = 1 if gds else depth
    gpus = ":".join(map(str, range(s.writers)))
    engine = (
        ["ioengine=libcufile", "cuda_io=cufile", f"gpu_dev_ids={gpus}"]
        if gds
        else ["ioengine=libaio"]
    )
    notes = [
        *header,
        # Bytes in full: the comment derives bs=, so every byte of the rounding shows.
        f"I/O size {count(s.io_bytes)} B: {s.chunk_tokens}-token chunks ({s.chunk_from}) of "
        f"{count(s.kv_bytes_per_io)} B per I/O: {s.writers} writer(s) ({s.writers_from}); "
        f"{s.layout_from}; rounded up to {count(s.io_unit_bytes)} B ({s.io_unit_from})",
        f"demand: {d.demand_from}",
        *_open_loop_lines(d),
        f"queue depth {d.iodepth} per rank: {d.iodepth_from}",
        *_stripe_lines(d, depth),
        f"numjobs {numjobs}: fio's rate is per job, so every rate below is divided by it",
    ]
    if gds:
        notes.append(
            "GPUDirect Storage: libcufile moves data between the file and GPU memory "
            f"({d.gds_from}); it is synchronous, so the queue depth runs as {numjobs} jobs"
        )
    # The plan's, the trace's and the tiers' names are in these lines: each stays one comment
    # line, so no name can start a section or an option (exec_prerun= runs a command).
    lines = [comment(text, ";") for text in notes]
    lines += [
        "",
        "[global]",
        f"description=kvadvisor job-set {job_set_id}",
        *([f"directory=${{{ENV_DIR}}}", f"filename=kvadvisor.{stem}"] if n == 1 else []),
        f"size=${{{ENV_SIZE}}}",
        f"runtime=${{{ENV_RUNTIME}}}",
        "time_based=1",
        *engine,
        "direct=1",
        f"bs={s.io_bytes}",
        f"iodepth={iodepth}",
        f"numjobs={numjobs}",
        "group_reporting=1",
        f"percentile_list={PERCENTILES}",
        "randrepeat=0",
    ]
    for i, p in enumerate(phases):
        lines += [
            "",
            *_phase_lines(p, s.io_bytes, numjobs, i == 0, devices=n),
        ]
    return FioJobFile(
        path=f"fio/{stem}.fio",
        result=f"results/{stem}.json",
        stage=d.stage,
        tier=d.tier,
        gds=gds,
        io_bytes=s.io_bytes,
        numjobs=numjobs,
        iodepth=iodepth,
        phases=tuple(phases),
        text="\n".join(lines) + "\n",
        devices=n,
    )


# --- reading fio's JSON back ------------------------------------------------------------------


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _percentile(clat: Mapping[str, Any], pct: float) -> float | None:
    table = clat.get("percentile") if isinstance(clat, Mapping) else None
    if not isinstance(table, Mapping):
        return None
    for key, value in table.items():
        try:
            if abs(float(key) - pct) < 1e-6 and _num(value) is not None:
                return float(value) / NS_PER_S
        except ValueError:
            continue
    return None


def measured_direction(job: Mapping[str, Any], direction: str) -> Measured | None:
    """One direction of one fio JSON job entry; None when it moved nothing."""
    d = job.get(direction)
    if not isinstance(d, Mapping):
        return None
    ios = _num(d.get("total_ios")) or 0.0
    io_bytes = _num(d.get("io_bytes")) or 0.0
    if ios <= 0 or io_bytes <= 0:
        return None
    clat = d.get("clat_ns") or {}
    return Measured(
        direction=direction,
        bytes_per_s=_num(d.get("bw_bytes")) or 0.0,
        iops=_num(d.get("iops")) or 0.0,
        io_bytes=io_bytes / ios,
        ios=int(ios),
        runtime_s=(_num(d.get("runtime")) or 0.0) / MS_PER_S,
        clat_p50_s=_percentile(clat, 50.0),
        clat_p99_s=_percentile(clat, 99.0),
        clat_p999_s=_percentile(clat, 99.9),
    )


def fio_jobs(doc: Any, path: str) -> list[Mapping[str, Any]]:
    """The job entries of a parsed fio JSON document (checks its shape, names the file)."""
    if not isinstance(doc, Mapping) or "fio version" not in doc:
        raise VerifyError(
            f"{path}: not fio JSON output (no 'fio version'); run fio with "
            "--output-format=json as run-fio.sh does"
        )
    jobs = doc.get("jobs")
    if not isinstance(jobs, list) or not jobs:
        raise VerifyError(f"{path}: fio JSON output with no 'jobs'; the run did not complete")
    for i, job in enumerate(jobs):
        if not isinstance(job, Mapping) or not isinstance(job.get("jobname"), str):
            raise VerifyError(f"{path}: jobs[{i}]: no 'jobname'; not fio JSON output")
    return jobs
