"""The catalogs step times come from, layered: GPUs, models and per-GPU step-model coefficients.

The packaged catalogs with any user files (``--catalog``, routed by their ``kind``) layered on:
a user entry adds a GPU or model, or replaces the packaged entry of the same name whole. One
object carries them to the stage profiler, the replay and the advisor, so a user's GPU, model
or coefficients reach every step time the product computes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType

from kvadvisor.catalog.efficiency import Efficiency, EfficiencyCatalog, load_efficiency_catalog
from kvadvisor.catalog.gpus import GPUS_YAML, GpuSpec, parse_gpus
from kvadvisor.catalog.loader import find_named, load_layered
from kvadvisor.catalog.models import MODELS_YAML, ModelSpec, parse_models, read_hf_config


@dataclass(frozen=True)
class PerfCatalogs:
    """GPUs, models and step-model coefficients, packaged plus the user's files."""

    gpus: Mapping[str, GpuSpec]
    models: Mapping[str, ModelSpec]
    efficiency: EfficiencyCatalog

    @classmethod
    def packaged(cls) -> PerfCatalogs:
        """The packaged catalogs alone (parsed once per process)."""
        return _packaged()

    def gpu(self, name: str) -> GpuSpec:
        """A GPU by name or alias, case-insensitive; an unknown name gets the closest ones."""
        return find_named(self.gpus, name, "GPU", "gpus")

    def model(self, name: str) -> ModelSpec:
        """A catalog model by name or alias (a Hugging Face id), case-insensitive."""
        return find_named(self.models, name, "model", "models")

    def resolve_model(self, name_or_path: str) -> ModelSpec:
        """``--model``: a catalog name, a Hugging Face id, or a config.json (or its folder)."""
        candidate = Path(name_or_path)
        if name_or_path.endswith(".json") or candidate.is_file() or candidate.is_dir():
            if candidate.is_dir():
                candidate = candidate / "config.json"
            return read_hf_config(candidate)
        return self.model(name_or_path)

    def efficiency_for(self, gpu: GpuSpec) -> tuple[Efficiency, str]:
        """The step-model coefficients for ``gpu`` and where they come from.

        Its own entry, a sibling's, or the closest fitted GPU's (``EfficiencyCatalog.for_gpu``).
        """
        return self.efficiency.for_gpu(gpu, self.gpus)

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        """Pickled with its mappings copied (a read-only view cannot be pickled).

        A typed plan holds its catalogs, and a verdict its plan: a report crosses processes
        (Dask, a test's shared analyses) like any other result.
        """
        return (_read_only, (dict(self.gpus), dict(self.models), self.efficiency))


def _read_only(
    gpus: dict[str, GpuSpec], models: dict[str, ModelSpec], efficiency: EfficiencyCatalog
) -> PerfCatalogs:
    """Catalogs over read-only views of ``gpus`` and ``models`` (unpickling)."""
    return PerfCatalogs(MappingProxyType(gpus), MappingProxyType(models), efficiency)


def load_perf_catalogs(
    gpu_files: Iterable[str | Path] = (),
    model_files: Iterable[str | Path] = (),
    efficiency_files: Iterable[str | Path] = (),
) -> PerfCatalogs:
    """The packaged GPU, model and efficiency catalogs with the user's files layered on."""
    gpu_files, model_files, efficiency_files = (
        tuple(gpu_files),
        tuple(model_files),
        tuple(efficiency_files),
    )
    if not (gpu_files or model_files or efficiency_files):
        return _packaged()
    return PerfCatalogs(
        MappingProxyType(load_layered(parse_gpus, GPUS_YAML, gpu_files)),
        MappingProxyType(load_layered(parse_models, MODELS_YAML, model_files)),
        load_efficiency_catalog(efficiency_files),
    )


@lru_cache(maxsize=1)
def _packaged() -> PerfCatalogs:
    return PerfCatalogs(
        MappingProxyType(load_layered(parse_gpus, GPUS_YAML)),
        MappingProxyType(load_layered(parse_models, MODELS_YAML)),
        load_efficiency_catalog(),
    )
