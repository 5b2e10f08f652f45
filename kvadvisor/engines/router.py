"""The router in front of each engine's replicas: the plan's router policy as the engine runs it.

The replay routes every request with the plan's ``router`` (docs/replay.md R3), so the files
start the router that realises it: SGLang's router (``sglang_router.launch_router``), vLLM's
router (``vllm_router.launch_router``, the same Rust router forked for vLLM) for the vLLM-based
targets, and Dynamo's frontend with its KV router for KVBM. Worker lists are placeholders, one
per replica the replay routed to. A policy the engine's router does not have is written as the
one it has that comes closest, and the file says how they differ.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from kvadvisor.emit.context import EmitContext
from kvadvisor.emit.text import Setting, placeholder, shell_script
from kvadvisor.errors import ConfigError
from kvadvisor.plan.model import StagePlan
from kvadvisor.quoting import comment
from kvadvisor.vocab import Stage

SGLANG_ROUTER = "SGLang sgl-router/py_src/sglang_router/router_args.py@e46dcd8"
VLLM_ROUTER = "vLLM router py_src/vllm_router/router_args.py@462d39d"
DYNAMO_FRONTEND = "Dynamo components/src/dynamo/frontend/frontend_args.py@c6b40e7"
# Cache-aware thresholds: the routers' own defaults (RouterArgs in both router_args.py). The
# replay's prefix-aware cost has no threshold of its own to carry over, so the defaults stay.
CACHE_THRESHOLD = "0.3"
BALANCE_ABS = "64"
BALANCE_REL = "1.5"
# Ports: SGLang's server default (server_args.py: 30000) and P/D bootstrap port (8998); a vLLM
# replica r of a node listens on 8000 + r (engines/vllm.py SERVE_BASE_PORT).
SGLANG_SERVER_PORT = 30000
SGLANG_BOOTSTRAP_PORT = 8998
ROUTER_PORT = 30000  # both routers' default --port
DYNAMO_HTTP_PORT = 8000  # the frontend's default --http-port
# Dynamo's KV router cost weight: the replay's router_weight (fleet/resolved.py, 1.0).
DYNAMO_OVERLAP_WEIGHT = "1.0"

# The plan's router -> (policy of the SGLang/vLLM router, how it differs from the replay's).
POLICIES = {
    "prefix_aware": (
        "cache_aware",
        "cache-aware: the worker whose radix tree matches most of the prompt, once the match "
        "passes --cache-threshold; otherwise the least loaded (the replay's prefix-aware router "
        "weighs overlap against load in one cost, docs/replay.md R3)",
    ),
    "round_robin": ("round_robin", "round robin, as replayed"),
    "least_outstanding": (
        "power_of_two",
        "power of two choices: the less loaded of two workers drawn at random; the router has "
        "no least-outstanding policy, and the replay's compares every replica",
    ),
}
DYNAMO_MODES = {
    "prefix_aware": ("kv", "Dynamo's KV router: the cost the replay's prefix-aware router uses"),
    "round_robin": ("round-robin", "round robin, as replayed"),
    "least_outstanding": (
        "kv",
        "Dynamo has no least-outstanding mode: its KV router with overlap weight 0 picks the "
        "replica with the least active prefill and decode load, the closest it has",
    ),
}
# The router files every target writes: each engine lists its own with every stage
# (``shared_files``), and plan/engine_files.py reads its flags under the engine's ``router``.
ROUTER_FILES = ("-router.sh", "dynamo-frontend.sh")


def is_router_file(name: str) -> bool:
    """Whether ``name`` is a router file of an engine target (router options, no engine's own)."""
    return name.endswith(ROUTER_FILES)


def _policy(stage: StagePlan) -> tuple[str, str]:
    return POLICIES[stage.router]


def worker_urls(stage: StagePlan, per_replica: bool, port: int) -> list[str]:
    """One placeholder URL per worker the router sees: per replica, or per instance."""
    urls = []
    for node in range(1, stage.count + 1):
        host = placeholder(f"{stage.stage}-node-{node}")
        ports = range(port, port + (stage.replicas_per_instance or 1)) if per_replica else (port,)
        urls += [f"http://{host}:{p}" for p in ports]
    return urls


def _thresholds(stages: Sequence[StagePlan], source: str) -> list[Setting]:
    if not any(s.router == "prefix_aware" for s in stages):
        return []
    return [
        Setting(
            "cache-threshold",
            CACHE_THRESHOLD,
            f"route by prefix when at least 30% of the prompt matches a worker's tree ({source} "
            "default)",
        ),
        Setting(
            "balance-abs-threshold",
            BALANCE_ABS,
            f"balance load instead when the busiest worker has more than 64 requests above the "
            f"idlest ({source} default)",
        ),
        Setting(
            "balance-rel-threshold",
            BALANCE_REL,
            f"... and more than 1.5x the idlest's load ({source} default)",
        ),
    ]


def _serving_flags(stage: StagePlan, per_replica: bool, port: int, source: str) -> list[Setting]:
    policy, why = _policy(stage)
    urls = worker_urls(stage, per_replica, port)
    return [
        Setting(
            "policy",
            policy,
            f"the plan's router {stage.router}: {why} ({source})",
        ),
        Setting(
            "worker-urls",
            tuple(urls),
            f"{len(urls)} worker(s): the {stage.replicas} replica(s) the replay routed to, "
            f"{stage.count} x {stage.instance}",
        ),
    ]


def _pd_flags(
    prefill: StagePlan, decode: StagePlan, source: str, mode: str, bootstrap: int | None
) -> tuple[list[Setting], list[str]]:
    """P/D mode: the prefill and decode lists, a policy per stage; the --prefill/--decode words.

    ``--prefill`` and ``--decode`` repeat once per worker (argparse ``append``), so they go on
    the launch line, after the flag array.
    """
    per_replica = mode == "vllm-pd-disaggregation"
    port = SGLANG_SERVER_PORT if not per_replica else 8000
    flags = [Setting(mode, None, f"prefill and decode workers apart, KV handed over ({source})")]
    for stage, name in ((prefill, "prefill-policy"), (decode, "decode-policy")):
        policy, why = _policy(stage)
        flags.append(
            Setting(name, policy, f"the plan's {stage.stage} router {stage.router}: {why}")
        )
    words = []
    for url in worker_urls(prefill, per_replica, port):
        words.append(f"--prefill {shlex.quote(url)}" + (f" {bootstrap}" if bootstrap else ""))
    words += [f"--decode {shlex.quote(url)}" for url in worker_urls(decode, per_replica, port)]
    return flags, words


def _launch(module: str, words: list[str]) -> list[str]:
    if not words:
        return [f'python -m {module} "${{ROUTER_ARGS[@]}}"']
    return [f'python -m {module} "${{ROUTER_ARGS[@]}}" \\'] + [
        f"  {w}" + (" \\" if i < len(words) - 1 else "") for i, w in enumerate(words)
    ]


def http_router(ctx: EmitContext, engine: str, name: str) -> dict[str, str]:
    """``name``: SGLang's or vLLM's router for the stages of ``ctx`` (``engine``: which)."""
    sglang = engine == "sglang"
    source = SGLANG_ROUTER if sglang else VLLM_ROUTER
    module = "sglang_router.launch_router" if sglang else "vllm_router.launch_router"
    stages = {s.stage: s for s in ctx.plan.stages}
    flags = [
        Setting("host", "0.0.0.0", "clients reach the fleet here"),
        Setting(
            "port",
            str(ROUTER_PORT),
            f"the router's default port ({source}); SGLang servers default to it too, so start "
            "the router on a host of its own or give it another",
        ),
    ]
    words: list[str] = []
    notes = []
    if ctx.disaggregated:
        pd, words = _pd_flags(
            stages[Stage.PREFILL],
            stages[Stage.DECODE],
            source,
            "pd-disaggregation" if sglang else "vllm-pd-disaggregation",
            SGLANG_BOOTSTRAP_PORT if sglang else None,
        )
        flags += pd
    else:
        serving = ctx.plan.stages[0]
        per_replica = not sglang
        flags += _serving_flags(
            serving, per_replica, SGLANG_SERVER_PORT if sglang else 8000, source
        )
    if sglang and any((s.replicas_per_instance or 1) > 1 for s in ctx.plan.stages):
        flags.append(
            Setting(
                "dp-aware",
                None,
                "each SGLang server runs its replicas as data-parallel ranks (--dp-size); the "
                "router routes to each rank, as the replay does to each replica",
            )
        )
    flags += _thresholds(ctx.plan.stages, source)
    for s in ctx.plan.stages:
        notes.append(
            f"{s.stage}: {s.replicas} replica(s) on {s.count} x {s.instance}; the replay's "
            f"router: {s.router}"
        )
    what = "SGLang router" if sglang else "vLLM router"
    head = ctx.head(f"{what} in front of every replica, one for the fleet")
    return {
        name: shell_script(
            head + [comment(n) for n in notes],
            [],
            "ROUTER_ARGS",
            flags,
            _launch(module, words),
        )
    }


def dynamo_decode_router(prefill_router: str) -> str:
    """The router Dynamo's frontend gives a disaggregated decode stage under ``prefill_router``.

    One ``--router-mode`` serves the fleet; in disaggregated serving its prefill router routes
    the prefill workers, and the decode workers are routed by the same mode with the KV
    router's overlap weight set to 0, on load alone (Dynamo's own replay of its frontend,
    lib/mocker/src/replay/offline/disagg.rs@84809e0 ``derive_decode_router_config``).
    """
    return "round_robin" if prefill_router == "round_robin" else "least_outstanding"


def dynamo_frontend(ctx: EmitContext, name: str) -> dict[str, str]:
    """``name``: Dynamo's frontend with the router mode of the plan's first stage.

    Disaggregated, that is the prefill stage's, and the decode stage gets the router Dynamo
    gives it (:func:`dynamo_decode_router`); a plan whose decode router differs is refused.
    """
    stage = ctx.plan.stages[0]
    if ctx.disaggregated:
        decode = ctx.plan.stages[-1]
        real = dynamo_decode_router(stage.router)
        if decode.router != real:
            raise ConfigError(
                f"Dynamo routes a disaggregated decode stage {real} when its prefill stage is "
                f"routed {stage.router} (one --router-mode for the fleet; the decode router is "
                f"its KV router at overlap weight 0); the plan's decode router {decode.router} "
                "cannot be expressed: give the decode stage router: " + real
            )
    modes = {DYNAMO_MODES[s.router][0] for s in ctx.plan.stages}
    mode, why = DYNAMO_MODES[stage.router]
    flags = [
        Setting("http-port", str(DYNAMO_HTTP_PORT), f"the frontend's default ({DYNAMO_FRONTEND})"),
        Setting("router-mode", mode, f"the plan's {stage.stage} router {stage.router}: {why}"),
    ]
    if "kv" in modes:
        weight = "0.0" if stage.router == "least_outstanding" else DYNAMO_OVERLAP_WEIGHT
        flags += [
            Setting(
                "router-kv-overlap-score-weight",
                weight,
                "weight of the prompt tokens a worker already holds in its cost; the replay's "
                "router_weight (docs/replay.md R3)"
                + (
                    "; the decode workers' router runs at weight 0 whatever this is"
                    if ctx.disaggregated
                    else ""
                ),
            ),
            Setting(
                "router-temperature",
                "0.0",
                "0: the lowest cost wins, as in the replay (no random sampling)",
            ),
            Setting(
                "router-kv-events",
                None,
                "workers publish what they store and evict (their --kv-events-config), so the "
                "router knows what each holds",
            ),
        ]
    if ctx.disaggregated:
        flags.append(
            Setting(
                "enforce-disagg",
                None,
                "every request is prefilled on a prefill worker, as replayed (no decode-side "
                "prefill while prefill workers register); the mode above routes the prefill "
                "workers, and the decode workers "
                + ("on load alone (overlap weight 0)" if mode == "kv" else "round robin")
                + f", the plan's decode router {ctx.plan.stages[-1].router} ({DYNAMO_FRONTEND})",
            )
        )
    notes = [
        f"{s.stage}: {s.replicas} dynamo.vllm worker(s) on {s.count} x {s.instance} register "
        f"themselves; the replay's router: {s.router}"
        for s in ctx.plan.stages
    ]
    head = ctx.head("Dynamo frontend and router, one for the fleet")
    return {
        name: shell_script(
            head + [comment(n) for n in notes],
            [],
            "FRONTEND_ARGS",
            flags,
            ['python -m dynamo.frontend "${FRONTEND_ARGS[@]}"'],
        )
    }
