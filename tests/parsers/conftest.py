"""Shared helpers for parser tests: load copied fixtures relative to tests/fixtures/."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture
def fixture_text():
    """Return a loader: ``fixture_text("nvidia-smi/q-h100-590-idle.txt") -> str`` (UTF-8, exact bytes)."""

    def load(relpath: str) -> str:
        return (FIXTURES / relpath).read_bytes().decode("utf-8")

    return load
