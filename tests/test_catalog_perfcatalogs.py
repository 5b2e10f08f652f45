"""A user's GPU, model and efficiency files (--catalog) reach the profiler, replay and advisor."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import kvadvisor
from kvadvisor.catalog.efficiency import EFFICIENCY_YAML, load_efficiencies
from kvadvisor.catalog.perfcatalogs import PerfCatalogs, load_perf_catalogs

SAMPLE = (
    Path(__file__).resolve().parents[1] / "sample_traces" / "mooncake_conversation_head.jsonl.gz"
)
CLOCK = "2026-01-01T00:00:00+00:00"
LAB_TFLOPS = 900.0
LAB_GPU = {
    "display_name": "Lab GPU 96GB",
    "architecture": "hopper",
    "bf16_dense_tflops": LAB_TFLOPS,
    "fp8_dense_tflops": 1800.0,
    "memory_gb": 96,
    "memory_bandwidth_gbps": 4800,
    "pcie_gbps": 64,
    "nvlink_gbps": 900,
    "source": ["LAB"],
}
# Llama-3.1-8B's published shape under another name.
LAB_MODEL = {
    "display_name": "Lab model 8B",
    "layers": 32,
    "q_heads": 32,
    "kv_heads": 8,
    "head_dim": 128,
    "total_params_billion": 8,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "source": ["LAB"],
}
SOURCES = {"LAB": "our lab measurements"}


def _write(path: Path, kind: str, entries: dict) -> str:
    path.write_text(yaml.safe_dump({"kind": kind, "sources": SOURCES, "entries": entries}))
    return str(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A GPU, a model and coefficients for the GPU (H200's, with bf16 GEMMs at 0.4 of peak)."""
    d = tmp_path_factory.mktemp("catalogs")
    eff = dict(yaml.safe_load(EFFICIENCY_YAML.read_text())["entries"]["h200"])
    eff.update(gemm_efficiency=0.4, source=["LAB"], notes="measured in our lab")
    return {
        "gpus": _write(d / "gpus.yaml", "gpus", {"lab-gpu": LAB_GPU}),
        "models": _write(d / "models.yaml", "models", {"lab-model": LAB_MODEL}),
        "efficiency": _write(d / "eff.yaml", "efficiency", {"lab-gpu": eff}),
    }


def _analyze(catalogs: list[str]) -> kvadvisor.Report:
    return kvadvisor.analyze(
        SAMPLE,
        model="lab-model",
        gpu="lab-gpu",
        tp=1,
        catalogs=catalogs,
        replay=False,
        generated_at=CLOCK,
    )


def test_layered_catalogs_add_entries_and_keep_the_packaged_ones(files: dict[str, str]) -> None:
    """The user's GPU and model are found by name; the packaged ones stay."""
    cats = load_perf_catalogs([files["gpus"]], [files["models"]], [files["efficiency"]])
    assert cats.gpu("LAB-GPU").bf16_dense_tflops == LAB_TFLOPS
    assert cats.model("lab-model").layers == 32
    assert cats.gpu("h200") == PerfCatalogs.packaged().gpu("h200")
    assert kvadvisor.load_catalogs(list(files.values())).find("lab-gpu").name == "lab-gpu"


def test_profiler_and_advisor_use_the_users_gpu_model_and_coefficients(
    files: dict[str, str],
) -> None:
    """The profile runs the user's model on the user's GPU with the user's coefficients.

    The report names them; the advisor's split-GPU fact is the user's GPU's peak. Without the
    efficiency file the GPU borrows H200's fitted coefficients (the closest fitted Hopper), whose
    GEMMs run at H200's fitted fraction of peak (0.79) instead of 0.4: prefill GPU time falls.
    """
    report = _analyze(list(files.values()))
    dep = report.model.deployment
    assert (report.model.name, dep.gpu) == ("lab-model", "lab-gpu")
    assert dep.efficiency["gemm_efficiency"] == 0.4
    assert dep.efficiency["source"] == "efficiency catalog entry lab-gpu: our lab measurements"
    assert dep.step_model_reason.endswith("; coefficients: fitted for lab-gpu")
    facts = report.recommendation.facts
    assert facts["split_gpu_bf16_tflops"]["value"] == LAB_TFLOPS
    borrowed = _analyze([files["gpus"], files["models"]])
    why = "lab-gpu has no fitted coefficients; those of h200, the closest fitted hopper GPU"
    assert why in borrowed.model.deployment.step_model_reason
    h200 = load_efficiencies()["h200"].gemm_efficiency
    assert borrowed.model.deployment.efficiency["gemm_efficiency"] == h200 > 0.4
    assert borrowed.stage_split.prefill_s < report.stage_split.prefill_s


def test_replay_uses_the_users_catalogs(files: dict[str, str], tmp_path: Path) -> None:
    """A plan naming the user's model and GPU replays on the user's coefficients."""
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        yaml.safe_dump(
            {
                "name": "lab",
                "model": {"name": "lab-model", "tp": 1},
                "topology": "aggregated",
                "stages": {"serving": {"gpu": "lab-gpu", "count": 1}},
            }
        )
    )
    result = kvadvisor.replay(
        SAMPLE, plan, catalogs=list(files.values()), generated_at=CLOCK
    ).replay
    (stage,) = result.stages
    assert stage.gpu == "lab-gpu"
    assert "efficiency catalog entry lab-gpu: our lab measurements" in stage.step_model


def test_the_deployment_search_uses_the_users_gpu_and_coefficients(files: dict[str, str]) -> None:
    """The search's shapes read the layered catalogs, as its replays and `review` do.

    An instance carrying the user's GPU is refused with the packaged catalogs alone (its GPU
    is unknown there, so the replay could not run it) and fits with them; its step times come
    from the user's coefficients (GEMMs at 0.4 of peak): slower than the borrowed H200 ones.
    """
    from dataclasses import replace

    from kvadvisor.advice.space import shapes
    from kvadvisor.catalog.instances import load_instances

    lab = replace(load_instances()["p5en.48xlarge"], gpu="lab-gpu")
    users = load_perf_catalogs([files["gpus"]], [files["models"]], [files["efficiency"]])
    borrowed = load_perf_catalogs([files["gpus"]], [files["models"]])
    model = users.model("lab-model")
    got, refused = shapes(lab, model, "bf16", "bf16", 10_000)
    assert not got and refused == ["p5en.48xlarge: its GPU lab-gpu is not in the GPU catalog"]
    (own, *_), _ = shapes(lab, model, "bf16", "bf16", 10_000, users)
    (other, *_), _ = shapes(lab, model, "bf16", "bf16", 10_000, borrowed)
    assert own.gpu.name == "lab-gpu" and own.tp == other.tp
    assert own.step.tokens_time_s(8192.0) > other.step.tokens_time_s(8192.0)
