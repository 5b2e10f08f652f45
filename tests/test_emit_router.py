"""Every engine target starts the router the replay assumed, with the router's own option names.

For the advisor's verdicts on a sample trace (one aggregated, one disaggregated), each target's
router file names the policy that realises each stage's replayed router and one worker per
replica; every option and policy is on the router's own list (tests/fixtures/router_keys/,
copied from the routers' sources at the commit named there), and bash parses the file.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from advice_traces import slo_for
from emit_fixtures import HOST, emit_report

from kvadvisor.emit import emit_all
from kvadvisor.emit.deployment import deployment_from_report
from kvadvisor.errors import ConfigError
from kvadvisor.pipeline import AnalyzeOptions
from kvadvisor.pipeline.analyze import analyze
from kvadvisor.pipeline.review import review_plans
from kvadvisor.plan import engine_settings_table, load_plan
from kvadvisor.plan.engine_files import EngineFileError, file_routers, read_engine_file
from kvadvisor.planreview.settings import engine_facts
from kvadvisor.results.verdict import Verdict
from kvadvisor.trace import read_trace

ROOT = Path(__file__).resolve().parents[1]
KEYS = ROOT / "tests" / "fixtures" / "router_keys"
TRACE = ROOT / "sample_traces" / "azure_code_head.csv.zst"
# target -> (router file, router key list)
ROUTERS = {
    "sglang-hicache": ("sglang-router.sh", "sglang-router"),
    "vllm": ("vllm-router.sh", "vllm-router"),
    "lmcache": ("vllm-lmcache-router.sh", "vllm-router"),
    "mooncake": ("vllm-mooncake-router.sh", "vllm-router"),
    "dynamo-kvbm": ("dynamo-frontend.sh", "dynamo-frontend"),
}
# What each plan router is in the routers' own words (their policies' documented behaviour:
# cache_aware matches prefixes, power_of_two compares the load of two workers).
HTTP_POLICY = {"prefix_aware": "cache_aware", "round_robin": "round_robin"}
HTTP_POLICY["least_outstanding"] = "power_of_two"
DYNAMO_MODE = {"prefix_aware": "kv", "round_robin": "round-robin", "least_outstanding": "kv"}


def _keys(name: str) -> dict[str, Any]:
    return yaml.safe_load((KEYS / f"{name}.yaml").read_text())


def _words(text: str) -> list[str]:
    """The router's command-line words: the flag array, then what the launch line adds."""
    start = re.search(r"^([A-Z_]+)=\($", text, re.MULTILINE)
    assert start is not None
    end = text.index("\n)", start.end())
    words = shlex.split(text[start.end() : end], comments=True)
    launch = text[end + 2 :].replace("\\\n", " ")
    after = launch.split(f'"${{{start.group(1)}[@]}}"', 1)[1]
    return words + shlex.split(after, comments=True)


def _options(words: list[str]) -> dict[str, list[list[str]]]:
    """{option: [values of each occurrence]}."""
    out: dict[str, list[list[str]]] = {}
    for w in words:
        if w.startswith("--"):
            out.setdefault(w[2:], []).append([])
        else:
            next(reversed(out.values()))[-1].append(w)
    return out


def _verdict_report(topology: str, engine: str | None = None):  # type: ignore[no-untyped-def]
    """The sample trace's analysis, with its best verdict of ``topology`` as the primary.

    ``engine``: the analysis replayed for that engine's KV page (None: vLLM's).
    """
    report = _analysis(engine)
    vs = report.recommendation.verdict
    pick = next((v for v in vs.verdicts if v.chosen and v.topology == topology), None)
    assert pick is not None, [(v.provider, v.topology, v.chosen) for v in vs.verdicts]
    rec = replace(report.recommendation, verdict=replace(vs, primary=pick.provider))
    return replace(report, recommendation=rec), pick


_CACHE: dict[str, Any] = {}


def _analysis(engine: str | None = None):  # type: ignore[no-untyped-def]
    key = f"report-{engine}"
    if key not in _CACHE:
        _CACHE[key] = analyze(
            read_trace(TRACE),
            AnalyzeOptions(slo=slo_for(TRACE), engine=engine),
            version="test",
            generated_at="2026-01-01T00:00:00",
        )
    return _CACHE[key]


@pytest.fixture(scope="module", params=["aggregated", "disaggregated"])
def emitted(request):  # type: ignore[no-untyped-def]
    """(verdict, {target: router file text}, {target: its verdict}) for each topology.

    SGLang runs 64-token pages: its files come from the analysis replayed for it (the others'
    verdict was replayed at vLLM's 16-token blocks, which SGLang's emit refuses).
    """
    report, verdict = _verdict_report(request.param)
    sglang, sglang_verdict = _verdict_report(request.param, "sglang-hicache")
    with pytest.raises(ConfigError, match="64-token KV pages"):
        emit_all(report, ["sglang-hicache"], "kvadvisor analyze")
    out, verdicts = {}, {}
    for target, (name, _) in ROUTERS.items():
        verdicts[target] = sglang_verdict if target == "sglang-hicache" else verdict
        try:
            mine = sglang if target == "sglang-hicache" else report
            files = emit_all(mine, [target], "kvadvisor analyze")
        except ConfigError as exc:
            # Mooncake's store is host memory: a stage without a host tier is refused, saying so
            assert target == "mooncake" and "no host tier" in str(exc), (target, exc)
            continue
        out[target] = files[name]
    # the sample trace's verdicts keep no host tier: its router is checked on the emit fixtures
    assert set(ROUTERS) - set(out) == {"mooncake"}
    return verdict, out, verdicts


def _check_options(target: str, text: str) -> dict[str, list[list[str]]]:
    keys = _keys(ROUTERS[target][1])
    opts = _options(_words(text))
    assert set(opts) <= set(keys["options"]), set(opts) - set(keys["options"])
    for name, allowed in keys["choices"].items():
        for values in opts.get(name, []):
            assert values and values[0] in allowed, (name, values)
    assert keys["launch"] in text
    return opts


@pytest.mark.parametrize("target", sorted(set(ROUTERS) - {"mooncake"}))
def test_router_options_are_the_routers_own(emitted, target) -> None:
    """Every option the router file passes, and every value with fixed choices, is on its list."""
    _check_options(target, emitted[1][target])


@pytest.mark.parametrize("decode", [None, (HOST,)], ids=["aggregated", "disaggregated"])
def test_mooncake_router_on_a_host_tier_deployment(decode) -> None:
    """Mooncake's vLLM replicas get vLLM's router: its options, one URL per replica."""
    report = emit_report(decode=decode)
    text = emit_all(report, ["mooncake"], "kvadvisor analyze")["vllm-mooncake-router.sh"]
    opts = _check_options("mooncake", text)
    plan, _ = deployment_from_report(report)
    if decode is None:
        assert len(opts["worker-urls"][0]) == plan.stages[0].replicas
    else:
        assert "vllm-pd-disaggregation" in opts
        assert [len(opts["prefill"]), len(opts["decode"])] == [s.replicas for s in plan.stages]


def _stages(verdict: Verdict) -> dict[str, Any]:
    return {str(s.role): s for s in verdict.stages}


@pytest.mark.parametrize("target", ["sglang-hicache", "vllm", "lmcache"])
def test_http_router_policy_and_workers(emitted, target) -> None:
    """The policy of each stage's replayed router; one worker URL per replica.

    SGLang: one per server, with --dp-aware reaching each data-parallel replica.
    """
    _, files, verdicts = emitted
    verdict = verdicts[target]
    opts = _options(_words(files[target]))
    stages = _stages(verdict)
    sglang = target == "sglang-hicache"

    def urls(stage) -> int:  # type: ignore[no-untyped-def]
        return stage.instances * (1 if sglang else stage.replicas_per_instance)

    if verdict.topology == "aggregated":
        (s,) = stages.values()
        assert opts["policy"] == [[HTTP_POLICY[s.router]]]
        assert s.router == "prefix_aware" and opts["policy"] == [["cache_aware"]]
        assert len(opts["worker-urls"][0]) == urls(s)
        assert {"cache-threshold", "balance-abs-threshold", "balance-rel-threshold"} <= set(opts)
    else:
        p, d = stages["prefill"], stages["decode"]
        assert ("pd-disaggregation" if sglang else "vllm-pd-disaggregation") in opts
        assert opts["prefill-policy"] == [[HTTP_POLICY[p.router]]]
        assert opts["decode-policy"] == [[HTTP_POLICY[d.router]]]
        assert len(opts["prefill"]) == urls(p) and len(opts["decode"]) == urls(d)
        # SGLang's prefill servers are named with their P/D bootstrap port
        assert all(len(v) == (2 if sglang else 1) for v in opts["prefill"])
    dp = any(s.replicas_per_instance > 1 for s in stages.values())
    assert ("dp-aware" in opts) == (sglang and dp)


def test_dynamo_frontend_is_the_kv_router_with_kv_events(emitted) -> None:
    """Dynamo: the frontend's KV router for a prefix-aware plan, fed by every worker's events."""
    verdict, files, _ = emitted
    opts = _options(_words(files["dynamo-kvbm"]))
    first = verdict.stages[0]
    assert opts["router-mode"] == [[DYNAMO_MODE[first.router]]]
    assert first.router == "prefix_aware" and opts["router-mode"] == [["kv"]]
    assert opts["router-kv-overlap-score-weight"] == [["1.0"]]
    assert "router-kv-events" in opts
    # disaggregated: every request goes through a prefill worker, as replayed
    assert ("enforce-disagg" in opts) == (verdict.topology == "disaggregated")
    report, _ = _verdict_report(str(verdict.topology))
    workers = emit_all(report, ["dynamo-kvbm"], "kvadvisor analyze")
    events = _keys("vllm-kv-events")
    for s in verdict.stages:
        text = workers[f"dynamo-{s.role}.sh"]
        m = re.search(r'--kv-events-config ("(?:[^"\\]|\\.)*")', text)
        assert m is not None, s.role
        # the shell's view of the word, with replica 0's port filled in
        word = shlex.split(m.group(1).replace("$((5557 + r))", "5557"))[0]
        cfg = json.loads(word)
        assert set(cfg) <= set(events["options"])
        assert (
            cfg["enable_kv_cache_events"] is True
            and cfg["publisher"] in events["choices"]["publisher"]
        )
        assert cfg["endpoint"] == "tcp://*:5557"


def test_round_robin_plans_start_round_robin_routers() -> None:
    """A report without a verdict routes round robin (its plan's default), so do the routers.

    No KV events are asked of Dynamo workers then.
    """
    files = emit_all(emit_report(decode=None), list(ROUTERS), "kvadvisor analyze")
    assert _options(_words(files["vllm-router.sh"]))["policy"] == [["round_robin"]]
    assert _options(_words(files["sglang-router.sh"]))["policy"] == [["round_robin"]]
    front = _options(_words(files["dynamo-frontend.sh"]))
    assert front["router-mode"] == [["round-robin"]] and "router-kv-events" not in front
    assert "--kv-events-config" not in files["dynamo-serving.sh"]
    assert "cache-threshold" not in _options(_words(files["vllm-router.sh"]))


def test_router_files_are_valid_bash(emitted) -> None:
    """`bash -n` parses every router file (placeholders quoted, continuation lines joined)."""
    _, files, _ = emitted
    for target, text in files.items():
        run = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True)
        assert run.returncode == 0, (target, run.stderr)


def test_router_file_reads_back_as_each_stages_replayed_router(emitted) -> None:
    """Each router file, read back as `review` reads it, gives every stage its replayed router.

    The files go through plan/engine_files.py; an edited policy reads back as another router.
    Dynamo's one frontend realises the disaggregated verdict too: its prefill router runs the
    mode, and with --enforce-disagg the decode workers are routed by load (least_outstanding).
    """
    _, files, verdicts = emitted
    table = engine_settings_table()
    for target, text in files.items():
        name = ROUTERS[target][0]
        (settings,) = read_engine_file(name, text, table).values()
        routers = file_routers(settings["router"])
        for s in verdicts[target].stages:
            read = routers.get(str(s.role), routers.get("*"))
            assert read == s.router, (target, s.role)
        for word in ("--policy cache_aware", "--prefill-policy cache_aware", "--router-mode kv"):
            if word in text:
                edited = text.replace(word, word.split()[0] + " round_robin")
                edited = edited.replace("--router-mode round_robin", "--router-mode round-robin")
                (moved,) = read_engine_file(name, edited, table).values()
                assert file_routers(moved["router"]) != routers, (target, word)


def test_router_files_are_in_the_plan_and_their_placeholders_are_linted(tmp_path) -> None:
    """Each plan lists its router file with every stage, so EL11's facts name its workers."""
    report = emit_report(decode=(HOST,))
    files = emit_all(report, [*ROUTERS, "plan"], "kvadvisor analyze")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    for target in ROUTERS:
        plan = load_plan(tmp_path / f"plan-{target}.yaml")
        assert [s.stage for s in plan.stages] == ["prefill", "decode"]
        for stage in plan.stages:
            # the router's settings sit under the engine whose router it is
            owner = next(e for e, v in stage.engines.items() if "router" in v)
            facts = dict(engine_facts(plan, stage, None))[owner]
            left = facts.values["engine_placeholders"]
            workers = "worker-urls" if target == "dynamo-kvbm" else "prefill"
            if target != "dynamo-kvbm":  # Dynamo's workers register themselves: no addresses
                assert f"router.{workers}[0]" in str(left), (target, left)
            assert file_routers(stage.engines[owner]["router"])


def test_a_router_file_launched_by_an_unknown_module_is_refused() -> None:
    """The launch line says whose router it is: another module is named as the file's mistake."""
    text = emit_all(emit_report(), ["vllm"], "kvadvisor analyze")["vllm-router.sh"]
    edited = text.replace("python -m vllm_router.launch_router", "python -m my_router")
    with pytest.raises(EngineFileError, match="launched by no router this reader knows") as exc:
        read_engine_file("vllm-router.sh", edited, engine_settings_table())
    assert "vllm_router.launch_router" in str(exc.value) and "\n" not in str(exc.value)


def test_dynamo_refuses_a_decode_router_it_does_not_run() -> None:
    """A disaggregated plan whose decode router is not Dynamo's (load, under the KV mode).

    Dynamo's frontend has one --router-mode; its decode workers are routed at overlap weight 0
    (Dynamo's replay of its frontend, lib/mocker/src/replay/offline/disagg.rs). A prefix-aware
    decode stage cannot be expressed: the target is refused with one line saying what to give.
    """
    report, verdict = _verdict_report("disaggregated")
    assert [s.router for s in verdict.stages] == ["prefix_aware", "least_outstanding"]
    stages = tuple(
        replace(s, router="prefix_aware") if str(s.role) == "decode" else s for s in verdict.stages
    )
    plan = verdict.replayed_plan
    plan = replace(
        plan,
        stages=tuple(
            replace(s, router="prefix_aware") if str(s.stage) == "decode" else s
            for s in plan.stages
        ),
    )
    vs = report.recommendation.verdict
    edited = replace(
        vs,
        verdicts=tuple(
            replace(v, stages=stages, replayed_plan=plan) if v is verdict else v
            for v in vs.verdicts
        ),
    )
    bad = replace(report, recommendation=replace(report.recommendation, verdict=edited))
    with pytest.raises(ConfigError, match="decode router prefix_aware cannot be expressed") as exc:
        emit_all(bad, ["dynamo-kvbm"], "kvadvisor analyze")
    assert "\n" not in str(exc.value) and "router: least_outstanding" in str(exc.value)
    # the HTTP routers have a policy per stage: they take it
    text = emit_all(bad, ["vllm"], "kvadvisor analyze")["vllm-router.sh"]
    assert _options(_words(text))["decode-policy"] == [["cache_aware"]]


def test_review_fails_a_router_file_whose_policy_is_not_the_plans(tmp_path) -> None:
    """EL33: the router file, read back, must route each stage with the plan's router.

    The plan routes both stages round robin (a report without a verdict); the emitted file
    passes, and the same file edited to route prefill cache-aware fails on that stage alone.
    """
    report = emit_report(decode=(HOST,))
    files = emit_all(report, ["vllm", "plan"], "kvadvisor analyze")
    for name, text in files.items():
        (tmp_path / name).write_text(text)

    def el33() -> dict[str, tuple[str, str]]:
        review = review_plans(read_trace(TRACE), [load_plan(tmp_path / "plan.yaml")])[0]
        return {str(c.stage): (c.status, c.message) for c in review.checks if c.code == "EL33"}

    assert {s: v[0] for s, v in el33().items()} == {"prefill": "pass", "decode": "pass"}
    text = files["vllm-router.sh"]
    assert "--prefill-policy round_robin" in text
    (tmp_path / "vllm-router.sh").write_text(
        text.replace("--prefill-policy round_robin", "--prefill-policy cache_aware")
    )
    found = el33()
    assert found["decode"][0] == "pass" and found["prefill"][0] == "fail"
    assert (
        "routes this stage prefix_aware, the plan (and its replay) round_robin"
        in (found["prefill"][1])
    )
