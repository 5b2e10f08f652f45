"""The one plan writer: every plan reads back as the Plan it was written from (issue 29)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import yaml
from test_plan_loader import GOOD

from kvadvisor.plan import check_plan, load_plan
from kvadvisor.plan.writer import plan_mapping, plan_yaml
from kvadvisor.units import BYTES_PER_GB, BYTES_PER_GIB, parse_quantity
from kvadvisor.units.written import (
    rate_as_written,
    size_as_written,
    time_as_written,
    written_rate,
    written_size,
    written_time,
)

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples" / "plans").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_plan_reads_back_as_it_was_loaded(path: Path) -> None:
    """Loaded, written and checked again: the same Plan, and the same text written twice."""
    plan = load_plan(path, allow_outside_plan_dir=True)
    again = check_plan(str(path), plan_mapping(plan), allow_outside_plan_dir=True)
    _same(again, plan)
    assert plan_yaml(again) == plan_yaml(plan)


def _same(got: object, want: object, where: str = "plan") -> None:
    """Equal field by field; quantities within what the text keeps.

    Sizes are at most a millionth of a GiB over (1e-6 of any size above 1 GiB); rates and
    times keep nine digits.
    """
    if dataclasses.is_dataclass(want) and not isinstance(want, type):
        assert type(got) is type(want), where
        for f in dataclasses.fields(want):
            if f.compare:
                _same(getattr(got, f.name), getattr(want, f.name), f"{where}.{f.name}")
    elif isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _same(g, w, f"{where}[{i}]")
    elif isinstance(want, float) and not isinstance(want, bool):
        assert got == pytest.approx(want, rel=1e-6), where
    else:
        assert got == want, where


def test_inline_storage_slo_traffic_and_engine_settings_read_back() -> None:
    """Inline tiers, SLO, traffic scale, explicit hardware and inline engine settings."""
    plan = check_plan("good.yaml", GOOD)
    doc = plan_mapping(plan)
    assert doc["slo"] == {"ttft_p99": "2 s", "tpot_p99": "0.05 s"}
    assert doc["traffic"] == {"scale": 3.0}
    prefill = doc["stages"]["prefill"]
    assert prefill["engines"] == {"vllm": {"block-size": 16}, "lmcache": {"chunk_size": 256}}
    assert prefill["host_memory"] == "2048 GiB" and prefill["gpus_per_instance"] == 8
    assert prefill["tiers"][0]["storage"]["read_bandwidth"] == "50 GB/s"
    again = check_plan("good.yaml", yaml.safe_load(plan_yaml(plan)))
    _same(again, plan)
    assert plan_yaml(again) == plan_yaml(plan)


@pytest.mark.parametrize(
    "nbytes", [1.0, 1000.0, 0.1 * BYTES_PER_GIB, 1600 * BYTES_PER_GIB, 123456789012.345, 7e14]
)
def test_a_written_size_is_never_short_and_at_most_a_millionth_of_a_gib_over(
    nbytes: float,
) -> None:
    """Rounded up to a millionth of a GiB: an engine size rounded down stays within it."""
    back = parse_quantity(written_size(nbytes), "size")
    assert nbytes <= back <= nbytes + 1e-6 * BYTES_PER_GIB * (1 + 1e-12)


@pytest.mark.parametrize("rate", [1.0, 781.25e6, 63.0153846e9 / 7, 3.2e12])
def test_a_written_rate_and_time_keep_nine_significant_digits(rate: float) -> None:
    """Within 5e-9 of the value, read back as GB/s and seconds."""
    assert parse_quantity(written_rate(rate), "rate") == pytest.approx(rate, rel=5e-9)
    assert written_rate(2 * BYTES_PER_GB) == "2 GB/s"
    seconds = rate / 1e12
    assert parse_quantity(written_time(seconds), "time") == pytest.approx(seconds, rel=5e-9)


def test_the_values_as_written_are_what_the_text_reads_back_as() -> None:
    """A plan built in memory holds them: bit for bit what its written plan loads to."""
    rng = np.random.default_rng(29)
    for value in np.exp(rng.uniform(np.log(1e-7), np.log(1e15), 3000)):
        v = float(value)
        size = parse_quantity(written_size(v), "size")
        assert size_as_written(v) == size and written_size(size) == written_size(v)
        assert rate_as_written(v) == parse_quantity(written_rate(v), "rate")
        assert time_as_written(v / 1e6) == parse_quantity(written_time(v / 1e6), "time")
