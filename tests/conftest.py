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


@pytest.fixture(scope="session", autouse=True)
def _session_state_home(tmp_path_factory):
    """No test writes the real state directory (/var/lib/clustercert for root): CLUSTERCERT_HOME is a
    temporary directory for the whole session (what module- and session-scoped fixtures see) ..."""
    old = os.environ.get("CLUSTERCERT_HOME")
    os.environ["CLUSTERCERT_HOME"] = str(tmp_path_factory.mktemp("clustercert-home-session"))
    yield
    if old is None:
        os.environ.pop("CLUSTERCERT_HOME", None)
    else:
        os.environ["CLUSTERCERT_HOME"] = old


@pytest.fixture(autouse=True)
def _state_home(monkeypatch, tmp_path_factory):
    """... and a fresh one for each test (no store, no signing key): a test that certifies makes its
    key with ``init_signing_key`` (or sets CLUSTERCERT_HOME itself)."""
    monkeypatch.setenv("CLUSTERCERT_HOME", str(tmp_path_factory.mktemp("clustercert-home")))


def init_signing_key(home: Path | str | None = None) -> Path:
    """`clustercert key init` in ``home`` (default: the current CLUSTERCERT_HOME) unless a key is
    there already; the private key's path."""
    from clustercert import certificate

    state = Path(home or os.environ["CLUSTERCERT_HOME"])
    priv = certificate.key_paths(state)[0]
    return priv if priv.exists() else certificate.init_key(state)


# The state directories the lab tests run certify/drift with (CLUSTERCERT_HOME=<lab dir's parent>/NAME):
# each gets its signing key when the lab is bootstrapped for them.
LAB_CERTIFY_HOMES = ("certify-test-state", "drift-test-state")


# The lab fixtures (one lab per machine, under /tmp/clustercert-lab.lock) are shared by every test
# directory: tests/lab, tests/provisioning, tests/validators, tests/certify, tests/drift.
sys.path.insert(0, str(REPO / "tests" / "lab"))
from labfixtures import Lab, fresh_lab, lab, lab_lock  # noqa: E402,F401


@pytest.fixture(scope="module")
def bootstrapped_lab(lab):  # noqa: F811 - the imported session fixture
    """The lab's 4 nodes brought to the pinned state by `clustercert bootstrap -i lab` (idempotent:
    re-run per module, so whatever an earlier module changed is put back), with no fault active."""
    return bootstrap_lab(lab, 4)


@pytest.fixture(scope="session")
def lab_bootstrapper():
    """`bootstrap_lab` for modules that need a lab of another size (a fixture, because
    `from conftest import …` resolves to whichever conftest pytest imported first)."""
    return bootstrap_lab


def bootstrap_lab(running_lab, nodes: int):
    """Resize the lab to ``nodes`` (nodes are added or removed at the end), heal every fault and run
    `clustercert bootstrap -i lab` on all of them."""
    import json

    running_lab.up(nodes)
    for home in LAB_CERTIFY_HOMES:
        init_signing_key(running_lab.dir.parent / home)
    for name in running_lab.nodes:
        running_lab.manager.heal(name)
    for name in running_lab.nodes:
        running_lab.wait_ssh(name, timeout=120)
    p = run_cli("bootstrap", "-i", "lab", "--format", "json", timeout=1800,
                env={"CLUSTERCERT_HOME": str(running_lab.dir.parent / "bootstrap-fixture-state")})
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        raise AssertionError(f"bootstrap printed no JSON (rc {p.returncode}): {p.stderr[-3000:]}") from None
    assert p.returncode == 0, doc
    return running_lab
