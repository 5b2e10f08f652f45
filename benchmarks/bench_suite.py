r"""README's test command before and after issue 30, as CI runs it: interleaved, medians, spread.

Each run is a fresh clone of this repository at one commit, its own ``.ci/run`` with
``CI=true`` (a fresh virtual environment, the package and its test extra installed, cold pip
and numba caches), which calls that commit's README test command: one process at ``--before``
(f539671, where issue 30 was filed), ``-n auto`` at ``--after``. The runs go A B, B A, A B, ...
(a pair at a time, the order alternating), so a change in the machine's speed falls on both
sides. Per run: README's test command (the seconds in pytest's first summary line, the suite;
a second line is the ``[silicon]`` step's), the whole job's wall and CPU (user + system of every
process it waited for), and the machine's state just before it: a plain Python loop's CPU
seconds alone and two at once. Where two at once each take longer than one alone, the two
cores share their throughput and ``-n auto`` cannot gain a factor of two, whatever the suite.

    python benchmarks/bench_suite.py [--pairs 2] [--before f539671] [--after HEAD] \
        [--shared FOLDER]

``--shared`` links FOLDER as ``../shared`` beside each clone (the real traces the round-trip
tests add). Nothing else should run on the machine meanwhile. A pair took 33 minutes on two
vCPUs (docs/benchmarks.md, the test suite's tenth round).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _harness import REPO, spread

FILED_ON = "f539671"  # issue 30 was filed on this commit: README ran the suite in one process
# The first line of pytest's -q summary: "2867 passed, 3 warnings in 753.32s (0:12:33)".
SUMMARY = re.compile(r"^(\d+) passed\b.*? in ([\d.]+)s\b", re.MULTILINE)
FAILED = re.compile(r"^(?:\d+ passed, )?(\d+) (?:failed|errors?)\b", re.MULTILINE)
LOOP = "import time\nt = time.process_time()\ns = 0\nfor i in range(30_000_000):\n    s += i\n"
LOOP += "print(time.process_time() - t)\n"


@dataclass(frozen=True)
class Run:
    """One run of a commit's .ci/run: what its suite and its whole job took."""

    label: str
    commit: str
    log: Path  # .ci/run's output
    returncode: int
    passed: int | None
    suite_s: float | None
    job_wall_s: float
    job_cpu_s: float
    loop_alone_s: float
    loop_two_s: tuple[float, float]


def read_log(text: str) -> tuple[int | None, float | None, int | None]:
    """From .ci/run's output: the suite's tests passed and seconds, and how many failed.

    The suite's summary is pytest's first (the [silicon] step's comes after it); a run with a
    failure has no "N passed" line of its own, so its seconds are None.
    """
    summary = SUMMARY.search(text)
    failed = FAILED.search(text)
    return (
        int(summary.group(1)) if summary else None,
        float(summary.group(2)) if summary else None,
        int(failed.group(1)) if failed else None,
    )


def _loop(count: int) -> list[float]:
    """CPU seconds of the plain loop in ``count`` processes started at once."""
    procs = [
        subprocess.Popen([sys.executable, "-c", LOOP], stdout=subprocess.PIPE, text=True)
        for _ in range(count)
    ]
    return [float(p.communicate()[0]) for p in procs]


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _commit(ref: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", ref],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def run_once(label: str, commit: str, work: Path, shared: Path | None, log: Path) -> Run:
    """Clone ``commit`` into a fresh folder and time its ``.ci/run``; the output goes to ``log``."""
    alone = _loop(1)[0]
    two = _loop(2)
    folder = Path(tempfile.mkdtemp(prefix=f"{label}-", dir=work))
    clone = folder / "kvadvisor"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", commit], check=True)
    if shared is not None:
        (folder / "shared").symlink_to(shared.resolve())
    env = {**os.environ, "CI": "true"}
    # The suite must not find this process's numba cache or virtual environment: .ci/run makes
    # its own from the system's python3.
    venv = env.pop("VIRTUAL_ENV", None)
    if venv:
        keep = [d for d in env.get("PATH", "").split(os.pathsep) if not d.startswith(venv)]
        env["PATH"] = os.pathsep.join(keep)
    for name in ("NUMBA_CACHE_DIR", "PYTHONPATH"):
        env.pop(name, None)
    cpu0, wall0 = _children_cpu(), time.perf_counter()
    with log.open("w") as out:
        done = subprocess.run(
            ["bash", ".ci/run"], cwd=clone, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    wall, cpu = time.perf_counter() - wall0, _children_cpu() - cpu0
    passed, suite_s, _ = read_log(log.read_text(errors="replace"))
    shutil.rmtree(folder, ignore_errors=True)
    return Run(
        label=label,
        commit=commit,
        log=log,
        returncode=done.returncode,
        passed=passed,
        suite_s=suite_s,
        job_wall_s=wall,
        job_cpu_s=cpu,
        loop_alone_s=alone,
        loop_two_s=(two[0], two[1]),
    )


def main() -> int:
    """Run the pairs, print each run as it ends, then the medians and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--before", default=FILED_ON, help="commit A (one process)")
    parser.add_argument("--after", default="HEAD", help="commit B (-n auto)")
    parser.add_argument("--shared", type=Path, help="linked as ../shared beside each clone")
    parser.add_argument("--work", type=Path, help="where the clones go (default: a temp folder)")
    args = parser.parse_args()
    if args.shared is not None and not args.shared.is_dir():
        parser.error(f"--shared {args.shared}: not a folder")
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-suite-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        sides = {"A": _commit(args.before), "B": _commit(args.after)}
    except subprocess.CalledProcessError as e:
        parser.error(f"not a commit of this repository: {e.stderr.strip()}")
    print(f"A = {sides['A']} (before), B = {sides['B']} (after); logs in {work}", flush=True)
    print(
        "run  commit   rc  passed  suite_s  job_wall_s  job_cpu_s  loop_alone_s  loop_two_s",
        flush=True,
    )
    pairs: list[dict[str, Run]] = []
    for pair in range(args.pairs):
        pairs.append({})
        for label in "AB" if pair % 2 == 0 else "BA":
            name = f"{label}{pair + 1}"
            r = run_once(name, sides[label], work, args.shared, work / f"{name}.log")
            pairs[-1][label] = r
            suite = f"{r.suite_s:.1f}" if r.suite_s is not None else "-"
            print(
                f"{name:<4} {r.commit:<8} {r.returncode:>2} {r.passed or '-':>7} {suite:>8} "
                f"{r.job_wall_s:>11.1f} {r.job_cpu_s:>10.1f} {r.loop_alone_s:>13.2f}  "
                f"{r.loop_two_s[0]:.2f} / {r.loop_two_s[1]:.2f}",
                flush=True,
            )
    bad = [r for p in pairs for r in p.values() if r.returncode != 0 or r.suite_s is None]
    for r in bad:
        failed = read_log(r.log.read_text(errors="replace"))[2]
        why = f"{failed} failed" if failed else "no pytest summary"
        print(f"{r.label}: .ci/run exited {r.returncode} ({why}); see {r.log}")
    a = [p["A"].suite_s for p in pairs if p["A"].suite_s is not None]
    b = [p["B"].suite_s for p in pairs if p["B"].suite_s is not None]
    if not a or not b:
        return 1
    print(f"A, one process: {spread(a)} s")
    print(f"B, -n auto:     {spread(b)} s")
    print(f"ratio of the medians B/A: {statistics.median(b) / statistics.median(a):.3f}")
    within = [
        f"{p['B'].suite_s / p['A'].suite_s:.3f}" for p in pairs if p["A"].suite_s and p["B"].suite_s
    ]
    print("B/A within each pair: " + ", ".join(within))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
