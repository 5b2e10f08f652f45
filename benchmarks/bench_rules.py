"""Rule engine and advisor speed: load the built-in rules, evaluate them, run the advisor.

Usage: python benchmarks/bench_rules.py [--repeat N]

Prints the time to load and check every built-in rule file, rule evaluations per second over a
full fact set, and the time of one advisor run (instance and tier ranking over both catalogs plus
every rule). These are fixed costs per `analyze`; they do not grow with the trace.
"""

from __future__ import annotations

import argparse
import time

from kvadvisor.advice.advisor import advise
from kvadvisor.catalog.instances import load_instances
from kvadvisor.catalog.storage import load_storage
from kvadvisor.facts.registry import FACTS, collect
from kvadvisor.facts.workload import workload_facts
from kvadvisor.results.common import IoRate, TraceSummary
from kvadvisor.results.report import IoDemand, ModelSummary, StageSplit
from kvadvisor.rules import evaluate, load_rules


def main() -> None:
    """Measure and print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()

    t0 = time.perf_counter()
    rules = load_rules([], FACTS)
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    storage, instances = load_storage(), load_instances()
    catalogs_s = time.perf_counter() - t0

    trace = TraceSummary(
        path="bench",
        format="mooncake",
        requests=12_031,
        duration_s=3537.0,
        block_tokens=512,
        columns=("block_hashes",),
        input_tokens_total=144_793_823,
        output_tokens_total=4_122_048,
        arrival_rate_per_s=3.4,
    )
    facts = workload_facts(
        trace,
        ModelSummary("llama-3.1-70b", 327_680),
        StageSplit("modeled", 40_000.0, 15_000.0, 0.727),
        None,
        IoDemand(IoRate(1.2e9, 4.5e9, 9e9), IoRate(0.9e9, 3e9, 6e9), 1.0),
    )
    facts.update(
        collect(
            [
                ("split_gpus_per_replica", 8),
                ("split_gpu_bf16_tflops", 989.4),
                ("split_gpu_memory_bandwidth_gbps", 4800.0),
                ("model_weights_gib", 131.0),
            ]
        )
    )
    advice = advise(facts, None, storage, instances, rules, None)
    full = advice.facts

    t0 = time.perf_counter()
    for _ in range(args.repeat):
        evaluate(rules, full)
    eval_s = (time.perf_counter() - t0) / args.repeat

    runs = max(1, args.repeat // 20)
    t0 = time.perf_counter()
    for _ in range(runs):
        advise(facts, None, storage, instances, rules, None)
    advise_s = (time.perf_counter() - t0) / runs

    print(f"built-in rules loaded and checked: {len(rules)} in {load_s * 1000:.1f} ms")
    print(
        f"storage + instance catalogs loaded: {len(storage)} + {len(instances)} entries in "
        f"{catalogs_s * 1000:.1f} ms"
    )
    print(
        f"evaluate {len(rules)} rules over {len(full)} facts: {eval_s * 1e6:.0f} us "
        f"({len(rules) / eval_s:,.0f} rule evaluations/s)"
    )
    print(
        f"one advisor run (rank {len(instances)} instances and {len(storage)} tiers per stage, "
        f"evaluate rules): {advise_s * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
