"""Acceptance on the lab (root): `clustercert bootstrap -i lab` on 4 bare nodes, idempotence, check
mode, tamper detection and repair, daemon.json merge (the rolling reboot policy:
test_rolling_reboot_lab.py, the suite's last lab module)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from consumer import FQCN, build_and_install, site_env, write_site
from labfixtures import bootstrap
from provisioning_helpers import BIN, ROLES

pytestmark = [pytest.mark.lab, pytest.mark.slow]

NCCL_TASK = "Tell NCCL which HCAs are compute rails"
MEMLOCK_TASK = "Raise memlock and nofile for every login (limits.d)"
NCCL_INSTALL_TASK = "Install NCCL, perftest, nccl-tests, nvbandwidth and DCGM in one transaction"
# the holds are the install task's (the collection's packages action): a hold dropped on its own is its one
# change
NCCL_HOLD_TASK = NCCL_INSTALL_TASK





def changed_tasks(stdout: str) -> list[str]:
    """The tasks ansible-playbook's default output reports changed (its TASK [...] headers)."""
    task, out = "", []
    for line in stdout.splitlines():
        if line.startswith("TASK ["):
            task = line[6:line.rindex("]")]
        elif line.startswith("changed: [") and task not in out:
            out.append(task)
    return out


def assert_all_ok(doc: dict, nodes: list[str]) -> None:
    assert sorted(doc["hosts"]) == nodes
    bad = {h: s for h, s in doc["hosts"].items() if s["failed"] or s["unreachable"]}
    assert not bad, bad


@pytest.fixture(scope="module")
def bootstrapped(lab, lab_bootstrap_marker):
    # bare nodes: earlier test modules of the session may have provisioned this lab, so start afresh
    lab.manager.down()
    lab.up()
    rc, first = bootstrap(lab)
    assert rc == 0, first
    assert_all_ok(first, lab.nodes)
    assert all(s["changed"] > 0 for s in first["hosts"].values())  # bare nodes: everything was installed
    lab_bootstrap_marker(lab)  # the modules after this one start from these bootstrapped nodes
    return first


def test_second_run_changes_nothing(lab, bootstrapped):
    rc, second = bootstrap(lab)
    assert rc == 0
    assert_all_ok(second, lab.nodes)
    assert {h: s["changed"] for h, s in second["hosts"].items()} == dict.fromkeys(lab.nodes, 0), second[
        "changes"
    ]


def test_every_role_by_fqcn_from_the_installed_collection(lab, bootstrapped, tmp_path):
    """Issue 34.1: a site's own playbook applies every role of the built and installed collection by its FQCN
    (tests/provisioning/consumer.py: nothing of clustercert's but the collection and its profile mapping) to a
    bootstrapped lab node, for real: every role runs (the package-installing roles use the collection's
    filters and plugins by FQCN), nothing fails and nothing but node_check (not part of bootstrap) changes.
    One run, not a check-mode run before it (CI time: each is about 40 s): what FQCN use can break (a filter,
    lookup or task file the collection does not resolve) breaks both alike, and the roles under --check are
    test_tampering_is_reported_exactly_and_repaired's."""
    node = lab.nodes[-1]  # no other test of this module changes it
    collections = build_and_install(tmp_path)
    site = tmp_path / "site"
    playbook = write_site(site, collections)
    env = site_env(site, collections)
    runs = {}
    for mode, flags in (("real", []),):
        p = subprocess.run(
            [str(BIN / "ansible-playbook"), "-i", str(lab.inventory), "--limit", node, str(playbook), *flags],
            capture_output=True,
            text=True,
            env=env,
            cwd=str(site),
            timeout=1200,
        )
        assert p.returncode == 0, f"{mode}: " + p.stdout[-6000:] + p.stderr[-3000:]
        recap = re.search(
            rf"^{re.escape(node)}\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)",
            p.stdout,
            re.M,
        )
        assert recap and recap.group(3) == recap.group(4) == "0", p.stdout[-3000:]
        ran = set(re.findall(rf"TASK \[{re.escape(FQCN)}\.(\w+) : ", p.stdout))
        assert ran == {r.name for r in ROLES.iterdir() if r.is_dir()}, f"{mode}: {sorted(ran)}"
        assert "No filter named" not in p.stdout + p.stderr
        runs[mode] = changed_tasks(p.stdout)
    # by FQCN the roles keep the bootstrapped node as clustercert bootstrap left it: nothing to change; only
    # node_check (not part of bootstrap) installs node-check there
    for mode, changed in runs.items():
        assert all(t.startswith(f"{FQCN}.node_check : ") for t in changed), (mode, changed)


def test_node_state_after_bootstrap(lab, bootstrapped):
    out = lab.ssh(lab.nodes[0], "cat /sys/module/nvidia/version; lsmod | grep -c '^nvidia_peermem '; "
                  "cat /etc/nccl.conf; systemctl is-active nvidia-persistenced nvidia-fabricmanager; "
                  "apt-mark showhold | sort | tr '\\n' ' '").stdout
    assert out.splitlines()[0] == "570.172.08"
    assert out.splitlines()[1] == "1"
    assert "NCCL_IB_HCA==mlx5_0,mlx5_1" in out
    assert out.count("active") >= 2
    for pkg in (
        "nvidia-open",
        "nvidia-driver",
        "libnccl2",
        "libnccl-dev",
        "nvidia-container-toolkit",
        "doca-ofed",
        "nvidia-fabricmanager-570",
        "datacenter-gpu-manager",
        "perftest",
    ):
        assert f" {pkg} " in " " + out.splitlines()[-1] + " ", pkg


def test_tampering_is_reported_exactly_and_repaired(lab, bootstrapped):
    """Check mode reports the tampered node's changes and nothing on the bootstrapped nodes beside it (what a
    check-mode run of a bootstrapped lab reports: nothing); the repair puts them back; a hold dropped on its
    own is its own change."""
    node = lab.nodes[0]
    lab.ssh(
        node, "echo NCCL_DEBUG=INFO >> /etc/nccl.conf; rm /etc/security/limits.d/90-clustercert-memlock.conf"
    )
    fault = subprocess.run([sys.executable, "-m", "clustercert", "lab", "fault", node, "package_drift"],
                           capture_output=True, text=True, timeout=300)
    assert fault.returncode == 0, fault.stdout + fault.stderr
    rc, doc = bootstrap(lab, "--check", "--diff")
    assert rc == 0
    # The lab's package_drift installs libnccl2's other version the way an upgrade would (which also
    # drops its hold): one change, reported by the install task, which also puts the hold back.
    assert sorted((c["host"], c["task"]) for c in doc["changes"]) == sorted(
        [(node, NCCL_TASK), (node, MEMLOCK_TASK), (node, NCCL_INSTALL_TASK)]), doc["changes"]
    assert {c["role"] for c in doc["changes"]} == {"ib_redundancy", "tuning", "nccl_tools"}
    assert {h: s["changed"] for h, s in doc["hosts"].items() if h != node} == {
        n: 0 for n in lab.nodes if n != node
    }
    nccl = next(c for c in doc["changes"] if c["task"] == NCCL_TASK)
    assert "NCCL_DEBUG=INFO" in json.dumps(nccl["diff"])
    assert "NCCL_DEBUG=INFO" in lab.ssh(node, "cat /etc/nccl.conf").stdout  # check mode changed nothing

    rc, repair = bootstrap(lab, "--limit", node)  # the check above found nothing on the other nodes
    assert rc == 0
    assert {(c["host"], c["task"]) for c in repair["changes"]} >= {
        (node, NCCL_TASK), (node, MEMLOCK_TASK), (node, NCCL_INSTALL_TASK)}
    state = lab.ssh(
        node,
        "cat /etc/nccl.conf; test -f /etc/security/limits.d/90-clustercert-memlock.conf && echo limits; "
        "apt-mark showhold | grep -qx libnccl2 && echo held; dpkg-query -W -f='${Version}' libnccl2",
    ).stdout
    assert "NCCL_DEBUG" not in state and "limits" in state and "held" in state
    assert state.endswith("2.26.2-1+cuda12.8")
    # from here on, this node only. A hold dropped on its own (apt-mark unhold) is its own change, reported by
    # the hold task -- and the only one: the check run also shows the repair above left nothing behind.
    lab.ssh(node, "apt-mark unhold libnccl-dev")
    rc, doc = bootstrap(lab, "--check", "--diff", "--limit", node)
    assert rc == 0 and [(c["host"], c["task"]) for c in doc["changes"]] == [(node, NCCL_HOLD_TASK)], doc[
        "changes"
    ]
    rc, _ = bootstrap(lab, "--tags", "nccl_tools", "--limit", node)
    assert rc == 0 and "libnccl-dev" in lab.ssh(node, "apt-mark showhold").stdout.split()


def test_daemon_json_keeps_foreign_keys(lab, bootstrapped):
    node = lab.nodes[1]
    seeded = {"log-driver": "json-file", "log-opts": {"max-size": "10m"}, "data-root": "/srv/docker",
              "runtimes": {"crun": {"path": "/usr/bin/crun"}}}
    lab.ssh(node, f"mkdir -p /etc/docker && echo '{json.dumps(seeded)}' > /etc/docker/daemon.json")
    args = ("--limit", node, "--tags", "container_toolkit", "-e", "container_toolkit_runtime=docker")
    rc, doc = bootstrap(lab, *args)
    assert rc == 0, doc
    merged = json.loads(lab.ssh(node, "cat /etc/docker/daemon.json").stdout)
    assert merged == {**seeded, "runtimes": {"crun": {"path": "/usr/bin/crun"},
                                             "nvidia": {"path": "nvidia-container-runtime", "args": []}}}
    rc, again = bootstrap(lab, *args)
    assert rc == 0 and again["hosts"][node]["changed"] == 0
