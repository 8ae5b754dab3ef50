"""Validators on a bootstrapped lab (root): healthy passes, every validator-owned fault is caught on
its node only, hangs become timed errors, a dead node is unreachable, and plain pytest works."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from clustercert.lab.faults import FAULTS

pytestmark = [pytest.mark.lab, pytest.mark.slow]

PROBE_OWNED = {"link_slow", "nccl_busbw_low", "probe_hang", "node_down"}
VALIDATOR_FAULTS = sorted(k for k in FAULTS if k not in PROBE_OWNED)


def validate(lab, *args: str, timeout: float = 300) -> tuple[int, dict, float]:
    env = dict(os.environ, CLUSTERCERT_HOME=str(lab.dir.parent / "validate-test-state"))
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "clustercert", "validate", "-i", "lab", "--format", "json", *args],
                       capture_output=True, text=True, timeout=timeout, env=env)
    elapsed = time.monotonic() - t0
    assert p.returncode in (0, 1), p.stderr
    return p.returncode, json.loads(p.stdout), elapsed


def failing(doc: dict, node: str) -> list[dict]:
    return [f for f in doc["nodes"][node]["findings"] if f["status"] in ("fail", "error")]


def test_healthy_bootstrapped_lab_passes_everything(bootstrapped_lab):
    rc, doc, _ = validate(bootstrapped_lab)
    problems = {n: [(f["check"], f["subject"], f["observed"]) for f in failing(doc, n)] for n in doc["nodes"]}
    assert rc == 0, problems
    for name, node in doc["nodes"].items():
        assert node["verdict"] == "pass"
        checks = {f["check"] for f in node["findings"]}
        assert len(checks) >= 30, (name, sorted(checks))
        for f in node["findings"]:
            if f["status"] == "skip":  # only where the profile says why
                assert "profile" in f["observed"], f


def test_hanging_nvidia_smi_is_a_timed_error_not_a_pass(bootstrapped_lab):
    lab = bootstrapped_lab
    target = lab.nodes[0]
    lab.manager.fault(target, "probe_hang", {"tool": "nvidia-smi"})
    try:
        _rc, doc, elapsed = validate(lab, "--checks", "gpu")
    finally:
        lab.manager.heal(target, "probe_hang")
    timeout = 30  # clustercert_command_timeout_s default
    assert elapsed < timeout + 5 + 10, elapsed  # the run ends within the timeout (+ start-up)
    gpu = [f for f in doc["nodes"][target]["findings"] if f["check"] == "gpu.count"]
    assert gpu and gpu[0]["status"] == "error" and f"timed out after {timeout} s" in gpu[0]["observed"]
    assert not [f for f in doc["nodes"][target]["findings"] if f["check"] == "gpu.count" and f["status"] == "pass"]


def test_node_down_is_unreachable_and_others_complete(bootstrapped_lab):
    lab = bootstrapped_lab
    target = lab.nodes[2]
    lab.manager.fault(target, "node_down", {})
    try:
        rc, doc, _ = validate(lab)
    finally:
        lab.manager.heal(target, "node_down")
        lab.wait_ssh(target, timeout=120)
        # a power cycle: let the node's clock sync and its bond form again before the next test
        lab.ssh(target, "chronyc waitsync 20 0.1 0 1; for i in $(seq 30); do test -d /sys/class/net/bond0/bonding && break; "
                        "sleep 1; done", check=False, timeout=90)
    assert rc == 1
    assert doc["nodes"][target]["verdict"] == "unreachable"
    for other in lab.nodes:
        if other != target:
            assert doc["nodes"][other]["verdict"] == "pass", failing(doc, other)


def test_plain_pytest_validators_against_the_lab(bootstrapped_lab):
    lab = bootstrapped_lab
    hosts = ",".join(f"ssh://{n}" for n in lab.nodes[:2])
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "validators/",
                        f"--hosts={hosts}", f"--ssh-config={lab.ssh_config}", f"--ansible-inventory={lab.inventory}"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:]
    assert " passed" in p.stdout and " failed" not in p.stdout


# Last in the module: healing a configuration fault is what an admin would do by hand (it can leave
# e.g. a package unheld); the tests above need an untouched bootstrapped lab.
@pytest.mark.parametrize("kind", VALIDATOR_FAULTS)
def test_fault_is_caught_on_its_node_only(bootstrapped_lab, kind):
    lab = bootstrapped_lab
    target = lab.nodes[1]
    check = FAULTS[kind].check
    lab.manager.fault(target, kind, {})
    if FAULTS[kind].hardware:
        time.sleep(3)  # the node's hardware agent applies hw.json changes to sysfs within its 1 s loop
    try:
        _rc, doc, _ = validate(lab)
    finally:
        lab.manager.heal(target, kind)
    hits = [f for f in doc["nodes"][target]["findings"] if f["check"] == check and f["status"] == "fail"]
    assert hits, (kind, check, failing(doc, target))
    params = FAULTS[kind].params
    if "gpu" in params:
        assert all(f["subject"].startswith("GPU") or f["subject"] == "node" for f in hits), hits
    if "hca" in params:
        assert any(f["subject"].startswith("mlx5_") for f in hits), hits
    for other in lab.nodes:
        if other != target:
            assert not [f for f in doc["nodes"][other]["findings"] if f["status"] == "fail"], (other, failing(doc, other))
