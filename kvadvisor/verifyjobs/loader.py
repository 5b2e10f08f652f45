"""Read a verify folder back: the manifest, fio's JSON outputs and the benchmark outputs.

The only module of :mod:`kvadvisor.verifyjobs` that reads files; a file that cannot be used is a
VerifyError (or the trace reader's TraceError) naming it and saying what to do.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kvadvisor.catalog.storage import STORAGE_FILE
from kvadvisor.errors import CatalogError
from kvadvisor.io.fileio import check_input
from kvadvisor.io.yamlio import load_yaml
from kvadvisor.trace import TraceFormat, read_trace
from kvadvisor.trace.model import Trace
from kvadvisor.units.format import count
from kvadvisor.verifyjobs.fio import fio_jobs
from kvadvisor.verifyjobs.model import MANIFEST_NAME, RESULTS_DIR, VerifyError, VerifyFolder
from kvadvisor.verifyjobs.results import DESCRIPTION, check_manifest

BENCH_FORMATS = {"vllm": TraceFormat.VLLM, "sglang": TraceFormat.SGLANG}
MAX_JSON_BYTES = 256 * 1024 * 1024  # a fio JSON of a few jobs is kilobytes; refuse the absurd


def _json(path: Path, what: str, fix: str) -> Any:
    check_input(path, VerifyError)  # a FIFO named *.json would block the read forever
    try:
        size = path.stat().st_size
        if size > MAX_JSON_BYTES:
            raise VerifyError(f"{path}: {count(size)} bytes is too large for {what}")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise VerifyError(f"{path}: cannot be read ({exc}); {fix}") from None
    # fio may print notes before its JSON document into the same file.
    start = text.find("\n{") + 1 if not text.lstrip().startswith("{") else 0
    if not text.strip():
        raise VerifyError(f"{path}: empty; {fix}")
    try:
        return json.loads(text[start:])
    except json.JSONDecodeError as exc:
        line = text[:start].count("\n") + exc.lineno
        raise VerifyError(
            f"{path}: not valid JSON at line {line}, column {exc.colno} ({exc.msg}): a "
            f"truncated or interrupted {what}; {fix}"
        ) from None
    except (RecursionError, ValueError) as exc:
        # Nesting past Python's recursion limit, or an integer of more than 4,300 digits.
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:80]
        raise VerifyError(f"{path}: not valid JSON ({reason}): not a {what}; {fix}") from None


def read_manifest(folder: str | Path) -> dict[str, Any]:
    """The folder's verify.json, checked."""
    folder = Path(folder)
    path = folder / MANIFEST_NAME
    if not folder.is_dir():
        raise VerifyError(f"{folder}: not a directory; give the folder `kvadvisor verify` wrote")
    if not path.is_file():
        raise VerifyError(
            f"{folder}: no {MANIFEST_NAME}; give the folder `kvadvisor verify TRACE --plan PLAN "
            "-o DIR` wrote"
        )
    fix = "regenerate the folder with `kvadvisor verify TRACE --plan PLAN -o DIR`"
    return check_manifest(_json(path, "manifest", fix), str(path))


def load_folder(folder: str | Path) -> VerifyFolder:
    """Read the manifest and every result it names that exists (missing ones are left out).

    Any other fio JSON in ``results/`` must be of this job set too: one from another set is
    refused, so a stale result is not silently ignored.
    """
    folder = Path(folder)
    manifest = read_manifest(folder)
    fio: dict[str, tuple[str, Any]] = {}
    known: set[Path] = set()
    for spec in manifest["fio"]:
        path = folder / spec["result"]
        known.add(path)
        if path.is_file():
            fix = f"rerun ./run-fio.sh {spec['file']}"
            fio[spec["file"]] = (str(path), _json(path, "fio run", fix))
    benches: dict[str, tuple[str, Trace]] = {}
    spans: dict[str, float] = {}
    for spec in manifest["benchmarks"]:
        path = folder / spec["result"]
        known.add(path)
        if path.is_file():
            trace = read_trace(path, BENCH_FORMATS[spec["engine"]])
            benches[spec["engine"]] = (str(path), trace)
            if not trace.arrivals_measured:
                span = _runs_duration(path)
                if span is not None:
                    spans[spec["engine"]] = span
    notes: list[str] = []
    results = folder / RESULTS_DIR
    for path in sorted(results.glob("*.json")) if results.is_dir() else []:
        if path in known:
            continue
        doc = _json(path, "fio run", "remove it or rerun the job from this folder")
        try:
            jobs = fio_jobs(doc, str(path))
        except VerifyError:
            notes.append(f"{path}: not fio output; left alone")
            continue
        for job in jobs:
            found = DESCRIPTION.search(str(job.get("desc") or ""))
            if found is None or found.group(1) != manifest["job_set_id"]:
                raise VerifyError(
                    f"{path}: fio output of job '{job['jobname']}' from "
                    + (f"job set {found.group(1)}" if found else "outside kvadvisor")
                    + f", not this folder's job set {manifest['job_set_id']}; remove it"
                )
        notes.append(f"{path}: fio output of this job set under another name; not read")
    return VerifyFolder(str(folder), manifest, fio, benches, tuple(notes), spans)


def _runs_duration(path: Path) -> float | None:
    """The seconds a benchmark output's runs took by the tool's own clock (``duration``, summed).

    Wanted where the output has no per-request start times (SGLang's bench_serving): its
    requests' arrivals are then unknown, and the run's span is the tool's ``duration`` (from
    the first request sent to the last completed), not the longest request. The file was read
    whole by the trace reader already; a run without a numeric duration gives None.
    """
    total = 0.0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            run = json.loads(line)
        except json.JSONDecodeError:
            return None  # one JSON document over several lines: not SGLang's JSONL
        value = run.get("duration") if isinstance(run, dict) else None
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
            return None
        total += float(value)
    return total or None


def storage_entries(extra: Sequence[str | Path] = ()) -> tuple[dict[str, Any], dict[str, str]]:
    """The storage catalog's entries as written (raw fields) and its sources, with ``extra``.

    Later files add or replace entries, as ``--catalog`` does; a measured entry keeps the
    fields of the entry it replaces. Files that are not storage catalogs are skipped.
    """
    entries: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for path in (STORAGE_FILE, *extra):
        doc = load_yaml(path, CatalogError)
        if not isinstance(doc, dict) or doc.get("kind") != "storage":
            continue
        sources.update({str(k): str(v) for k, v in (doc.get("sources") or {}).items()})
        entries.update({str(k): v for k, v in (doc.get("entries") or {}).items()})
    return entries, sources
