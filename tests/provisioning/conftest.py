from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from provisioning_helpers import BIN, HERE, ansible_env


@pytest.fixture(scope="session")
def rendered(tmp_path_factory) -> Path:
    """Run tests/provisioning/render.yml once: every role resolved and rendered per distribution."""
    out = tmp_path_factory.mktemp("render")
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(HERE / "inventory.yml"), str(HERE / "render.yml"),
         "-e", f"render_out={out}"],
        capture_output=True, text=True, env=ansible_env(), timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return out
