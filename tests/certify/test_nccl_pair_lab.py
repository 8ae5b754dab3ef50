"""NCCL all_reduce across two nodes on the bootstrapped lab (4 nodes; `clustercert bootstrap` ran the
cluster_ssh role and installed OpenMPI): launched with the distribution's mpirun from node a of each
pair, judged against the profile's nccl_allreduce_pair; a slowed link on one end fails the pair; a
hung rank is a timed error that leaves no process on either node."""

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

from clustercert.record.certificate import expanded  # the file keeps findings and links as tables

pytestmark = [pytest.mark.lab, pytest.mark.slow]

LEFTOVER = "[a]ll_reduce_perf|[o]rted|[m]pirun"


def leftovers(lab, nodes) -> dict[str, str]:
    out = {}
    for n in nodes:
        r = lab.ssh(n, f"ps -eo pid,args | grep -E '{LEFTOVER}' || true", check=False)
        if r.stdout.strip():
            out[n] = r.stdout.strip()
    return out


def _pair(lab, tmp_path, a: str, b: str, timeout: float = 20):
    from clustercert.model.inventory import load_inventory
    from clustercert.probes import run as certify
    from clustercert.probes.plan import ProbeSettings

    inv = load_inventory(str(lab.inventory))  # `-i lab` (the command layer resolves the name)
    cfg = ProbeSettings(2, timeout)
    th = cfg.thresholds(inv.hosts[a].profile)
    cp = Path(tempfile.mkdtemp(prefix="cc-", dir="/tmp"))  # short: ssh's control socket path has a length limit
    try:
        t0 = time.monotonic()
        m = certify.nccl_pair(inv.hosts[a], inv.hosts[b], 1, cfg, cp, th["nccl_allreduce_pair"], set())
        return m, time.monotonic() - t0, cfg
    finally:
        shutil.rmtree(cp, ignore_errors=True)


def test_certify_measures_nccl_across_each_pair(bootstrapped_lab, tmp_path):
    lab = bootstrapped_lab
    out = tmp_path / "out"
    env = dict(os.environ, CLUSTERCERT_HOME=str(lab.dir.parent / "certify-test-state"))
    p = subprocess.run([sys.executable, "-m", "clustercert", "certify", "-i", "lab", "--out", str(out),
                        "--probe-seconds", "2", "--probe-timeout", "20"], capture_output=True, text=True, timeout=900,
                       env=env)
    assert p.returncode in (0, 1), p.stderr[-3000:]
    cert = expanded(json.loads((out / "certificate.json").read_text()))
    floor = cert["thresholds"]["nccl_allreduce_pair"]["floor"]
    r1 = {(lk["a"], lk["b"]) for lk in cert["links"] if lk["round"] == 1}
    nccl = {(lk["a"], lk["b"]): lk for lk in cert["links"] if lk["probe"] == "nccl_allreduce"}
    assert r1 and set(nccl) == r1, cert["links"]
    for lk in nccl.values():
        assert lk["status"] == "pass" and lk["value"] >= floor and lk["unit"] == "gbyte_per_s", lk
        assert lk["subject"].endswith(", 16 GPUs"), lk
    assert not leftovers(lab, lab.nodes)


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


def test_cluster_ssh_nodes_reach_each_other_with_host_keys_checked_and_a_limited_check_changes_nothing(bootstrapped_lab):
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
    p = subprocess.run([sys.executable, "-m", "clustercert", "bootstrap", "-i", "lab", "--check", "--diff", "--limit", a,
                        "--tags", "cluster_ssh,nccl_tools", "--format", "json"], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, CLUSTERCERT_HOME=str(lab.dir.parent / "bootstrap-fixture-state")))
    doc = json.loads(p.stdout)
    assert p.returncode == 0 and doc["changes"] == [], doc
