"""Validators on a bootstrapped lab (root): healthy passes, every validator-owned fault is caught on
its node only (with the other checks it fails, ALSO_FAILS; validate runs those checks on every node), hangs
become timed errors, a dead node is unreachable, and plain pytest works; the faults that only a probe sees are
caught by `clustercert probe` on their node only (PROBE_FAULTS). clustercert.report.catalogue names these
tests for each (fault kind, id) pair; tests/test_catalogue.py reads the lists below and holds the catalogue to
them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from clustercert_lab.faults import FAULTS

pytestmark = [pytest.mark.lab, pytest.mark.slow]

PROBE_OWNED = {"link_slow", "nccl_busbw_low", "probe_hang", "node_down",
               "gdr_disabled", "storage_slow",  # these two: tests/certify/test_certify_lab.py (issue 22)
               "rank_slow",  # tests/certify/test_certify_lab.py (issue 33: probe.ddp_step)
               # tests/certify/test_nccl_pair_lab.py (issue 33: launch, scaling)
               "nccl_one_host", "nccl_scale_slow"}
# fault kinds no validator fails: drift reports them against the certified baseline
# (tests/drift/test_drift_lab.py)
DRIFT_OWNED = {"gpu_swapped"}
VALIDATOR_FAULTS = sorted(k for k in FAULTS if k not in PROBE_OWNED | DRIFT_OWNED)
# checks a fault kind fails besides the one the lab's fault table names for it: check -> the subject that
# fails
ALSO_FAILS = {
    "ib_port_down": {"ib.ipoib": "ib0"},  # mlx5_0 (the default) is DOWN: its IPoIB netdev ib0 goes down too
    # libnccl2 (the default) moves to the lab repo's other version
    "package_drift": {"nccl.version": "libnccl2"},
    # lspci shows GPU0's link as nvidia-smi does: Gen4 x8 where the profile asks Gen5 x16
    "gpu_pcie_degraded": {"hw.pcie_manifest": "GPU0 00000000:19:00.0"},
    # mlx5_0 (the default) runs another firmware than mlx5_1 on the same node
    "hca_firmware_odd": {"ib.firmware": "node"},
}
# issue 21.3: the hardware checks' fault kinds -> the subjects that fail on the faulty node (the kinds'
# defaults: GPU 0 at 00000000:19:00.0, mlx5_0, the last NVSwitch); on every other node the check passes, not
# only fails not
HARDWARE_SUBJECTS = {
    "nvlink_crc_errors": {"GPU0"},
    "hca_moved": {"mlx5_0"},
    "pcie_device_missing": {"NVSwitches"},
    "hca_firmware_odd": {"mlx5_0"},
    "gpu_vbios_odd": {"GPU0 00000000:19:00.0"},
    "gpu_fabric_degraded": {"GPU0 00000000:19:00.0"},
}
# fault kinds only a probe sees: (their parameters, `probe --probes`, the probe ids they fail on the node)
PROBE_FAULTS = {
    "nccl_busbw_low": ({"factor": "0.5"}, "nccl", ("probe.nccl_allreduce",)),
    "ib_port_rate_degraded": ({}, "ib_write_bw", ("probe.ib_write_bw_loopback",)),
    "gpu_pcie_degraded": ({}, "nvbandwidth", ("probe.nvbandwidth_h2d", "probe.nvbandwidth_d2h")),
}


def validate(lab, *args: str, timeout: float = 300, inventory: str = "lab") -> tuple[int, dict, float]:
    env = dict(os.environ, CLUSTERCERT_HOME=str(lab.dir.parent / "validate-test-state"))
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "clustercert", "validate", "-i", inventory, "--format", "json", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    elapsed = time.monotonic() - t0
    assert p.returncode in (0, 1), p.stderr
    return p.returncode, json.loads(p.stdout), elapsed


def probe(lab, *args: str, timeout: float = 600) -> tuple[int, dict]:
    env = dict(os.environ, CLUSTERCERT_HOME=str(lab.dir.parent / "validate-test-state"))
    p = subprocess.run([sys.executable, "-m", "clustercert", "probe", "-i", "lab", "--probe-seconds", "2",
                        "--probe-timeout", "20", "--format", "json", *args],
                       capture_output=True, text=True, timeout=timeout, env=env)
    assert p.returncode in (0, 1), p.stderr[-3000:]
    return p.returncode, json.loads(p.stdout)


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


def test_hanging_nvidia_smi_is_a_timed_error_not_a_pass(bootstrapped_lab, tmp_path):
    lab = bootstrapped_lab
    target = lab.nodes[0]
    # the inventory's command timeout (clustercert_command_timeout_s, default 30 s), short here: CI time
    timeout = 8
    inv_dir = tmp_path / "inventory"
    shutil.copytree(lab.inventory.parent, inv_dir)
    with open(inv_dir / "group_vars" / "all.yml", "a") as f:
        f.write(f"clustercert_command_timeout_s: {timeout}\n")
    lab.manager.fault(target, "probe_hang", {"tool": "nvidia-smi"})
    try:
        _rc, doc, elapsed = validate(lab, "--checks", "gpu", inventory=str(inv_dir / lab.inventory.name))
    finally:
        lab.manager.heal(target, "probe_hang")
    assert elapsed < timeout + 5 + 10, elapsed  # the run ends within the timeout (+ start-up)
    gpu = [f for f in doc["nodes"][target]["findings"] if f["check"] == "gpu.count"]
    assert gpu and gpu[0]["status"] == "error" and f"timed out after {timeout} s" in gpu[0]["observed"]
    assert not [
        f for f in doc["nodes"][target]["findings"] if f["check"] == "gpu.count" and f["status"] == "pass"
    ]
    # the other nodes answered within it: their GPUs pass
    assert all(
        f["status"] == "pass"
        for n in lab.nodes[1:]
        for f in doc["nodes"][n]["findings"]
        if f["check"] == "gpu.count"
    )


@pytest.mark.proves("unreachable", fault="node_down", status="unreachable")
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
        lab.ssh(target, "chronyc waitsync 20 0.1 0 1; for i in $(seq 30); do test -d /sys/class/net/bond0/"
                        "bonding && break; sleep 1; done", check=False, timeout=90)
    assert rc == 1
    assert doc["nodes"][target]["verdict"] == "unreachable"
    for other in lab.nodes:
        if other != target:
            assert doc["nodes"][other]["verdict"] == "pass", failing(doc, other)


def test_plain_pytest_validators_against_the_lab(bootstrapped_lab):
    lab = bootstrapped_lab
    hosts = ",".join(f"ssh://{n}" for n in lab.nodes[:2])
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "validators/",
            f"--hosts={hosts}",
            f"--ssh-config={lab.ssh_config}",
            f"--ansible-inventory={lab.inventory}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stdout[-3000:]
    assert " passed" in p.stdout and " failed" not in p.stdout


# Hardware faults only (healed exactly): before the configuration faults below.
@pytest.mark.parametrize("kind", sorted(PROBE_FAULTS))
def test_probe_fault_is_caught_on_its_node_only(bootstrapped_lab, kind):
    lab = bootstrapped_lab
    target = lab.nodes[1]
    params, probes, checks = PROBE_FAULTS[kind]
    lab.manager.fault(target, kind, params)
    try:
        _rc, doc = probe(lab, "--probes", probes)
    finally:
        lab.manager.heal(target, kind)
    for check in checks:
        hits = [f for f in doc["nodes"][target]["findings"] if f["check"] == check and f["status"] == "fail"]
        assert hits, (kind, check, failing(doc, target))
        for other in lab.nodes:
            if other != target:
                assert not [
                    f
                    for f in doc["nodes"][other]["findings"]
                    if f["check"] == check and f["status"] == "fail"
                ], (other, failing(doc, other))


# Last in the module: healing a configuration fault is what an admin would do by hand (it can leave
# e.g. a package unheld); the tests above need an untouched bootstrapped lab.
@pytest.mark.parametrize("kind", VALIDATOR_FAULTS)
def test_fault_is_caught_on_its_node_only(bootstrapped_lab, kind):
    lab = bootstrapped_lab
    target = lab.nodes[1]
    check = FAULTS[kind].check
    lab.manager.fault(target, kind, {})
    try:
        # the checks the fault concerns, on every node (each validate of every check costs about 5 s of CI
        # here, most of it the simulated tools starting; the whole set runs in
        # test_healthy_bootstrapped_lab_passes_everything)
        _rc, doc, _ = validate(lab, "--checks", ",".join([check, *ALSO_FAILS.get(kind, {})]))
    finally:
        lab.manager.heal(target, kind)
    assert {f["check"] for n in doc["nodes"].values() for f in n["findings"]} <= {
        check,
        *ALSO_FAILS.get(kind, {}),
    }
    hits = [f for f in doc["nodes"][target]["findings"] if f["check"] == check and f["status"] == "fail"]
    assert hits, (kind, check, failing(doc, target))
    params = FAULTS[kind].params
    if "gpu" in params:
        assert all(f["subject"].startswith("GPU") or f["subject"] == "node" for f in hits), hits
    if "hca" in params:
        assert any(f["subject"].startswith("mlx5_") for f in hits), hits
    for also, subject in ALSO_FAILS.get(kind, {}).items():
        more = [f for f in doc["nodes"][target]["findings"] if f["check"] == also and f["status"] == "fail"]
        assert more and {f["subject"] for f in more} == {subject}, (kind, also, failing(doc, target))
    if kind in HARDWARE_SUBJECTS:
        assert {f["subject"] for f in hits} == HARDWARE_SUBJECTS[kind], (kind, hits)
    for other in lab.nodes:
        if other != target:
            assert not [f for f in doc["nodes"][other]["findings"] if f["status"] == "fail"], (
                other,
                failing(doc, other),
            )
            # the healthy nodes pass it: an error, a skip or no finding is no pass
            if kind in HARDWARE_SUBJECTS:
                mine = [f for f in doc["nodes"][other]["findings"] if f["check"] == check]
                assert mine and all(f["status"] == "pass" for f in mine), (kind, other, mine)
