from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from provisioning_helpers import BIN, HERE, ansible_env

from clustercert.collect import engine


def _render(out: Path) -> Path:
    # with the strategy clustercert's engine runs every playbook with (mitogen_linear where mitogen is
    # installed): the same 128 files as the linear strategy, in 13 s instead of 35 s here
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(HERE / "inventory.yml"), str(HERE / "render.yml"),
         "-e", f"render_out={out}"],
        capture_output=True, text=True, env=ansible_env(**engine.strategy_env()), timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return out


@pytest.fixture(scope="session")
def rendered(tmp_path_factory) -> Path:
    """Run tests/provisioning/render.yml once: every role resolved and rendered per distribution.
    Under pytest-xdist once for all the workers (about 15 s): the first renders into the run's
    shared temporary directory while holding its lock, the others wait for it and read its output."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return _render(tmp_path_factory.mktemp("render"))
    shared = tmp_path_factory.getbasetemp().parent / "render"  # the workers' basetemps' parent: this run's
    with open(f"{shared}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (shared / ".complete").exists():
            shutil.rmtree(shared, ignore_errors=True)
            shared.mkdir()
            _render(shared)
            (shared / ".complete").touch()
    return shared
