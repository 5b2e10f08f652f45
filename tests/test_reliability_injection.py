"""Names from other people's files never become code in the files kvadvisor generates (issue 31 A).

A trace's file name, a plan's name and its tier names (and catalog names, in `--emit` files) are
written into shell scripts, fio job files, engine configurations and READMEs. Each name here
holds every character that ends a line somewhere (newline, CR, vertical tab, form feed, NEL,
the Unicode line and paragraph separators) followed by a fio section with ``exec_prerun=`` and
a shell command, plus the shell's quoting characters. Every generated file must still parse
(``bash -n``, ``fio --parse-only``, the YAML and JSON parsers), hold no section or command
beyond its own, and running the benchmark script must not run the name.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from cli_checks import one_error_line
from emit_fixtures import FSX, HOST, NVME, POOL, emit_report
from typer.testing import CliRunner
from verify_fixtures import DISK_PLAN, write_bursty_trace

from kvadvisor.cli import EXIT_OK, EXIT_USER_ERROR, app
from kvadvisor.emit import TARGETS, emit_all
from kvadvisor.plan import PlanCatalogs, load_plan
from kvadvisor.results import Tier
from kvadvisor.verifyjobs.generate import VerifyOptions

runner = CliRunner()
FIO = shutil.which("fio")
BASH = shutil.which("bash")

MARK = "KVX"
PAYLOAD = (
    "touch PWNED{c}[global]{c}exec_prerun=touch PWNED{c}; y $(touch PWNED) `touch PWNED` "
    "' \" ;touch PWNED"
)
# What the payload runs or sets, as a line would hold it (a name made a slug holds neither).
PAYLOAD_WORDS = ("touch PWNED", "exec_prerun=")
# Every character some tool (or Python's splitlines) takes as the end of a line, and ESC.
BREAKS = ("\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\u2029", "\x1b")


def hostile(what: str, breaks: tuple[str, ...] = BREAKS, *, file_name: bool = False) -> str:
    """A name starting with MARK whose every line break is followed by a section and commands.

    A file name cannot hold NUL or '/' (nor pass 255 bytes: it takes a few breaks at a time);
    other names get a NUL too.
    """
    parts = [PAYLOAD.format(c=c) for c in breaks] + ([] if file_name else ["\x00touch PWNED"])
    return f"{MARK}-{what}" + "".join(f"{c}{p}" for c, p in zip(breaks, parts, strict=False))


def hostile_path(folder: Path, what: str, suffix: str) -> Path:
    """A file whose every folder name, and its own, holds one of the breaks and the payload."""
    for c in BREAKS[:-1]:
        folder = folder / hostile(what, (c,), file_name=True)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / (hostile(what, BREAKS[-1:], file_name=True) + suffix)


def _lines_keep_names_whole(name: str, text: str, comment: str | None) -> None:
    """No name's payload is code: each line holding it is a comment.

    Without comments (Markdown), the line must also hold the name's start, MARK: the name was
    not split.
    Lines are split by Python's splitlines, which breaks at more characters than bash or fio
    do, so a name that survives it survives them. A long comment may wrap: its next line is a
    comment too.
    """
    for line in text.splitlines():
        if not any(bad in line for bad in PAYLOAD_WORDS):
            continue
        if comment is None:
            assert MARK in line, f"{name}: a name's payload starts a line: {line!r}"
            continue
        code = "" if line.lstrip().startswith(comment) else line.split(f" {comment} ")[0]
        assert not any(bad in code for bad in PAYLOAD_WORDS), f"{name}: {line!r}"


def _check_shell(name: str, text: str, tmp_path: Path) -> None:
    path = tmp_path / "check.sh"
    path.write_text(text, encoding="utf-8")
    if BASH is not None:
        done = subprocess.run([BASH, "-n", str(path)], capture_output=True, text=True)
        assert done.returncode == 0, (name, done.stderr)
    _lines_keep_names_whole(name, text, "#")


def _check_fio(name: str, text: str, tmp_path: Path) -> None:
    sections = [ln for ln in text.splitlines() if ln.startswith("[")]
    assert sections[0] == "[global]" and "[global]" not in sections[1:], (name, sections)
    assert not any(ln.startswith("exec_") for ln in text.splitlines()), name
    _lines_keep_names_whole(name, text, ";")
    if FIO is not None:
        path = tmp_path / "check.fio"
        path.write_text(text, encoding="utf-8")
        env = {
            **os.environ,
            "KVADVISOR_FIO_DIR": str(tmp_path),
            "KVADVISOR_FIO_SIZE": "1m",
            "KVADVISOR_FIO_RUNTIME": "1",
        }
        done = subprocess.run(
            [FIO, "--parse-only", str(path)], env=env, capture_output=True, text=True, cwd=tmp_path
        )
        assert done.returncode == 0, (name, done.stdout, done.stderr)
    assert not (tmp_path / "PWNED").exists()


def check_generated(files: dict[str, str], tmp_path: Path) -> None:
    """Every generated file parses by its format and no name in it starts a line."""
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    for name, text in files.items():
        if name.endswith(".sh"):
            _check_shell(name, text, scratch)
        elif name.endswith(".fio"):
            _check_fio(name, text, scratch)
        elif name.endswith((".yaml", ".yml")):
            doc = yaml.safe_load(text)
            assert isinstance(doc, dict), name
            assert not any(MARK in str(k) or "exec_prerun" in str(k) for k in doc), name
            _lines_keep_names_whole(
                name, "\n".join(ln for ln in text.splitlines() if ln.startswith("#")), "#"
            )
        elif name.endswith(".json"):
            lines = text.splitlines()
            body = "\n".join(ln for ln in lines if not ln.startswith("#"))
            json.loads(body)
            _lines_keep_names_whole(name, "\n".join(ln for ln in lines if ln.startswith("#")), "#")
        elif name.endswith(".env"):
            for line in text.splitlines():
                assert not line or line.startswith("#") or line.split("=", 1)[0].isidentifier(), (
                    name,
                    line,
                )
            _lines_keep_names_whole(name, text, "#")
        elif name.endswith(".jsonl"):
            continue  # numbers only
        else:  # Markdown and notes
            _lines_keep_names_whole(name, text, None)
    assert not (tmp_path / "PWNED").exists()


def _hostile_report(tier: Tier):
    host = dataclasses.replace(HOST, name=hostile("host"))
    storage = dataclasses.replace(tier, name=hostile("tier"))
    report = emit_report(prefill=(host, storage), decode=(host,))
    return dataclasses.replace(
        report, trace=dataclasses.replace(report.trace, path=hostile("trace"))
    )


@pytest.mark.parametrize("tier", [NVME, FSX, POOL], ids=["disk", "shared-fs", "pool"])
def test_every_emit_target_and_the_plan_keep_names_out_of_code(tier: Tier, tmp_path: Path) -> None:
    """`--emit` every engine and `--emit plan`: hostile trace, tier and host names stay comments."""
    files = emit_all(_hostile_report(tier), list(TARGETS), command=f"kvadvisor {hostile('cmd')}")
    assert any(n.endswith(".sh") for n in files) and any(n.endswith(".yaml") for n in files)
    check_generated(files, tmp_path)


def test_an_emitted_plan_from_a_hostile_trace_name_loads(tmp_path: Path) -> None:
    """The plan's name is made from the trace's file name: printable, so the plan loads back."""
    files = emit_all(_hostile_report(NVME), ["plan"], command="kvadvisor analyze")
    doc = yaml.safe_load(files["plan.yaml"])
    assert doc["name"].startswith(f"kvadvisor-{MARK}-trace")
    assert "\n" not in doc["name"] and "\n" not in doc["description"]


def _verify_inputs(tmp_path: Path) -> tuple[Path, Path]:
    trace = write_bursty_trace(hostile_path(tmp_path, "trace", ".jsonl"), 120)
    plan = hostile_path(tmp_path, "plan", ".yaml")
    plan.write_text(DISK_PLAN)
    return trace, plan


def test_verify_keeps_names_out_of_scripts_and_fio_jobs(tmp_path: Path) -> None:
    """Verify's fio jobs, bench scripts, run-fio.sh and README with hostile names everywhere.

    The plan loader refuses such names (below); here they are put into the loaded plan, as a
    name that was never checked would arrive, so the writers' own quoting is what is tested.
    """
    from kvadvisor.pipeline.verify import verify

    trace, plan_path = _verify_inputs(tmp_path)
    catalogs = PlanCatalogs.packaged()
    plan = load_plan(plan_path, catalogs)
    stages = tuple(
        dataclasses.replace(
            s, tiers=tuple(dataclasses.replace(t, name=hostile("tier")) for t in s.tiers)
        )
        for s in plan.stages
    )
    plan = dataclasses.replace(plan, name=hostile("plan"), stages=stages)
    result = verify(trace, plan, catalogs.storage, VerifyOptions(), version="0")
    files = result.files
    assert any(n.startswith("fio/") for n in files), list(files)
    check_generated(files, tmp_path)
    # The README's command line is one bash command naming the trace and plan as they are.
    (line,) = [ln for ln in files["README.md"].splitlines() if "kvadvisor review" in ln]
    if BASH is not None:
        command = line.strip().split(" --results")[0]
        words = subprocess.run(
            [BASH, "-c", f"printf '%s\\0' {command}"], capture_output=True, check=True
        ).stdout.split(b"\0")[:-1]
        assert words == [
            b"kvadvisor",
            b"review",
            os.fsencode(trace),
            b"--plan",
            os.fsencode(plan_path),
        ]


def test_running_the_bench_script_runs_no_name(tmp_path: Path) -> None:
    """The reported attack: `bash bench/vllm.sh` ran a line of the trace's file name."""
    if BASH is None:
        pytest.skip("bash is not installed")
    trace, plan = _verify_inputs(tmp_path)
    out = tmp_path / "jobs"
    result = runner.invoke(app, ["verify", str(trace), "--plan", str(plan), "-o", str(out)])
    assert result.exit_code == EXIT_OK, result.output
    stub = tmp_path / "bin"
    stub.mkdir()
    for tool in ("vllm", "python3"):
        (stub / tool).write_text("#!/bin/sh\nexit 0\n")
        (stub / tool).chmod(stat.S_IRWXU)
    env = {**os.environ, "PATH": f"{stub}:{os.environ['PATH']}", "MODEL": "m"}
    for script in ("bench/vllm.sh", "bench/sglang.sh", "run-fio.sh"):
        subprocess.run([BASH, str(out / script)], cwd=tmp_path, env=env, capture_output=True)
        assert not (tmp_path / "PWNED").exists(), script
        assert not (out / "PWNED").exists(), script


@pytest.mark.parametrize(
    ("field", "yaml_text"),
    [
        ("name", 'name: "x\\n[global]\\nexec_prerun=touch PWNED\\n; y"\n'),
        ("stages.prefill.tiers[0].name", None),
    ],
)
def test_the_plan_loader_refuses_a_name_with_a_line_break(
    field: str, yaml_text: str | None, tmp_path: Path
) -> None:
    """A plan name or tier name with a newline is refused, naming the field (exit 2)."""
    text = DISK_PLAN
    if yaml_text is not None:
        text = text.replace("name: tiny-disk\n", yaml_text)
    else:
        text = text.replace("- name: disk", '- name: "disk\\nexec_prerun=touch PWNED"')
    plan = tmp_path / "plan.yaml"
    plan.write_text(text)
    trace = write_bursty_trace(tmp_path / "t.jsonl", 60)
    result = runner.invoke(app, ["review", str(trace), "--plan", str(plan)])
    assert result.exit_code == EXIT_USER_ERROR, result.output
    line = one_error_line(result)
    assert f"{field}: holds the control character U+000A" in line, line


def test_analyze_emit_through_the_cli_keeps_names_out_of_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`analyze HOSTILE-TRACE --emit` every target: the command line and names stay comments.

    The report stands in for the analysis; the trace's path is the hostile one on disk.
    """
    import kvadvisor

    trace = hostile_path(tmp_path / "in", "trace", ".jsonl")
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1}\n')
    report = _hostile_report(NVME)
    report = dataclasses.replace(report, trace=dataclasses.replace(report.trace, path=str(trace)))
    monkeypatch.setattr(kvadvisor, "analyze", lambda *a, **k: report)
    out = tmp_path / "configs"
    args = ["analyze", str(trace), "--quiet", "-o", str(out)]
    for target in TARGETS:
        args += ["--emit", target]
    result = runner.invoke(app, args)
    assert result.exit_code == EXIT_OK, result.output
    files = {p.name: p.read_text(encoding="utf-8") for p in out.iterdir()}
    assert len(files) > 10
    check_generated(files, tmp_path)


def test_a_catalog_entry_name_with_a_line_break_is_refused(tmp_path: Path) -> None:
    """Catalog names become tier and instance names: the catalog loader checks them too."""
    catalog = tmp_path / "cat.yaml"
    catalog.write_text(
        'kind: storage\nsources: {a: "x"}\nentries:\n'
        '  "evil\\n[global]\\nexec_prerun=touch PWNED":\n    category: local_nvme\n'
    )
    trace = write_bursty_trace(tmp_path / "t.jsonl", 40)
    result = runner.invoke(
        app,
        ["analyze", str(trace), "-q", "--catalog", str(catalog), "-o", str(tmp_path / "r.json")],
    )
    one_error_line(result, "holds the control character U+000A")
