"""Shared test fixtures: paths to the real public traces beside the project."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO.parent / "shared" / "traces"
MOONCAKE_TRACE = SHARED_TRACES / "conversation_trace.jsonl"
AZURE_CODE_TRACE = SHARED_TRACES / "AzureLLMInferenceTrace_code.csv"


@pytest.fixture(scope="session")
def mooncake_path() -> Path:
    """The Mooncake FAST'25 conversation trace (skips when shared/ is not beside the repo)."""
    if not MOONCAKE_TRACE.exists():
        pytest.skip("shared/traces not available")
    return MOONCAKE_TRACE


@pytest.fixture(scope="session")
def azure_code_path() -> Path:
    """The Azure LLM inference 2023 code trace."""
    if not AZURE_CODE_TRACE.exists():
        pytest.skip("shared/traces not available")
    return AZURE_CODE_TRACE


def pytest_addoption(parser: pytest.Parser) -> None:
    """--update-golden rewrites tests/golden/ from the current output (see tests/goldtest.py)."""
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite golden files under tests/golden/ instead of comparing with them",
    )
