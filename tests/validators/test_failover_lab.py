"""`clustercert validate --disruptive` on a bootstrapped lab (root): the bond failover test.

Every node's active slave goes down in turn, the other slave takes over within miimon x 3 while the
next node's bond address still answers over the bond, the primary comes back; nothing is left down.
Without --disruptive nothing is disturbed and no ib.bond_failover finding appears. A node whose backup
slave is down fails the test (and is not disturbed); the others still pass, pinging another peer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

pytestmark = [pytest.mark.lab, pytest.mark.slow]

CHECK = "ib.bond_failover"
MIIMON_MS = 100  # profile lab


def validate(lab, *args: str, timeout: float = 300) -> tuple[int, dict]:
    env = dict(os.environ, CLUSTERCERT_HOME=str(lab.dir.parent / "validate-test-state"))
    p = subprocess.run(
        [sys.executable, "-m", "clustercert", "validate", "-i", "lab", "--format", "json", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert p.returncode in (0, 1), p.stderr
    return p.returncode, json.loads(p.stdout)


def findings(doc: dict, node: str, check: str) -> list[dict]:
    return [f for f in doc["nodes"][node]["findings"] if f["check"] == check]


def bond_state(lab, node: str) -> str:
    return lab.ssh(node, "cat /sys/class/net/bond0/bonding/active_slave /sys/class/net/ib0/operstate "
                         "/sys/class/net/ib1/operstate").stdout.split()


def wait_primary_active(lab, node: str, timeout: float = 10) -> list[str]:
    deadline = time.monotonic() + timeout
    state = bond_state(lab, node)
    while state != ["ib0", "up", "up"] and time.monotonic() < deadline:
        time.sleep(0.3)
        state = bond_state(lab, node)
    return state


def bond_ip(lab, node: str) -> str:
    return f"10.253.0.{10 + lab.nodes.index(node) + 1}"


def test_without_disruptive_nothing_is_disturbed(bootstrapped_lab):
    lab = bootstrapped_lab
    rc, doc = validate(lab, "--checks", "bond")
    assert rc == 0, {n: findings(doc, n, "ib.bond") for n in lab.nodes}
    for name in lab.nodes:
        assert not findings(doc, name, CHECK)
        assert [f["status"] for f in findings(doc, name, "ib.bond")] == ["pass"]


def test_every_node_fails_over_and_comes_back(bootstrapped_lab):
    lab = bootstrapped_lab
    # the bond's address is on bond0 (ib_redundancy role) and reachable from another node over the bond
    assert f"{bond_ip(lab, lab.nodes[1])}/24" in lab.ssh(lab.nodes[1], "ip -4 -o addr show dev bond0").stdout
    lab.ssh(lab.nodes[0], f"ping -n -c 2 -W 1 -I bond0 {bond_ip(lab, lab.nodes[1])}")
    t0 = time.monotonic()
    rc, doc = validate(lab, "--checks", "bond", "--disruptive")
    elapsed = time.monotonic() - t0
    problems = {n: [f for f in doc["nodes"][n]["findings"] if f["status"] != "pass"] for n in lab.nodes}
    assert rc == 0, problems
    for i, name in enumerate(lab.nodes):
        fs = {f["subject"]: f for f in findings(doc, name, CHECK)}
        peer = lab.nodes[(i + 1) % len(lab.nodes)]
        assert set(fs) == {
            "bond0 failover",
            f"bond0 peer {bond_ip(lab, peer)} ({peer})",
            "bond0 back to ib0",
        }, fs
        assert all(f["status"] == "pass" for f in fs.values()), fs
        fo = fs["bond0 failover"]
        assert fo["observed"].startswith("ib0 -> ib1 in ") and fo["unit"] == "ms"
        assert 0 <= fo["value"] <= 3 * MIIMON_MS, fo
        assert fs[f"bond0 peer {bond_ip(lab, peer)} ({peer})"]["observed"].endswith("/3 replies")
    assert elapsed < 90, elapsed
    # afterwards: every slave up, the primary active again, ib.bond passes
    for name in lab.nodes:
        assert bond_state(lab, name) == ["ib0", "up", "up"], name
    rc, doc = validate(lab, "--checks", "bond")
    assert rc == 0 and all([f["status"] for f in findings(doc, n, "ib.bond")] == ["pass"] for n in lab.nodes)


@pytest.mark.proves("ib.bond_failover", fault="bond_slave_down", params={"slave": "ib1"})
def test_backup_slave_down_fails_that_node_only(bootstrapped_lab):
    lab = bootstrapped_lab
    target, first, third = lab.nodes[1], lab.nodes[0], lab.nodes[2]
    lab.manager.fault(target, "bond_slave_down", {"slave": "ib1"})
    try:
        assert bond_state(lab, target) == ["ib0", "up", "down"]
        rc, doc = validate(lab, "--checks", "bond", "--disruptive")
        # the bond still forwards on ib0 ...
        lab.ssh(first, f"ping -n -c 2 -W 1 -I bond0 {bond_ip(lab, target)}")
        # ... and stops once no slave is up (the emulated bond's data path follows its slaves)
        lab.manager.fault(target, "bond_slave_down", {"slave": "ib0"})
        assert (
            lab.ssh(first, f"ping -n -c 2 -W 1 -I bond0 {bond_ip(lab, target)}", check=False).returncode != 0
        )
    finally:
        lab.manager.heal(target, "bond_slave_down")
    assert rc == 1
    (f,) = findings(doc, target, CHECK)
    assert (
        f["status"] == "fail"
        and f["observed"] == "backup slave ib1 is down: failover impossible (ib0 was not taken down)"
    )
    for name in lab.nodes:
        if name != target:
            fs = findings(doc, name, CHECK)
            assert fs and all(x["status"] == "pass" for x in fs), (name, fs)
    # the node before the faulty one pings the next healthy node instead
    assert {x["subject"] for x in findings(doc, first, CHECK)} >= {
        f"bond0 peer {bond_ip(lab, third)} ({third})"
    }
    # healed: the bond is whole again
    assert wait_primary_active(lab, target) == ["ib0", "up", "up"]
    lab.ssh(first, f"ping -n -c 2 -W 1 -I bond0 {bond_ip(lab, target)}")
    rc, doc = validate(lab, "--checks", "bond")
    assert rc == 0 and all([x["status"] for x in findings(doc, n, "ib.bond")] == ["pass"] for n in lab.nodes)
