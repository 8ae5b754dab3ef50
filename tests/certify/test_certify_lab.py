"""Certify on a bootstrapped lab of 8 (root): healthy -> certified, its report renders in headless
Chromium; a slow link and a missing GPU are caught and localised; a hung probe is a timed error
leaving no process; a node dying mid-run; `clustercert probe` runs the probes alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

pytestmark = [pytest.mark.lab, pytest.mark.slow]

LAB_NODES = 8


@pytest.fixture(scope="module")
def lab8(lab, lab_bootstrapper):
    lab = lab_bootstrapper(lab, LAB_NODES)
    assert len(lab.nodes) == LAB_NODES
    return lab


PROBE_TOOLS = ("ib_write_bw", "ib_write_lat", "iperf3", "all_reduce_perf", "nvbandwidth", "nvidia-smi", "dcgmi")


def certify(lab, out, *args: str, timeout: float = 900) -> tuple[int, dict, str]:
    env = dict(os.environ, CLUSTERCERT_HOME=str(lab.dir.parent / "certify-test-state"))
    p = subprocess.run([sys.executable, "-m", "clustercert", "certify", "-i", "lab", "--out", str(out),
                        "--probe-seconds", "2", "--probe-timeout", "20", *args],
                       capture_output=True, text=True, timeout=timeout, env=env)
    assert p.returncode in (0, 1), p.stderr[-3000:]
    return p.returncode, json.loads((out / "certificate.json").read_text()), p.stdout


def leftover_probes(lab) -> dict[str, str]:
    out = {}
    for n in lab.nodes:
        # simulated tools run as python3 (their command line names the tool); the [x]yz pattern keeps
        # this grep from matching itself
        pattern = "|".join(f"[{t[0]}]{t[1:]}" for t in PROBE_TOOLS)
        r = lab.ssh(n, f"ps -eo pid,args | grep -E '{pattern}' || true", check=False)
        if r.stdout.strip():
            out[n] = r.stdout.strip()
    return out


def test_healthy_lab_is_certified_and_verifiable(lab8, tmp_path):
    lab = lab8
    rc, cert, stdout = certify(lab, tmp_path)
    bad = {n: [f["check"] for f in v["findings"] if f["status"] in ("fail", "error")] for n, v in cert["nodes"].items()}
    assert rc == 0 and cert["verdict"] == "pass", (bad, [lk for lk in cert["links"] if lk["status"] != "pass"])
    assert cert["rounds"] == 1 and cert["links"]
    assert {lk["probe"] for lk in cert["links"]} == {"ib_write_bw", "ib_write_lat", "iperf3", "nccl_allreduce"}
    lat = [lk for lk in cert["links"] if lk["probe"] == "ib_write_lat"]
    assert {lk["fabric"] for lk in lat} == {0, 1} and all(lk["unit"] == "usec" and lk["value"] < 2 for lk in lat)
    for n, v in cert["nodes"].items():
        util = [f for f in v["findings"] if f["check"] == "probe.gpu_util_under_load"]
        assert sorted(f["subject"] for f in util) == [f"GPU{i}" for i in range(8)], (n, util)
        assert all(f["status"] == "pass" and f["value"] >= 70 for f in util), (n, util)
        diag = [f for f in v["findings"] if f["check"] == "probe.dcgmi_diag"]
        assert [(f["subject"], f["status"]) for f in diag] == [("dcgmi diag -r 2", "pass")], (n, diag)
    for name in ("report.html", "junit.xml", "summary.md", "signing.pub"):
        assert (tmp_path / name).is_file()
    v = subprocess.run([sys.executable, "-m", "clustercert", "verify", str(tmp_path / "certificate.json"),
                        "--key", str(tmp_path / "signing.pub")], capture_output=True, text=True)
    assert v.returncode == 0 and "certificate OK" in v.stdout
    assert not leftover_probes(lab)
    # the report opens offline in headless Chromium and paints a heatmap cell for the pairs measured
    from test_reports import _chromium, screenshot_heatmap

    browser = _chromium()
    if browser is None:
        pytest.skip("chromium is not installed (scripts/setup.sh installs it)")
    _w, _h, _rows, hits = screenshot_heatmap(browser, cert, tmp_path / "report.html", tmp_path)
    assert len(hits) > 5_000, "no heatmap cells on the report's first screen"


def test_slow_link_and_missing_gpu_are_localised(lab8, tmp_path):
    lab = lab8
    slow, gpu = "node05", "node02"
    lab.manager.fault(slow, "link_slow", {"fabric": "0", "factor": "0.3"})
    lab.manager.fault(gpu, "gpu_missing", {})
    lab.manager.fault(gpu, "gpu_row_remap_pending", {"gpu": "0"})
    try:
        rc, cert, _ = certify(lab, tmp_path)
    finally:
        lab.manager.heal(slow)
        lab.manager.heal(gpu)
    assert rc == 1 and cert["verdict"] == "fail"
    assert cert["rounds"] == 2
    loc = {x.get("node") or x.get("link"): x["kind"] for x in cert["localisation"]}
    # node05 fails with two partners on fabric 0; node02 (7 GPUs) cannot run the 16-rank pair
    # all_reduce with any partner, so it may be localised as a bad node too; nothing else is
    assert loc.get(slow) == "bad_node" and set(loc) <= {slow, gpu}, cert["localisation"]
    assert loc.get(gpu, "bad_node") == "bad_node", cert["localisation"]
    assert cert["nodes"][gpu]["verdict"] == "fail"
    assert any(f["check"] == "gpu.count" and f["status"] == "fail" for f in cert["nodes"][gpu]["findings"])
    assert cert["nodes"][slow]["verdict"] == "fail"
    for n in lab.nodes:
        if n not in (slow, gpu):
            assert cert["nodes"][n]["verdict"] == "pass", [f for f in cert["nodes"][n]["findings"] if f["status"] != "pass"]
    for probe in ("iperf3", "ib_write_bw", "ib_write_lat"):
        slow_links = [lk for lk in cert["links"] if slow in (lk["a"], lk["b"]) and lk["fabric"] == 0 and lk["probe"] == probe]
        assert slow_links and all(lk["status"] == "fail" for lk in slow_links), (probe, slow_links)
    # the slow fabric-0 link leaves the node's fabric-1 latency alone
    other = [lk for lk in cert["links"] if slow in (lk["a"], lk["b"]) and lk["fabric"] == 1 and lk["probe"] == "ib_write_lat"]
    assert other and all(lk["status"] == "pass" for lk in other)
    gf = cert["nodes"][gpu]["findings"]
    diag = {f["subject"]: f["status"] for f in gf if f["check"] == "probe.dcgmi_diag"}
    assert diag.get("GPU Memory") == "fail" and diag.get("Page Retirement/Row Remap") == "fail", diag
    # all_reduce_perf -g 8 cannot run on 7 GPUs: no load, so no utilisation verdict either (an error)
    util = [f for f in gf if f["check"] == "probe.gpu_util_under_load"]
    assert util and all(f["status"] == "error" for f in util), util


def test_hung_probe_is_a_timed_error_and_leaves_nothing(lab8, tmp_path):
    lab = lab8
    target = lab.nodes[0]
    lab.manager.fault(target, "probe_hang", {"tool": "ib_write_bw"})
    try:
        t0 = time.monotonic()
        # a shorter timeout than the other tests' (the hang costs it in the loopback test and in both rounds)
        rc, cert, _ = certify(lab, tmp_path, "--probe-timeout", "12")
        elapsed = time.monotonic() - t0
    finally:
        lab.manager.heal(target, "probe_hang")
    assert rc == 1
    hung = [f for f in cert["nodes"][target]["findings"] if f["check"] == "probe.ib_write_bw_loopback"]
    assert hung and all(f["status"] == "error" and "timed out after 14 s" in f["observed"] for f in hung), hung
    assert elapsed < 600
    assert not leftover_probes(lab)


def test_node_dying_mid_run(lab8, tmp_path):
    lab = lab8
    victim = lab.nodes[2]

    fired = threading.Event()

    def kill_sshd_in_round1():
        # iperf3 runs only in the pair rounds: the victim's first iperf3 process marks round 1
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            r = lab.ssh(victim, "ps -eo args | grep -c '[i]perf3' || true", check=False)
            if r.returncode == 0 and r.stdout.strip() not in ("", "0"):
                lab.manager.fault(victim, "node_down", {})
                fired.set()
                return
            time.sleep(0.2)

    t = threading.Thread(target=kill_sshd_in_round1)
    t.start()
    try:
        rc, cert, _ = certify(lab, tmp_path)
    finally:
        t.join()
        lab.manager.heal(victim, "node_down")
        lab.wait_ssh(victim, timeout=120)
    assert fired.is_set(), "the victim never ran a pair probe"
    assert rc == 1
    assert cert["nodes"][victim]["verdict"] == "unreachable", cert["nodes"][victim]
    for n in lab.nodes:
        if n != victim:
            assert cert["nodes"][n]["verdict"] == "pass", (n, [f for f in cert["nodes"][n]["findings"] if f["status"] != "pass"])
    import sqlite3

    db = sqlite3.connect(lab.dir.parent / "certify-test-state" / "store.sqlite")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    (status,) = db.execute("SELECT status FROM runs ORDER BY started DESC LIMIT 1").fetchone()
    assert status == "done"


def test_probe_verb_runs_only_the_named_probes(lab8, tmp_path):
    lab = lab8
    env = dict(os.environ, CLUSTERCERT_HOME=str(lab.dir.parent / "certify-test-state"))
    p = subprocess.run([sys.executable, "-m", "clustercert", "probe", "-i", "lab", "--probes", "iperf3,ib_write_lat",
                        "--probe-seconds", "2", "--probe-timeout", "20", "--format", "json"],
                       capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads(p.stdout)
    assert doc["verdict"] == "pass" and doc["rounds"] == 1
    assert {lk["probe"] for lk in doc["links"]} == {"iperf3", "ib_write_lat"}
    assert len({frozenset((lk["a"], lk["b"])) for lk in doc["links"]}) == LAB_NODES // 2
    # no node probe was asked for: no NCCL, nvbandwidth, dcgmi or loopback findings
    assert all(not n["findings"] for n in doc["nodes"].values()), doc["nodes"]
    assert not leftover_probes(lab)
