"""The record layer survives SIGKILL; runs lock per inventory; Prometheus output parses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from clustercert import prom
from clustercert.store import Store


def _nodes(n: int, verdict: str = "pass") -> dict:
    return {f"node{i:02d}": {"verdict": verdict, "findings": [
        {"check": "gpu.count", "status": verdict, "subject": "node", "expected": "8", "observed": "8", "evidence": "x" * 200}
        for _ in range(20)]} for i in range(n)}


def test_store_survives_sigkill_mid_write(tmp_path):
    db = tmp_path / "store.sqlite"
    Store(db).start_run("before", "certify", "inv", {})
    Store(db).finish_run("before", "pass", _nodes(4))
    writer = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(os.getcwd() + '/src')!r})
        from clustercert.store import Store
        s = Store({str(db)!r})
        i = 0
        while True:
            s.start_run(f"r{{i}}", "drift", "inv", {{}})
            s.finish_run(f"r{{i}}", "fail", {{f"n{{k}}": {{"verdict": "fail", "findings": [{{"check": "c", "status": "fail"}}] * 50}} for k in range(50)}})
            i += 1
            print(i, flush=True)
        """)
    p = subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE, text=True)
    p.stdout.readline()  # at least one full run written; now kill it mid-flight
    time.sleep(0.3)
    p.send_signal(signal.SIGKILL)
    p.wait()
    s = Store(db)
    assert s.integrity_ok()
    assert s.node_verdicts("before") == {f"node{i:02d}": "pass" for i in range(4)}  # nothing recorded is lost
    s.start_run("after", "drift", "inv", {})
    s.finish_run("after", "pass", _nodes(2))
    assert s.runs(limit=1)[0]["id"] == "after"


def test_lock_names_the_holder_and_dies_with_it(tmp_path, monkeypatch):
    monkeypatch.setenv("CLUSTERCERT_HOME", str(tmp_path))
    holder = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(os.getcwd() + '/src')!r})
        from clustercert.runlock import inventory_lock
        with inventory_lock("inventory/h100-sample", "drift"):
            print("locked", flush=True)
            time.sleep(60)
        """)
    p = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True,
                         env=dict(os.environ, CLUSTERCERT_HOME=str(tmp_path)))
    assert p.stdout.readline().strip() == "locked"
    from clustercert.runlock import LockBusy, inventory_lock

    with pytest.raises(LockBusy) as exc:
        with inventory_lock("inventory/h100-sample", "certify"):
            pass
    assert f"pid {p.pid}" in str(exc.value) and "`clustercert drift`" in str(exc.value)
    p.send_signal(signal.SIGKILL)
    p.wait()
    with inventory_lock("inventory/h100-sample", "certify"):  # a killed holder leaves no stale lock
        pass


def test_prom_textfile_parses(tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    text = prom.render({("node01", "configuration"): 1, ("node03", "state"): 2},
                       {("node01", "gpu.count"): "pass", ('we"ird', "ib.bond"): "fail"}, 1764680000.0)
    path = tmp_path / "clustercert.prom"
    prom.write_atomic(path, text)
    fams = {f.name: f for f in text_string_to_metric_families(path.read_text())}
    drift = {(s.labels["node"], s.labels["kind"]): s.value for s in fams["clustercert_drift_items"].samples}
    assert drift == {("node01", "configuration"): 1.0, ("node03", "state"): 2.0}
    status = {(s.labels["node"], s.labels["check"]): s.value for s in fams["clustercert_check_status"].samples}
    assert status[('we"ird', "ib.bond")] == 1.0
    assert fams["clustercert_last_run_timestamp_seconds"].samples[0].value == 1764680000.0
    assert [p.name for p in tmp_path.iterdir()] == ["clustercert.prom"]  # no temp file left behind


def test_actions_are_recorded_with_their_run(tmp_path):
    s = Store(tmp_path / "store.sqlite")
    s.start_run("r1", "certify", "inv", {})
    s.finish_run("r1", "fail", _nodes(2), actions={"slurm": [
        {"node": "node01", "slurm_node": "gpu-a01", "action": "drain", "reason": "clustercert: gpu.count", "ok": True, "detail": ""},
        {"node": "node00", "slurm_node": "gpu-a00", "action": "resume", "reason": "", "ok": False, "detail": "scontrol: timed out"}]})
    s.start_run("r2", "certify", "inv", {})
    s.finish_run("r2", "pass", _nodes(2))
    got = [(a["node"], a["target"], a["action"], a["ok"], a["reason"], a["detail"]) for a in s.actions("r1")]
    assert got == [("node00", "gpu-a00", "resume", False, "", "scontrol: timed out"),
                   ("node01", "gpu-a01", "drain", True, "clustercert: gpu.count", "")]
    assert s.actions("r2") == []
