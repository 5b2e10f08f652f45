"""Inputs and outputs as a hostile user meets them: never over an input, never over a device.

Regression cases of issue 18 (the bad-input matrix): an output that is an input under another
name, a device or FIFO as output, a full device or stdout, a FIFO or symlink loop as input, an
unreadable file, and SIGINT/SIGTERM in the middle of a write. The CLI cases run in-process
through CliRunner where they can; the entry point's own duties (signals, the final flush of
stdout) run in a subprocess.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from cli_checks import one_error_line
from typer.testing import CliRunner

from kvadvisor.cli import app
from kvadvisor.errors import ConfigError, TraceFormatError
from kvadvisor.io.fileio import InputFile, InputSet, atomic_target, check_input
from kvadvisor.plan import PlanError

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"
PLANS = REPO / "examples" / "plans"
runner = CliRunner()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def trace(tmp_path: Path) -> Path:
    """A small vLLM result (the analysis takes well under a second)."""
    path = tmp_path / "v.json"
    shutil.copy(SAMPLES / "vllm_bench_old.json", path)
    return path


@pytest.fixture()
def plan(tmp_path: Path) -> Path:
    """A copy of the good example plan."""
    path = tmp_path / "plan.yaml"
    shutil.copy(PLANS / "good-p5e-prefill-p5-decode.yaml", path)
    return path


def _spellings(path: Path) -> dict[str, Path]:
    """The same file under other names: another spelling, a symlink, a hard link."""
    link = path.with_name("link" + path.suffix)
    link.symlink_to(path.name)
    hard = path.with_name("hard" + path.suffix)
    os.link(path, hard)
    return {
        "same": path,
        "dotted": path.parent / "." / ".." / path.parent.name / path.name,
        "symlink": link,
        "hardlink": hard,
    }


# --- never over an input -------------------------------------------------------------------


def test_analyze_report_never_over_the_trace(trace: Path) -> None:
    """-o naming the trace, by any spelling or link, is exit 2 and the trace is unchanged."""
    before = _sha(trace)
    for how, target in _spellings(trace).items():
        result = runner.invoke(app, ["analyze", str(trace), "-q", "-o", str(target)])
        one_error_line(result, "is the input trace", "never writes over its input")
        assert _sha(trace) == before, how


def test_review_outputs_never_over_the_trace_or_plan(trace: Path, plan: Path) -> None:
    """--junit or -o over the trace or the plan is refused before anything is written."""
    before = (_sha(trace), _sha(plan))
    for option, target, role in [
        ("--junit", trace, "trace"),
        ("--junit", plan, "plan"),
        ("-o", plan.with_name("plan.yaml"), "plan"),
    ]:
        args = ["review", str(trace), "--plan", str(plan), option, str(target)]
        if option == "-o":  # a review file is .md or .txt: reach the plan through a link
            link = plan.with_name("plan-link.md")
            link.unlink(missing_ok=True)
            link.symlink_to(plan.name)
            args[-1] = str(link)
        one_error_line(runner.invoke(app, args), f"is the input {role}")
    assert (_sha(trace), _sha(plan)) == before


def test_emit_never_over_an_input(tmp_path: Path) -> None:
    """--emit writes engine files into -o DIR: one that is an input (here the plan) is refused."""
    # --emit needs block hashes: the Mooncake head's 400 requests have them, and the refusal
    # comes after the analysis, whatever the trace's size.
    trace = SAMPLES / "mooncake_conversation_head.jsonl.gz"
    out = tmp_path / "cfg"
    out.mkdir()
    plan = out / "lmcache-prefill.yaml"
    shutil.copy(PLANS / "good-p5e-prefill-p5-decode.yaml", plan)
    before = _sha(plan)
    # A target the long conversation prompts can meet, and two instance types, one per stage,
    # so there is a disaggregated deployment whose prefill files are written.
    pinned = ["--slo", "ttft_p99=10s,tpot_p99=100ms", "--provider", "aws"]
    pinned += ["--instance", "prefill=p5.48xlarge", "--instance", "decode=p5en.48xlarge"]
    result = runner.invoke(
        app,
        ["analyze", str(trace), "-q", "--plan", str(plan), "--emit", "lmcache", "-o", str(out)]
        + pinned,
    )
    one_error_line(result, "lmcache-prefill.yaml", "is the input plan")
    assert _sha(plan) == before
    assert [p.name for p in out.iterdir()] == ["lmcache-prefill.yaml"]  # nothing else written


def test_convert_never_over_the_trace_through_a_hard_link(tmp_path: Path) -> None:
    """`convert -o` a hard link of the parquet input: refused (the old check compared paths)."""
    src = tmp_path / "t.parquet"
    shutil.copy(SAMPLES / "mooncake_conversation.parquet", src)
    hard = tmp_path / "again.parquet"
    os.link(src, hard)
    before = _sha(src)
    one_error_line(runner.invoke(app, ["convert", str(src), "-o", str(hard)]), "is the input trace")
    assert _sha(src) == before


def test_input_set_compares_files_by_inode(tmp_path: Path) -> None:
    """An InputSet built from a folder refuses each file in it; a new path passes."""
    folder = tmp_path / "rules"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "r.yaml").write_text("x: 1\n")
    inputs = InputSet([InputFile("rules file", folder)])
    with pytest.raises(ConfigError, match="is the input rules file"):
        inputs.check_output(folder / "sub" / "r.yaml")
    inputs.check_output(tmp_path / "new.md")
    inputs.check_output("-")


# --- devices and FIFOs as outputs -----------------------------------------------------------


@pytest.mark.skipif(not os.path.exists("/dev/null"), reason="needs /dev/null")
def test_dev_null_as_output_stays_a_device(trace: Path) -> None:
    """-o /dev/null is written to, not replaced by a regular file (a rename would replace it)."""
    result = runner.invoke(
        app, ["analyze", str(trace), "-q", "--format", "json", "-o", "/dev/null"]
    )
    assert result.exit_code == 0, result.output
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_fifo_as_output_is_written_in_place(trace: Path, tmp_path: Path) -> None:
    """-o a FIFO: the report goes through the pipe to its reader; the FIFO stays a FIFO."""
    fifo = tmp_path / "report.json"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    result = runner.invoke(app, ["analyze", str(trace), "-q", "-o", str(fifo)])
    reader.join(timeout=30)
    assert result.exit_code == 0, result.output
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert got and got[0].startswith(b"{") and b'"format_version"' in got[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json", "v.json"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_dev_full_as_output_is_one_error(trace: Path) -> None:
    """-o /dev/full: exit 2, one line saying the device is full; /dev/full is still a device."""
    result = runner.invoke(
        app, ["analyze", str(trace), "-q", "--format", "json", "-o", "/dev/full"]
    )
    one_error_line(result, "/dev/full: cannot be written", "No space left on device")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_atomic_target_writes_a_device_in_place(tmp_path: Path) -> None:
    """A FIFO target is yielded itself (no temp file beside it, no rename over it)."""
    fifo = tmp_path / "p"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    with atomic_target(fifo) as target:
        assert target == fifo
        target.write_text("through the pipe")
    reader.join(timeout=10)
    assert got == [b"through the pipe"]
    assert [p.name for p in tmp_path.iterdir()] == ["p"]


def _cli(*args: str, stdout=subprocess.PIPE, env=None, **kw) -> subprocess.CompletedProcess:
    """The installed entry point in a fresh process (signals, stdout, import-time behaviour)."""
    return subprocess.run(
        [sys.executable, "-m", "kvadvisor", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        env=env,
        **kw,
    )


def _one_stderr_line(proc: subprocess.CompletedProcess, *needles: str) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_full_stdout_is_one_error(trace: Path) -> None:
    """A report or a summary written to a full stdout: exit 2, one line, no traceback."""
    with open("/dev/full", "w") as full:
        proc = _cli("analyze", str(trace), "-q", "--format", "json", stdout=full)
        _one_stderr_line(proc, "stdout: cannot be written", "No space left on device")
        assert proc.returncode == 2
        proc = _cli("info", str(trace), stdout=full)
        _one_stderr_line(proc, "stdout: cannot be written")
        assert proc.returncode == 2


# --- inputs that are not regular files -------------------------------------------------------


def test_fifo_named_parquet_as_trace_does_not_hang(tmp_path: Path) -> None:
    """A FIFO named *.parquet was opened and waited on forever; it is refused up front."""
    fifo = tmp_path / "t.parquet"
    os.mkfifo(fifo)
    for command in (["analyze"], ["info"], ["convert", "-o", str(tmp_path / "o.parquet")]):
        args = [command[0], str(fifo), *command[1:]]
        proc = _cli(*args)
        assert proc.returncode == 2
        _one_stderr_line(proc, "t.parquet: is a named pipe (FIFO), not a regular file")


def test_symlink_loop_and_fifo_as_plan(trace: Path, tmp_path: Path) -> None:
    """--plan a symlink loop or a FIFO: said as such, not "no such file"."""
    (tmp_path / "a.yaml").symlink_to("b.yaml")
    (tmp_path / "b.yaml").symlink_to("a.yaml")
    one_error_line(
        runner.invoke(app, ["review", str(trace), "--plan", str(tmp_path / "a.yaml")]),
        "a.yaml: is a symlink loop",
        "#plan",
    )
    fifo = tmp_path / "p.yaml"
    os.mkfifo(fifo)
    one_error_line(
        runner.invoke(app, ["review", str(trace), "--plan", str(fifo)]),
        "p.yaml: is a named pipe (FIFO)",
    )


def test_check_input_names_each_kind(tmp_path: Path) -> None:
    """Missing, dangling link, directory, FIFO: one message each; a directory when allowed."""
    cases = {
        tmp_path / "missing.csv": "no such file",
        tmp_path / "dangling.csv": "is a symlink to a missing file",
        tmp_path: "is a directory",
        tmp_path / "fifo.csv": "is a named pipe (FIFO)",
    }
    (tmp_path / "dangling.csv").symlink_to("nowhere.csv")
    os.mkfifo(tmp_path / "fifo.csv")
    for path, needle in cases.items():
        with pytest.raises(TraceFormatError, match=re.escape(needle)):
            check_input(path, TraceFormatError)
    assert check_input(tmp_path, TraceFormatError, directory_ok=True) == tmp_path


@pytest.fixture()
def unreadable(monkeypatch):
    """Make files unreadable: chmod 000, and (as root, who reads anyway) a refused open."""
    denied: set[str] = set()
    real_open = os.open

    def fake_open(path, flags, *args, **kwargs):
        if os.fspath(path) in denied:
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    if os.geteuid() == 0:
        monkeypatch.setattr(os, "open", fake_open)

    def make(path: Path) -> Path:
        path.chmod(0)
        denied.add(os.fspath(path))
        return path

    yield make
    for path in denied:
        Path(path).chmod(0o644)


def test_unreadable_plan_rules_and_model_config(
    trace: Path, plan: Path, tmp_path: Path, unreadable
) -> None:
    """Permission denied on a plan, a rule file or a model config: one line, exit 2."""
    one_error_line(
        runner.invoke(app, ["review", str(trace), "--plan", str(unreadable(plan))]),
        "plan.yaml: cannot be read (permission denied)",
    )
    rules = tmp_path / "rules"
    rules.mkdir()
    rule = rules / "XX01.yaml"
    shutil.copy(REPO / "rules" / "cache" / "CA01-read-less-first.yaml", rule)
    unreadable(rule)
    one_error_line(
        runner.invoke(app, ["rules", "check", str(rules)]),
        "XX01.yaml: cannot be read (permission denied)",
    )
    config = tmp_path / "config.json"
    config.write_text('{"num_hidden_layers": 2}')
    one_error_line(
        runner.invoke(app, ["analyze", str(trace), "-q", "--model", str(unreadable(config))]),
        "config.json: cannot be read (permission denied)",
    )


# --- signals -----------------------------------------------------------------------------


# A signal whose handler ran inside a callback Python cannot raise from: the stop is raised
# in a weakref callback, as when SIGTERM landed in the import system's module-lock callback.
_UNRAISABLE_STOP = """
import sys, weakref
import kvadvisor.cli as cli
sys.argv = ["kvadvisor", "info", "x"]

class Box:
    pass

def run():
    box = Box()
    ref = weakref.ref(box, lambda _: (_ for _ in ()).throw(cli.Interrupted(15)))
    del box
    return 0

cli._run = run
cli.main()
"""


def test_a_signal_inside_a_callback_stops_with_one_line() -> None:
    """SIGTERM handled inside a weakref callback: exit 143 and the one line, no traceback.

    Seen once under load in the test below: the handler's exception, raised in the import
    system's module-lock callback, was printed as "Exception ignored in ..." with its traceback
    and the run went on until the watchdog stopped it.
    """
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run(
        [sys.executable, "-c", _UNRAISABLE_STOP], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 143, proc.stderr
    assert proc.stderr == "error: interrupted by SIGTERM; no output was left half-written\n"


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_removes_the_temporary_file(tmp_path: Path, sig: int, code: int) -> None:
    """SIGTERM or SIGINT while synth writes: exit 143 or 130, one line, no file left behind."""
    out = tmp_path / "s.parquet"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvadvisor", "synth", "-o", str(out), "--requests", "20000000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not any(p.name.startswith(".s.parquet.") for p in tmp_path.iterdir()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
        time.sleep(0.02)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    lines = err.strip().splitlines()
    assert lines == [
        f"error: interrupted by {signal.Signals(sig).name}; no output was left half-written"
    ], err
    assert list(tmp_path.iterdir()) == []


def test_plan_error_kind_for_plan_inputs(tmp_path: Path) -> None:
    """check_input raises the loader's own error class (the slug points at its docs)."""
    with pytest.raises(PlanError):
        check_input(tmp_path / "nope.yaml", PlanError)
