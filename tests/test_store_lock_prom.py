"""The record layer survives SIGKILL; runs lock per inventory; Prometheus output parses, follows the naming
conventions and passes `promtool check metrics`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from prom_lint import promtool_check

from clustercert.record.store import Store
from clustercert.report import prom


def _nodes(n: int, verdict: str = "pass") -> dict:
    return {
        f"node{i:02d}": {
            "verdict": verdict,
            "findings": [
                {
                    "check": "gpu.count",
                    "status": verdict,
                    "subject": "node",
                    "expected": "8",
                    "observed": "8",
                    "evidence": "x" * 200,
                }
                for _ in range(20)
            ],
        }
        for i in range(n)
    }


def test_store_survives_sigkill_mid_write(tmp_path):
    db = tmp_path / "store.sqlite"
    Store(db).start_run("before", "certify", "inv", {})
    Store(db).finish_run("before", "pass", _nodes(4))
    writer = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(os.getcwd() + '/src')!r})
        from clustercert.record.store import Store
        s = Store({str(db)!r})
        i = 0
        while True:
            s.start_run(f"r{{i}}", "drift", "inv", {{}})
            s.finish_run(f"r{{i}}", "fail", {{f"n{{k}}": {{"verdict": "fail", "findings": [{{"check": "c", "status": "fail"}}] * 50}} for k in range(50)}})
            i += 1
            print(i, flush=True)
        """)  # noqa: E501
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
        from clustercert.record.runlock import inventory_lock
        with inventory_lock("inventory/h100-sample", "drift"):
            print("locked", flush=True)
            time.sleep(60)
        """)
    p = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True,
                         env=dict(os.environ, CLUSTERCERT_HOME=str(tmp_path)))
    assert p.stdout.readline().strip() == "locked"
    from clustercert.record.runlock import LockBusy, inventory_lock

    with pytest.raises(LockBusy) as exc:
        with inventory_lock("inventory/h100-sample", "certify"):
            pass
    assert f"pid {p.pid}" in str(exc.value) and "`clustercert drift`" in str(exc.value)
    p.send_signal(signal.SIGKILL)
    p.wait()
    with inventory_lock("inventory/h100-sample", "certify"):  # a killed holder leaves no stale lock
        pass


def _families(path) -> dict:
    """Every metric family of a textfile, parsed by prometheus_client's own parser (what node_exporter
    reads)."""
    from prometheus_client.parser import text_string_to_metric_families

    return {f.name: f for f in text_string_to_metric_families(path.read_text())}


def test_prom_textfile_parses(tmp_path):
    nodes = {"node01": {"verdict": "pass", "findings": [{"check": "gpu.count", "status": "pass"},
                                                        {"check": "gpu.ecc", "status": "pass"},
                                                        {"check": "gpu.ecc", "status": "fail"}]},
             'we"ird\\n': {"verdict": "unreachable", "findings": []},
             "node03": {"verdict": "error", "findings": [{"check": "ib.bond", "status": "skip"}]}}
    links = [
        {
            "a": "node01",
            "b": "node03",
            "fabric": 0,
            "probe": "ib_write_bw",
            "subject": "mlx5_0 node01->node03",
            "value": 300.0,
            "unit": "gbit_per_s",
            "status": "fail",
            "round": 1,
            "threshold": "ib_write_bw_pair",
        },
        {
            "a": "node01",
            "b": "node03",
            "fabric": 0,
            "probe": "ib_write_bw",
            "subject": "mlx5_0 node01->node03",
            "value": 390.5,
            "unit": "gbit_per_s",
            "status": "pass",
            "round": 2,
            "threshold": "ib_write_bw_pair",
        },
        {
            "a": "node01",
            "b": "node03",
            "fabric": None,
            "probe": "nccl_allreduce",
            "subject": "node01+node03",
            "value": None,
            "unit": "gbyte_per_s",
            "status": "error",
            "round": 1,
            "threshold": "nccl_allreduce_pair",
        },
        {
            "a": "node01",
            "b": "node03",
            "fabric": 0,
            "probe": "ib_write_lat",
            "subject": "mlx5_0",
            "value": 1.1,
            "unit": "usec",
            "status": "pass",
            "round": 1,
            "threshold": "ib_write_lat_p99",
        },
    ]
    bounds = prom.threshold_bounds({"ib_write_bw_pair": {"floor": 320.0, "ceiling": None},
                                    "ib_write_lat_p99": {"floor": None, "ceiling": 4.2}})
    text = prom.render(
        "drift",
        nodes=nodes,
        links=links,
        bounds=bounds,
        duration_s=12.3456,
        finished=1764680000.0,
        last_success=1764600000.0,
        drift_items={("node01", "configuration"): 1, ("node03", "state"): 2},
    )
    path = tmp_path / "clustercert.prom"
    prom.write_atomic(path, text)
    fams = _families(path)
    drift = {(s.labels["node"], s.labels["kind"]): s.value for s in fams["clustercert_drift_items"].samples}
    assert drift == {("node01", "configuration"): 1.0, ("node03", "state"): 2.0}
    # a check's status: 0/1 per status (its worst one is 1), so an alert on status="fail" never fires on a
    # skip
    status = {(s.labels["node"], s.labels["check"], s.labels["status"]): s.value
              for s in fams["clustercert_check_status"].samples}
    assert {k[:2]: k[2] for k, v in status.items() if v == 1} == {("node01", "gpu.count"): "pass",
                                                                  ("node01", "gpu.ecc"): "fail",
                                                                  ("node03", "ib.bond"): "skip"}
    assert len(status) == 3 * 4 and set(status.values()) == {0.0, 1.0}
    # the alert's expression
    failing = {k[:2] for k, v in status.items() if k[2] in ("fail", "error") and v > 0}
    assert failing == {("node01", "gpu.ecc")}
    verdict = {
        s.labels["node"]: s.labels["verdict"]
        for s in fams["clustercert_node_verdict"].samples
        if s.value == 1
    }
    assert verdict == {"node01": "pass", 'we"ird\\n': "unreachable", "node03": "error"}
    assert len(fams["clustercert_node_verdict"].samples) == 3 * 4
    # one metric per unit, in base units: Gb/s -> bytes/s, us -> seconds; no unit label
    assert "clustercert_link_value" not in fams and not any(
        "unit" in s.labels for f in fams.values() for s in f.samples
    )
    bw = {(s.labels["probe"], s.labels["fabric"]): s.value
          for s in fams["clustercert_link_bandwidth_bytes_per_second"].samples}
    assert bw == {("ib_write_bw", "0"): 390.5e9 / 8}  # round 2 replaced round 1; nccl_allreduce had no value
    lat = {s.labels["probe"]: s.value for s in fams["clustercert_link_latency_seconds"].samples}
    assert lat == {"ib_write_lat": pytest.approx(1.1e-6)}
    floor = {(s.labels["probe"], s.labels["bound"]): s.value
             for s in fams["clustercert_link_bandwidth_threshold_bytes_per_second"].samples}
    assert floor == {("ib_write_bw", "floor"): 320e9 / 8}
    ceiling = {(s.labels["probe"], s.labels["bound"]): s.value
               for s in fams["clustercert_link_latency_threshold_seconds"].samples}
    assert ceiling == {("ib_write_lat", "ceiling"): pytest.approx(4.2e-6)}
    lstatus = {
        s.labels["probe"]: s.labels["status"] for s in fams["clustercert_link_status"].samples if s.value == 1
    }
    assert lstatus == {"ib_write_bw": "pass", "nccl_allreduce": "error", "ib_write_lat": "pass"}
    assert {s.labels["verb"] for f in fams.values() for s in f.samples if "verb" in s.labels} == {"drift"}
    assert fams["clustercert_run_duration_seconds"].samples[0].value == 12.346
    assert fams["clustercert_last_run_timestamp_seconds"].samples[0].value == 1764680000.0
    assert fams["clustercert_last_success_timestamp_seconds"].samples[0].value == 1764600000.0
    assert [p.name for p in tmp_path.iterdir()] == ["clustercert.prom"]  # no temp file left behind
    assert (path.stat().st_mode & 0o777) == 0o644  # node_exporter runs as another user
    promtool_check(path.read_text())


def test_link_values_convert_to_base_units_one_metric_per_unit():
    """GB/s (NCCL's busbw) and Gb/s (perftest) both become bytes per second, ms and ns seconds, percent a
    ratio; a unit the exporter does not know gets no value series (its status is still there)."""
    links = [
        {
            "a": "n1",
            "b": "n2",
            "fabric": None,
            "probe": "nccl_allreduce",
            "subject": "n1+n2",
            "value": 48.5,
            "unit": "gbyte_per_s",
            "status": "pass",
            "round": 1,
        },
        {
            "a": "n1",
            "b": "n2",
            "fabric": 1,
            "probe": "iperf3",
            "subject": "fabric 1",
            "value": 25.0,
            "unit": "gbit_per_s",
            "status": "pass",
            "round": 1,
        },
        {
            "a": "n1",
            "b": "n2",
            "fabric": None,
            "probe": "ddp_allreduce",
            "subject": "n1+n2",
            "value": 12.5,
            "unit": "ms",
            "status": "fail",
            "round": 1,
            "threshold": "step",
        },
        {
            "a": "n1",
            "b": "n2",
            "fabric": None,
            "probe": "gpu_util",
            "subject": "n1+n2",
            "value": 97.0,
            "unit": "percent",
            "status": "pass",
            "round": 1,
        },
        {
            "a": "n1",
            "b": "n2",
            "fabric": None,
            "probe": "mystery",
            "subject": "x",
            "value": 3.0,
            "unit": "furlongs",
            "status": "skip",
            "round": 1,
        },
    ]
    text = prom.render(
        "certify", links=links, bounds={"step": ("ceiling", 10.0), "gpu_util": ("floor", 0.9, "ratio")}
    )
    from prometheus_client.parser import text_string_to_metric_families

    fams = {f.name: f for f in text_string_to_metric_families(text)}
    bw = {s.labels["probe"]: s.value for s in fams["clustercert_link_bandwidth_bytes_per_second"].samples}
    assert bw == {"nccl_allreduce": 48.5e9, "iperf3": 25e9 / 8}
    assert [(s.labels["probe"], s.value) for s in fams["clustercert_link_latency_seconds"].samples] == [
        ("ddp_allreduce", 0.0125)]
    assert [
        (s.labels["bound"], s.value) for s in fams["clustercert_link_latency_threshold_seconds"].samples
    ] == [("ceiling", 0.01)]
    assert [(s.labels["probe"], s.value) for s in fams["clustercert_link_ratio"].samples] == [
        ("gpu_util", 0.97)
    ]
    # the bound's own unit
    assert [s.value for s in fams["clustercert_link_ratio_threshold"].samples] == [0.9]
    assert not any(
        s.labels["probe"] == "mystery"
        for f in fams.values()
        if f.name != "clustercert_link_status"
        for s in f.samples
    )
    skipped = {s.labels["status"]: s.value for s in fams["clustercert_link_status"].samples
               if s.labels["probe"] == "mystery"}
    assert skipped == {"pass": 0.0, "fail": 0.0, "error": 0.0, "skip": 1.0}
    promtool_check(text)


def test_promtool_check_fails_on_a_non_base_unit_and_a_gauge_named_total():
    """The check the tests run is a real one: promtool refuses what its linter flags."""
    with pytest.raises(AssertionError, match="base unit"):
        promtool_check("# HELP x_milliseconds t\n# TYPE x_milliseconds gauge\nx_milliseconds 1\n")
    with pytest.raises(AssertionError, match="_total"):
        promtool_check("# HELP y_total t\n# TYPE y_total gauge\ny_total 1\n")


def test_prom_never_passed_has_no_last_success(tmp_path):
    path = tmp_path / "v.prom"
    prom.write_atomic(path, prom.render("validate", nodes={}, duration_s=1.0, finished=5.0))
    fams = _families(path)
    assert fams["clustercert_last_success_timestamp_seconds"].samples == []
    assert fams["clustercert_last_run_timestamp_seconds"].samples[0].labels == {"verb": "validate"}
    promtool_check(path.read_text())


def test_certify_prom_from_the_sample_certificate(tmp_path):
    from test_certificate import sample_certificate

    from clustercert.report import prom

    cert = sample_certificate()
    path = tmp_path / "certify.prom"
    prom.write_certify(str(path), cert, "inventory/x")
    fams = _families(path)
    verdict = {
        s.labels["node"]: s.labels["verdict"] for s in fams["clustercert_node_verdict"].samples if s.value
    }
    assert verdict["gpu-node-03"] == "fail" and verdict["gpu-node-08"] == "unreachable"
    assert verdict["gpu-node-01"] == "pass"
    slow = [s for s in fams["clustercert_link_bandwidth_bytes_per_second"].samples
            if (s.labels["a"], s.labels["b"], s.labels["fabric"]) == ("gpu-node-05", "gpu-node-06", "1")]
    # the second round's measurement, in bytes/s
    assert [s.value for s in slow] == [pytest.approx(208.9e9 / 8)]
    floors = {
        s.labels["probe"]: s.value
        for s in fams["clustercert_link_bandwidth_threshold_bytes_per_second"].samples
    }
    assert floors == {"ib_write_bw": 320e9 / 8, "iperf3": 20e9 / 8}
    # the skipped ib.bond check is not a failure: only gpu-node-03's failing checks read fail=1
    failing = {(s.labels["node"], s.labels["check"]) for s in fams["clustercert_check_status"].samples
               if s.labels["status"] == "fail" and s.value > 0}
    assert failing == {("gpu-node-03", "gpu.count"), ("gpu-node-03", "nccl.allreduce_1node")}
    skipped = {s.labels["node"] for s in fams["clustercert_check_status"].samples
               if s.labels["check"] == "ib.bond" and s.labels["status"] == "skip" and s.value == 1}
    assert len(skipped) == 7
    assert fams["clustercert_run_duration_seconds"].samples[0].value == 1674.0  # 08:14:03 -> 08:41:57
    # failed, and no run passed before
    assert fams["clustercert_last_success_timestamp_seconds"].samples == []
    promtool_check(path.read_text())


def test_actions_are_recorded_with_their_run(tmp_path):
    s = Store(tmp_path / "store.sqlite")
    s.start_run("r1", "certify", "inv", {})
    s.finish_run(
        "r1",
        "fail",
        _nodes(2),
        actions={
            "slurm": [
                {
                    "node": "node01",
                    "slurm_node": "gpu-a01",
                    "action": "drain",
                    "reason": "clustercert: gpu.count",
                    "ok": True,
                    "detail": "",
                },
                {
                    "node": "node00",
                    "slurm_node": "gpu-a00",
                    "action": "resume",
                    "reason": "",
                    "ok": False,
                    "detail": "scontrol: timed out",
                },
            ]
        },
    )
    s.start_run("r2", "certify", "inv", {})
    s.finish_run("r2", "pass", _nodes(2))
    got = [(a["node"], a["target"], a["action"], a["ok"], a["reason"], a["detail"]) for a in s.actions("r1")]
    assert got == [("node00", "gpu-a00", "resume", False, "", "scontrol: timed out"),
                   ("node01", "gpu-a01", "drain", True, "clustercert: gpu.count", "")]
    assert s.actions("r2") == []


def test_the_documented_alert_fires_on_a_failure_and_never_on_a_skip(tmp_path):
    """docs/reports.md's alert on checks, run by `promtool test rules` over the series a validate textfile
    holds: it fires for the failing and the erroring check, not for the skipped one (which the single number
    of before, 3 for skip, made fire on `> 0`)."""
    import json
    import shutil

    from prometheus_client.parser import text_string_to_metric_families

    if shutil.which("promtool") is None:
        pytest.skip("promtool is not installed (Debian's prometheus package; scripts/setup.sh installs it)")
    nodes = {"node01": {"verdict": "fail", "findings": [{"check": "gpu.ecc", "status": "fail"},
                                                        {"check": "ib.bond", "status": "skip"}]},
             "node02": {"verdict": "error", "findings": [{"check": "time.sync", "status": "error"},
                                                         {"check": "ib.bond", "status": "skip"}]}}
    text = prom.render("validate", nodes=nodes, duration_s=1.0, finished=5.0)
    promtool_check(text)
    series = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            series.append({"series": f"{s.name}{{{labels}}}", "values": f"{s.value:g}x5"})
    (tmp_path / "rules.yml").write_text(json.dumps({"groups": [{"name": "clustercert", "rules": [
        {"alert": "ClustercertCheckFailed", "expr": 'clustercert_check_status{status=~"fail|error"} == 1'},
        {"alert": "ClustercertNodeNotPassing", "expr": 'clustercert_node_verdict{verdict!="pass"} == 1'}]}]}))

    def alert(name: str, node: str, **labels: str) -> dict:
        return {"exp_labels": {"alertname": name, "verb": "validate", "node": node, **labels}}

    (tmp_path / "test.yml").write_text(
        json.dumps(
            {
                "rule_files": ["rules.yml"],
                "evaluation_interval": "1m",
                "tests": [
                    {
                        "interval": "1m",
                        "input_series": series,
                        "alert_rule_test": [
                            {
                                "eval_time": "2m",
                                "alertname": "ClustercertCheckFailed",
                                "exp_alerts": [  # no ib.bond (skipped)
                                    alert("ClustercertCheckFailed", "node01", check="gpu.ecc", status="fail"),
                                    alert(
                                        "ClustercertCheckFailed", "node02", check="time.sync", status="error"
                                    ),
                                ],
                            },
                            {
                                "eval_time": "2m",
                                "alertname": "ClustercertNodeNotPassing",
                                "exp_alerts": [
                                    alert("ClustercertNodeNotPassing", "node01", verdict="fail"),
                                    alert("ClustercertNodeNotPassing", "node02", verdict="error"),
                                ],
                            },
                        ],
                    }
                ],
            }
        )
    )
    r = subprocess.run(
        ["promtool", "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stdout + r.stderr
