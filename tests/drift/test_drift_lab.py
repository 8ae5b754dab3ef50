"""Nightly drift on a certified lab (root): four kinds of tampering, classified; --fix; SIGKILL safety."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from labfixtures import nccl_leftovers

from clustercert.record.certificate import expanded  # the file keeps findings and links as tables

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def cc(lab, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, CLUSTERCERT_HOME=str(lab.dir.parent / "drift-test-state"))
    return subprocess.run([sys.executable, "-m", "clustercert", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


BASELINE: dict = {}  # the certified fixture's certificate file


@pytest.fixture(scope="module")
def certified(bootstrapped_lab, tmp_path_factory):
    lab = bootstrapped_lab
    out = tmp_path_factory.mktemp("baseline")
    p = cc(lab, "certify", "-i", "lab", "--out", str(out), "--probe-seconds", "2", "--probe-timeout", "20")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    BASELINE["certificate"] = out / "certificate.json"
    BASELINE["stdout"] = p.stdout
    return lab


def drift(lab, *args: str) -> tuple[int, dict]:
    p = cc(lab, "drift", "-i", "lab", "--format", "json", "--probes", "quick", *args)
    assert p.returncode in (0, 1), p.stderr[-3000:]
    return p.returncode, json.loads(p.stdout)


def test_certify_recorded_each_nodes_hardware(certified):
    """Issue 21.5: certify recorded what it certified on every node (GPU serials and UUIDs, HCA GUIDs and
    firmware, board and chassis serials, the NVSwitch count), every GPU told apart: what drift compares with
    (a swapped GPU: test_four_tamperings_classified_then_fixed)."""
    lab = certified
    cert = json.loads(BASELINE["certificate"].read_text())
    serials = set()
    for name in lab.nodes[:4]:
        hw = cert["nodes"][name]["hardware"]
        assert len(hw["gpus"]) == 8 and all(g["serial"] and g["uuid"].startswith("GPU-") and g["vbios"]
                                            for g in hw["gpus"]), hw
        serials |= {g["serial"] for g in hw["gpus"]}
        assert [h["name"] for h in hw["hcas"]] == ["mlx5_0", "mlx5_1"] and all(h["node_guid"] and h["fw_ver"]
                                                                              for h in hw["hcas"]), hw
        assert hw["board"]["system_serial"] and hw["board"]["chassis_serial"] and hw["nvswitch_count"] == 4, (
            hw
        )
    assert len(serials) == 32  # every GPU of the four nodes is told apart


def test_the_baseline_certify_measured_nccl_across_each_pair_and_the_cluster(certified):
    """NCCL all_reduce across two nodes (the distribution's mpirun from node a of each pair, judged against
    the profile's nccl_allreduce_pair) on each round-1 pair of the baseline certify, then across all 4 nodes
    (probe.nccl_cluster), each shown in the reports; no launcher process left. The baseline certify of this
    module is that run (tests/certify/test_nccl_pair_lab.py's own certify did the same: CI time)."""
    lab = certified
    out, stdout = BASELINE["certificate"].parent, BASELINE["stdout"]
    cert = expanded(json.loads((out / "certificate.json").read_text()))
    floor = cert["thresholds"]["nccl_allreduce_pair"]["floor"]
    r1 = {(lk["a"], lk["b"]) for lk in cert["links"] if lk["round"] == 1}
    nccl = {(lk["a"], lk["b"]): lk for lk in cert["links"] if lk["probe"] == "nccl_allreduce"}
    assert r1 and set(nccl) == r1, cert["links"]
    for lk in nccl.values():
        assert lk["status"] == "pass" and lk["value"] >= floor and lk["unit"] == "gbyte_per_s", lk
        assert lk["subject"].endswith(", 16 GPUs"), lk
    # issue 33.2: after the pairs, one all_reduce across the 4 nodes, and one per fabric (the lab's two rails
    # sit on two fabrics), each a cluster finding that passes; the reports show them
    found = {f["subject"]: f for f in cert["cluster_findings"]}
    assert sorted(found) == [f"4 nodes x 8 GPUs, {g}" for g in ("all rails", "fabric 0", "fabric 1")], found
    for f in found.values():
        assert (
            f["check"] == "probe.nccl_cluster" and f["status"] == "pass" and f["nodes"] == list(lab.nodes)
        ), f
        assert "across 4 nodes (32 ranks): scaling efficiency" in f["observed"], f
    assert (
        "## Cluster" in (out / "summary.md").read_text()
        and 'testsuite name="cluster"' in (out / "junit.xml").read_text()
    )
    assert 'id="cluster"' in (out / "report.html").read_text()
    assert "cluster probe.nccl_cluster 4 nodes" in stdout
    assert not nccl_leftovers(lab, lab.nodes)


@pytest.mark.proves("hardware.gpu", fault="gpu_swapped", status="hardware")
def test_four_tamperings_classified_then_fixed(certified, tmp_path):
    """Four tamperings on four nodes, each of its kind (configuration twice, state, performance); --fix
    repairs the configuration only. Then, on a repaired node, a swapped GPU (issue 21.5: GPU 3 gets another
    serial and UUID, every check still passes) is one `hardware` item, on that node only, naming the GPU,
    beside what
    --fix left (the state item; that run measures no probe: the performance item is the first run's). One lab
    run for both: each drift run costs 30-40 s of CI (its check-mode playbook about 30 s, the probes 10 s)."""
    lab = certified
    cert = json.loads(BASELINE["certificate"].read_text())
    n1, n2, n3, n4 = lab.nodes[:4]
    lab.ssh(n1, "sed -i 's/^NCCL_IB_HCA=.*/NCCL_IB_HCA=mlx5_0/' /etc/nccl.conf")
    lab.manager.fault(n2, "package_drift", {})
    lab.manager.fault(n3, "gpu_row_remap_pending", {})
    lab.manager.fault(n4, "link_slow", {"fabric": "0", "factor": "0.3"})
    try:
        prom = tmp_path / "clustercert.prom"
        rc, doc = drift(lab, "--prom", str(prom))
        assert rc == 1
        kinds = {}
        for item in doc["items"]:
            kinds.setdefault(item["node"], set()).add(item["kind"])
        assert kinds == {n1: {"configuration"}, n2: {"configuration"}, n3: {"state"}, n4: {"performance"}}, (
            doc["items"]
        )
        assert any(i["node"] == n3 and i.get("check") == "gpu.row_remap" for i in doc["items"])
        assert any(i["node"] == n1 and "nccl" in (i.get("task") or "").lower() for i in doc["items"])
        from prometheus_client.parser import text_string_to_metric_families

        fams = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
        per = {(s.labels["node"], s.labels["kind"]): s.value for s in fams["clustercert_drift_items"].samples}
        assert per[(n3, "state")] >= 1 and per[(n1, "state")] == 0
        # promtool checks it at the end (a skip where it is missing skips no more)
        exposition = prom.read_text()

        # what --fix repairs is configuration: the two nodes that have it, no probe needed
        rc, doc = drift(lab, "--fix", "--probes", "none", "--limit", f"{n1},{n2}")
        assert doc["fixed"]["nodes"] == sorted([n1, n2])
        lab.manager.fault(n1, "gpu_swapped", {"gpu": "3"})
        rc, doc = drift(lab, "--probes", "none")  # a GPU's serial is the validators' reading: no probe needed
        assert rc == 1
        assert {i["node"] for i in doc["items"]} == {n1, n3}, doc["items"]
        assert {(i["node"], i["kind"]) for i in doc["items"] if i["node"] != n1} == {(n3, "state")}
    finally:
        lab.manager.heal(n1, "gpu_swapped")
        lab.manager.heal(n3)
        lab.manager.heal(n4)
        lab.manager.heal(n2)
    # the swapped GPU is a healthy part: its hardware item is all that drifted on the repaired node
    (item,) = [i for i in doc["items"] if i["node"] == n1]
    old = next(g for g in cert["nodes"][n1]["hardware"]["gpus"] if g["index"] == 3)
    assert item["kind"] == "hardware" and item["check"] == "hardware.gpu", item
    assert item["detail"] == f"GPU3 {old['bus_id']}: swapped", item
    assert (
        old["serial"] in item["before"]
        and old["uuid"] in item["before"]
        and old["serial"] not in item["after"]
    )
    from prom_lint import promtool_check

    promtool_check(exposition)


def _playbooks_running(lab) -> list[str]:
    out = subprocess.run(["pgrep", "-af", "ansible-playbook"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if str(lab.inventory) in line]


def test_sigkill_leaves_store_usable(certified):
    lab = certified
    env = dict(os.environ, CLUSTERCERT_HOME=str(lab.dir.parent / "drift-test-state"))
    p = subprocess.Popen([sys.executable, "-m", "clustercert", "drift", "-i", "lab", "--format", "json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    time.sleep(8)  # mid-run: the check-mode playbook or the validators
    p.send_signal(signal.SIGKILL)
    p.wait()
    # the check-mode playbook it had started does not run on without it
    deadline = time.monotonic() + 15
    while _playbooks_running(lab) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _playbooks_running(lab) == []
    # the next run records into the same store (on one node, without probes: what it finds adds nothing here)
    rc, _doc = drift(lab, "--probes", "none", "--limit", lab.nodes[0])
    assert rc in (0, 1)
    db = sqlite3.connect(lab.dir.parent / "drift-test-state" / "store.sqlite")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_second_run_is_refused_while_one_holds_the_lock(certified):
    lab = certified
    env = dict(os.environ, CLUSTERCERT_HOME=str(lab.dir.parent / "drift-test-state"))
    first = subprocess.Popen(
        [sys.executable, "-m", "clustercert", "drift", "-i", "lab"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        time.sleep(3)
        second = cc(lab, "drift", "-i", "lab")
        assert (
            second.returncode == 1
            and "another run holds the lock" in second.stderr
            and f"pid {first.pid}" in second.stderr
        )
    finally:
        first.kill()
        first.wait()
