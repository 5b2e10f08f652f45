"""A plan's engine_files: engine configuration files read back into engine settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvadvisor.plan import PlanError, engine_settings_table, load_plan
from kvadvisor.plan.engine_files import (
    EngineFileError,
    mooncake_bytes,
    read_engine_file,
    scalar,
)

TABLE = engine_settings_table()
SCRIPT = """#!/usr/bin/env bash
# a comment
export SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR='/mnt/nvme/hicache'
SGLANG_ARGS=(
  # why
  --tp-size 2
  --enable-hierarchical-cache
  --hicache-size 214
  --disaggregation-ib-device 'mlx5_0,mlx5_1'
)
python -m sglang.launch_server "${SGLANG_ARGS[@]}"
"""


def test_shell_flags_and_exports() -> None:
    """Flags with a value, without one, and exports land under the array's engine."""
    out = read_engine_file("sglang-prefill.sh", SCRIPT, TABLE)
    assert out == {
        "sglang-hicache": {
            "tp-size": 2,
            "enable-hierarchical-cache": True,
            "hicache-size": 214,
            "disaggregation-ib-device": "mlx5_0,mlx5_1",
            "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR": "/mnt/nvme/hicache",
        }
    }


def test_keys_go_to_the_engine_that_owns_them() -> None:
    """A Dynamo worker's vLLM flags are vLLM settings; several values make a list."""
    text = "DYNAMO_ARGS=(\n  --tensor-parallel-size 4\n  --connector kvbm nixl\n)\n"
    out = read_engine_file("dynamo-prefill.sh", text, TABLE)
    assert out == {
        "vllm": {"tensor-parallel-size": 4},
        "dynamo-kvbm": {"connector": ["kvbm", "nixl"]},
    }


def test_gflags_json_and_master_apart() -> None:
    """--name=value flags; a JSON value parses; a master's flags stay under `master`."""
    master = "MOONCAKE_MASTER_ARGS=(\n  --eviction_ratio=0.1\n  --enable_offload=true\n)\n"
    assert read_engine_file("m.sh", master, TABLE) == {
        "mooncake": {"master": {"eviction_ratio": 0.1, "enable_offload": True}}
    }
    vllm = 'VLLM_ARGS=(\n  --kv-transfer-config \'{"kv_connector":"NixlConnector"}\'\n)\n'
    cfg = read_engine_file("v.sh", vllm, TABLE)["vllm"]["kv-transfer-config"]
    assert cfg == {"kv_connector": "NixlConnector"}


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("a.txt", "x", "unknown engine file type"),
        ("a.sh", "echo hi\n", "no flag array"),
        ("a.sh", "FOO_ARGS=(\n  --x 1\n)\n", "names no engine"),
        ("a.sh", "VLLM_ARGS=(\n  bare\n)\n", "expected a --flag"),
        ("a.env", "NOT A PAIR\n", "expected KEY=VALUE"),
        ("a.yaml", "- 1\n", "expected a mapping"),
    ],
)
def test_unreadable_files_say_why(name, text, message) -> None:
    """Each format's mistake is one message naming the file."""
    with pytest.raises(EngineFileError, match=message):
        read_engine_file(name, text, TABLE)


def test_scalars_and_mooncake_sizes() -> None:
    """Numbers and booleans parse; Mooncake sizes are binary ("4 GB" = 4 GiB)."""
    assert scalar("12") == 12 and scalar("0.5") == 0.5 and scalar("true") is True
    assert scalar("/tmp") == "/tmp"
    assert mooncake_bytes("4 GB") == 4 * 1024**3 and mooncake_bytes("4gb") == 4 * 1024**3
    assert mooncake_bytes(1000) == 1000 and mooncake_bytes("1.5 T") == int(1.5 * 1024**4)
    assert mooncake_bytes("4 GiB") is None and mooncake_bytes(-1) is None


def _plan(tmp_path: Path, files: list[str], engines: str = "") -> Path:
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "model: {kv_bytes_per_token: 1000}\n"
        "stages:\n  prefill:\n"
        f"    engine_files: {files}\n" + (f"    engines: {engines}\n" if engines else "")
    )
    return plan


def test_plan_reads_its_engine_files(tmp_path: Path) -> None:
    """Files are read relative to the plan; inline settings win over the files'."""
    (tmp_path / "sglang-prefill.sh").write_text(SCRIPT)
    (tmp_path / "kvbm-prefill.env").write_text("# why\nDYN_KVBM_CPU_CACHE_GB=429\n")
    plan = load_plan(
        _plan(
            tmp_path,
            ["sglang-prefill.sh", "kvbm-prefill.env"],
            "{sglang-hicache: {hicache-size: 100}}",
        )
    )
    engines = plan.stages[0].engines
    assert engines["sglang-hicache"]["hicache-size"] == 100
    assert engines["sglang-hicache"]["tp-size"] == 2
    assert engines["dynamo-kvbm"] == {"DYN_KVBM_CPU_CACHE_GB": 429}


@pytest.mark.parametrize(
    ("files", "content", "message"),
    [
        (["missing.sh"], None, "engine_files\\[0\\]: .*missing.sh: no such file"),
        (["bad.sh"], "VLLM_ARGS=(\n  --no-such-flag 1\n)\n", "unknown field"),
        (["bad.txt"], "x", "unknown engine file type"),
    ],
)
def test_plan_engine_file_errors(tmp_path: Path, files, content, message) -> None:
    """A missing, unknown or misspelt engine file is one PlanError with the key path."""
    if content is not None:
        (tmp_path / files[0]).write_text(content)
    with pytest.raises(PlanError, match=message):
        load_plan(_plan(tmp_path, files))
