"""NCCL all_reduce across two nodes: the mpirun/srun command lines, where it runs in a pair's probes
(after the bandwidth and latency probes), its verdicts, and the cleanup that leaves no rank or launch
daemon behind on either node, even after a timeout."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from clustercert.checks.rails import node_rails
from clustercert.collect import ssh
from clustercert.collect.slurm import NodeState
from clustercert.collect.ssh import ProbeRun, collect_node
from clustercert.model.evidence import CommandResult, NodeEvidence
from clustercert.model.profile import load_profile
from clustercert.probes import commands as probes
from clustercert.probes import run as certify
from clustercert.probes.plan import ProbeSettings

FIX = Path(__file__).parent / "fixtures" / "nccl-tests"
# a real rank line (NVIDIA/nccl-tests#369's 2 x GH200 run), its host and rank set per GPU below
RANK_LINE = next(
    ln
    for ln in (FIX / "all_reduce_perf-2node-GH200-slingshot-wrong-96-32-FAILED.txt").read_text().splitlines()
    if ln.startswith("#  Rank  0 ")
)


def with_ranks(text: str, hosts: list[str], gpus: int) -> str:
    """A real table whose excerpt left out its "# Rank" lines, with the lines the run printed: ``gpus``
    ranks on each of ``hosts``, numbered across them."""
    lines = [RANK_LINE.replace("Rank  0 ", f"Rank {n * gpus + g:>2} ").replace("gpu-1-1", host)
             .replace("device  0", f"device {g:>2}") for n, host in enumerate(hosts) for g in range(gpus)]
    return "# Using devices\n" + "\n".join(lines) + "\n" + text


SINGLE = (FIX / "all_reduce_perf-old-error-NA-8xa100-superbench.txt").read_text()  # 8 ranks on localhost
GOOD = with_ranks((FIX / "all_reduce_perf-old-format-2x-dgx-a100-k8s.txt").read_text(), ["node1", "node2"], 8)
SLOW = with_ranks(
    (FIX / "all_reduce_perf-wrong-NA-ipoib-tcp-slow.txt").read_text(), ["node1.lab", "10.0.0.2"], 8
)


def _host(name: str, slurm: bool = False, slurm_name: str | None = None, gres: str | None = "gpu"):
    return SimpleNamespace(
        name=name,
        connection={"ansible_host": f"10.0.0.{name[-1]}"},
        profile=load_profile("lab"),
        vars=SimpleNamespace(
            clustercert_fabric_addresses={},
            clustercert_slurm=slurm,
            clustercert_slurm_node_name=slurm_name,
            clustercert_slurm_gres=gres,
        ),
    )


def test_mpirun_command_one_process_per_host_driving_all_its_gpus():
    cmd = probes.nccl_pair_mpirun_cmd(["10.0.0.1", "10.0.0.2"], 8, "t0k")
    assert cmd.startswith(
        "mpirun --allow-run-as-root -np 2 -H 10.0.0.1:1,10.0.0.2:1 --map-by slot --bind-to none "
    )
    assert "-x CLUSTERCERT_PROBE_TAG=t0k " in cmd and "plm_rsh_args '-o BatchMode=yes'" in cmd
    assert cmd.endswith("all_reduce_perf -b 8 -e 8G -f 2 -g 8")


def test_srun_command_names_the_slurm_nodes_the_job_and_a_time_limit():
    cmd = probes.nccl_pair_srun_cmd(["gpu-a", "gpu-b"], 4, "t0k", 65, "gpu")
    # the step asks Slurm for the node's GPUs: with ConstrainDevices a step that asks none sees none
    assert cmd.startswith("srun --nodes=2 --ntasks-per-node=1 --nodelist=gpu-a,gpu-b --gres=gpu:4 "
                          "--job-name=clustercert-nccl-t0k ")
    assert "--time=2 " in cmd and "--export=ALL,CLUSTERCERT_PROBE_TAG=t0k " in cmd
    assert cmd.endswith("all_reduce_perf -b 8 -e 8G -f 2 -g 4")
    assert probes.nccl_pair_cleanup_cmd("t0k", slurm=True).startswith("scancel --name=clustercert-nccl-t0k ")
    assert "scancel" not in probes.nccl_pair_cleanup_cmd("t0k")


@pytest.mark.parametrize("gres, want", [("gpu:h100", " --gres=gpu:h100:8 "), (None, None)])
def test_srun_gres_request_follows_the_inventory(gres, want):
    """A typed GRES (gpu:h100) is asked per node with its type; a Slurm without GPU GRES (null) asks none."""
    cmd = probes.nccl_pair_srun_cmd(["a", "b"], 8, "t0k", 30, gres)
    if want:
        assert want in cmd
    else:
        assert "--gres" not in cmd and cmd.endswith("-g 8")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_cleanup_kills_the_tagged_ranks_and_their_launch_daemon_and_nothing_else(tmp_path):
    daemon = tmp_path / "orted"  # a stand-in for OpenMPI's orted: it starts a rank and waits for it
    daemon.write_text("#!/bin/sh\nCLUSTERCERT_PROBE_TAG=mine sleep 300 &\nwait\n")
    daemon.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "CLUSTERCERT_PROBE_TAG"}
    procs = {
        "daemon": subprocess.Popen([str(daemon)], env=env),
        "rank": subprocess.Popen(["sleep", "300"], env=dict(env, CLUSTERCERT_PROBE_TAG="mine")),
        "other_launch": subprocess.Popen(["sleep", "300"], env=dict(env, CLUSTERCERT_PROBE_TAG="mine2")),
        "untagged": subprocess.Popen(["sleep", "300"], env=env),
    }
    try:
        time.sleep(0.5)
        ev = collect_node("local", {"ansible_connection": "local"},
                          {"cleanup": (probes.nccl_pair_cleanup_cmd("mine"), 15.0)})
        r = ev.results["cleanup"]
        assert r.ok and r.stdout.startswith("KILLED="), r
        killed = {int(x) for x in r.stdout.split("=", 1)[1].split()}
        assert procs["rank"].pid in killed and procs["daemon"].pid in killed
        for p in procs.values():
            try:
                p.wait(timeout=0.1 if p is procs["untagged"] or p is procs["other_launch"] else 5)
            except subprocess.TimeoutExpired:
                pass
        assert not _alive(procs["rank"].pid) and not _alive(procs["daemon"].pid)
        assert _alive(procs["other_launch"].pid) and _alive(procs["untagged"].pid)
        r2 = collect_node("local", {"ansible_connection": "local"},
                          {"cleanup": (probes.nccl_pair_cleanup_cmd("mine"), 15.0)}).results["cleanup"]
        assert r2.ok and r2.stdout.strip() == "KILLED="  # nothing left to kill
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
        subprocess.run(
            ["/bin/sh", "-c", probes.nccl_pair_cleanup_cmd("mine")], capture_output=True, check=False
        )


def _fake(monkeypatch, result: CommandResult):
    calls = []

    def fake_run(server, client, timeout, *, control_dir=None, **_):
        calls.append(("run", client[0], client[2], timeout, time.monotonic()))
        time.sleep(0.05)
        return ProbeRun(None, result)

    def fake_collect(node, conn, commands, *, control_dir=None, parallel=8):
        calls.append(("collect", node, commands["cleanup"][0], commands["cleanup"][1], time.monotonic()))
        return NodeEvidence(node, True, results={"cleanup": CommandResult(0, "KILLED=", "", False, 0.1)})

    monkeypatch.setattr(ssh, "run_server_client", fake_run)
    monkeypatch.setattr(ssh, "collect_node", fake_collect)
    monkeypatch.setattr(ssh, "collect_node", fake_collect)  # through collect_many
    return calls


def test_nccl_pair_judged_against_the_pair_threshold_and_cleaned_up_on_both_nodes(monkeypatch, tmp_path):
    th = load_profile("lab").thresholds["nccl_allreduce_pair"]
    cfg = ProbeSettings(2, 20)
    calls = _fake(monkeypatch, CommandResult(0, GOOD, "", False, 3.0, "mpirun"))
    m = certify.nccl_pair(_host("node1"), _host("node2"), 1, cfg, tmp_path, th, set(), io=ssh.SshBackend())
    assert (m.probe, m.a, m.b, m.subject, m.round) == (
        "nccl_allreduce",
        "node1",
        "node2",
        "node1+node2, 16 GPUs",
        1,
    )
    assert m.status == "pass" and m.value == 188.53 and m.unit == "gbyte_per_s"
    run, *cleanups = calls
    assert (
        run[1] == "node1"
        and run[2].startswith("mpirun ")
        and "-H 10.0.0.1:1,10.0.0.2:1" in run[2]
        and run[2].endswith(" -g 8")
        and run[3] == 22
    )
    tag = run[2].split("CLUSTERCERT_PROBE_TAG=")[1].split()[0]
    assert sorted(c[1] for c in cleanups) == ["node1", "node2"]
    assert all(f"CLUSTERCERT_PROBE_TAG={tag}" in c[2] and c[3] == 15.0 for c in cleanups)
    calls = _fake(monkeypatch, CommandResult(0, SLOW, "", False, 3.0, "mpirun"))
    m = certify.nccl_pair(_host("node1"), _host("node2"), 1, cfg, tmp_path, th, set(), io=ssh.SshBackend())
    assert m.status == "fail" and m.value == 3.15


@pytest.mark.parametrize("text, why", [
    # nccl-tests built without MPI, or a launcher that put both processes on the first host
    (with_ranks((FIX / "all_reduce_perf-old-format-2x-dgx-a100-k8s.txt").read_text(), ["node1", "node1"], 8),
     "16 ranks on node1, none on node2"),
    (with_ranks((FIX / "all_reduce_perf-old-format-2x-dgx-a100-k8s.txt").read_text(), ["node1"], 8),
     "8 of the 2 nodes x 8 GPUs = 16 ranks asked for: 8 ranks on node1, none on node2"),
    # two single-node runs' outputs joined (a real 8-GPU run, once on each node): 235 GB/s passed before
    (SINGLE.replace("localhost", "node1") + SINGLE.replace("localhost", "node2"),
     "ranks 0-7 printed more than once (more than one run's output)"),
    (with_ranks((FIX / "all_reduce_perf-old-format-2x-dgx-a100-k8s.txt").read_text(), ["node1", "gpu-9"], 8),
     "none on node2, 8 on gpu-9 (not a node asked for)"),
    ((FIX / "all_reduce_perf-old-format-2x-dgx-a100-k8s.txt").read_text(), "ran 0 of the 2 nodes"),
])
def test_a_pair_run_that_did_not_cover_both_nodes_is_an_error_whatever_its_figure(
    monkeypatch, tmp_path, text, why
):
    th = load_profile("lab").thresholds["nccl_allreduce_pair"]
    _fake(monkeypatch, CommandResult(0, text, "", False, 3.0, "mpirun"))
    m = certify.nccl_pair(_host("node1"), _host("node2"), 1, ProbeSettings(2, 20), tmp_path, th, set(),
                          io=ssh.SshBackend())
    assert m.status == "error" and why in m.observed, m.observed
    assert m.value is None


def test_a_timed_out_launch_is_an_error_and_both_nodes_are_still_cleaned(monkeypatch, tmp_path):
    th = load_profile("lab").thresholds["nccl_allreduce_pair"]
    calls = _fake(monkeypatch, CommandResult(None, "", "", True, 22.0, "mpirun ..."))
    m = certify.nccl_pair(_host("node1"), _host("node2"), 1, ProbeSettings(2, 20), tmp_path, th, set(),
                          io=ssh.SshBackend())
    assert m.status == "error" and "timed out after 22 s" in m.observed
    assert [c[1] for c in calls if c[0] == "collect"] == ["node1", "node2"]


def test_slurm_clusters_launch_with_srun_and_cancel_the_job(monkeypatch, tmp_path):
    th = load_profile("lab").thresholds["nccl_allreduce_pair"]
    calls = _fake(monkeypatch, CommandResult(0, GOOD, "", False, 3.0, "srun"))
    a, b = _host("node1", True, "gpu-a"), _host("node2", True, None)
    idle = {"node1": NodeState("gpu-a", "IDLE", None), "node2": NodeState("node2", "IDLE", None)}
    m = certify.nccl_pair(a, b, 2, ProbeSettings(2, 20), tmp_path, th, set(), idle, io=ssh.SshBackend())
    assert m.status == "pass" and m.evidence.startswith("launched with srun\n")
    assert calls[0][2].startswith("srun --nodes=2 --ntasks-per-node=1 --nodelist=gpu-a,node2 ")
    assert f" --gres=gpu:{a.profile.gpu.count} " in calls[0][2]
    assert all(c[2].startswith("scancel --name=clustercert-nccl-") for c in calls[1:])


@pytest.mark.parametrize(
    "states, why",
    [
        (
            {
                "node1": NodeState("gpu-a", "IDLE+DRAIN", "clustercert: gpu.count"),
                "node2": NodeState("node2", "IDLE", None),
            },
            "gpu-a: IDLE+DRAIN",
        ),
        (
            {"node1": NodeState("gpu-a", "IDLE", None), "node2": NodeState("node2", "MIXED", None)},
            "node2: MIXED",
        ),
        (
            {
                "node1": NodeState("gpu-a", "IDLE", None),
                "node2": "scontrol could not read it (node1: timed out)",
            },
            "node2: scontrol could not read it (node1: timed out)",
        ),
        (None, "gpu-a: state not read; node2: state not read"),
    ],
)
def test_slurm_pairs_that_slurm_cannot_place_now_launch_with_mpirun_and_say_why(
    monkeypatch, tmp_path, states, why
):
    """A node under certification is usually drained (or busy): srun would be refused or wait, so the
    pair launches over ssh, and the evidence names the state that kept srun off."""
    th = load_profile("lab").thresholds["nccl_allreduce_pair"]
    calls = _fake(monkeypatch, CommandResult(0, GOOD, "", False, 3.0, "mpirun"))
    a, b = _host("node1", True, "gpu-a"), _host("node2", True, None)
    m = certify.nccl_pair(a, b, 1, ProbeSettings(2, 20), tmp_path, th, set(), states, io=ssh.SshBackend())
    assert m.status == "pass" and calls[0][2].startswith("mpirun ")
    assert m.evidence.startswith(f"launched with mpirun over ssh: Slurm cannot start a step now ({why})\n"), (
        m.evidence
    )
    assert not any("scancel" in c[2] for c in calls[1:])


def test_nccl_pair_is_not_run_with_a_node_down(monkeypatch, tmp_path):
    th = load_profile("lab").thresholds["nccl_allreduce_pair"]
    calls = _fake(monkeypatch, CommandResult(0, GOOD, "", False, 3.0, "mpirun"))
    m = certify.nccl_pair(_host("node1"), _host("node2"), 1, ProbeSettings(2, 20), tmp_path, th, {"node2"},
                          io=ssh.SshBackend())
    assert m.status == "error" and "node2 stopped answering" in m.observed and not calls


def test_pair_probes_run_nccl_after_the_perftests_and_the_ddp_test_last(monkeypatch, tmp_path):
    bw = (
        Path(__file__).parent / "fixtures/perftest/ib_read_bw-a-report_gbits-client-result-excerpt.txt"
    ).read_text()
    seen = []

    def fake_run(server, client, timeout, *, control_dir=None, **_):
        seen.append((client[2].split()[0], client[2]))
        time.sleep(0.05)
        return ProbeRun(
            None, CommandResult(0, GOOD if client[2].startswith("mpirun") else bw, "", False, 1, client[2])
        )

    monkeypatch.setattr(ssh, "run_server_client", fake_run)
    monkeypatch.setattr(ssh, "start_server", lambda server, timeout, **_: server)
    monkeypatch.setattr(
        ssh, "finish_probe", lambda srv, client, timeout, **k: fake_run(srv, client, timeout, **k)
    )
    # the reachability pass and the cleanup (through collect_many)
    monkeypatch.setattr(ssh, "collect_node", lambda node, conn, commands, **_: NodeEvidence(node, True))
    # the rails as certify hands them over: the lab profile's names, each GPU's NUMA node from topo -m
    lab = node_rails(load_profile("lab"), {"devices": [], "matrix": {}, "affinity": {
        "GPU0": {"numa_affinity": "0"}, "GPU4": {"numa_affinity": "1"}}}, None)
    ms, down = certify.pair_probes(_host("node1"), _host("node2"), 1,
                                   ProbeSettings(2, 20, rails={"node1": lab, "node2": lab}), tmp_path,
                                   io=ssh.SshBackend())
    # the perftests (ib_write_bw --use_cuda runs under numactl), then NCCL, then the DDP smoke test (torchrun
    # started after picking a free port)
    tools = [t for t, _ in seen]
    assert tools[-2:] == ["mpirun", "port=$(python3"], tools
    assert set(tools[:-2]) == {"ib_write_bw", "numactl", "ib_write_lat"}, tools
    by_probe = {m.probe: m for m in ms}
    assert by_probe["nccl_allreduce"].status == "pass" and not down
    # the fake NCCL printed no NCCL_DEBUG=INFO lines, the fake torchrun nothing of the test: errors, not
    # passes
    assert (
        by_probe["nccl_transport"].status == "error"
        and ms[-1].probe == "ddp_step"
        and ms[-1].status == "error"
    )
    assert " -x NCCL_DEBUG=INFO " in next(line for t, line in seen if t == "mpirun")
    cfg = ProbeSettings(2, 20, only=frozenset({"ib_write_bw"}))
    seen.clear()
    ms, _ = certify.pair_probes(_host("node1"), _host("node2"), 1, cfg, tmp_path, io=ssh.SshBackend())
    assert "mpirun" not in [t for t, _ in seen] and all(m.probe == "ib_write_bw" for m in ms)


def test_reports_show_nccl_across_nodes_as_one_all_rails_heatmap(tmp_path):
    """An NCCL pair link has no fabric (it uses every rail): the reports group it under "All rails"
    and hold it to nccl_allreduce_pair, not to the single-node figure."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from test_certificate import NODES, sample_certificate

    from clustercert.record import certificate as cc
    from clustercert.report.common import threshold_for
    from clustercert.report.files import write_reports

    cert = sample_certificate()
    cert["thresholds"] = {
        "nccl_allreduce_1node": {"floor": 460.0, "ceiling": None, "unit": "gbyte_per_s", "source": "1"},
        "nccl_allreduce_pair": {"floor": 80.0, "ceiling": None, "unit": "gbyte_per_s", "source": "2"},
    }
    a, b = NODES[0], NODES[1]
    cert["links"] += [
        {
            "a": a,
            "b": b,
            "fabric": None,
            "probe": "nccl_allreduce",
            "value": 96.0,
            "unit": "gbyte_per_s",
            "status": "pass",
            "round": 1,
            "subject": f"{a}+{b}, 16 GPUs",
        }
    ]
    assert threshold_for(cert, "nccl_allreduce")["floor"] == 80.0
    key, _ = cc.load_or_create_key(cc.init_key(tmp_path / "state"), tmp_path / "state")
    paths = write_reports(cc.sign(cert, key), tmp_path / "out")
    html_text = paths["html"].read_text()
    assert (
        'data-probe="nccl_allreduce"' in html_text
        and "All rails · NCCL all_reduce bus bandwidth" in html_text
    )
    assert 'classname="link.all_rails.nccl_allreduce"' in paths["junit"].read_text()
    assert "| all | nccl_allreduce |" in paths["summary"].read_text()


def test_the_outlier_rule_compares_pair_figures_with_pair_figures():
    """NCCL on one node (~480 GB/s) and across a pair (~96 GB/s) share the probe name: the pair's
    figures are not judged against the nodes' median."""
    from clustercert.probes.evaluate import Measurement, apply_outlier_rule

    nodes = [Measurement("nccl_allreduce", f"n{i}", value=479.0, status="pass") for i in range(4)]
    pairs = [Measurement("nccl_allreduce", "n0", "n1", value=96.0, status="pass"),
             Measurement("nccl_allreduce", "n2", "n3", value=96.0, status="pass"),
             Measurement("nccl_allreduce", "n4", "n5", value=40.0, status="pass")]
    apply_outlier_rule(nodes + pairs, 0.9, "seed")
    assert [m.status for m in nodes] == ["pass"] * 4
    assert [m.status for m in pairs] == ["pass", "pass", "fail"] and "median 96" in pairs[2].observed


def test_slurm_states_are_read_once_for_the_slurm_nodes_whose_pair_nccl_runs(monkeypatch, tmp_path):
    def host(name, slurm):
        return SimpleNamespace(
            name=name,
            vars=SimpleNamespace(clustercert_slurm=slurm, clustercert_slurm_node_name=None),
            profile=SimpleNamespace(thresholds={"nccl_allreduce_pair": object()}, ddp=None),
        )

    inv = SimpleNamespace(hosts={"n1": host("n1", True), "n2": host("n2", True), "n3": host("n3", False)})
    asked = []

    def fake_read(inv_, names, skip=frozenset(), control_dir=None):
        asked.append(dict(names))
        return ("n1", inv_.hosts["n1"]), {"n1": NodeState("n1", "IDLE+DRAIN", "admin")}, []

    monkeypatch.setattr(certify, "read_states", fake_read)
    states = certify.slurm_launch_states(inv, ["n1", "n2", "n3"], ProbeSettings(2, 20), tmp_path)
    assert asked == [{"n1": "n1", "n2": "n2"}]  # not n3: it is not a Slurm node
    assert states["n1"].state == "IDLE+DRAIN" and states["n2"].startswith("scontrol could not read it (")
    # no pair NCCL through Slurm (no Slurm node, or NCCL not among the probes): Slurm is not asked
    only_bw = ProbeSettings(2, 20, frozenset({"ib_write_bw"}))
    assert certify.slurm_launch_states(inv, ["n1", "n2"], only_bw, tmp_path) is None
    assert certify.slurm_launch_states(inv, ["n3"], ProbeSettings(2, 20), tmp_path) is None
    assert len(asked) == 1
