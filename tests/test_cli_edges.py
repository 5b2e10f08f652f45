"""The command line's rough edges, one test each (issue 19): what a new user meets first."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import typer.main
from conftest import SAMPLES
from typer.testing import CliRunner

import kvadvisor.errors as errors
from kvadvisor.cli import EXIT_OK, EXIT_USER_ERROR, app
from kvadvisor.cli.docscmd import docs_dir, section
from kvadvisor.facts.registry import FACTS
from kvadvisor.rules import load_rules

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "kvadvisor"
runner = CliRunner()
SMALL = SAMPLES / "vllm_bench_old.json"  # 30 requests
PLAN = REPO / "examples" / "plans" / "good-p5e-prefill-p5-decode.yaml"


@pytest.mark.parametrize(
    "argv", [["-m", "kvadvisor"], ["-m", "kvadvisor", "rules"], ["-m", "kvadvisor", "catalog"]]
)
def test_bare_commands_show_help_and_exit_0(argv: list[str]) -> None:
    """A bare command asks what there is: the help, exit 0, no empty `error:` line."""
    out = subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == EXIT_OK, out.stderr
    assert "Usage: kvadvisor" in out.stdout
    assert "error" not in out.stderr


@pytest.fixture(scope="module")
def parquet_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding one canonical parquet file (what `analyze` streams)."""
    folder = tmp_path_factory.mktemp("dir")
    res = runner.invoke(
        app, ["convert", str(SAMPLES / "bailian_example.jsonl"), "-o", str(folder / "t.parquet")]
    )
    assert res.exit_code == 0, res.output
    return folder


def test_info_and_convert_take_a_directory(parquet_dir: Path, tmp_path: Path) -> None:
    """Info and convert read a directory of canonical parquet as analyze does."""
    info = runner.invoke(app, ["info", str(parquet_dir)])
    assert info.exit_code == 0, info.output
    assert "requests      103" in info.stdout  # sample_traces/README.md: 103 requests
    out = tmp_path / "whole.parquet"
    conv = runner.invoke(app, ["convert", str(parquet_dir), "-o", str(out)])
    assert conv.exit_code == 0, conv.output
    assert pq.read_metadata(out).num_rows == 103
    assert conv.stderr == f"wrote {out}: canonical parquet\n"


def test_review_takes_a_directory(parquet_dir: Path) -> None:
    """Review reads the directory whole and reviews the plan against it."""
    res = runner.invoke(app, ["review", str(parquet_dir), "--plan", str(PLAN)])
    assert res.exit_code in (0, 1), res.output  # findings may fail the plan; reading works
    assert "Traceback" not in res.output and "is a directory" not in res.output


def test_directory_options_that_cannot_apply_are_refused(parquet_dir: Path) -> None:
    """--map on a directory of canonical files: one error line, exit 2."""
    res = runner.invoke(app, ["info", str(parquet_dir), "--map", "input_tokens=x"])
    assert res.exit_code == EXIT_USER_ERROR
    assert "--map and --block-tokens do not apply" in res.stderr


def test_emit_quiet_says_what_it_wrote(tmp_path: Path) -> None:
    """--emit with -q: every file written is said on stderr, nothing else."""
    folder = tmp_path / "cfg"
    res = runner.invoke(
        app,
        [
            "analyze",
            str(SAMPLES / "bailian_example.jsonl"),
            "-q",
            "--emit",
            "lmcache",
            "-o",
            str(folder),
        ],
    )
    assert res.exit_code == 0, res.output
    written = sorted(folder.iterdir())
    assert written
    assert sorted(res.stderr.splitlines()) == sorted(f"wrote {p}" for p in written)
    assert res.stdout == ""


def test_analyze_says_every_file_after_the_summary(tmp_path: Path) -> None:
    """Two reports: the summary first, then one `wrote PATH` line each, in the order given."""
    html, js = tmp_path / "r.html", tmp_path / "r.json"
    res = runner.invoke(app, ["analyze", str(SMALL), "-o", str(html), "-o", str(js)])
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines()[-2:] == [f"wrote {html}", f"wrote {js}"]
    assert "Verdict" in res.stdout


def _bad_rule(folder: Path, name: str, code: str) -> None:
    # Two problems in one file: a bad severity and an unknown fact.
    (folder / name).write_text(
        f"code: {code}\nname: custom.{code.lower()}\ngroups: [custom]\nseverity: loud\n"
        "summary: s\nstage: both\nwhen: {fact: no_such_fact, op: '>', value: 1}\n"
        "message: m\ndocs: {what: w, why: y, references: [r]}\n",
        encoding="utf-8",
    )


def test_rules_check_lists_every_problem(tmp_path: Path) -> None:
    """Two bad files: every problem of each on its own line, then the count; exit 2."""
    _bad_rule(tmp_path, "a.yaml", "XA01")
    _bad_rule(tmp_path, "b.yaml", "XB01")
    res = runner.invoke(app, ["rules", "check", str(tmp_path)])
    assert res.exit_code == EXIT_USER_ERROR
    lines = res.stderr.splitlines()
    errors_ = [line for line in lines if line.startswith("error: ")]
    for name in ("a.yaml", "b.yaml"):
        mine = [line for line in errors_ if name in line]
        assert len(mine) >= 2, lines  # the severity and the fact, not "and 1 more"
        assert any("severity" in line for line in mine)
        assert any("no_such_fact" in line for line in mine)
    assert "more problem" not in res.stderr
    assert lines[-1] == f"{tmp_path}: {len(errors_)} problems"


def _error_classes() -> list[type]:
    found, todo = [], [errors.KvAdvisorError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo += cls.__subclasses__()
    return found


@pytest.mark.parametrize("cls", _error_classes(), ids=lambda c: c.__name__)
def test_every_error_hint_resolves_for_a_pip_user(cls: type) -> None:
    """`kvadvisor docs errors#SLUG`, the hint of every error line, prints a section."""
    text = (docs_dir() / "errors.md").read_text(encoding="utf-8")
    found = section(text, cls.slug)
    assert found and len(found.strip().splitlines()) >= 2, cls.slug
    res = runner.invoke(app, ["docs", f"errors#{cls.slug}", "--raw"])
    assert res.exit_code == 0 and res.stdout == found
    drawn = runner.invoke(app, ["docs", f"errors#{cls.slug}"])
    heading = found.splitlines()[0].lstrip("#").strip().replace("`", "")  # code: drawn plain
    assert drawn.exit_code == 0 and heading in drawn.stdout and "<a id=" not in drawn.stdout


@pytest.mark.parametrize("topic", ["errors", "advisor", "stage-profiler", "cache"])
def test_docs_are_drawn_for_the_terminal(topic: str) -> None:
    """`docs TOPIC` draws the Markdown at the terminal's width, anchors and markup gone."""
    raw = (docs_dir() / f"{topic}.md").read_text(encoding="utf-8")
    assert '<a id="' in raw  # the topics chosen have anchors to hide
    res = runner.invoke(app, ["docs", topic], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert "<a id=" not in res.stdout and not any(line.startswith("#") for line in lines)
    assert max(map(len, lines)) <= 80
    title = raw.split("\n", 1)[0].lstrip("# ").strip()
    # The title heading drawn (centred, wrapped when long), not "# Title".
    assert " ".join(lines[:2]).split()[: len(title.split())] == title.split()


def test_every_docs_reference_in_the_package_resolves() -> None:
    """Each `kvadvisor docs TOPIC[#SECTION]` a rule (the review's checks too) or fact cites exists.

    No DESIGN.md and no `docs/X.md` path: neither is on a pip user's disk; the docs command is.
    """
    shown = [
        text
        for r in load_rules([], FACTS)
        for text in (r.docs.what, r.docs.why, r.docs.example, *r.docs.references)
    ] + [f.description for f in FACTS.values()]
    assert not [s for s in shown if "DESIGN.md" in s or re.search(r"docs/[\w-]+\.md", s)]
    cited = {
        ref for s in shown for ref in re.findall(r"kvadvisor docs ([a-z-]+(?:#[a-z0-9_-]+)?)", s)
    }
    assert {"cache#prefix-hit", "advisor#one-storage-spec", "stage-profiler#io-demand"} <= cited
    for ref in sorted(cited):
        topic, _, part = ref.partition("#")
        text = (docs_dir() / f"{topic}.md").read_text(encoding="utf-8")
        assert not part or section(text, part), ref


# A path into the repository's docs/ or DESIGN.md, which a pip-installed user does not have.
_REPO_DOC = re.compile(r"DESIGN\.md|docs/[\w-]+\.md")


def test_what_a_user_reads_cites_no_file_they_lack() -> None:
    """Shipped data (catalog sources, report schemas, templates) and the rendered reports.

    Each golden report is the output of a run; the data files are read as they ship. A
    reference there goes through `kvadvisor docs TOPIC`, which every install has.
    """
    shipped = [
        *sorted((PKG / "catalog" / "data").glob("*.yaml")),
        *sorted((PKG / "report" / "schema").glob("*.json")),
        *sorted((PKG / "report" / "templates").iterdir()),
        *sorted((REPO / "tests" / "golden").glob("*/report.*")),
    ]
    assert len(shipped) > 10
    cited = {
        f"{path.relative_to(REPO)}: {m.group()}"
        for path in shipped
        for line in path.read_text(encoding="utf-8").splitlines()
        if not (path.suffix == ".yaml" and line.lstrip().startswith("#"))  # comments: not shown
        for m in _REPO_DOC.finditer(line)
    }
    assert not cited


def test_docs_command_lists_and_refuses() -> None:
    """No topic: the topics; an unknown topic or section: one error line, exit 2."""
    res = runner.invoke(app, ["docs"])
    assert res.exit_code == 0 and res.stdout.startswith("advisor")
    assert "errors" in res.stdout and "reports" in res.stdout
    bad = runner.invoke(app, ["docs", "nope"])
    assert bad.exit_code == EXIT_USER_ERROR and "the topics are:" in bad.stderr
    bad = runner.invoke(app, ["docs", "errors#nope"])
    assert bad.exit_code == EXIT_USER_ERROR and "no section 'nope'" in bad.stderr


def _commands(group, path=()):  # type: ignore[no-untyped-def]
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):
            yield from _commands(cmd, (*path, name))
        else:
            yield (*path, name)


ALL_COMMANDS = sorted(_commands(typer.main.get_command(app)))


@pytest.mark.parametrize("command", ALL_COMMANDS, ids=" ".join)
def test_help_reads_at_80_columns(command: tuple[str, ...]) -> None:
    """Every command's --help at 80 columns: no `<bool>`, no `<list[...]>`, no cut names.

    No metavar wrapped mid-word either: a choice list (`<parquet|csv|...`) or a range
    (`[0.001<=x<=10000000`) that opens on a line and closes on the next.
    """
    res = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    assert "<bool>" not in res.stdout and "<list[" not in res.stdout
    option_names = re.findall(r"│ (-[-\w]+…)", res.stdout)
    assert not option_names, option_names
    assert "…" not in res.stdout
    split = [
        line
        for line in res.stdout.splitlines()
        if re.search(r"<[a-z][\w|-]*$|<[a-z][\w|-]*\s{2}|\[[^]\s]*<=[^]\s]*(\s|$)", line)
    ]
    assert not split, split


def test_analyze_help_is_grouped_into_panels() -> None:
    """The 35 options of analyze sit in panels by what they are about, in reading order."""
    res = runner.invoke(app, ["analyze", "--help"], env={"COLUMNS": "100"})
    panels = re.findall(r"╭─ ([A-Za-z ]+?) ─", res.stdout)
    assert panels == [
        "Arguments",
        "Options",
        "Input",
        "Cache",
        "Model and GPU",
        "Deployment",
        # --allow-outside-plan-dir: the one declaration review, replay and verify use too
        "Trust",
        "Rules and catalogs",
        "Output",
    ]

    def panel(start: str, end: str) -> str:
        text = res.stdout[res.stdout.index(start) : res.stdout.index(end)]
        return " ".join(text.replace("│", " ").split())

    cache = panel("╭─ Cache", "╭─ Model")
    deploy = panel("╭─ Deployment", "╭─ Rules")
    # The two instance counts, each in its panel, each naming the other.
    assert "--cache-instances" in cache and "--instances" in deploy
    assert "Not the serving" in cache and "--cache-instances" in deploy


def _summary_on_a_terminal(env: dict[str, str]) -> bytes:
    """`analyze` run with stdout on a pseudo-terminal: what the terminal received."""
    main, child = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvadvisor", "analyze", str(SMALL)],
        stdout=child,
        stderr=subprocess.DEVNULL,
        cwd=REPO,
        env={**os.environ, "TERM": "xterm", "COLUMNS": "100", **env},
    )
    os.close(child)
    out = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=120)
    os.close(main)
    assert proc.returncode == 0
    return out


def test_colour_on_a_terminal_and_never_with_no_color() -> None:
    """A terminal gets severities in colour; NO_COLOR=1 (no-color.org) gets none."""
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    coloured = _summary_on_a_terminal({**env, "NO_COLOR": ""})
    assert b"\x1b[1mVerdict" in coloured
    plain = _summary_on_a_terminal({"NO_COLOR": "1"})
    assert b"Verdict" in plain and b"\x1b[" not in plain
