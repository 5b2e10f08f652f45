"""The KV dtype and the MLA page size the verdict was replayed with reach every launch file.

A real sample trace (Mooncake conversation head) is analysed at ``--kv-dtype fp8`` on a given
p5en.48xlarge; every engine target is emitted, its launch files read back through the engine
files -> plan settings path (plan/engine_files.py), and the KV dtype found there is compared with
the deployment's: a launch file without it, or with another dtype, fails. The KV bytes per token
are computed here from the models' config.json numbers: Qwen2.5-32B 64 layers x 8 KV heads x
128 x (K, V); DeepSeek-V3 (MLA) 61 layers x (512 latent + 64 RoPE), one copy.
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kvadvisor.cli as cli
from kvadvisor.emit import emit_all, emit_targets
from kvadvisor.emit.kvcache import kv_dtype_read
from kvadvisor.engines import registry
from kvadvisor.engines.router import is_router_file
from kvadvisor.errors import ConfigError
from kvadvisor.pipeline import AnalyzeOptions
from kvadvisor.pipeline.analyze import analyze
from kvadvisor.pipeline.review import review_plans
from kvadvisor.plan import engine_settings_table, load_plan
from kvadvisor.plan.engine_files import read_engine_file
from kvadvisor.trace import read_trace

TRACE = (
    Path(__file__).resolve().parents[1] / "sample_traces" / "mooncake_conversation_head.jsonl.gz"
)
ENGINES = ["vllm", "lmcache", "dynamo-kvbm", "sglang-hicache"]
QWEN_FP8_BYTES = 64 * 8 * 128 * 2  # one byte per element
DSV3_ELEMENTS = 61 * (512 + 64)
# Launch files (the flag array's engine) whose flags carry the KV dtype and the page.
LAUNCH = {"vllm-": "vllm", "dynamo-": "vllm", "sglang-": "sglang-hicache"}


def _report(  # type: ignore[no-untyped-def]
    model: str,
    kv_dtype: str,
    weight_dtype: str | None = None,
    slo: str | None = None,
    engine: str | None = None,
):
    options = AnalyzeOptions(
        model=model,
        kv_dtype=kv_dtype,
        weight_dtype=weight_dtype,
        instance=("p5en.48xlarge",),
        slo=slo,
        replay=False,
        engine=engine,
    )
    return analyze(read_trace(TRACE), options, version="test", generated_at="2026-01-01T00:00:00")


def _launch_settings(files: dict[str, str]) -> dict[str, dict]:
    """{launch file: the settings of its engine}, read back as `review` reads them."""
    table = engine_settings_table()
    out = {}
    for name, text in files.items():
        engine = next((e for p, e in LAUNCH.items() if name.startswith(p)), None)
        if engine is not None and name.endswith(".sh") and not is_router_file(name):
            out[name] = read_engine_file(name, text, table)[engine]
    return out


@pytest.fixture(scope="module")
def fp8(tmp_path_factory):
    """(report, emitted files, the directory they were written to) for Qwen2.5-32B, FP8 KV."""
    report = _report("qwen2.5-32b", "fp8")
    vllm_family = [e for e in ENGINES if e != "sglang-hicache"]
    files = emit_all(report, [*vllm_family, "plan"], "kvadvisor analyze --kv-dtype fp8")
    # SGLang runs 64-token pages: its deployment is replayed for it (the vLLM ones refused)
    sglang, refused = emit_targets(
        _report("qwen2.5-32b", "fp8", engine="sglang-hicache"),
        ["sglang-hicache", "vllm", "plan"],
        "kvadvisor analyze --kv-dtype fp8",
    )
    assert list(refused) == ["vllm"] and "16-token KV pages" in refused["vllm"]
    files.update(sglang)
    out = tmp_path_factory.mktemp("fp8")
    for name, text in files.items():
        (out / name).write_text(text)
    return report, files, out


def test_fp8_kv_reaches_every_launch_file(fp8) -> None:
    """Each launch file stores KV at FP8, as the plan (and the replayed deployment) says."""
    report, files, out = fp8
    assert report.model.kv_bytes_per_token == QWEN_FP8_BYTES
    settings = _launch_settings(files)
    # one serving stage here: vllm, vllm-lmcache, dynamo and sglang launch files
    assert {n.split("-")[0] for n in settings} == {"vllm", "dynamo", "sglang"}
    assert any(n.startswith("vllm-lmcache-") for n in settings)
    for name, s in settings.items():
        assert kv_dtype_read(s.get("kv-cache-dtype")) == "fp8", (name, s)
    values = {n.split("-")[0]: s["kv-cache-dtype"] for n, s in settings.items()}
    assert values == {"vllm": "fp8", "dynamo": "fp8", "sglang": "fp8_e4m3"}
    for engine in ENGINES:
        plan = load_plan(out / f"plan-{engine}.yaml")
        assert plan.model.kv_dtype == "fp8"
        for stage in plan.stages:
            assert stage.engines, (engine, stage.stage)  # the launch files were read back
            for block in stage.engines.values():
                if "kv-cache-dtype" in block:
                    assert kv_dtype_read(block["kv-cache-dtype"]) == plan.model.kv_dtype


def test_a_launch_file_at_another_dtype_is_told_apart(fp8, tmp_path) -> None:
    """The comparison can fail: `review` passes EL32 on the files as emitted, fails it at BF16.

    The same vLLM file at bfloat16 reads back as bf16, not fp8; without the flag, vLLM's auto
    stores the model's BF16, which an FP8 plan also fails.
    """
    _, files, out = fp8

    def el32(folder: Path) -> list[str]:
        review = review_plans(read_trace(TRACE), [load_plan(folder / "plan-vllm.yaml")])[0]
        return [c.status for c in review.checks if c.code == "EL32"]

    assert el32(out) == ["pass"]
    name = next(
        n for n in files if n.startswith("vllm-") and n.endswith(".sh") and not is_router_file(n)
    )
    flag = "  --kv-cache-dtype fp8\n"
    assert flag in files[name]
    for variant, value in (("bf16", "  --kv-cache-dtype bfloat16\n"), ("unset", "")):
        edited = files[name].replace(flag, value)
        if value:
            s = _launch_settings({name: edited})[name]
            assert kv_dtype_read(s["kv-cache-dtype"]) == "bf16"
        folder = tmp_path / variant
        folder.mkdir()
        for n, text in files.items():
            (folder / n).write_text(edited if n == name else text)
        assert el32(folder) == ["fail"], variant


def test_an_mla_model_gets_flashmla_pages_and_its_kv_dtype(tmp_path) -> None:
    """DeepSeek-V3: vLLM blocks and SGLang pages of 64 tokens (FlashMLA), BF16 KV written.

    The verdict was replayed at 64-token pages too (vLLM's page for an MLA model), so every
    engine target is written from one analysis.
    """
    # DeepSeek-V3 at FP8 weights on H200s meets only a loose SLO on this trace (3 instances).
    report = _report("deepseek-v3", "bf16", "fp8", "ttft_p99=60s,tpot_p99=1s")
    assert report.model.kv_bytes_per_token == DSV3_ELEMENTS * 2
    files = emit_all(report, ENGINES, "kvadvisor analyze --model deepseek-v3")
    settings = _launch_settings(files)
    assert settings
    for name, s in settings.items():
        page = s.get("block-size", s.get("page-size"))
        assert page == 64, (name, s)
        assert kv_dtype_read(s["kv-cache-dtype"]) == "bf16"
    # SGLang runs DeepSeek-V3 on FlashMLA on the H200 (Hopper): the back-end is written
    sglang = {n: s for n, s in settings.items() if n.startswith("sglang-")}
    assert sglang and {s["attention-backend"] for s in sglang.values()} == {"flashmla"}
    assert {s.page_tokens for s in report.recommendation.verdict.primary_verdict.stages} == {64}
    # A dense model keeps vLLM's default 16-token block.
    dense = _launch_settings(emit_all(_report("qwen2.5-32b", "bf16"), ["vllm"], "k"))
    assert {s["block-size"] for s in dense.values()} == {16}


def test_an_unfilled_model_is_caught_in_every_vllm_launch_file(fp8, tmp_path) -> None:
    """EL11 names the model while it is still <FILL:...>, in vLLM, LMCache and KVBM files alike.

    Filled in (the files rewritten with a model id), the model is no longer named.
    """
    _, files, out = fp8
    marker = "<FILL:model-path-or-hf-id>"
    for engine in ("vllm", "lmcache", "dynamo-kvbm"):
        plan = out / f"plan-{engine}.yaml"
        el11 = [
            c
            for c in review_plans(read_trace(TRACE), [load_plan(plan)])[0].checks
            if c.code == "EL11"
        ]
        assert any(c.status == "fail" and "model" in c.message for c in el11), (engine, el11)
    for name, text in files.items():
        (tmp_path / name).write_text(text.replace(marker, "Qwen/Qwen2.5-32B-Instruct"))
    for engine in ("vllm", "lmcache", "dynamo-kvbm"):
        review = review_plans(read_trace(TRACE), [load_plan(tmp_path / f"plan-{engine}.yaml")])[0]
        named = [c.message for c in review.checks if c.code == "EL11" and c.status == "fail"]
        assert not any("model" in m.split(":", 1)[-1] for m in named), (engine, named)


def test_a_refused_target_leaves_the_others_written(fp8) -> None:
    """A target the deployment cannot take is refused alone; the others are still written.

    Mooncake's store needs a host tier; this deployment has none (its GPU pools hold the reuse).
    """
    report, _, _ = fp8
    v = report.recommendation.verdict.primary_verdict
    assert all(not s.tiers for s in v.stages)  # the case: no stage has a tier
    targets = ["vllm", "mooncake", "sglang-hicache", "plan"]
    files, refused = emit_targets(report, targets, "kvadvisor analyze")
    assert list(refused) == ["mooncake", "sglang-hicache"]
    assert "no host tier" in refused["mooncake"]
    # the verdict was replayed at vLLM's 16-token blocks; SGLang HiCache runs 64-token pages
    why = refused["sglang-hicache"]
    assert "64-token KV pages" in why and "replayed at 16-token pages" in why
    assert "--emit sglang-hicache first" in why and "\n" not in why
    assert "vllm-serving.sh" in files
    assert not any(n.startswith(("mooncake", "sglang")) for n in files)
    # plans keep one name per engine asked for, whichever were refused
    assert {n for n in files if n.startswith("plan")} == {"plan-vllm.yaml"}
    with pytest.raises(ConfigError, match="no host tier"):  # alone, it is the error
        emit_targets(report, ["mooncake", "plan"], "kvadvisor analyze")
    with pytest.raises(ConfigError, match="mooncake: .*no host tier"):  # strict form
        emit_all(report, targets, "kvadvisor analyze")


def test_a_plan_replayed_with_swap_preemption_is_refused_by_every_engine(fp8) -> None:
    """Every engine preempts by recompute, so a verdict replayed with swap is not emitted.

    vLLM V1 has no swap (its scheduler drops a preempted request's blocks), nor SGLang (it
    retracts and recomputes); LMCache, Mooncake and Dynamo run vLLM's processes.
    """
    report, _, _ = fp8
    swapped = copy.deepcopy(report)
    v = swapped.recommendation.verdict.primary_verdict
    for stage in v.plan["stages"].values():
        stage["scheduler"]["preemption"] = "swap"
    # as read back from JSON: the plan mapping (edited) is loaded, there is no typed plan
    rec = swapped.recommendation
    swapped = replace(swapped, recommendation=replace(rec, verdict=rec.verdict.without_plans()))
    engines = [e.name for e in registry.engines()]
    assert {registry.engine(e).preemption[0] for e in engines} == {"recompute"}
    for engine in ("vllm", "dynamo-kvbm", "lmcache"):
        with pytest.raises(ConfigError, match="preempts by recompute") as err:
            emit_targets(swapped, [engine], "kvadvisor analyze")
        assert "replayed with swap preemption" in str(err.value)
        assert "scheduler.preemption: recompute" in str(err.value)
    # the verdict as the advisor replayed it (recompute) is written as before
    files, refused = emit_targets(report, ["vllm"], "kvadvisor analyze")
    assert "vllm-serving.sh" in files and not refused
    assert "preemption-mode" not in files["vllm-serving.sh"]


def test_the_cli_writes_the_others_and_says_which_was_refused(tmp_path) -> None:
    """`analyze --emit vllm --emit mooncake`: exit 0, the vLLM files, one note line for Mooncake."""
    out = tmp_path / "cfg"
    args = ["analyze", str(TRACE), "--model", "qwen2.5-32b", "--kv-dtype", "fp8"]
    args += ["--instance", "p5en.48xlarge", "--quiet", "--emit", "vllm", "--emit", "mooncake"]
    result = CliRunner().invoke(cli.app, [*args, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "vllm-serving.sh").is_file()
    assert not list(out.glob("mooncake*"))
    notes = [ln for ln in result.stderr.splitlines() if ln.startswith("note: --emit")]
    assert len(notes) == 1 and "mooncake not written" in notes[0] and "no host tier" in notes[0]


def test_the_cli_replays_the_page_of_the_first_engine_asked_for(tmp_path) -> None:
    """`analyze --emit sglang-hicache --emit vllm`: replayed at SGLang's 64-token pages.

    SGLang's files carry the page the verdict was replayed at; vLLM, whose 16-token blocks the
    verdict never ran, is refused with one note line saying how to get its deployment.
    """
    out = tmp_path / "cfg"
    args = ["analyze", str(TRACE), "--model", "qwen2.5-32b", "--kv-dtype", "fp8"]
    args += ["--instance", "p5en.48xlarge", "--quiet", "--emit", "sglang-hicache"]
    args += ["--emit", "vllm", "-o", str(out), "-o", str(tmp_path / "report.json")]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "report.json").read_text())
    vs = report["recommendation"]["verdict"]
    v = next(x for x in vs["verdicts"] if x["provider"] == vs["primary"])
    assert {s["page_tokens"] for s in v["stages"]} == {64}
    settings = _launch_settings({"sglang-serving.sh": (out / "sglang-serving.sh").read_text()})
    assert settings["sglang-serving.sh"]["page-size"] == 64
    assert not list(out.glob("vllm-*"))
    notes = [ln for ln in result.stderr.splitlines() if ln.startswith("note: --emit")]
    assert len(notes) == 1 and notes[0].startswith("note: --emit vllm not written: vLLM runs 16")
    assert "--emit vllm first (or alone)" in notes[0]
