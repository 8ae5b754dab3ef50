from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from suites import BESIDE_LAB_FROM, beside_lab

REPO = Path(__file__).resolve().parent.parent


def run_cli(
    *args: str, env: dict | None = None, timeout: float = 120, cwd: Path | None = None
) -> subprocess.CompletedProcess:
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
    from clustercert.record import certificate

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
    """The lab's 4 nodes in the pinned state of `clustercert bootstrap -i lab`, with no fault active
    (see bootstrap_lab: bootstrapped again only where an earlier module may have changed it)."""
    return bootstrap_lab(lab, 4)


@pytest.fixture(scope="session")
def lab_bootstrapper():
    """`bootstrap_lab` for modules that need a lab of another size (a fixture, because
    `from conftest import …` resolves to whichever conftest pytest imported first)."""
    return bootstrap_lab


@pytest.fixture(scope="session")
def lab_bootstrap_marker():
    """mark_bootstrapped, for a module that runs the bootstrap itself."""
    return mark_bootstrapped


# The nodes the last bootstrap of this session brought to the pinned state: node -> its machine id
# (a node made anew -- `lab down`/`up`, a resize -- has another). Empty: nothing known.
_BOOTSTRAPPED: dict[str, str] = {}


def _machine_ids(running_lab) -> dict[str, str]:
    out = {}
    for name in running_lab.nodes:
        r = running_lab.handle(name).exec(["cat", "/etc/machine-id"], timeout=20)
        out[name] = r.stdout.strip() if r.returncode == 0 else ""
    return out


def mark_bootstrapped(running_lab) -> None:
    """Record that every node of ``running_lab`` is in the pinned state now (a module that ran the
    bootstrap itself says so; bootstrap_lab does)."""
    _BOOTSTRAPPED.clear()
    _BOOTSTRAPPED.update(_machine_ids(running_lab))


def _still_bootstrapped(running_lab) -> bool:
    """The same nodes the last bootstrap left (same machine ids, no more, no fewer), and the validators
    pass on every one of them: what a bootstrap would put back is in place. Earlier modules put back
    what they changed (their tests assert it); this is the check that they did."""
    if not _BOOTSTRAPPED or _machine_ids(running_lab) != _BOOTSTRAPPED:
        return False
    home = running_lab.dir.parent / "bootstrap-fixture-state"
    p = run_cli("validate", "-i", "lab", "--format", "json", timeout=600, env={"CLUSTERCERT_HOME": str(home)})
    if p.returncode != 0:  # why the module pays for a bootstrap: what an earlier module left behind
        import json

        try:
            bad = [f"{n} {f['check']} {f['status']}: {f.get('observed', '')}"[:300]
                   for n, nd in json.loads(p.stdout)["nodes"].items()
                   for f in nd["findings"] if f["status"] not in ("pass", "skip")]
        except (ValueError, AttributeError):
            bad = [p.stdout[-500:] + p.stderr[-500:]]
        with (home / "rebootstrap.log").open("a") as log:
            log.write(f"{time.strftime('%H:%M:%S')} re-bootstrap: " + "; ".join(bad) + "\n")
    return p.returncode == 0


def bootstrap_lab(running_lab, nodes: int):
    """Resize the lab to ``nodes`` (nodes are added or removed at the end), heal every fault, and bring
    every node to the pinned state with `clustercert bootstrap -i lab` -- unless the last bootstrap of
    this session left these very nodes and the validators pass on them (CI time: a bootstrap re-run
    costs about a minute a module); a lab grown from such nodes has only its added nodes bootstrapped."""
    running_lab.up(nodes)
    for home in LAB_CERTIFY_HOMES:
        init_signing_key(running_lab.dir.parent / home)
    for name in running_lab.nodes:
        running_lab.manager.heal(name)
    for name in running_lab.nodes:
        running_lab.wait_ssh(name, timeout=120)
    added = _added_to_bootstrapped(running_lab)
    if added is None and _still_bootstrapped(running_lab):
        return running_lab
    _BOOTSTRAPPED.clear()
    if added:
        # grown from bootstrapped nodes, as a site adds nodes: the new ones bootstrapped on their own, then
        # the cluster's known-hosts file (cluster_ssh, the one role that names every node) on all of them (CI
        # time: a full run would take the earlier nodes through every role again, changing nothing)
        _bootstrap(running_lab, "--limit", ",".join(added))
        _bootstrap(running_lab, "--tags", "cluster_ssh")
    else:
        _bootstrap(running_lab)
    mark_bootstrapped(running_lab)
    return running_lab


def _bootstrap(running_lab, *args: str) -> None:
    import json

    p = run_cli("bootstrap", "-i", "lab", "--format", "json", *args, timeout=1800,
                env={"CLUSTERCERT_HOME": str(running_lab.dir.parent / "bootstrap-fixture-state")})
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        raise AssertionError(f"bootstrap {' '.join(args)} printed no JSON (rc {p.returncode}): "
                             f"{p.stderr[-3000:]}") from None
    assert p.returncode == 0, doc


def _added_to_bootstrapped(running_lab) -> list[str] | None:
    """The nodes added at the end of a lab whose other nodes are the ones the last bootstrap left (same
    machine ids) and pass the validators; None where that is not so (nothing added, or the earlier nodes
    changed)."""
    if not _BOOTSTRAPPED:
        return None
    ids = _machine_ids(running_lab)
    added = [n for n in running_lab.nodes if n not in _BOOTSTRAPPED]
    if not added or any(ids.get(n) != mid for n, mid in _BOOTSTRAPPED.items()):
        return None
    home = running_lab.dir.parent / "bootstrap-fixture-state"
    p = run_cli("validate", "-i", "lab", "--limit", ",".join(_BOOTSTRAPPED), timeout=600,
                env={"CLUSTERCERT_HOME": str(home)})
    return added if p.returncode == 0 else None


# Lab modules run in this order (after every other test): each bootstrap from bare nodes happens once,
# the modules that need the bootstrapped 4 nodes follow the one that bootstrapped them, and the
# 8-node certify module, which grows the lab, comes last. A module missing here runs after these.
LAB_MODULE_ORDER = (
    "tests/lab/test_lab_core.py",                 # the lab itself, bare nodes
    "tests/lab/test_faults.py",                   # fault matrix on bare nodes provisioned by hand
    "tests/provisioning/test_bootstrap_lab.py",   # bootstrap from bare nodes (marks them bootstrapped)
    "tests/security/test_security_lab.py",
    "tests/validators/test_validate_lab.py",
    "tests/validators/test_failover_lab.py",
    "tests/drift/test_drift_lab.py",
    "tests/certify/test_nccl_pair_lab.py",
    "tests/certify/test_drain_slurm_lab.py",
    # right after: the lab's Slurm again (its packages are there)
    "tests/certify/test_backend_slurm_lab.py",
    "tests/certify/test_certify_lab.py",          # grows the lab to 6 nodes
    # reboots 2 of the 6 into another driver: nothing undoes it
    "tests/provisioning/test_rolling_reboot_lab.py",
)


def pytest_runtest_setup(item):
    """Under scripts/test.sh (CLUSTERCERT_BESIDE_LAB_GO names a file): the first lab test of the modules from
    BESIDE_LAB_FROM on creates that file, and the work beside the lab tests starts (tests/suites.py)."""
    go = os.environ.get("CLUSTERCERT_BESIDE_LAB_GO")
    if not go or item.get_closest_marker("lab") is None or os.path.exists(go):
        return
    path = str(Path(str(item.fspath)).relative_to(REPO))
    if path in LAB_MODULE_ORDER and LAB_MODULE_ORDER.index(path) >= LAB_MODULE_ORDER.index(BESIDE_LAB_FROM):
        Path(go).touch()


def pytest_collection_modifyitems(session, config, items):
    """Unit tests first, then the lab modules in LAB_MODULE_ORDER (a stable sort: tests keep their order
    within a module); the unit tests of BESIDE_LAB's files are marked beside_lab."""
    rank = {m: i for i, m in enumerate(LAB_MODULE_ORDER)}

    def key(item):
        path = str(Path(str(item.fspath)).relative_to(REPO))
        if item.get_closest_marker("lab") is None:
            if beside_lab(path):
                item.add_marker(pytest.mark.beside_lab)
            return (0, 0)
        return (1, rank.get(path, len(rank)))

    items.sort(key=key)
