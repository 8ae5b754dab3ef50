from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def run_cli(*args: str, env: dict | None = None, timeout: float = 120, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run `python -m clustercert ARGS` as a user would, capturing output."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "clustercert", *args],
        capture_output=True, text=True, timeout=timeout, env=full_env, cwd=cwd,
    )


@pytest.fixture
def cli():
    return run_cli
