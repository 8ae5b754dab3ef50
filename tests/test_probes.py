"""Probe evaluation on real tool output: values against the profile's threshold, failures as errors."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from clustercert.collect import ssh
from clustercert.model.evidence import CommandResult, NodeEvidence
from clustercert.model.profile import load_profile
from clustercert.probes.commands import dcgmi_diag_cmd
from clustercert.probes.evaluate import Measurement, apply_outlier_rule, eval_nccl, eval_perftest
from clustercert.probes.judge import ThresholdJudge
from clustercert.probes.plan import ProbeSettings
from clustercert.probes.timing import tool_seconds

FIX = Path(__file__).parent / "fixtures"
TH = load_profile("h100-sxm-8x-ndr").thresholds


def res(stdout: str, rc: int | None = 0, timed_out: bool = False) -> CommandResult:
    return CommandResult(rc, stdout, "", timed_out, 1.0, "tool")


def test_perftest_value_against_threshold():
    text = (FIX / "perftest" / "ib_read_bw-a-report_gbits-client-result-excerpt.txt").read_text()
    m = eval_perftest(Measurement("ib_write_bw", "a", "b"), TH["ib_write_bw_pair"], res(text), 30)
    assert m.status in ("pass", "fail") and m.unit == "gbit_per_s" and m.value > 0
    assert m.status == ("pass" if m.value >= 320 else "fail")
    assert "seed guide" in m.expected


def test_timeouts_and_failures_are_errors_never_passes():
    m = eval_perftest(
        Measurement("ib_write_bw", "a", "b"), TH["ib_write_bw_pair"], res("", rc=None, timed_out=True), 22
    )
    assert m.status == "error" and m.observed == "timed out after 22 s: tool"
    failed = (FIX / "nccl-tests" / "all_reduce_perf-2node-GH200-slingshot-wrong-96-32-FAILED.txt").read_text()
    m = eval_nccl(Measurement("nccl_allreduce", "a"), TH["nccl_allreduce_1node"], res(failed), 60)
    assert m.status == "error" and "nccl-tests failed" in m.observed
    m = eval_nccl(Measurement("nccl_allreduce", "a"), TH["nccl_allreduce_1node"], res("garbage\n"), 60)
    assert m.status == "error" and "unparseable" in m.observed


def test_outlier_rule_fails_a_slow_member_that_meets_the_floor():
    ms = []
    for i, v in enumerate([395.0, 392.0, 394.0, 340.0]):
        m = Measurement(
            "ib_write_bw", f"n{i}", "x", value=v, unit="gbit_per_s", status="pass", observed=f"{v} gbit_per_s"
        )
        ms.append(m)
    apply_outlier_rule(ms, 0.9, "test")
    assert [m.status for m in ms] == ["pass", "pass", "pass", "fail"]
    assert "outlier" in ms[3].observed


# ---- ib_write_lat ------------------------------------------------------------------------------

LAT = TH["ib_write_lat_p99"]
LAT_SEP = "-" * 87
# the table as perftest prints it in iteration mode (-n), values as the lab's simulated NDR link
LAT_GOOD = f"""{LAT_SEP}
                    RDMA_Write Latency Test
 Dual-port       : OFF\t\tDevice         : mlx5_0
{LAT_SEP}
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]
 2       10000         0.98           1.37         1.02               1.03           0.01            1.07                   1.32
{LAT_SEP}
"""  # noqa: E501
# -D (duration) mode: perftest prints t_avg only, no percentiles
LAT_DURATION = f"""{LAT_SEP}
                    RDMA_Write Latency Test
{LAT_SEP}
 #bytes        #iterations       t_avg[usec]    tps average
 2             2451034           1.02           978123.45
{LAT_SEP}
"""


def test_latency_is_judged_on_p99_against_a_ceiling():
    m = eval_perftest(Measurement("ib_write_lat", "a", "b"), LAT, res(LAT_GOOD), 30, lat=True)
    assert (m.status, m.value, m.unit) == ("pass", 1.07, "usec")
    assert m.lower_is_better and not m.relative
    assert "<= 4.2 usec" in m.expected and "Imbue" in m.expected
    real = (FIX / "perftest" / "ib_read_lat-client-result-percentiles-excerpt.txt").read_text()
    m = eval_perftest(Measurement("ib_write_lat", "a", "b"), LAT, res(real), 30, lat=True)
    assert (m.status, m.value) == ("fail", 5.74)  # p99, not t_typical (5.49)


def test_latency_without_a_percentile_timeout_or_garbage_is_an_error():
    m = eval_perftest(Measurement("ib_write_lat", "a", "b"), LAT, res(LAT_DURATION), 30, lat=True)
    assert m.status == "error" and "99th percentile" in m.observed and m.value is None
    m = eval_perftest(
        Measurement("ib_write_lat", "a", "b"), LAT, res("", rc=None, timed_out=True), 22, lat=True
    )
    assert m.status == "error" and m.observed.startswith("timed out after 22 s")
    m = eval_perftest(Measurement("ib_write_lat", "a", "b"), LAT, res("segfault\n"), 22, lat=True)
    assert m.status == "error" and "unparseable" in m.observed
    bw = (FIX / "perftest" / "ib_read_bw-a-report_gbits-client-result-excerpt.txt").read_text()
    m = eval_perftest(Measurement("ib_write_lat", "a", "b"), LAT, res(bw), 22, lat=True)
    assert m.status == "error" and "no latency table" in m.observed


def test_latency_command_runs_iterations_not_duration():
    from clustercert.probes.commands import perftest_cmd

    lat = perftest_cmd("ib_write_lat", "mlx5_0", 1, 18715, 5, "node02")
    assert (
        lat.startswith("ib_write_lat -d mlx5_0 -i 1 -p 18715 -n ")
        and " -D " not in lat
        and lat.endswith(" node02")
    )
    assert "--report_gbits -D 5" in perftest_cmd("ib_write_bw", "mlx5_0", 1, 18515, 5)


def test_outlier_rule_leaves_latency_and_utilisation_alone():
    lat = [
        eval_perftest(
            Measurement("ib_write_lat", f"n{i}", "x"),
            LAT,
            res(LAT_GOOD.replace("1.07   ", f"{v}   ")),
            30,
            lat=True,
        )
        for i, v in enumerate([1.07, 1.07, 1.08, 1.6])
    ]
    assert [m.value for m in lat] == [1.07, 1.07, 1.08, 1.6]
    util = [
        Measurement(
            "gpu_util_under_load",
            "n0",
            subject=f"GPU{i}",
            value=v,
            unit="percent",
            status="pass",
            relative=False,
        )
        for i, v in enumerate([100.0, 100.0, 100.0, 75.0])
    ]
    bw = [Measurement("ib_write_bw", f"n{i}", "x", value=v, unit="gbit_per_s", status="pass") for i, v in
          enumerate([395.0, 392.0, 394.0, 340.0])]
    apply_outlier_rule(lat + util + bw, 0.9, "test")
    # 1.6 us is 50 % above the median but within the p99 ceiling: a longer path, not a sick link
    assert [m.status for m in lat] == ["pass"] * 4 and not any(m.notes for m in lat)
    assert [m.status for m in util] == ["pass"] * 4
    assert [m.status for m in bw] == ["pass", "pass", "pass", "fail"]


# ---- GPU utilisation during the NCCL run --------------------------------------------------------

UTIL = TH["gpu_util_under_load"]


def _nccl_ok() -> str:
    from clustercert.parsers import parse

    for p in sorted((FIX / "nccl-tests").iterdir()):
        text = p.read_text()
        try:
            if parse("nccl-tests", text)["ok"]:
                return text
        except Exception:  # noqa: BLE001 - only looking for one passing capture
            continue
    raise AssertionError("no passing nccl-tests fixture")


def _samples(rows: list[list[int | str]]) -> str:
    """nvidia-smi --query-gpu=index,utilization.gpu --format=csv,noheader,nounits -lms: one line per
    GPU per tick."""
    return "".join(f"{g}, {v}\n" for tick in rows for g, v in enumerate(tick))


def _util_run(samples: str | None, nccl: str | None = None, **kw) -> CommandResult:
    from clustercert.probes.commands import UTIL_MARK

    out = (nccl if nccl is not None else _nccl_ok())
    if samples is not None:
        out += f"{UTIL_MARK}\n{samples}"
    return res(out, **kw)


def _eval_util(run: CommandResult, gpus: int = 4):
    from clustercert.probes.evaluate import eval_gpu_util, split_util

    load, samples = split_util(run, "all_reduce_perf -g 4")
    return eval_gpu_util("n1", UTIL, gpus, load, samples, 60)


def test_utilisation_is_the_mean_over_the_busy_window_per_gpu():
    # idle while NCCL starts, busy, idle again after it ended: only the busy window counts
    ticks = [
        [0, 0, 0, 0],
        [0, 0, 0, 0],
        [96, 100, 100, 98],
        [100, 100, 100, 100],
        [100, 100, 99, 100],
        [0, 0, 0, 0],
    ]
    ms = _eval_util(_util_run(_samples(ticks)))
    assert [m.subject for m in ms] == ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert all(m.status == "pass" and m.unit == "percent" and not m.relative for m in ms)
    assert ms[0].value == pytest.approx((96 + 100 + 100) / 3, abs=0.001)
    assert "3 of 6 ticks" in ms[0].observed and "GPU0 samples: 0, 0, 96, 100, 100, 0" == ms[0].evidence
    assert ">= 70 percent" in ms[0].expected and "seed guide" in ms[0].expected


def test_a_gpu_idle_while_the_others_work_fails():
    ticks = [[100, 100, 100, 0], [100, 100, 100, 5], [100, 100, 100, 0]]
    ms = _eval_util(_util_run(_samples(ticks)))
    assert [m.status for m in ms] == ["pass", "pass", "pass", "fail"]
    assert ms[3].value == pytest.approx(1.667, abs=0.001)
    none_busy = _eval_util(_util_run(_samples([[0, 0, 0, 0]] * 4)))
    assert all(m.status == "fail" and m.value == 0 and "no GPU was busy" in m.observed for m in none_busy)


def test_utilisation_errors_never_pass():
    ticks = _samples([[100, 100, 100, 100]] * 3)
    # NCCL hung: the remote runner killed the script at its timeout; samples never printed
    ms = _eval_util(_util_run(None, nccl="", rc=None, timed_out=True))
    assert len(ms) == 1 and ms[0].status == "error" and "did not complete" in ms[0].observed
    assert "timed out after 60 s: all_reduce_perf -g 4 (GPU utilisation sampled alongside)" in ms[0].observed
    failed = (FIX / "nccl-tests" / "all_reduce_perf-2node-GH200-slingshot-wrong-96-32-FAILED.txt").read_text()
    ms = _eval_util(_util_run(ticks, nccl=failed, rc=1))
    assert ms[0].status == "error" and "nccl-tests failed" in ms[0].observed
    ms = _eval_util(_util_run(None))
    assert ms[0].status == "error" and "no utilisation samples" in ms[0].observed
    ms = _eval_util(_util_run("sh: 1: nvidia-smi: not found\n"))
    assert ms[0].status == "error" and "unreadable utilisation samples" in ms[0].observed
    ms = _eval_util(_util_run(""))
    assert ms[0].status == "error"
    # a GPU that never shows up in the samples, and one that reports N/A
    ms = _eval_util(_util_run("".join("0, 100\n1, [N/A]\n2, 100\n" for _ in range(3))))
    assert [m.status for m in ms] == ["pass", "error", "pass", "error"]
    assert "N/A" in ms[1].observed and "missing" in ms[3].observed


def test_a_sample_line_cut_by_the_sampler_stop_is_ignored():
    ms = _eval_util(_util_run(_samples([[100, 100, 100, 100]] * 2) + "0, 10"))
    assert all(m.status == "pass" and m.value == 100 for m in ms)


def test_sampling_script_runs_both_stops_the_sampler_and_keeps_the_exit_status(tmp_path):
    """The real script under /bin/sh, with stand-ins for nvidia-smi (-lms loop) and the workload."""
    import os
    import subprocess

    from clustercert.probes.commands import with_util_sampling
    from clustercert.probes.evaluate import split_util

    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nvidia-smi").write_text(f"#!/bin/sh\necho $$ > {tmp_path}/sampler.pid\n"
                                       "while true; do echo '0, 100'; echo '1, 100'; sleep 0.05; done\n")
    (bindir / "workload").write_text("#!/bin/sh\nsleep 0.4\necho 'workload output'\nexit 3\n")
    for f in bindir.iterdir():
        f.chmod(0o755)
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", TMPDIR=str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    p = subprocess.run(["/bin/sh", "-c", with_util_sampling("workload", 50)], capture_output=True, text=True,
                       timeout=20, env=env)
    assert p.returncode == 3
    load, samples = split_util(CommandResult(p.returncode, p.stdout, p.stderr, False, 1.0, "x"), "workload")
    assert (
        load.stdout == "workload output\n" and load.command == "workload (GPU utilisation sampled alongside)"
    )
    assert samples.count("0, 100\n") >= 2
    pid = int((tmp_path / "sampler.pid").read_text())
    time.sleep(0.2)
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
    assert list((tmp_path / "tmp").iterdir()) == []  # the samples file was unlinked at once


def test_sampling_script_killed_at_its_timeout_leaves_nothing(tmp_path):
    import os

    from clustercert.collect.ssh import collect_node
    from clustercert.probes.commands import with_util_sampling

    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nvidia-smi").write_text(f"#!/bin/sh\necho $$ > {tmp_path}/sampler.pid\n"
                                       "while true; do echo '0, 100'; sleep 0.05; done\n")
    (bindir / "workload").write_text("#!/bin/sh\nsleep 60\n")
    for f in bindir.iterdir():
        f.chmod(0o755)
    script = f"PATH={bindir}:$PATH; TMPDIR={tmp_path}; export TMPDIR; " + with_util_sampling("workload", 50)
    ev = collect_node("local", {"ansible_connection": "local"}, {"nccl": (script, 1.5)})
    r = ev.results["nccl"]
    assert r.timed_out and r.rc is None
    pid = int((tmp_path / "sampler.pid").read_text())
    time.sleep(0.3)
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "sampler.pid"]  # no samples file left


# ---- dcgmi diag ----------------------------------------------------------------------------------

DIAG = load_profile("h100-sxm-8x-ndr").dcgm_diag


def test_dcgmi_diag_pass_fail_per_test():
    from clustercert.probes.commands import dcgmi_diag_label
    from clustercert.probes.evaluate import eval_dcgmi_diag

    assert DIAG.level == 2 and dcgmi_diag_label(DIAG.level) == "dcgmi diag -r 2"
    assert "dcgmi diag -r 2 -j;;" in dcgmi_diag_cmd(DIAG.level)  # -j where the node's DCGM prints JSON
    ok = (FIX / "dcgmi" / "diag-r2-dcgm4.4.2-per-gpu-format-pass.txt").read_text()
    ms = eval_dcgmi_diag("n1", DIAG, res(ok), 900)
    assert len(ms) == 1 and ms[0].status == "pass" and ms[0].subject == "dcgmi diag -r 2"
    assert "tests passed" in ms[0].observed and "DCGM" in ms[0].expected
    bad = (FIX / "dcgmi" / "diag-r1-deployment-failures.txt").read_text()
    ms = eval_dcgmi_diag("n1", DIAG, res(bad, rc=226), 900)
    assert [m.subject for m in ms] == ["Persistence Mode", "Environment Variables", "Page Retirement",
                                       "Graphics Processes", "Inforom"]
    assert all(m.status == "fail" and m.probe == "dcgmi_diag" and m.evidence for m in ms)
    pcie = (FIX / "dcgmi" / "diag-r2-dcgm4.4.1-v100-pcie-fail-internal-error-excerpt.txt").read_text()
    ms = eval_dcgmi_diag("n1", DIAG, res(pcie, rc=226), 900)
    failing = {m.subject: m for m in ms}
    assert failing["pcie"].status == "fail" and "internal error during the test" in failing["pcie"].observed


def test_dcgmi_diag_skipped_tests_errors_and_timeouts_are_not_passes():
    from clustercert.probes.evaluate import eval_dcgmi_diag

    table = """Successfully ran diagnostic for group.
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Deployment  --------+------------------------------------------------|
| Denylist                  | Pass                                           |
+-----  Integration  -------+------------------------------------------------+
| PCIe                      | Skip - All                                     |
+-----  Hardware  ----------+------------------------------------------------+
| GPU Memory                | Pass - All                                     |
+---------------------------+------------------------------------------------+
"""
    ms = eval_dcgmi_diag("n1", DIAG, res(table), 900)
    assert [(m.subject, m.status) for m in ms] == [("PCIe", "error")] and "skipped" in ms[0].observed
    plugins = (FIX / "dcgmi" / "diag-r3-dcgm4-error-cannot-load-plugins.txt").read_text()
    ms = eval_dcgmi_diag("n1", DIAG, res(plugins, rc=1), 900)
    assert ms[0].status == "error" and "Cannot load plugins" in ms[0].observed
    ms = eval_dcgmi_diag("n1", DIAG, res("", rc=None, timed_out=True), 900)
    assert ms[0].status == "error" and ms[0].observed.startswith("timed out after 900 s")
    ms = eval_dcgmi_diag("n1", DIAG, res("Segmentation fault\n", rc=139), 900)
    assert ms[0].status == "error" and "unparseable" in ms[0].observed
    ms = eval_dcgmi_diag("n1", DIAG, None, 900)
    assert ms[0].status == "error" and ms[0].observed == "did not run"


def test_dcgmi_diag_level_zero_or_absent_is_a_skip_saying_why():
    from clustercert.probes.evaluate import eval_dcgmi_diag

    off = load_profile("lab", {"dcgm_diag": {"level": 0}}).dcgm_diag
    ms = eval_dcgmi_diag("n1", off, None, 0)
    assert [m.status for m in ms] == ["skip"] and "level is 0" in ms[0].observed
    ms = eval_dcgmi_diag("n1", None, None, 0)
    assert [m.status for m in ms] == ["skip"] and "sets no dcgm_diag" in ms[0].observed
    assert ms[0].finding().check == "probe.dcgmi_diag"


def test_a_node_runs_commands_one_after_another_within_the_sum_of_their_limits():
    """certify runs NCCL, nvbandwidth and dcgmi diag one after another (parallel=1) in one connection:
    the connection may last as long as all of them, not only the longest."""
    from clustercert.collect.ssh import _overall_timeout

    assert _overall_timeout([65, 65, 900], 1) == 1030
    assert _overall_timeout([30] * 4, 8) == 30
    assert _overall_timeout([30] * 20, 8) == 30 * 20 / 8 + 30
    assert _overall_timeout([], 1) == 10


# ---- certify: which probes run when ------------------------------------------------------------

# the probes before issue 22 (no GPUDirect, NVLink aggregate, checkpoint, DDP or NCCL transport check): what
# the tests of the stage order and timing below hold; tests/test_workload.py holds the plans with the new ones
PRE22 = frozenset({"ib_write_bw", "ib_write_lat", "iperf3", "nccl", "nvbandwidth", "dcgmi"})


def _pre22() -> ProbeSettings:
    return ProbeSettings(2, 20, only=PRE22, training=False)


def _host(name: str, profile: str = "lab", addresses: dict | None = None):
    from types import SimpleNamespace

    return SimpleNamespace(name=name, connection={"ansible_host": name}, profile=load_profile(profile),
                           vars=SimpleNamespace(clustercert_fabric_addresses=addresses or {}))


def test_pair_probes_run_one_kind_at_a_time_bandwidth_then_ipoib_then_latency(monkeypatch, tmp_path):
    import threading

    from clustercert.collect.ssh import ProbeRun
    from clustercert.probes import run as certify

    bw = (FIX / "perftest" / "ib_read_bw-a-report_gbits-client-result-excerpt.txt").read_text()
    calls, lock = [], threading.Lock()

    def fake(server, client, timeout, *, control_dir=None, **_):
        tool = client[2].split()[0]
        t0 = time.monotonic()
        time.sleep(0.2)
        with lock:
            calls.append((tool, client[2], t0, time.monotonic()))
        return ProbeRun(None, res(LAT_GOOD if tool == "ib_write_lat" else bw))

    started = []

    def fake_start(server, timeout, *, control_dir=None, **_):
        with lock:
            started.append((server[2].split()[0], time.monotonic(), timeout))
        return server

    reach = []

    def fake_reach(node, conn, commands, **_):
        if any(k.startswith("reach") for k in commands):  # (the pair NCCL's cleanup comes here too)
            reach.append((node, time.monotonic(), commands))
        return NodeEvidence(node, True, results={k: CommandResult(0, "1 received", "", False, 0.01, v[0])
                                                         for k, v in commands.items()})

    monkeypatch.setattr(ssh, "run_server_client", fake)  # the pair's NCCL, last
    monkeypatch.setattr(ssh, "start_server", fake_start)
    monkeypatch.setattr(
        ssh, "finish_probe", lambda srv, client, timeout, **k: fake(srv, client, timeout, **k)
    )
    monkeypatch.setattr(ssh, "collect_node", fake_reach)
    a = _host("node01", addresses={"ib0": "10.251.0.11/24", "ib1": "10.252.0.11/24"})
    b = _host("node02", addresses={"ib0": "10.251.0.12/24", "ib1": "10.252.0.12/24"})
    ms, down = certify.pair_probes(a, b, 1, _pre22(), tmp_path, io=ssh.SshBackend())
    # the reachability pass: on the client node, one echo per fabric address, beside the first stage
    ((node, at, asked),) = reach
    assert node == "node01" and at < min(t0 for *_, t0, _ in calls)
    assert asked == {"reach0": ("ping -n -q -c 1 -W 1 -I 10.251.0.11 10.251.0.12", 3.0),
                     "reach1": ("ping -n -q -c 1 -W 1 -I 10.252.0.11 10.252.0.12", 3.0)}
    lat = [m for m in ms if m.probe == "ib_write_lat"]
    assert [(m.subject, m.fabric, m.status, m.unit) for m in lat] == [
        ("mlx5_0 node01->node02", 0, "pass", "usec"), ("mlx5_1 node01->node02", 1, "pass", "usec")]
    assert lat[0].link() | {"subject": lat[0].subject} == {
        "a": "node01", "b": "node02", "fabric": 0, "probe": "ib_write_lat", "value": 1.07, "unit": "usec",
        "status": "pass", "round": 1, "subject": "mlx5_0 node01->node02", "threshold": "ib_write_lat_p99"}
    def span(tool):
        return (min(t0 for t, _, t0, _ in calls if t == tool), max(t1 for t, _, _, t1 in calls if t == tool))

    # one kind at a time: the HCAs carry one measurement's traffic; the rails / fabrics at once
    (bw0, bw1), (ip0, ip1), (lat0, lat1) = span("ib_write_bw"), span("iperf3"), span("ib_write_lat")
    assert bw1 <= ip0 and ip1 <= lat0
    assert bw1 - bw0 < 0.35 and ip1 - ip0 < 0.35 and lat1 - lat0 < 0.35
    assert sorted(c[1] for c in calls if c[0] == "iperf3") == [
        "iperf3 -c 10.251.0.12 -B 10.251.0.11 -p 5201 -t 2 --connect-timeout 3000 -J",
        "iperf3 -c 10.252.0.12 -B 10.252.0.11 -p 5202 -t 2 --connect-timeout 3000 -J"]
    # every server was started before the first stage ended, bounded past all three stages
    assert sorted(t for t, *_ in started) == ["ib_write_bw"] * 2 + ["ib_write_lat"] * 2 + ["iperf3"] * 2
    assert all(at < bw1 and limit >= 3 * 20 for _, at, limit in started)
    assert all(" -n " in cmd and " node02" in cmd for tool, cmd, *_ in calls if tool == "ib_write_lat")
    assert not down


def test_later_pair_probes_are_not_run_against_a_node_that_stopped_answering(monkeypatch, tmp_path):
    from clustercert.collect.ssh import ProbeRun
    from clustercert.probes import run as certify

    seen = []

    def fake(server, client, timeout, *, control_dir=None, **_):
        seen.append(client[2].split()[0])
        return ProbeRun(
            None, CommandResult(None, "", "no answer", True, 20, client[2]), server_reachable=False
        )

    stopped = []
    monkeypatch.setattr(
        ssh, "finish_probe", lambda srv, client, timeout, **k: fake(srv, client, timeout, **k)
    )
    monkeypatch.setattr(ssh, "start_server", lambda server, timeout, **_: server)
    monkeypatch.setattr(ssh, "stop_server", stopped.append)
    a = _host("node01", addresses={"ib0": "10.251.0.11/24", "ib1": "10.252.0.11/24"})
    b = _host("node02", addresses={"ib0": "10.251.0.12/24", "ib1": "10.252.0.12/24"})
    ms, down = certify.pair_probes(a, b, 1, _pre22(), tmp_path, io=ssh.SshBackend())
    assert down == {"node02"} and set(seen) == {"ib_write_bw"}
    # the later stages' servers are stopped, their probes are errors saying why
    assert sorted(s[2].split()[0] for s in stopped) == ["ib_write_lat"] * 2 + ["iperf3"] * 2
    later = [m for m in ms if m.probe in ("iperf3", "ib_write_lat")]
    assert len(later) == 4 and all(
        m.status == "error" and "node02 stopped answering" in m.observed for m in later
    )


def test_node_probes_sample_utilisation_in_the_nccl_command_and_run_dcgmi_at_the_profile_level(
    monkeypatch, tmp_path
):
    from clustercert.probes import run as certify
    from clustercert.probes.commands import UTIL_MARK

    loop = (FIX / "perftest" / "ib_read_bw-a-report_gbits-client-result-excerpt.txt").read_text()
    diag = (FIX / "dcgmi" / "diag-r1-deployment-failures.txt").read_text()
    asked, calls = {}, []

    def fake_collect(node, conn, commands, *, control_dir=None, parallel=8, stages=None, on_done=None):
        asked.update(commands)
        calls.append(stages)
        nccl = _nccl_ok() + f"{UTIL_MARK}\n" + _samples([[100] * 8] * 3)
        return NodeEvidence(node, True, results={
            "loopback0": CommandResult(0, loop, "", False, 2.0, commands["loopback0"][0]),
            "loopback1": CommandResult(0, loop, "", False, 2.5, commands["loopback1"][0]),
            "nccl": CommandResult(0, nccl, "", False, 3.0, commands["nccl"][0]),
            "nvbandwidth": CommandResult(0, "garbage\n", "", False, 1.0, "nvbandwidth"),
            "dcgmi_diag": CommandResult(226, diag, "", False, 1.0, "dcgmi diag -r 2")})

    monkeypatch.setattr(ssh, "collect_node", fake_collect)
    host = _host("node01")
    assert host.profile.gpu.nvswitch
    ms = certify.node_probes(host, _pre22(), tmp_path, io=ssh.SshBackend())
    # one connection: the rails' loopbacks at once (each client with its server) and, the GPUs being on
    # NVSwitch, NCCL beside them; then one after another
    assert calls == [[["loopback0", "loopback1", "nccl"], ["nvbandwidth"], ["dcgmi_diag"]]]
    client, limit, server = asked["loopback1"]
    assert client.startswith("ib_write_bw -d mlx5_1 ") and client.endswith(" localhost") and limit == 22
    assert (
        server["cmd"].startswith("ib_write_bw -d mlx5_1 ")
        and " -p 18616 " in server["cmd"]
        and server["port"] == 18616
    )
    loops = [m for m in ms if m.probe == "ib_write_bw_loopback"]
    assert [m.subject for m in loops] == ["mlx5_0", "mlx5_1"] and all(
        m.value and m.status != "error" for m in loops
    )
    assert tool_seconds(ms) == 3.0 + 1.0 + 1.0  # the rails and NCCL at once, the rest one after another
    script, limit = asked["nccl"]
    assert "all_reduce_perf -b 8 -e 8G -f 2 -g 8" in script and "utilization.gpu" in script and limit == 22
    assert asked["dcgmi_diag"] == (dcgmi_diag_cmd(2), 900)
    by = {}
    for m in ms:
        by.setdefault(m.probe, []).append(m)
    assert [m.status for m in by["gpu_util_under_load"]] == ["pass"] * 8
    assert len(by["nccl_allreduce"]) == 1 and by["nccl_allreduce"][0].value is not None
    assert {m.subject for m in by["dcgmi_diag"]} >= {"Persistence Mode", "Inforom"}
    assert all(m.status == "fail" for m in by["dcgmi_diag"])
    findings = [m.finding() for m in ms]
    assert {f.check for f in findings} >= {
        "probe.gpu_util_under_load",
        "probe.dcgmi_diag",
        "probe.nccl_allreduce",
    }
    # without NVSwitch NCCL's traffic inside the node crosses PCIe, as the loopback traffic does: after the
    # rails
    host.profile = host.profile.model_copy(
        update={"gpu": host.profile.gpu.model_copy(update={"nvswitch": False})}
    )
    ms = certify.node_probes(host, _pre22(), tmp_path, io=ssh.SshBackend())
    assert calls[-1] == [["loopback0", "loopback1"], ["nccl"], ["nvbandwidth"], ["dcgmi_diag"]]
    assert tool_seconds(ms) == 2.5 + 3.0 + 1.0 + 1.0


def test_drift_counts_a_latency_rise_not_a_latency_fall_as_a_drop(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from clustercert.commands import drift
    from clustercert.probes import run as certify

    def lat(a, b, v):
        m = eval_perftest(Measurement("ib_write_lat", a, b, fabric=0), LAT,
                          res(LAT_GOOD.replace("1.07   ", f"{v}   ")), 30, lat=True)
        assert m.value == v
        return m

    # the n1-n2 link: +50 %; n3-n4: faster than the baseline; any other pair (round 2): as the baseline
    values = {frozenset(("n1", "n2")): 1.6, frozenset(("n3", "n4")): 0.9}
    monkeypatch.setenv("CLUSTERCERT_HOME", str(tmp_path))
    monkeypatch.setattr(certify, "pair_probes", lambda a, b, rnd, cfg, cp, *_, **__: (
        [lat(a.name, b.name, values.get(frozenset((a.name, b.name)), 1.07))], set()))
    inv = SimpleNamespace(
        hosts={n: SimpleNamespace(name=n, vars=SimpleNamespace()) for n in ("n1", "n2", "n3", "n4")}
    )
    baseline = [{"probe": "ib_write_lat", "fabric": 0, "value": 1.07, "status": "pass"}] * 4
    items, ms = drift.performance(inv, ["n1", "n2", "n3", "n4"], baseline, lambda n: 0.10, 2,
                                  io=ssh.SshBackend())
    assert len(ms) >= 2
    notes = " ".join(i.after or "" for i in items)
    assert "ib_write_lat fabric 0: 1.6 usec vs baseline median 1.07 (+50%" in notes
    assert "0.9" not in notes
    assert [(i.node, i.check) for i in items] == [("n1<->n2", "probe.link")]  # n1, n2 pass with others


def _timed(probe: str, a: str, b: str, elapsed: float | None) -> Measurement:
    return Measurement(probe, a, b, status="pass", elapsed=elapsed)


def test_pair_round_tool_time_is_the_longest_pair_stage_by_stage():
    from clustercert.probes.timing import pair_round_tool_seconds

    ms = [
        _timed("ib_write_bw", "n1", "n2", 5.2),
        _timed("ib_write_bw", "n1", "n2", 5.1),
        _timed("iperf3", "n1", "n2", 5.4),
        _timed("ib_write_lat", "n1", "n2", 5.1),
        _timed("ib_write_lat", "n1", "n2", 5.3),
        # n3->n4: slower bandwidth, latency not run (a node stopped answering): no time charged for it
        _timed("ib_write_bw", "n3", "n4", 7.0),
        _timed("ib_write_lat", "n3", "n4", None),
    ]
    assert pair_round_tool_seconds(ms) == 15.9  # n1->n2: max(5.2, 5.1) + 5.4 + max(5.1, 5.3); n3->n4: 7.0
    # the pair's NCCL all_reduce runs after its latency jobs
    assert pair_round_tool_seconds(ms + [_timed("nccl_allreduce", "n1", "n2", 2.5)]) == 18.4
    assert pair_round_tool_seconds([]) == 0.0


def test_probe_timing_critical_path_and_control_overhead():
    from clustercert.probes.timing import probe_timing, tool_seconds

    # a node's loopback rails run at once (the longest counts), its other probes one after another;
    # a command behind several values carries its time once
    per_node = {
        "n1": [
            _timed("ib_write_bw_loopback", "n1", "", 5.1),
            _timed("ib_write_bw_loopback", "n1", "", 5.2),
            _timed("nvbandwidth", "n1", "", 3.0),
            _timed("nvbandwidth", "n1", "", None),
        ],
        "n2": [_timed("ib_write_bw_loopback", "n2", "", 5.0)],
        "n3": [],
    }
    assert tool_seconds(per_node["n1"]) == 8.2
    # with the stages they ran in: the longest of each stage, the stages one after another
    staged = [
        Measurement("ib_write_bw_loopback", "n1", elapsed=5.1, stage=0),
        Measurement("nccl_allreduce", "n1", elapsed=6.0, stage=0),
        Measurement("nvbandwidth", "n1", elapsed=3.0, stage=1),
        Measurement("dcgmi_diag", "n1", elapsed=2.0, stage=2),
    ]
    assert tool_seconds(staged) == 11.0
    rounds = [{"round": 1, "wall_s": 12.0, "tool_s": 10.7}, {"round": 2, "wall_s": 6.5, "tool_s": 5.5}]
    t = probe_timing(per_node, 10.0, rounds, 29.0)
    assert t["node_probes"] == {"wall_s": 10.0, "tool_s": 8.2}
    assert t["probe_tool_s"] == 24.4 and t["probe_wall_s"] == 29.0
    assert t["control_overhead_s"] == 4.6 and t["control_overhead_pct"] == 15.9
    assert t["rounds"] == rounds
    assert probe_timing({}, 0.0, [], 0.0)["control_overhead_pct"] == 0.0


def test_run_probes_reports_timing_of_each_phase(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from clustercert.probes import run as certify

    monkeypatch.setenv("CLUSTERCERT_HOME", str(tmp_path))
    monkeypatch.setattr(
        certify,
        "node_probes",
        lambda h, cfg, cp, down, hcas_free=None, io=None, **_: [_timed("nccl_allreduce", h.name, "", 0.2)],
    )

    def pair(a, b, rnd, cfg, cp, slurm_states=None, plan=None, io=None, channels=None):
        assert slurm_states is None  # no Slurm in this inventory: nothing was asked of it
        time.sleep(0.1)
        return [
            _timed("ib_write_bw", a.name, b.name, 0.05),
            _timed("ib_write_lat", a.name, b.name, 0.02),
        ], set()

    monkeypatch.setattr(certify, "pair_probes", pair)
    inv = SimpleNamespace(hosts={n: _host(n) for n in ("n1", "n2", "n3", "n4")})
    for h in inv.hosts.values():
        h.vars.clustercert_slurm = False
    out = certify.run(inv, ["n1", "n2", "n3", "n4"], ProbeSettings(1, 5), ThresholdJudge(), 25,
                      io=ssh.SshBackend())
    t = out.timing
    assert [r["round"] for r in t["rounds"]] == [1] and t["rounds"][0]["tool_s"] == 0.07
    assert t["rounds"][0]["wall_s"] >= 0.1
    assert t["node_probes"]["tool_s"] == 0.2
    assert t["probe_wall_s"] == out.seconds
    assert t["probe_tool_s"] == 0.27 and t["control_overhead_s"] == round(out.seconds - 0.27, 2)


def test_round1_servers_start_once_their_node_loopback_tests_end(monkeypatch, tmp_path):
    """Round 1 is known before the node probes: a pair's servers start on its server node as soon as
    that node's loopback tests have ended (while its GPU probes still run), not with the round."""
    import threading
    from types import SimpleNamespace

    from clustercert.probes import run as certify

    monkeypatch.setenv("CLUSTERCERT_HOME", str(tmp_path))
    events, lock = [], threading.Lock()

    def node(h, cfg, cp, down, hcas_free=None, io=None, **_):
        if h.name in ("node02", "node04"):  # the round's server nodes: loopbacks end, the GPU probes go on
            time.sleep(0.05 if h.name == "node02" else 0.3)
            hcas_free(h.name)
            with lock:
                events.append(("loopback done", h.name))
        time.sleep(0.5)
        with lock:
            events.append(("node done", h.name))
        return []

    def start(server, timeout, *, control_dir=None, server_port=None, peer=None):
        with lock:
            events.append(("server", server[0]))
        return SimpleNamespace(server=server, timeout=timeout)

    plans = {}

    def pair(a, b, rnd, cfg, cp, slurm_states=None, plan=None, io=None, channels=None):
        plans[(a.name, b.name)] = plan
        plan.taken = True
        return [_timed("ib_write_bw", a.name, b.name, 0.1)], set()

    monkeypatch.setattr(certify, "node_probes", node)
    monkeypatch.setattr(ssh, "start_server", start)
    monkeypatch.setattr(certify, "pair_probes", pair)
    hosts = {n: _host(n, addresses={"ib0": f"10.251.0.{i}/24", "ib1": f"10.252.0.{i}/24"})
             for i, n in enumerate(("node01", "node02", "node03", "node04"), 11)}
    for h in hosts.values():
        h.vars.clustercert_slurm = False
    out = certify.run(SimpleNamespace(hosts=hosts), list(hosts), ProbeSettings(2, 20), ThresholdJudge(), 25,
                      io=ssh.SshBackend())
    assert len(out.rounds) == 1 and set(plans) == {("node01", "node02"), ("node03", "node04")}
    servers = [i for i, e in enumerate(events) if e[0] == "server"]
    # per pair: ib_write_bw and ib_write_lat per rail, iperf3 per fabric, ib_write_bw --use_cuda per GPU-NIC
    # pair
    assert len(servers) == 2 * 8
    # node02's servers started before any node finished its probes, node04's once its loopbacks ended
    first_done = events.index(next(e for e in events if e[0] == "node done"))
    assert all(events[i] == ("server", "node02") for i in servers[:8]) and servers[7] < first_done
    assert events.index(("loopback done", "node04")) < servers[8] or servers[8] < first_done
    for plan in plans.values():  # each pair was handed its started servers, bounded past the node phase too
        started = [f.result() for stage in plan.servers for f in stage]
        assert len(started) == 8 and all(x.timeout > plan.bound + 3 * 27 for x in started)


def test_collect_node_reports_each_command_as_it_ends(tmp_path):
    from clustercert.collect.ssh import collect_node

    seen, t0 = [], time.monotonic()
    ev = collect_node(
        "local",
        {"ansible_connection": "local"},
        {"quick": ("echo quick", 10), "slow": ("sleep 1; echo slow", 10), "last": ("echo last", 10)},
        stages=[["quick", "slow"], ["last"]],
        on_done=lambda name: seen.append((name, time.monotonic() - t0)),
    )
    assert ev.reachable and {k: r.stdout.strip() for k, r in ev.results.items()} == {
        "quick": "quick",
        "slow": "slow",
        "last": "last",
    }
    assert [n for n, _ in seen] == ["quick", "slow", "last"]
    assert seen[0][1] < 0.8 <= seen[1][1]  # the quick command was reported while the slow one ran


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


LATE_SERVER = ("import socket, sys, time; time.sleep({delay}); s = socket.socket(); "
               "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', {port})); "
               "s.listen(1); c, _ = s.accept(); c.sendall(b'hello from the server'); c.close()")
CLIENT = ("import socket; c = socket.create_connection(('127.0.0.1', {port}), timeout=5); "
          "print(c.recv(100).decode())")


def test_client_starts_once_the_servers_port_listens_not_after_a_fixed_wait():
    """A server that takes 1 s to listen: with its port named, the client (which does not retry)
    connects; the fixed-delay path alone (delay 0) would have been refused."""
    import shlex

    from clustercert.collect.ssh import run_server_client

    local = {"ansible_connection": "local"}
    port = _free_port()
    server = (
        "localhost",
        local,
        f"{sys.executable} -c {shlex.quote(LATE_SERVER.format(delay=1.0, port=port))}",
    )
    client = ("localhost", local, f"{sys.executable} -c {shlex.quote(CLIENT.format(port=port))}")
    t0 = time.monotonic()
    r = run_server_client(server, client, 20, server_start_delay=0, server_port=port)
    assert r.client.ok and "hello from the server" in r.client.stdout, r.client
    assert time.monotonic() - t0 < 6


def test_the_servers_output_is_kept_whole_without_the_start_lines():
    """The PGID line and the listen watcher's line share the server's SSH session; neither reaches
    the server's evidence, and what the server printed before and after listening does."""
    import shlex

    from clustercert.collect.ssh import run_server_client

    local = {"ansible_connection": "local"}
    port = _free_port()
    talky = (
        "print('before listening', flush=True); "
        + LATE_SERVER.format(delay=0.3, port=port)
        + "; print('after')"
    )
    server = ("localhost", local, f"{sys.executable} -c {shlex.quote(talky)}")
    client = ("localhost", local, f"{sys.executable} -c {shlex.quote(CLIENT.format(port=port))}")
    r = run_server_client(server, client, 20, server_start_delay=5, server_port=port)
    assert r.client.ok and "hello from the server" in r.client.stdout, r.client
    assert r.server.stdout.splitlines() == ["before listening", "after"], r.server
    assert r.server.rc == 0


def test_a_server_that_never_listens_costs_the_poll_bound_and_the_client_is_an_error():
    import shlex

    from clustercert.collect.ssh import LISTEN_POLL_S, run_server_client

    local = {"ansible_connection": "local"}
    port = _free_port()
    marker = f"never-listens-{port}"
    server = ("localhost", local, f"sleep 60; echo {marker}")
    client = ("localhost", local, f"{sys.executable} -c {shlex.quote(CLIENT.format(port=port))}")
    t0 = time.monotonic()
    r = run_server_client(server, client, 20, server_start_delay=0, server_port=port)
    took = time.monotonic() - t0
    assert not r.client.ok and "refused" in r.client.stderr.lower(), r.client
    assert LISTEN_POLL_S - 0.5 <= took < LISTEN_POLL_S + 5, took
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert f"echo {marker}" not in ps  # the server's group was killed with the probe


def test_listen_poll_script_tells_listening_from_closed_ports():
    import socket

    from clustercert.collect.ssh import listen_poll_script

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        assert subprocess.run(["/bin/sh", "-c", listen_poll_script(port, 1)]).returncode == 0
    assert subprocess.run(["/bin/sh", "-c", listen_poll_script(_free_port(), 0.2)]).returncode == 124


def test_a_probe_that_ends_normally_reaps_its_own_group_and_needs_no_kill_round_trip(monkeypatch):
    """Server and client each leave a background child behind; their wrappers kill them when the
    command ends and say so, so the controller sends no kill of its own, and the marks stay out of
    the evidence."""
    import shlex

    from clustercert.collect import ssh

    kills = []
    monkeypatch.setattr(ssh, "_kill_group", lambda *a: kills.append(a))
    local = {"ansible_connection": "local"}
    port = _free_port()
    left = f"left-behind-{port}"
    srv = (
        f"(sleep 77 && echo {left}) & {sys.executable} -c "
        f"{shlex.quote(LATE_SERVER.format(delay=0.2, port=port))}"
    )
    cli = f"(sleep 78 && echo {left}) & {sys.executable} -c {shlex.quote(CLIENT.format(port=port))}"
    r = ssh.run_server_client(("localhost", local, srv), ("localhost", local, cli), 20, server_port=port)
    assert r.client.ok and r.client.stdout.strip() == "hello from the server", r.client
    assert r.server.rc == 0 and ssh.END_MARK not in r.server.stdout
    assert kills == []
    time.sleep(0.2)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "sleep 77" not in ps and "sleep 78" not in ps


def test_a_client_killed_at_its_timeout_takes_its_children_with_it():
    from clustercert.collect.ssh import run_server_client

    local = {"ansible_connection": "local"}
    t0 = time.monotonic()
    r = run_server_client(None, ("localhost", local, "sleep 79 & sleep 80"), 2)
    assert r.client.timed_out and r.client.rc is None and time.monotonic() - t0 < 6
    time.sleep(0.2)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "sleep 79" not in ps and "sleep 80" not in ps


def test_listen_poll_sees_an_ipv6_listener():
    import socket

    from clustercert.collect.ssh import listen_poll_script

    if not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    with socket.socket(socket.AF_INET6) as s:
        try:
            s.bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback here")
        s.listen(1)
        port = s.getsockname()[1]
        assert subprocess.run(["/bin/sh", "-c", listen_poll_script(port, 1)]).returncode == 0


def test_a_node_runs_a_server_and_its_client_in_one_connection_stage_by_stage():
    """A loopback probe in the node's own runner: the client starts once its server listens (the
    server takes 0.6 s), its time is its own, the server's leftovers are killed, and the next stage
    starts after the first has ended."""
    import shlex

    from clustercert.collect.ssh import collect_node

    port = _free_port()
    srv = f"(sleep 81 &) ; {sys.executable} -c {shlex.quote(LATE_SERVER.format(delay=0.6, port=port))}"
    cli = f"{sys.executable} -c {shlex.quote(CLIENT.format(port=port))}"
    t0 = time.monotonic()
    ev = collect_node("local", {"ansible_connection": "local"},
                      {"loop": (cli, 10, {"cmd": srv, "port": port, "timeout": 15}),
                       "after": ("date +%s.%N", 5)},
                      stages=[["loop"], ["after"]])
    took = time.monotonic() - t0
    loop = ev.results["loop"]
    assert loop.ok and loop.stdout.strip() == "hello from the server", loop
    assert loop.seconds < 0.5 and took >= 0.6  # the server's start is not the client's time
    assert float(ev.results["after"].stdout) >= t0 + 0.6  # the second stage ran after the first
    time.sleep(0.2)
    assert "sleep 81" not in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout


def test_a_node_side_server_that_never_listens_leaves_an_error_and_nothing_running():
    import shlex

    from clustercert.collect.ssh import collect_node

    port = _free_port()
    cli = f"{sys.executable} -c {shlex.quote(CLIENT.format(port=port))}"
    ev = collect_node(
        "local",
        {"ansible_connection": "local"},
        {"loop": (cli, 10, {"cmd": "sleep 82", "port": port, "timeout": 15})},
        stages=[["loop"]],
    )
    res = ev.results["loop"]
    assert not res.ok and "refused" in res.stderr.lower()
    m = eval_perftest(Measurement("ib_write_bw_loopback", "local"), TH["ib_write_bw_loopback"], res, 10)
    assert m.status == "error"
    assert "sleep 82" not in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout


def test_with_a_background_pool_the_probe_returns_when_its_client_is_done():
    """The server (which lingers 2 s after serving) is ended in the background pool; the probe
    returns with the client's result at once, and the server's group is gone once the pool is done."""
    import shlex
    from concurrent.futures import ThreadPoolExecutor

    from clustercert.collect.ssh import finish_probe, start_server

    local = {"ansible_connection": "local"}
    port = _free_port()
    linger = LATE_SERVER.format(delay=0.1, port=port) + "; time.sleep(2); print('done')"
    srv_cmd = f"(sleep 83 &) ; {sys.executable} -c {shlex.quote(linger)}"
    client = ("localhost", local, f"{sys.executable} -c {shlex.quote(CLIENT.format(port=port))}")
    with ThreadPoolExecutor(2) as bg:
        srv = start_server(("localhost", local, srv_cmd), 20, server_port=port)
        t0 = time.monotonic()
        r = finish_probe(srv, client, 20, background=bg)
        assert time.monotonic() - t0 < 1.5 and r.client.ok and r.server is None and r.server_reachable
    assert srv.proc.returncode is not None  # ended (by itself: within the 3 s its client's success gives it)
    assert "sleep 83" not in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout


# ---- a tool that did not finish is an error, never a pass (issue 19.5) -------------------------

NCCL_OK = (FIX / "nccl-tests" / "all_reduce_perf-old-format-2x-dgx-a100-k8s.txt").read_text()


def _cut_after(text: str, needle: str) -> str:
    """``text`` up to and including the first line holding ``needle``: what a run that died there printed."""
    lines = text.splitlines(keepends=True)
    i = next(k for k, line in enumerate(lines) if needle in line)
    return "".join(lines[: i + 1])


@pytest.mark.parametrize("rc", [0, 134])
def test_a_truncated_nccl_sweep_is_an_error(rc):
    # the sweep died after 1 GiB (the last rows, the out-of-bounds and average lines never came)
    cut = _cut_after(NCCL_OK, "1073741824 ")
    whole = eval_nccl(Measurement("nccl_allreduce", "a"), TH["nccl_allreduce_1node"], res(NCCL_OK), 60)
    assert whole.status in ("pass", "fail") and whole.value == 188.53
    m = eval_nccl(Measurement("nccl_allreduce", "a"), TH["nccl_allreduce_1node"], res(cut, rc=rc), 60)
    assert m.status == "error" and m.value is None
    assert ("exited with status 134" in m.observed) if rc else ("no closing summary" in m.observed)


def test_an_nccl_sweep_short_of_its_own_max_bytes_is_an_error():
    # the header says maxBytes 8 GiB; the table (and its summary) stops at 4 GiB
    hdr = (
        "# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg "
        "iters: 1 validation: 1 graph: 0\n"
    )
    m = eval_nccl(Measurement("nccl_allreduce", "a"), TH["nccl_allreduce_1node"], res(hdr + NCCL_OK), 60)
    assert m.status == "error" and "4294967296" in m.observed and "8589934592" in m.observed
    hdr4 = hdr.replace("8589934592", "4294967296")
    m = eval_nccl(Measurement("nccl_allreduce", "a"), TH["nccl_allreduce_1node"], res(hdr4 + NCCL_OK), 60)
    assert m.status != "error" and m.value == 188.53


def test_perftest_nonzero_exit_or_no_summary_is_an_error():
    text = (FIX / "perftest" / "ib_read_bw-a-report_gbits-client-result-excerpt.txt").read_text()
    ok = eval_perftest(Measurement("ib_write_bw", "a", "b"), TH["ib_write_bw_pair"], res(text), 30)
    assert ok.status in ("pass", "fail")
    m = eval_perftest(Measurement("ib_write_bw", "a", "b"), TH["ib_write_bw_pair"], res(text, rc=1), 30)
    assert m.status == "error" and "exited with status 1" in m.observed
    head = text.split(" #bytes")[0]  # the banner, no result table: the client died before its summary
    m = eval_perftest(Measurement("ib_write_bw", "a", "b"), TH["ib_write_bw_pair"], res(head), 30)
    assert m.status == "error" and m.value is None


def test_iperf3_with_an_error_member_is_an_error():
    from clustercert.probes.evaluate import eval_iperf3

    doc = ('{"start": {"connecting_to": {"host": "10.251.0.12", "port": 5201}}, "intervals": [], "end": {},\n'
           ' "error": "unable to connect to server - server may have stopped running or use a different '
           'port"}\n')
    m = eval_iperf3(Measurement("iperf3", "a", "b"), TH["iperf3_ipoib"], res(doc, rc=1), 30)
    assert m.status == "error" and "unable to connect to server" in m.observed
