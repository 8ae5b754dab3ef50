"""probe.nccl_cluster (issue 33.2): one all_reduce across every node the pair rounds cleared, per rail group,
judged on its rank lines and its scaling efficiency against the median pair busbw; fewer than three cleared
nodes is a skip. Its run is one mpirun -H over the nodes (or one srun step: tests/test_srun_backend.py), it
reaches the certificate's cluster_findings and every report. Real nccl-tests outputs throughout
(tests/fixtures/SOURCES.md)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_certificate import sample_certificate
from test_nccl_pair import SINGLE, _fake, _host, with_ranks
from test_srun_backend import inventory, slurm  # noqa: F401 - slurm: the stand-in Slurm fixture

from clustercert.collect.ssh import SshBackend
from clustercert.model.evidence import CommandResult
from clustercert.model.profile import load_profile
from clustercert.parsers import parse
from clustercert.probes import cluster
from clustercert.probes import run as certify
from clustercert.probes.evaluate import Measurement, nccl_rank_problem
from clustercert.probes.localise import Localisation
from clustercert.probes.plan import ProbeSettings
from clustercert.record import certificate as cc
from clustercert.record.results import cluster_record, cluster_verdict_with
from clustercert.report.html import render_html
from clustercert.report.junit import render_junit
from clustercert.report.markdown import render_summary

FIX = Path(__file__).parent / "fixtures" / "nccl-tests"
# NVIDIA/nccl-tests#369: a real run across 2 GH200 nodes, 4 ranks on each (its table failed: CUDA busy)
GH200 = (FIX / "all_reduce_perf-2node-GH200-exclusive-process-cuda-busy-failure.txt").read_text()
TABLE = (FIX / "all_reduce_perf-old-format-2x-dgx-a100-k8s.txt").read_text()  # busbw 188.53 GB/s at 4 GiB
NODES3 = ["node1", "node2", "node3"]
T = load_profile("lab").thresholds["nccl_allreduce_cluster"]
ALL = cluster.RailGroup("all rails", None, (), 1.0)


def addrs(names: list[str]) -> dict[str, str]:
    return {n: f"10.0.0.{n[-1]}" for n in names}


def judge(
    text: str, median: float | None, nodes: list[str] = NODES3, group: cluster.RailGroup = ALL, rc: int = 0
):
    return cluster.eval_cluster(
        nodes[0], group, addrs(nodes), 8, T, CommandResult(rc, text, "", False, 3.0, "mpirun"), 22, median
    )


def test_rank_lines_of_a_real_multi_node_run_cover_its_nodes_and_name_the_one_missing():
    rec = parse("nccl-tests", GH200)
    assert nccl_rank_problem(rec, {"gpu-1-1": "10.1.0.1", "gpu-1-7": "10.1.0.7"}, 4) is None
    why = nccl_rank_problem(rec, {"gpu-1-1": "10.1.0.1", "gpu-1-7": "10.1.0.7", "gpu-1-9": "10.1.0.9"}, 4)
    assert why == ("nccl-tests ran 8 of the 3 nodes x 4 GPUs = 12 ranks asked for: 4 ranks on gpu-1-1, 4 "
                   "ranks on gpu-1-7, none on gpu-1-9")


def test_a_cluster_that_keeps_the_pair_busbw_passes_with_n_and_its_scaling_efficiency():
    m = judge(with_ranks(TABLE, NODES3, 8), 190.0)
    assert (m.probe, m.a, m.status, m.value, m.unit) == (
        "nccl_cluster",
        "node1",
        "pass",
        188.53,
        "gbyte_per_s",
    )
    assert m.subject == "3 nodes x 8 GPUs, all rails" and m.nodes == NODES3 and m.fabric is None
    assert m.observed == ("188.53 gbyte_per_s across 3 nodes (24 ranks): scaling efficiency 0.99 of the "
                          "median pair busbw 190 gbyte_per_s")
    assert m.expected.startswith(
        ">= 171 gbyte_per_s: 0.9 x the median pair busbw 190 gbyte_per_s (scaling efficiency"
    )
    f = m.finding()
    assert (f.check, f.threshold) == ("probe.nccl_cluster", "nccl_allreduce_cluster")


def test_a_cluster_below_the_scaling_floor_fails():
    m = judge(with_ranks(TABLE, NODES3, 8), 250.0)
    assert m.status == "fail" and m.value == 188.53
    assert "scaling efficiency 0.75 of the median pair busbw 250" in m.observed


@pytest.mark.parametrize(
    "text, why",
    [
        # every rank on the first host (nccl_one_host in the lab): 24 ranks, one host
        (
            with_ranks(TABLE, ["node1", "node1", "node1"], 8),
            "24 ranks on node1, none on node2, none on node3",
        ),
        (
            with_ranks(TABLE, ["node1", "node2", "gpu-9"], 8),
            "none on node3, 8 on gpu-9 (not a node asked for)",
        ),
        # three single-node runs' outputs joined (a real 8-GPU run): ranks 0-7 three times, whatever its
        # figure
        (
            SINGLE.replace("localhost", "node1")
            + SINGLE.replace("localhost", "node2")
            + SINGLE.replace("localhost", "node3"),
            "ranks 0-7 printed more than once",
        ),
    ],
)
def test_a_cluster_run_on_the_wrong_hosts_is_an_error_whatever_its_figure(text, why):
    m = judge(text, 100.0)
    assert m.status == "error" and m.value is None and why in m.observed, m.observed


def test_a_failed_launch_and_no_pair_figure_are_errors():
    m = judge(GH200, 100.0, ["gpu-1-1", "gpu-1-7", "gpu-1-9"], rc=1)
    assert m.status == "error" and m.observed.startswith("nccl-tests failed") and m.value is None, m.observed
    m = judge(with_ranks(TABLE, NODES3, 8), None)
    assert m.status == "error" and "no pair NCCL figure to scale against" in m.observed
    assert m.expected.startswith(">= 0.9 x the median pair busbw")


def test_one_fabric_is_judged_against_its_share_of_the_rated_rails():
    groups = cluster.rail_groups(load_profile("lab"))
    assert [(g.label, g.fabric, g.hcas, g.share, g.env) for g in groups] == [
        ("all rails", None, (), 1.0, {}),
        ("fabric 0", 0, ("mlx5_0",), 0.5, {"NCCL_IB_HCA": "=mlx5_0"}),
        ("fabric 1", 1, ("mlx5_1",), 0.5, {"NCCL_IB_HCA": "=mlx5_1"})]
    m = judge(with_ranks(TABLE, NODES3, 8), 300.0, group=groups[1])
    assert m.status == "pass" and m.fabric == 0 and m.subject == "3 nodes x 8 GPUs, fabric 0"
    assert (
        "scaling efficiency 1.26 of the median pair busbw 300 gbyte_per_s x fabric 0's share 0.5"
        in m.observed
    )
    assert judge(with_ranks(TABLE, NODES3, 8), 450.0, group=groups[1]).status == "fail"  # 188.53 < 0.9 x 225
    # one fabric: one run over every rail
    assert [g.label for g in cluster.rail_groups(load_profile("h100-sxm-8x-ndr"))] == ["all rails"]


def _pair(
    a: str, b: str, status: str = "pass", value: float | None = 100.0, rnd: int = 1
) -> list[Measurement]:
    return [Measurement("ib_write_bw", a, b, status="pass", value=390.0, round=rnd),
            Measurement("nccl_allreduce", a, b, status=status, value=value, round=rnd)]


def test_cleared_nodes_passed_a_pair_their_own_probes_and_no_localisation_names_them():
    nodes = ["n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8"]
    pairs = (_pair("n1", "n2") + _pair("n3", "n4", "fail", 20.0) + _pair("n5", "n6") + _pair("n7", "n8")
             + _pair("n3", "n1", rnd=2))  # n3 cleared in round 2; n4 not
    locs = [Localisation("bad_node", "n4", "slow"), Localisation("bad_link", "n7<->n8", "fabric 0")]
    assert cluster.cleared_nodes(nodes, pairs, {"n6"}, {"n5"}, locs) == ["n1", "n2", "n3"]
    assert cluster.median_pair(pairs, ["n1", "n2", "n3"]) == 100.0
    assert cluster.median_pair(pairs, ["n1", "n5"]) is None


def test_fewer_than_three_cleared_nodes_is_a_skip_saying_why_never_a_pass():
    prof = load_profile("lab")
    plan = cluster.cluster_plan(["n1", "n2", "n3", "n4"], ["n1", "n2"], prof, prof.thresholds)
    (m,) = cluster.skipped(plan, "n1", 8)
    assert m.status == "skip" and m.probe == "nccl_cluster"
    assert m.observed == ("not run: 2 of 4 nodes passed the pair rounds (n1, n2); the cluster run needs at "
                          "least 3 (a pair is already measured by probe.nccl_allreduce)")
    assert cluster.cluster_plan(["n1"], [], prof, {}) is None  # not asked for (--probes without nccl)
    assert cluster.cluster_plan(["n1", "n2", "n3"], ["n1", "n2", "n3"], prof, prof.thresholds).skip is None


def _inv(names: list[str]):
    return SimpleNamespace(hosts={n: _host(n) for n in names})


def test_the_run_is_one_mpirun_over_the_cleared_nodes_per_rail_group_and_every_node_is_cleaned(
    monkeypatch, tmp_path
):
    names = ["node1", "node2", "node3", "node4"]
    calls = _fake(
        monkeypatch,
        CommandResult(0, with_ranks(TABLE, ["node1", "node2", "node3"], 8), "", False, 3.0, "mpirun"),
    )
    pairs = _pair("node1", "node2", value=190.0) + _pair("node3", "node4", "fail", 20.0) + \
        _pair("node3", "node1", value=186.0, rnd=2)
    out = certify.cluster_probes(_inv(names), names, ProbeSettings(2, 20), tmp_path, pairs, set(), set(),
                                 [Localisation("bad_node", "node4", "slow")], io=SshBackend())
    assert [(m.subject, m.status) for m in out] == [("3 nodes x 8 GPUs, all rails", "pass"),
                                                    ("3 nodes x 8 GPUs, fabric 0", "pass"),
                                                    ("3 nodes x 8 GPUs, fabric 1", "pass")]
    assert "median pair busbw 188 gbyte_per_s" in out[0].observed  # of 190 and 186
    runs = [c for c in calls if c[0] == "run"]
    assert [r[1] for r in runs] == ["node1"] * 3 and all(r[3] == 22 for r in runs)
    assert all(" -np 3 -H 10.0.0.1:1,10.0.0.2:1,10.0.0.3:1 " in r[2] and r[2].endswith(" -g 8") for r in runs)
    assert "NCCL_IB_HCA" not in runs[0][2] and " -x NCCL_IB_HCA==mlx5_0 " in runs[1][2]
    assert " -x NCCL_IB_HCA==mlx5_1 " in runs[2][2]
    assert out[1].evidence.startswith("launched with mpirun over ssh (NCCL_IB_HCA==mlx5_0)\n")
    cleaned = [c[1] for c in calls if c[0] == "collect"]
    assert sorted(cleaned) == sorted(["node1", "node2", "node3"] * 3)  # node4 took no part
    # no pair NCCL figure between the cleared nodes: an error per rail group, nothing run
    calls.clear()
    out = certify.cluster_probes(_inv(names), names, ProbeSettings(2, 20), tmp_path,
                                 [m for m in pairs if m.probe != "nccl_allreduce"], set(), set(), [],
                                 io=SshBackend())
    assert [m.status for m in out] == ["error"] * 3 and not calls
    assert "no pair NCCL figure to scale against" in out[0].observed
    # two cleared nodes: one skip, nothing run
    calls.clear()
    out = certify.cluster_probes(_inv(names), names, ProbeSettings(2, 20), tmp_path, pairs[:2], set(), set(),
                                 [], io=SshBackend())
    assert [m.status for m in out] == ["skip"] and not calls
    # not asked for (--probes iperf3): nothing at all
    assert (
        certify.cluster_probes(
            _inv(names),
            names,
            ProbeSettings(2, 20, frozenset({"iperf3"})),
            tmp_path,
            pairs,
            set(),
            set(),
            [],
            io=SshBackend(),
        )
        == []
    )


def test_nccl_cluster_all_rails_runs_the_all_rails_run_alone(monkeypatch, tmp_path, cli):
    """--nccl-cluster all-rails: one mpirun over every rail, no run per fabric (the flag reaches the probe
    settings of certify and probe; a value it does not know is one line, exit 2)."""
    names = ["node1", "node2", "node3"]
    calls = _fake(monkeypatch, CommandResult(0, with_ranks(TABLE, names, 8), "", False, 3.0, "mpirun"))
    pairs = _pair("node1", "node2", value=190.0) + _pair("node2", "node3", value=186.0)
    out = certify.cluster_probes(_inv(names), names, ProbeSettings(2, 20, per_fabric=False), tmp_path, pairs,
                                 set(), set(), [], io=SshBackend())
    assert [(m.subject, m.status) for m in out] == [("3 nodes x 8 GPUs, all rails", "pass")]
    runs = [c for c in calls if c[0] == "run"]
    assert len(runs) == 1 and "NCCL_IB_HCA" not in runs[0][2]
    from clustercert.cli import build_parser

    for verb in ("certify", "probe"):
        assert build_parser().parse_args([verb, "-i", "x", "--nccl-cluster", "all-rails"]).nccl_cluster == (
            "all-rails")
        assert build_parser().parse_args([verb, "-i", "x"]).nccl_cluster == "per-fabric"
    p = cli("certify", "-i", "x", "--out", str(tmp_path / "o"), "--nccl-cluster", "fabric")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "--nccl-cluster" in p.stderr


def test_slurm_clusters_run_it_as_one_srun_step_exporting_nccl_ib_hca_by_name():
    line = certify.cmd.nccl_cluster_srun_cmd(["gpu-a", "gpu-b", "gpu-c"], 8, "t0k", 65, "gpu",
                                              {"NCCL_IB_HCA": "=mlx5_0,mlx5_1"})
    assert line == ("env NCCL_IB_HCA==mlx5_0,mlx5_1 srun --nodes=3 --ntasks-per-node=1 --nodelist=gpu-a,"
                    "gpu-b,gpu-c --gres=gpu:8 --job-name=clustercert-nccl-t0k --time=2 --kill-on-bad-exit=1 "
                    "--export=ALL,CLUSTERCERT_PROBE_TAG=t0k,NCCL_IB_HCA all_reduce_perf -b 8 -e 8G -f 2 -g 8")


def _cert_with(findings: list) -> dict:
    cert = sample_certificate()
    cert["cluster_findings"] = [cluster_record(m) for m in findings]
    cert["verdict"] = cluster_verdict_with(cert["verdict"], cert["cluster_findings"])
    return cert


def test_the_certificate_and_every_report_show_the_cluster_finding(tmp_path):
    ok = judge(with_ranks(TABLE, NODES3, 8), 190.0)
    slow = judge(with_ranks(TABLE, NODES3, 8), 250.0)
    cert = _cert_with([ok, slow])
    assert cert["verdict"] == "fail" and cluster_verdict_with("pass", [cluster_record(ok)]) == "pass"
    rec = cert["cluster_findings"][1]
    assert {
        k: rec[k] for k in ("check", "status", "subject", "value", "unit", "threshold", "nodes", "fabric")
    } == {
        "check": "probe.nccl_cluster",
        "status": "fail",
        "subject": "3 nodes x 8 GPUs, all rails",
        "value": 188.53,
        "unit": "gbyte_per_s",
        "threshold": "nccl_allreduce_cluster",
        "nodes": NODES3,
        "fabric": None,
    }
    # signed and verified with the member (the schema names it), written as the file holds it
    key = cc.Ed25519PrivateKey.generate()
    signed = cc.sign(cert, key)
    assert cc.unknown_member(signed) is None
    cc.write_certificate(signed, tmp_path / "certificate.json")
    pub = tmp_path / "signing.pub"
    pub.write_text(cc.openssh_public_line(key.public_key()) + "\n")
    assert cc.verify(tmp_path / "certificate.json", pub)[0]
    written = json.loads((tmp_path / "certificate.json").read_text())
    assert written["cluster_findings"][1]["status"] == "fail"
    from test_schemas import certificate_validator  # the published schema (docs/schemas) names the member

    certificate_validator("written").validate(written)
    broken = {**written, "cluster_findings": [{k: v for k, v in rec.items() if k != "nodes"}]}
    assert not certificate_validator("written").is_valid(broken)  # a cluster finding says where it ran
    md = render_summary(cert)
    assert (
        "## Cluster" in md
        and "probe.nccl_cluster 3 nodes x 8 GPUs, all rails: **fail** — 188.53 gbyte_per_s" in md
    )
    html = render_html(cert)
    assert '<section id="cluster"><h2>Cluster</h2>' in html and "scaling efficiency 0.75" in html
    suite = next(s for s in ET.fromstring(render_junit(cert)).iter("testsuite") if s.get("name") == "cluster")
    cases = suite.findall("testcase")
    assert [c.get("classname") for c in cases] == ["probe.nccl_cluster"] * 2
    assert cases[1].find("failure") is not None and cases[0].find("failure") is None
    assert cases[0].get("name") == "3 nodes x 8 GPUs, all rails: node1, node2, node3"


FAKE_ALL_REDUCE = """#!/bin/sh
# a stand-in all_reduce_perf: task 0 prints the real table with the rank lines of the step's nodes
echo "$SLURMD_NODENAME NCCL_IB_HCA=$NCCL_IB_HCA" >> "$FAKE_SRUN_LOG.nccl"
[ "$SLURM_PROCID" = 0 ] && cat "$FAKE_NCCL_OUTPUT"
exit 0
"""


def test_backend_slurm_runs_the_cluster_all_reduce_as_one_srun_step_over_the_jobs_nodes(
    slurm, tmp_path, monkeypatch  # noqa: F811
):
    from clustercert.collect import srun

    names = ["node01", "node02", "node03"]
    inv = inventory(tmp_path, hosts=tuple(names))
    bin_dir = tmp_path / "bin"  # the stand-in Slurm's, first on PATH
    (bin_dir / "all_reduce_perf").write_text(FAKE_ALL_REDUCE)
    (bin_dir / "all_reduce_perf").chmod(0o755)
    (tmp_path / "nccl.txt").write_text(with_ranks(TABLE, names, 8))
    monkeypatch.setenv("FAKE_NCCL_OUTPUT", str(tmp_path / "nccl.txt"))
    group = cluster.rail_groups(load_profile("lab"))[1]  # fabric 0: NCCL_IB_HCA==mlx5_0
    with srun.SlurmBackend.open(inv) as io:
        m = certify.nccl_cluster(
            [inv.hosts[n] for n in names], group, ProbeSettings(2, 20), tmp_path, T, 190.0, io=io
        )
    assert m.status == "pass" and m.value == 188.53, (m.observed, m.evidence)
    assert m.evidence.startswith(
        "launched with srun (a step of the run's Slurm job 42) (NCCL_IB_HCA==mlx5_0)\n"
    )
    steps = [(s["cmd"], s["opts"]["--nodelist"]) for s in slurm()]
    # the launch from node01's step, then ONE step of all_reduce_perf over the three nodes, then the cleanup
    assert steps[:2] == [("/bin/sh", "node01"), ("all_reduce_perf", "node01,node02,node03")], steps
    nccl = slurm()[1]["opts"]
    assert nccl["--nodes"] == "3" and nccl["--export"].endswith(",NCCL_IB_HCA") and nccl["--gres"] == "gpu:8"
    got = sorted((tmp_path / "srun.log.nccl").read_text().splitlines())
    assert got == [f"{n} NCCL_IB_HCA==mlx5_0" for n in names]  # exported by name to every task
