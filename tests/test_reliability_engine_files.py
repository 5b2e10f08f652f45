"""A plan's engine_files pass the same boundary as the plan itself (issue 31 C, D, E, F).

`review` may gate CI on plans other people submit, so what a plan names is input from them:
regular files only, no larger than a plan, parsed with the plan's checks, decoding errors as
user errors, inside the plan's folder unless --allow-outside-plan-dir, and no content of the
file in any message beyond the offending key.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from cli_checks import one_error_line
from typer.testing import CliRunner
from verify_fixtures import write_bursty_trace

from kvadvisor.cli import EXIT_OK, app
from kvadvisor.errors import PlanError
from kvadvisor.io.yamlio import MAX_YAML_BYTES
from kvadvisor.plan import load_plan

runner = CliRunner()
SECRET = "root:*:20228:0:99999:7:::s3cr3t"


def _plan(folder: Path, files: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    plan = folder / "plan.yaml"
    names = ", ".join(f"'{f}'" for f in files)
    plan.write_text(
        f"model: {{kv_bytes_per_token: 1000}}\nstages:\n  prefill:\n    engine_files: [{names}]\n"
    )
    return plan


def _refused(plan: Path, *needles: str, **kwargs: bool) -> str:
    """The plan fails to load with one PlanError naming the key path and ``needles``."""
    with pytest.raises(PlanError) as info:
        load_plan(plan, **kwargs)
    message = str(info.value)
    assert "stages.prefill.engine_files[0]" in message, message
    assert "\n" not in message
    for needle in needles:
        assert needle in message, (needle, message)
    return message


def _load_in_time(plan: Path, seconds: float = 20.0) -> BaseException | None:
    """Load ``plan`` in a thread; fail if it has not finished in ``seconds`` (a hang)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            load_plan(plan)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"loading the plan did not finish in {seconds} s"
    return outcome[0]


# --- C: what is read is a regular file of bounded size ----------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_engine_file_is_refused_not_waited_on(tmp_path: Path) -> None:
    """A FIFO named as an engine file hung `review`; it is refused before it is opened."""
    os.mkfifo(tmp_path / "lmcache.yaml")
    exc = _load_in_time(_plan(tmp_path, ["lmcache.yaml"]))
    assert isinstance(exc, PlanError), exc
    assert "named pipe (FIFO)" in str(exc) and "engine_files[0]" in str(exc)


def test_a_symlink_to_a_device_is_refused(tmp_path: Path) -> None:
    """A symlink to /dev/zero grew to gigabytes; any device behind a link is refused."""
    if not os.path.exists("/dev/null"):
        pytest.skip("no /dev/null here")
    (tmp_path / "kvbm.env").symlink_to("/dev/null")
    plan = _plan(tmp_path, ["kvbm.env"])
    _refused(plan, "outside the plan's folder")
    _refused(plan, "character device", allow_outside_plan_dir=True)


def test_an_engine_file_over_the_plan_limit_is_refused(tmp_path: Path) -> None:
    """The plan loader's 4 MiB applies: a larger YAML is not parsed."""
    big = tmp_path / "lmcache.yaml"
    big.write_text("chunk_size: 256\n" + "# padding\n" * (MAX_YAML_BYTES // 10 + 1))
    _refused(_plan(tmp_path, ["lmcache.yaml"]), "limit")


# --- F: contained in the plan's folder; no content echoed -------------------------------------


@pytest.mark.parametrize("how", ["absolute", "dotdot", "symlink"])
def test_an_engine_file_outside_the_plans_folder_is_refused(tmp_path: Path, how: str) -> None:
    """/etc/passwd, ../../ and a symlink out are refused unless --allow-outside-plan-dir."""
    outside = tmp_path / "secret.env"
    outside.write_text(f"{SECRET}\n")
    folder = tmp_path / "plans"
    folder.mkdir()
    name = {"absolute": str(outside), "dotdot": "../secret.env", "symlink": "link.env"}[how]
    if how == "symlink":
        (folder / "link.env").symlink_to(outside)
    message = _refused(_plan(folder, [name]), "outside the plan's folder")
    assert SECRET not in message and "s3cr3t" not in message


def test_allow_outside_plan_dir_reads_it_without_echoing_its_content(tmp_path: Path) -> None:
    """Allowed outside, a file that is not KEY=VALUE is named by line, its text never shown."""
    outside = tmp_path / "secret.env"
    outside.write_text(f"# comment\n{SECRET}\n")
    plan = _plan(tmp_path / "plans", ["../secret.env"])
    message = _refused(plan, "line 2", "expected KEY=VALUE", allow_outside_plan_dir=True)
    assert "s3cr3t" not in message and "20228" not in message


def test_allow_outside_plan_dir_reads_a_good_file(tmp_path: Path) -> None:
    """The flag lets a trusted plan name a shared engine file elsewhere."""
    (tmp_path / "kvbm-prefill.env").write_text("DYN_KVBM_CPU_CACHE_GB=429\n")
    plan = _plan(tmp_path / "plans", ["../kvbm-prefill.env"])
    loaded = load_plan(plan, allow_outside_plan_dir=True)
    assert loaded.stages[0].engines["dynamo-kvbm"] == {"DYN_KVBM_CPU_CACHE_GB": 429}


def test_review_takes_the_flag(tmp_path: Path) -> None:
    """`review` refuses an outside file (exit 2, one line) and reads it with the flag."""
    (tmp_path / "kvbm-prefill.env").write_text("DYN_KVBM_CPU_CACHE_GB=1\n")
    plan = _plan(tmp_path / "plans", ["../kvbm-prefill.env"])
    trace = write_bursty_trace(tmp_path / "t.jsonl", 40)
    result = runner.invoke(app, ["review", str(trace), "--plan", str(plan)])
    one_error_line(result, "outside the plan's folder", "--allow-outside-plan-dir")
    result = runner.invoke(
        app, ["review", str(trace), "--plan", str(plan), "--allow-outside-plan-dir"]
    )
    assert result.exit_code in (EXIT_OK, 1), result.output
    assert "outside the plan's folder" not in result.output


# --- D: parser failures are user errors -------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content", "needle"),
    [
        ("lmcache.yaml", b"chunk_size: [1,\n", "invalid YAML"),  # ScannerError / ParserError
        ("lmcache.yaml", b"x: !!python/object/apply:os.system ['touch PWNED']\n", "invalid YAML"),
        ("lmcache.yaml", b"chunk_size: 1\n\xff\xfe\n", "not UTF-8"),
        ("lmcache.yaml", b"x: " + b"[" * 5000 + b"]" * 5000 + b"\n", "nesting"),
        ("mooncake.json", b"[" * 100_000, "nested deeper"),  # RecursionError in json
        ("mooncake.json", b'{"a": 1,', "not valid JSON"),
        ("vllm-prefill.sh", b"VLLM_ARGS=(\n  --x 'open\n)\n", "not valid shell words"),
        ("vllm-prefill.sh", b"VLLM_ARGS=(\n  --x 1\n", "no closing"),
        ("vllm-prefill.sh", b'VLLM_ARGS=(\n  --cfg {"a":\n)\n', "not valid JSON"),
    ],
    ids=[
        "yaml-syntax",
        "yaml-python-tag",
        "not-utf8",
        "yaml-deep",
        "json-deep",
        "json-syntax",
        "shell-quote",
        "shell-unclosed",
        "flag-json",
    ],
)
def test_parser_failures_are_one_plan_error(
    tmp_path: Path, name: str, content: bytes, needle: str
) -> None:
    """ScannerError, ConstructorError, UnicodeDecodeError, RecursionError: a PlanError each."""
    (tmp_path / name).write_bytes(content)
    _refused(_plan(tmp_path, [name]), needle)
    assert not (tmp_path / "PWNED").exists()


# --- E: the plan's value checks ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content", "needle"),
    [
        ("lmcache.yaml", "chunk_size: 256\nchunk_size: 512\n", "appears twice"),
        ("lmcache.yaml", "max_local_cpu_size: .inf\n", "not a finite number"),
        ("lmcache.yaml", f"chunk_size: {10**30}\n", "64 bits"),
        ("mooncake.json", '{"protocol": "tcp", "protocol": "rdma"}', "appears twice"),
        ("mooncake.json", '{"global_segment_size": NaN}', "NaN"),
        ("mooncake.json", '{"global_segment_size": 1e999}', "not a finite number"),
        ("mooncake.json", f'{{"global_segment_size": {10**30}}}', "64 bits"),
    ],
)
def test_value_checks_of_the_plan_apply(
    tmp_path: Path, name: str, content: str, needle: str
) -> None:
    """Duplicate keys, non-finite numbers and integers past 64 bits are refused, as in plans."""
    (tmp_path / name).write_text(content)
    _refused(_plan(tmp_path, [name]), needle)


def test_analyze_plan_takes_the_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`analyze --plan` refuses an outside engine file, and loads the plan with the flag."""
    import kvadvisor.api.advisor

    (tmp_path / "kvbm-prefill.env").write_text("DYN_KVBM_CPU_CACHE_GB=1\n")
    plan = _plan(tmp_path / "plans", ["../kvbm-prefill.env"])
    trace = write_bursty_trace(tmp_path / "t.jsonl", 40)
    args = ["analyze", str(trace), "-q", "--plan", str(plan), "-o", str(tmp_path / "r.json")]
    one_error_line(runner.invoke(app, args), "outside the plan's folder")
    loaded = []

    def stop(source: object, options: object, **kwargs: object) -> None:
        loaded.extend(options.plans)  # type: ignore[attr-defined]
        raise SystemExit(0)

    monkeypatch.setattr(kvadvisor.api.advisor, "analyze_source", stop)
    runner.invoke(app, [*args, "--allow-outside-plan-dir"])
    assert [p.stages[0].engines["dynamo-kvbm"] for p in loaded] == [{"DYN_KVBM_CPU_CACHE_GB": 1}]


@pytest.mark.parametrize("command", ["replay", "verify"])
def test_replay_and_verify_take_the_flag(command: str, tmp_path: Path) -> None:
    """The other commands that load a plan refuse an outside file and take the flag too."""
    from verify_fixtures import SERVING_PLAN

    (tmp_path / "lmcache-serving.yaml").write_text("chunk_size: 256\n")
    folder = tmp_path / "plans"
    folder.mkdir()
    plan = folder / "plan.yaml"
    plan.write_text(
        SERVING_PLAN.replace(
            "    count: 1\n", "    count: 1\n    engine_files: [../lmcache-serving.yaml]\n"
        )
    )
    trace = write_bursty_trace(tmp_path / "t.jsonl", 40)
    args = [command, str(trace), "--plan", str(plan)]
    if command == "verify":
        args += ["-o", str(tmp_path / "jobs")]
    one_error_line(runner.invoke(app, args), "outside the plan's folder")
    result = runner.invoke(app, [*args, "--allow-outside-plan-dir"])
    assert result.exit_code in (EXIT_OK, 1), result.output
