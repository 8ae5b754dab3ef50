"""NCCL all_reduce across two nodes on the bootstrapped lab (4 nodes; `clustercert bootstrap` ran the
cluster_ssh role and installed OpenMPI): launched with the distribution's mpirun from node a of each
pair, judged against the profile's nccl_allreduce_pair (a healthy certify's pairs and cluster run:
tests/drift/test_drift_lab.py's baseline); a slowed link on one end fails the pair; a
hung rank is a timed error that leaves no process on either node; a launch that put every rank on one
host is an error; and across all 4 nodes (probe.nccl_cluster) it scales, unless a slow spine stops it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from labfixtures import nccl_leftovers as leftovers

pytestmark = [pytest.mark.lab, pytest.mark.slow]

def _pair(lab, tmp_path, a: str, b: str, timeout: float = 20):
    from clustercert.collect.ssh import SshBackend
    from clustercert.model.inventory import load_inventory
    from clustercert.probes import run as certify
    from clustercert.probes.plan import ProbeSettings

    inv = load_inventory(str(lab.inventory))  # `-i lab` (the command layer resolves the name)
    cfg = ProbeSettings(2, timeout)
    th = cfg.thresholds(inv.hosts[a].profile)
    # short: ssh's control socket path has a length limit
    cp = Path(tempfile.mkdtemp(prefix="cc-", dir="/tmp"))
    try:
        t0 = time.monotonic()
        m = certify.nccl_pair(inv.hosts[a], inv.hosts[b], 1, cfg, cp, th["nccl_allreduce_pair"], set(),
                              io=SshBackend())
        return m, time.monotonic() - t0, cfg
    finally:
        shutil.rmtree(cp, ignore_errors=True)


@pytest.mark.proves("probe.nccl_allreduce", fault="link_slow", params={"fabric": 0, "factor": 0.3})
def test_a_slow_link_on_either_end_fails_the_pair(bootstrapped_lab, tmp_path):
    lab = bootstrapped_lab
    a, b = lab.nodes[0], lab.nodes[1]
    lab.manager.fault(b, "link_slow", {"fabric": "0", "factor": "0.3"})
    try:
        m, _s, _cfg = _pair(lab, tmp_path, a, b)
    finally:
        lab.manager.heal(b)
    assert m.status == "fail" and m.value < 40, (m.observed, m.evidence)
    assert not leftovers(lab, [a, b])


@pytest.mark.proves(
    "probe.nccl_allreduce", fault="probe_hang", params={"tool": "all_reduce_perf"}, status="error"
)
def test_a_hung_rank_is_a_timed_error_and_leaves_no_process(bootstrapped_lab, tmp_path):
    lab = bootstrapped_lab
    a, b = lab.nodes[2], lab.nodes[3]
    lab.manager.fault(b, "probe_hang", {"tool": "all_reduce_perf"})
    try:
        m, seconds, cfg = _pair(lab, tmp_path, a, b, timeout=10)
        left = leftovers(lab, [a, b])
    finally:
        lab.manager.heal(b)
    assert m.status == "error" and "timed out" in m.observed, m.observed
    assert seconds <= cfg.limit + 5, seconds
    assert not left, left


def test_cluster_ssh_nodes_reach_each_other_with_host_keys_checked_and_a_limited_check_changes_nothing(
    bootstrapped_lab,
):
    from clustercert.model.inventory import load_inventory

    lab = bootstrapped_lab
    inv = load_inventory(str(lab.inventory))  # `-i lab` (the command layer resolves the name)
    a, b = lab.nodes[0], lab.nodes[-1]
    addr = inv.hosts[b].connection.get("ansible_host") or b
    r = lab.ssh(a, f"ssh -o BatchMode=yes -o StrictHostKeyChecking=yes {addr} hostname", check=False)
    assert r.returncode == 0 and r.stdout.strip() == b, r.stdout + r.stderr
    known = lab.ssh(a, "cat /etc/ssh/ssh_known_hosts").stdout
    assert all(n in known for n in lab.nodes), known
    # a run limited to one node keeps the others' host keys (gathered read-only): nothing to change
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "clustercert",
            "bootstrap",
            "-i",
            "lab",
            "--check",
            "--diff",
            "--limit",
            a,
            "--tags",
            "cluster_ssh,nccl_tools",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, CLUSTERCERT_HOME=str(lab.dir.parent / "bootstrap-fixture-state")),
    )
    doc = json.loads(p.stdout)
    assert p.returncode == 0 and doc["changes"] == [], doc


@pytest.mark.proves("probe.nccl_allreduce", fault="nccl_one_host", status="error")
def test_nccl_one_host_makes_the_pairs_of_its_node_an_error_never_a_pass(bootstrapped_lab, tmp_path):
    """issue 33.1: a launch that puts every rank on the first host prints rank lines of one host, and its
    figure is that host's NVLink one (far above the pair floor): the pair run is an error naming where the
    ranks ran, with the faulty node as either end; a pair without it still passes."""
    lab = bootstrapped_lab
    a, b, c = lab.nodes[0], lab.nodes[1], lab.nodes[2]
    lab.manager.fault(b, "nccl_one_host", {})
    try:
        as_peer, _s, _cfg = _pair(lab, tmp_path, a, b)
        as_root, _s, _cfg = _pair(lab, tmp_path, b, c)
        clear, _s, _cfg = _pair(lab, tmp_path, a, c)
    finally:
        lab.manager.heal(b)
    assert as_peer.probe == "nccl_allreduce" and as_peer.status == "error" and as_peer.value is None, (
        as_peer.observed
    )
    assert f"16 ranks on {a}, none on {b}" in as_peer.observed, as_peer.observed
    assert as_root.status == "error" and f"16 ranks on {b}, none on {c}" in as_root.observed, as_root.observed
    assert clear.status == "pass", clear.observed
    assert not leftovers(lab, [a, b, c])


def _cluster(lab, nodes: list[str], median: float, fabric: int | None = None):
    from clustercert.collect.ssh import SshBackend
    from clustercert.model.inventory import load_inventory
    from clustercert.probes import cluster
    from clustercert.probes import run as certify
    from clustercert.probes.plan import ProbeSettings

    inv = load_inventory(str(lab.inventory))
    cfg = ProbeSettings(2, 20)
    prof = inv.hosts[nodes[0]].profile
    group = next(g for g in cluster.rail_groups(prof) if g.fabric == fabric)
    cp = Path(tempfile.mkdtemp(prefix="cc-", dir="/tmp"))
    try:
        return certify.nccl_cluster([inv.hosts[n] for n in nodes], group, cfg, cp,
                                    prof.thresholds["nccl_allreduce_cluster"], median, io=SshBackend())
    finally:
        shutil.rmtree(cp, ignore_errors=True)


@pytest.mark.proves("probe.nccl_cluster", fault="nccl_scale_slow")
def test_the_cluster_run_scales_and_a_slow_spine_fails_it_while_pairs_pass(bootstrapped_lab, tmp_path):
    """issue 33.2: one all_reduce across the 4 nodes (mpirun -H, 32 ranks) keeps the pair's bus bandwidth (and
    so does one fabric's, NCCL_IB_HCA==mlx5_0, against half of it); with nccl_scale_slow on one node the pairs
    still pass, the cluster run fails on its scaling efficiency."""
    lab = bootstrapped_lab
    nodes = list(lab.nodes)
    pair, _s, _cfg = _pair(lab, tmp_path, nodes[0], nodes[1])
    assert pair.status == "pass", pair.observed
    healthy = _cluster(lab, nodes, pair.value)
    fabric0 = _cluster(lab, nodes, pair.value, fabric=0)
    lab.manager.fault(nodes[2], "nccl_scale_slow", {"factor": "0.5"})
    try:
        slowed_pair, _s, _cfg = _pair(lab, tmp_path, nodes[2], nodes[3])
        slowed = _cluster(lab, nodes, pair.value)
    finally:
        lab.manager.heal(nodes[2])
    assert healthy.status == "pass" and healthy.subject == "4 nodes x 8 GPUs, all rails", healthy.observed
    assert "across 4 nodes (32 ranks): scaling efficiency " in healthy.observed, healthy.observed
    assert fabric0.status == "pass" and fabric0.fabric == 0 and fabric0.value < 0.6 * healthy.value, (
        fabric0.observed
    )
    assert "NCCL_IB_HCA==mlx5_0" in fabric0.evidence.splitlines()[0], fabric0.evidence[:300]
    assert slowed_pair.status == "pass", slowed_pair.observed
    assert slowed.finding().check == "probe.nccl_cluster" and slowed.status == "fail", slowed.observed
    assert "scaling efficiency 0.5" in slowed.observed, slowed.observed
    assert not leftovers(lab, nodes)
