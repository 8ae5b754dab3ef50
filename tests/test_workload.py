"""Issue 22: what a training job needs, off the lab. The NCCL transport parser on real NCCL_DEBUG=INFO logs
from public issues (tests/fixtures/nccl-info, SOURCES.md), the fio, DDP, findmnt and lsblk parsers, the
command builders, what the plans run, the evaluators (GPUDirect topology, transport, NVLink aggregate,
checkpoint, DDP), the storage checks, the profile sections, and the DDP smoke test itself under real torchrun
(CPU, gloo) where torch is installed."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from clustercert import remote
from clustercert.checks import HostContext
from clustercert.checks import storage as storage_checks
from clustercert.checks.rails import NodeRails, Rail, node_rails
from clustercert.errors import InputError
from clustercert.model.evidence import CommandResult
from clustercert.model.profile import load_profile, validate_profile
from clustercert.parsers import ParseError, parse
from clustercert.probes import commands as cmd
from clustercert.probes import workload
from clustercert.probes.plan import ProbeSettings, node_plan, pair_plan

FIX = Path(__file__).parent / "fixtures" / "nccl-info"
LAB = load_profile("lab")  # one DDP rank per node
# the lab profile with two DDP ranks per node: the evaluation of local ranks 0 and 1 on each node
LAB2 = LAB.model_copy(update={"ddp": LAB.ddp.model_copy(update={"ranks_per_node": 2})})
H100 = load_profile("h100-sxm-8x-ndr")
# the lab's rails as certify hands them to the probes: its profile's names, each GPU's NUMA node from topo -m
LAB_RAILS = node_rails(LAB, {"devices": [], "matrix": {}, "affinity": {"GPU0": {"numa_affinity": "0"},
                                                                      "GPU4": {"numa_affinity": "1"}}}, None)


def res(stdout: str, rc: int | None = 0, timed_out: bool = False, stderr: str = "") -> CommandResult:
    return CommandResult(rc, stdout, stderr, timed_out, 1.0, "tool")


# ---- the NCCL transport parser on real logs ---------------------------------------------------------------

def test_real_log_ib_with_gdrdma_nccl707():
    rec = parse("nccl-info-transport", (FIX / "2node-a100-ib-gdrdma-nccl707.txt").read_text())
    [(host, h)] = rec["hosts"].items()
    assert host == "10-90-43-152" and rec["info_lines"] == 12
    assert len(h["connections"]) == 12 and all(c["gdr"] and c["net"] == "IB" for c in h["connections"])
    c = h["connections"][0]
    assert (c["channel"], c["src"], c["dst"], c["direction"], c["device"]) == ("01", 2, 0, "receive", 5)


def test_real_log_net_socket_with_launcher_prefix_nccl1232():
    rec = parse("nccl-info-transport", (FIX / "2node-socket-tag-output-nccl1232.txt").read_text())
    assert set(rec["hosts"]) == {"node0", "node2"}
    nets = {c["net"] for h in rec["hosts"].values() for c in h["connections"] if c["transport"] == "NET"}
    assert nets == {"Socket"}
    shm = [c for c in rec["hosts"]["node0"]["connections"] if c["transport"] == "SHM"]
    assert len(shm) == 2 and shm[0]["channel"] == "00"


def test_real_logs_plugin_p2p_init_lines_and_bare_lines():
    ext = parse("nccl-info-transport", (FIX / "8gpu-ibext-plugin-p2p-cumem-nccl1814.txt").read_text())
    conns = ext["hosts"]["hostname-test"]["connections"]
    assert {c["transport"] for c in conns} == {"NET", "P2P"}
    assert {c["net"] for c in conns if c["transport"] == "NET"} == {"IBext_v8"} and not any(
        c["gdr"] for c in conns
    )
    init = parse("nccl-info-transport", (FIX / "2node-net-socket-and-ib-init-ncclt29.txt").read_text())
    assert init["hosts"]["server1"]["net_devices"] == {"0": "mlx5_1"}
    assert init["hosts"]["server3"]["networks"] == ["Socket", "IB"]
    bare = parse("nccl-info-transport", (FIX / "ib-gdrdma-one-end-only-nccl897.txt").read_text())
    assert [c["gdr"] for c in bare["hosts"]["?"]["connections"]] == [True, False]
    sock = parse("nccl-info-transport", (FIX / "2node-net-socket-3-p2p-ipc-nccl952.txt").read_text())
    assert [c["device"] for c in sock["hosts"]["<cluster_name>"]["connections"] if c["net"] == "Socket"] == [
        3,
        3,
    ]
    with pytest.raises(ParseError):
        parse("nccl-info-transport", "# nThread 1 nGpus 8\n")


H200_DDP = FIX / "1gpu-h200-nccl2.28.9-no-ib-socket-fallback-ddp-smoke.txt"  # own capture, SOURCES.md


def test_real_log_ib_plugin_failed_socket_assigned_h200():
    """NCCL 2.28.9 on a VM without InfiniBand: 'NET/IB : Using [RO]; OOB eth0:...' then 'Failed to initialize
    NET plugin IB' and 'Assigned NET plugin Socket to comm'. IB is not a network the host uses."""
    rec = parse("nccl-info-transport", H200_DDP.read_text())
    assert rec["info_lines"] == 95
    [(host, h)] = rec["hosts"].items()
    assert host == "vm"
    assert h["networks"] == ["Socket"] and h["net_plugin"] == "Socket" and h["failed_net_plugins"] == ["IB"]
    assert h["net_devices"] == {} and h["connections"] == []  # one rank: 'Channel 00/64 : 0', no '->' line
    # the DDP smoke script's own line in the same stdout
    (rank,) = parse("ddp-smoke", H200_DDP.read_text())["ranks"]
    assert (rank["backend"], rank["device"], rank["world_size"], rank["allreduce"]["ok"]) == (
        "nccl",
        "cuda:0",
        1,
        True,
    )


def test_failed_plugin_is_judged_per_process_and_older_logs_have_no_plugin():
    ok_ib = "n1:2:2 [1] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:<0>\n"
    failed = ("n1:1:1 [0] NCCL INFO NET/IB : Using [RO]; OOB eth0:<0>\n"
              "n1:1:1 [0] NCCL INFO Failed to initialize NET plugin IB\n"
              "n1:1:1 [0] NCCL INFO Assigned NET plugin Socket to comm\n")
    # another process of the host initialised IB: the host does use it
    h = parse("nccl-info-transport", failed + ok_ib)["hosts"]["n1"]
    assert (
        h["networks"] == ["IB"] and h["failed_net_plugins"] == ["IB"] and h["net_devices"] == {"0": "mlx5_0"}
    )
    h = parse("nccl-info-transport", failed)["hosts"]["n1"]
    assert h["networks"] == [] and h["net_plugin"] == "Socket"
    old = parse("nccl-info-transport", (FIX / "2node-net-socket-and-ib-init-ncclt29.txt").read_text())
    assert all(x["net_plugin"] is None and x["failed_net_plugins"] == [] for x in old["hosts"].values())


def test_transport_single_node_log_is_an_error_not_a_pass():
    """The H200 run is one rank on one node: no inter-node connection line, so probe.nccl_transport cannot
    judge it (error), never a pass."""
    m = workload.eval_nccl_transport("vm", "other", H100, res(H200_DDP.read_text()), 60)
    assert m.status == "error"
    assert m.observed == "no inter-node connection line (Channel ... via NET/...) in the output"


def _transport(text: str, a: str = "node0", b: str = "node2", profile=LAB):
    return workload.eval_nccl_transport(a, b, profile, res(text), 60)


def test_transport_judged_on_the_real_logs():
    m = _transport((FIX / "2node-socket-tag-output-nccl1232.txt").read_text())
    assert m.status == "fail" and "node0: NET/Socket (TCP) instead of InfiniBand" in m.observed
    assert "node2: NET/Socket" in m.observed and "via NET/Socket/0" in m.evidence
    one_node = (FIX / "2node-a100-ib-gdrdma-nccl707.txt").read_text()
    m = workload.eval_nccl_transport("10-90-43-152", "other", H100, res(one_node), 60)
    assert m.status == "fail" and "no inter-node connection line from other" in m.observed
    m = _transport((FIX / "8gpu-ibext-plugin-p2p-cumem-nccl1814.txt").read_text(), "hostname-test", "x")
    assert m.status == "fail" and "NET/IBext_v8/0 without GDRDMA" in m.observed
    m = _transport("garbage\n")
    assert m.status == "error"


def _lab_lines(host: str, gdr: bool, rails=("mlx5_0", "mlx5_1")) -> str:
    nics = " ".join(f"[{i}]{r}:1/IB" for i, r in enumerate(rails))
    flag = "/GDRDMA" if gdr else ""
    out = [f"{host}:1:2 [0] NCCL INFO NET/IB : Using {nics} ; OOB eth0:<0>"]
    out += [f"{host}:1:2 [{4 * i}] NCCL INFO Channel 0{i}/0 : {4 * i}[{4 * i}] -> {8 + 4 * i}[{4 * i}] "
            f"[send] via NET/IB/{i}{flag}" for i in range(len(rails))]
    return "\n".join(out) + "\n"


def test_transport_passes_with_gdrdma_on_every_rail_and_names_the_node_without():
    m = _transport(_lab_lines("node01", True) + _lab_lines("node02", True), "node01", "node02")
    assert m.status == "pass" and "GDRDMA on mlx5_0, mlx5_1 at both ends (4 connections)" in m.observed
    m = _transport(_lab_lines("node01", False) + _lab_lines("node02", True), "node01", "node02")
    assert m.status == "fail" and m.observed.startswith("node01: mlx5_0 without GDRDMA")
    assert "node02" not in m.observed and "via NET/IB/0" in m.evidence
    m = _transport(_lab_lines("node01", True, ("mlx5_0",)) + _lab_lines("node02", True), "node01", "node02")
    assert m.status == "fail" and "node01: mlx5_1 not used by NCCL" in m.observed
    # a host named by its address or FQDN is the inventory's node
    m = workload.eval_nccl_transport("node01", "node02", LAB, res(_lab_lines("node01.lab", True)
                                                                 + _lab_lines("10.0.0.2", True)), 60,
                                     {"node01": "10.0.0.1", "node02": "10.0.0.2"})
    assert m.status == "pass", m.observed


# ---- fio, DDP, findmnt, lsblk parsers -------------------------------------------------------------------

def fio_json(write_bw: float, read_bw: float, written: int = 32 << 20, error: int = 0) -> str:
    def d(bw, n):
        return {
            "io_bytes": n,
            "bw_bytes": bw,
            "bw": bw / 1024,
            "runtime": int(n / bw * 1000) if bw else 0,
            "iops": 1.0,
        }
    return ("fio: note: both iodepth >= 1 and synchronous I/O engine are selected\n" + json.dumps({
        "fio version": "fio-3.33", "jobs": [
            {"jobname": "write", "error": error, "read": d(0, 0), "write": d(write_bw, written)},
            {"jobname": "read", "error": 0, "read": d(read_bw, written), "write": d(0, 0)}]}))


def test_fio_parser():
    rec = parse("fio-json", fio_json(2e8, 4e8))
    assert rec["version"] == "fio-3.33" and rec["messages"][0].startswith("fio: note")
    assert rec["jobs"][0]["write"]["bw_bytes_per_s"] == 2e8 and rec["jobs"][1]["read"]["bytes"] == 32 << 20
    old = json.dumps({"jobs": [{"jobname": "write", "write": {"io_bytes": 1, "bw": 1000, "runtime": 1}}]})
    assert parse("fio-json", old)["jobs"][0]["write"]["bw_bytes_per_s"] == 1024000
    for bad in ("", "fio: failed to open /x\n", "{not json", json.dumps({"x": 1})):
        with pytest.raises(ParseError):
            parse("fio-json", bad)


def ddp_line(**kw) -> str:
    base = {
        "host": "node01",
        "rank": 0,
        "local_rank": 0,
        "world_size": 4,
        "local_world_size": 2,
        "backend": "gloo",
        "torch": "1.13.1",
        "problems": [],
        "allreduce": {
            "expected": 10.0,
            "min": 10.0,
            "max": 10.0,
            "ok": True,
            "bytes": 4096,
            "step_ms": [1.0, 2.0],
        },
    }
    return "CLUSTERCERT_DDP " + json.dumps(base | kw)


def test_ddp_parser():
    text = "[1,0]<stdout>:" + ddp_line() + "\n" + ddp_line(rank=1) + "\nTraceback (most recent call last):\n"
    rec = parse("ddp-smoke", text)
    assert [r["rank"] for r in rec["ranks"]] == [0, 1] and rec["errors"] == [
        "Traceback (most recent call last):"
    ]
    rec = parse(
        "ddp-smoke", "torch.distributed.DistNetworkError: The client socket has timed out after 60s\n"
    )
    assert rec["rendezvous_unreachable"] and not rec["ranks"]
    with pytest.raises(ParseError):
        parse("ddp-smoke", "hello\n")


def test_findmnt_and_lsblk_parsers():
    fm = parse(
        "findmnt-json",
        json.dumps(
            {
                "filesystems": [
                    {
                        "target": "/shared",
                        "source": "/dev/vda[/srv]",
                        "fstype": "ext4",
                        "options": "rw,relatime",
                        "avail": "5368709120",
                    }
                ]
            }
        ),
    )
    assert fm["mounts"][0]["options"] == ["rw", "relatime"] and fm["mounts"][0]["avail_bytes"] == 5 << 30
    lb = parse(
        "lsblk-json",
        json.dumps(
            {
                "blockdevices": [
                    {"name": "nvme0n1", "type": "disk", "tran": "nvme", "size": 1},
                    {"name": "vda", "type": "disk", "tran": None},
                ]
            }
        ),
    )
    assert [d["nvme"] for d in lb["devices"]] == [True, False]
    with pytest.raises(ParseError):
        parse("findmnt-json", "findmnt: unknown column: AVAIL\n")


# ---- commands -------------------------------------------------------------------------------------------

def test_gdr_perftest_pins_the_numa_node_and_puts_the_buffer_on_the_gpu():
    line = cmd.gdr_perftest_cmd("mlx5_3", 1, 18815, 5, 3, 1, "10.0.0.2")
    assert line == ("numactl --cpunodebind=1 --membind=1 ib_write_bw -d mlx5_3 -i 1 -p 18815 --report_gbits "
                    "-D 5 -F --use_cuda=3 10.0.0.2")
    assert cmd.topo_cmd() == "nvidia-smi topo -m"
    assert (
        cmd.nvbandwidth_cmd(cmd.NVLINK_TESTS, base=False)
        == "nvbandwidth -t all_to_one_write_ce -t one_to_all_write_ce"
    )


def test_nccl_pair_commands_print_info_lines_only_when_asked():
    assert "NCCL_DEBUG" not in cmd.nccl_pair_mpirun_cmd(["a", "b"], 8, "t")
    assert "-x NCCL_DEBUG=INFO all_reduce_perf" in cmd.nccl_pair_mpirun_cmd(["a", "b"], 8, "t", True)
    assert "--export=ALL,CLUSTERCERT_PROBE_TAG=t,NCCL_DEBUG=INFO all_reduce_perf" in cmd.nccl_pair_srun_cmd(
        ["a", "b"], 8, "t", 60, "gpu", True)
    assert cmd.nccl_pair_cleanup_cmd("t", True, cmd.DDP_JOB).startswith("scancel --name=clustercert-ddp-t ")


def _fio_runs(line: str) -> list[list[str]]:
    """The fio command lines of a checkpoint command (its shell words, split at ';')."""
    runs, cur = [], []
    for w in shlex.split(line.replace(";", " ; ")):
        if w == ";":
            runs.append(cur)
            cur = []
        else:
            cur.append(w)
    return [r for r in [*runs, cur] if r and r[0] == "fio"]


def test_checkpoint_command():
    line = cmd.checkpoint_cmd("/shared/", "node01", 1024, 5)
    write, read = _fio_runs(line)
    for run in (write, read):
        assert (
            "--direct=1" in run
            and "--filename=/shared/.clustercert-checkpoint.node01" in run
            and "--runtime=5" in run
        )
    assert "--name=write" in write and "--size=1024M" in write and "--end_fsync=1" in write
    assert "rm -f -- /shared/.clustercert-checkpoint.node01;" in line


def test_checkpoint_command_gives_every_fio_job_its_size_and_reads_only_what_was_written():
    """Lab, issue 22: the read job of the one fio run had no size (fio: 'read: you need to specify size=',
    error 22, exit 1) on every node. Every job now has one when its fio starts: the write the checkpoint's,
    the read run (a second fio, started once the file exists) 100% of the file, so a write cut short by
    --runtime is not laid out to full size before the read."""
    for run in _fio_runs(cmd.checkpoint_cmd("/scratch", "node01", 32, 2)):
        jobs = [i for i, w in enumerate(run) if w.startswith("--name=")]
        glob = [w for w in run[:jobs[0]] if w.startswith("--size=")]
        for a, b in zip(jobs, [*jobs[1:], len(run)], strict=True):
            assert glob or any(w.startswith("--size=") for w in run[a:b]), (run[a], run)
    write, read = _fio_runs(cmd.checkpoint_cmd("/scratch", "node01", 32, 2))
    assert (
        "--rw=read" in read and "--size=100%" in read and not any(w.startswith("--name=write") for w in read)
    )


def test_checkpoint_command_under_real_fio(tmp_path):
    """The exact command, run by fio where it is installed (the lab image's extras layer has fio 3.33)."""
    if not shutil.which("fio"):
        pytest.skip("fio is not installed here")
    p = subprocess.run(
        ["sh", "-c", cmd.checkpoint_cmd(str(tmp_path), "n1", 4, 2)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    rec = parse("fio-json", p.stdout)
    assert [(j["name"], j["error"]) for j in rec["jobs"]] == [("write", 0), ("read", 0)]
    assert rec["jobs"][0]["write"]["bytes"] == rec["jobs"][1]["read"]["bytes"] == 4 << 20
    assert list(tmp_path.iterdir()) == []
    ms = workload.eval_checkpoint("n1", str(tmp_path), 4, LAB.thresholds["checkpoint_write"],
                                  LAB.thresholds["checkpoint_read"], res(p.stdout, stderr=p.stderr), 60)
    assert all(m.status in ("pass", "fail") and m.value for m in ms), [(m.status, m.observed) for m in ms]


def test_fio_parser_reads_the_write_and_the_read_runs():
    one, two = fio_json(2e8, 4e8).split("\n", 1)[1], fio_json(2e8, 4e8).split("\n", 1)[1]
    write = json.dumps({**json.loads(one), "jobs": json.loads(one)["jobs"][:1]})
    read = json.dumps({**json.loads(two), "jobs": json.loads(two)["jobs"][1:]})
    rec = parse("fio-json", "fio: note: a\n" + write + "\nfio: note: b\n" + read + "\n")
    assert [j["name"] for j in rec["jobs"]] == ["write", "read"] and rec["messages"] == [
        "fio: note: a",
        "fio: note: b",
    ]
    assert rec["jobs"][1]["read"]["bw_bytes_per_s"] == 4e8
    with pytest.raises(ParseError):
        parse("fio-json", write + "\n{cut short")


def test_ddp_launch_commands(tmp_path):
    args = cmd.ddp_script_args("gloo", 2, 0, 5, 256, 60)
    line = cmd.ddp_launch_cmd(["10.0.0.1", "10.0.0.2"], ("python3", "-m", "torch.distributed.run"), "python3",
                              "print('x')", args, 2, {"GLOO_SOCKET_IFNAME": "eth0"}, "tag1")
    assert (
        line.startswith("port=$(python3 -c ")
        and "ssh -o BatchMode=yes -o ConnectTimeout=10 10.0.0.2 " in line
    )
    # the shell sees both torchruns with the rendezvous on the first node and the port picked there
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ssh").write_text('#!/bin/sh\nwhile [ "${1#-}" != "$1" ]; do shift 2; done; shift; sh -c "$*"\n')
    (fake / "python3").write_text('#!/bin/sh\nif [ "$1" = -c ] && [ "$#" = 2 ]; then echo 29500; exit 0; fi\n'
                                  'echo "ARGS $*"; env | grep -E '
                                  '"^(GLOO_SOCKET_IFNAME|CLUSTERCERT_PROBE_TAG)=" | sort\n')
    for f in fake.iterdir():
        f.chmod(0o755)
    p = subprocess.run(["/bin/sh", "-c", line], capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}"))
    assert p.returncode == 0, p.stderr
    runs = [ln for ln in p.stdout.splitlines() if ln.startswith("ARGS")]
    assert len(runs) == 2 and {("--node_rank=0" in r, "--node_rank=1" in r) for r in runs} == {
        (True, False),
        (False, True),
    }
    for r in runs:
        assert (
            "-m torch.distributed.run --nnodes=2 --nproc_per_node=2" in r
            and "--master_addr=10.0.0.1" in r
            and "--master_port=29500" in r
            and "--no_python python3 -c print('x') --backend gloo" in r
        ), r
    assert (
        p.stdout.count("GLOO_SOCKET_IFNAME=eth0") == 2 and p.stdout.count("CLUSTERCERT_PROBE_TAG=tag1") == 2
    )
    srun = cmd.ddp_srun_cmd(
        ["a", "b"], "10.0.0.1", ("torchrun",), "python3", "x", args, 8, {}, "t", 300, "gpu", 8
    )
    assert (
        "--gres=gpu:8 --job-name=clustercert-ddp-t --time=5" in srun and '--node_rank="$SLURM_NODEID"' in srun
    )
    # one srun step: each task's torchrun gets the profile's env (a value with commas too: srun's --export
    # would split it) and the tag; the fake srun runs the task once per node, as Slurm would
    (fake / "srun").write_text('#!/bin/sh\n'
                               'for a in "$@"; do case "$a" in --export=ALL,*) e="${a#--export=ALL,}";; --*) '
                               ';; *) break;; esac; shift; done\n'
                               'for n in 0 1; do env "$e" SLURM_NODEID=$n "$@"; done\n')
    (fake / "srun").chmod(0o755)
    srun = cmd.ddp_srun_cmd(
        ["a", "b"],
        "10.0.0.1",
        ("python3", "-m", "torch.distributed.run"),
        "python3",
        "print('x')",
        args,
        2,
        {"GLOO_SOCKET_IFNAME": "eth0,eth1"},
        "tag2",
        300,
        None,
        0,
    )
    assert "--gres" not in srun
    p = subprocess.run(["/bin/sh", "-c", srun], capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}"))
    assert p.returncode == 0, p.stderr
    runs = [ln for ln in p.stdout.splitlines() if ln.startswith("ARGS")]
    assert len(runs) == 2 and all("--master_addr=10.0.0.1 --master_port=29500" in r for r in runs), runs
    assert (
        p.stdout.count("GLOO_SOCKET_IFNAME=eth0,eth1") == 2
        and p.stdout.count("CLUSTERCERT_PROBE_TAG=tag2") == 2
    )


# ---- what the plans run -----------------------------------------------------------------------------------

def _host(name: str, profile=LAB, **extra):
    return SimpleNamespace(
        name=name,
        connection={"ansible_host": name},
        profile=profile,
        vars=SimpleNamespace(clustercert_fabric_addresses={}, clustercert_slurm=False, **extra),
    )


def test_node_plan_runs_gdr_after_the_host_loopbacks_then_nvlink_and_checkpoints():
    np = node_plan(_host("node01"), ProbeSettings(2, 20, rails={"node01": LAB_RAILS}))
    # the GPUDirect preflight (ib_write_bw --help) beside the host-memory loopbacks, before the GDR ones
    assert np.stages[0] == ["loopback0", "loopback1", "nccl", "gdr_help"]
    assert np.commands["gdr_help"][0] == "ib_write_bw --help"
    assert np.stages[1] == ["gdr0", "gdr1", "topo"]
    assert "--use_cuda=0" in np.commands["gdr0"][0] and "--cpunodebind=1" in np.commands["gdr1"][0]
    assert np.commands["gdr1"][2]["cmd"].endswith("--use_cuda=4")
    assert "-t all_to_one_write_ce -t one_to_all_write_ce" in np.commands["nvbandwidth"][0]
    assert ["checkpoint0"] in np.stages and ["checkpoint1"] in np.stages
    assert "/scratch/.clustercert-checkpoint.node01" in np.commands["checkpoint1"][0]
    # only what is asked: --probes storage runs the checkpoints alone
    np = node_plan(_host("node01"), ProbeSettings(2, 20, only=frozenset({"storage"})))
    assert set(np.commands) == {"checkpoint0", "checkpoint1"}
    # two GPUs on one rail: one after the other
    two = NodeRails("profile", (Rail(0, "mlx5_0", 0), Rail(1, "mlx5_0", 0)))
    np = node_plan(_host("n", H100), ProbeSettings(2, 20, only=frozenset({"gdr"}), rails={"n": two}))
    assert np.stages == [["gdr_help"], ["gdr0", "topo"], ["gdr1"]]


def test_pair_plan_adds_gdr_transport_and_ddp_where_asked():
    import clustercert.probes.evaluate as ev

    a, b = _host("node01"), _host("node02")
    plan = pair_plan(a, b, 1, ProbeSettings(2, 20), ev)
    keys = [key for _jobs, key in plan.stages]
    assert keys == ["ib_write_bw_pair", "ib_write_bw_gdr_pair", "ib_write_lat_p99"]
    gdr = plan.stages[1][0]
    assert [j.m.subject for j in gdr] == ["GPU0-mlx5_0 node01->node02", "GPU4-mlx5_1 node01->node02"]
    assert gdr[1].client[2].endswith("--use_cuda=4 node02") and gdr[1].fabric == 1
    assert plan.nccl and plan.transport and plan.ddp
    # drift: no transport, no DDP; a later round asks only what is in question
    plan = pair_plan(a, b, 1, ProbeSettings(2, 20, node_probes=False, training=False), ev)
    assert plan.nccl and not plan.transport and not plan.ddp
    plan = pair_plan(a, b, 2, ProbeSettings(2, 20), ev, {("nccl_transport", None)})
    assert plan.stages == [] and plan.nccl and plan.transport and not plan.ddp
    plan = pair_plan(a, b, 1, ProbeSettings(2, 20, only=frozenset({"ddp"})), ev)
    assert plan.stages == [] and not plan.nccl and plan.ddp


# ---- evaluators ------------------------------------------------------------------------------------------

TOPO = """\tGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV18\tPIX\tSYS\t0-51\t0\t\tN/A
GPU1\tNV18\t X \tSYS\tPIX\t52-103\t1\t\tN/A
NIC0\tPIX\tSYS\t X \tSYS\t\t\t\t
NIC1\tSYS\tPIX\tSYS\t X \t\t\t\t

Legend:

  X    = Self

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
"""


def _pairs(*pairs):
    return [Rail(g, h, n) for g, h, n in pairs]


def test_gdr_topology_against_topo_m():
    ok = workload.eval_gdr_topology("n", LAB, _pairs((0, "mlx5_0", 0), (1, "mlx5_1", 1)), res(TOPO), 30)
    assert [m.status for m in ok] == ["pass", "pass"] and ok[0].subject == "GPU0-mlx5_0 topology"
    bad = workload.eval_gdr_topology("n", LAB, _pairs((0, "mlx5_1", 1)), res(TOPO), 30)
    assert bad[0].status == "fail" and "mlx5_1 is SYS to GPU0" in bad[0].observed
    assert "nearer to GPU0: mlx5_0 (PIX)" in bad[0].observed and "NUMA node 0" in bad[0].observed
    gone = workload.eval_gdr_topology("n", LAB, _pairs((0, "mlx5_7", 0)), res(TOPO), 30)
    assert gone[0].status == "fail" and "mlx5_7 is not in nvidia-smi topo -m" in gone[0].observed
    err = workload.eval_gdr_topology("n", LAB, _pairs((0, "mlx5_0", 0)), res("", rc=None, timed_out=True), 30)
    assert err[0].status == "error"


NVLINK = """Running all_to_one_write_ce.
memcpy CE CPU(row) <- GPU(column) bandwidth (GB/s)
           0         1
 0    420.00    396.67

SUM all_to_one_write_ce 816.67

Running one_to_all_write_ce.
memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)
           0         1
 0    420.00    396.67

SUM one_to_all_write_ce 816.67
"""


def test_nvlink_aggregate_sums_both_directions_per_gpu():
    t = LAB.thresholds["nvlink_aggregate"]
    ms = workload.eval_nvlink_aggregate("n", t, res(NVLINK), 30)
    assert [(m.subject, m.value, m.status) for m in ms] == [("GPU0", 840.0, "pass"), ("GPU1", 793.34, "fail")]
    assert "in from all peers" in ms[0].observed and ms[0].threshold == "nvlink_aggregate"
    ms = workload.eval_nvlink_aggregate("n", t, res(NVLINK.split("Running one_to_all")[0]), 30)
    assert ms[0].status == "error" and "one_to_all_write_ce missing" in ms[0].observed


def test_checkpoint_against_its_floors():
    tw, tr = LAB.thresholds["checkpoint_write"], LAB.thresholds["checkpoint_read"]
    ms = workload.eval_checkpoint("n", "/shared", 32, tw, tr, res(fio_json(2e8, 4e8)), 30)
    assert [(m.subject, m.status, m.value, m.threshold) for m in ms] == [
        ("/shared write", "pass", 0.2, "checkpoint_write"), ("/shared read", "pass", 0.4, "checkpoint_read")]
    slow = workload.eval_checkpoint("n", "/shared", 32, tw, tr, res(fio_json(2e6, 4e8, written=4 << 20)), 30)
    assert slow[0].status == "fail" and "4 MiB in 2.097 s of the 32 MiB checkpoint" in slow[0].observed
    assert not slow[0].relative
    bad = workload.eval_checkpoint(
        "n", "/x", 32, tw, tr, res("fio: pid=1, err=22/file:filesetup.c: Invalid argument\n", rc=1), 30
    )
    assert [m.status for m in bad] == ["error", "error"]
    failed = workload.eval_checkpoint("n", "/x", 32, tw, None, res(fio_json(0, 0, 0, error=5)), 30)
    assert [m.status for m in failed] == ["error"] and "error 5" in failed[0].observed


def test_checkpoint_a_failed_fio_job_names_fios_message():
    """Lab, issue 22: fio exited 1 because its read job could not start, and the measurement said only that
    fio exited with status 1. The job fio says failed is an error with fio's own message; the write it
    completed is judged on its figures; a non-zero exit with both jobs whole stays an error for both."""
    tw, tr = LAB.thresholds["checkpoint_write"], LAB.thresholds["checkpoint_read"]
    doc = json.loads(fio_json(2e8, 0).split("\n", 1)[1])
    doc["jobs"][1].update(error=22, read={"io_bytes": 0, "bw_bytes": 0, "runtime": 0})
    err = (
        "read: you need to specify size=\n"
        "fio: pid=0, err=22/file:filesetup.c:1155, func=total_file_size, error=Invalid argument\n"
    )
    ms = workload.eval_checkpoint("n", "/scratch", 32, tw, tr, res(json.dumps(doc), rc=1, stderr=err), 30)
    assert [(m.subject, m.status) for m in ms] == [("/scratch write", "pass"), ("/scratch read", "error")]
    assert (
        "fio read job failed (error 22): read: you need to specify size=; fio: pid=0, err=22"
        in ms[1].observed
    )
    assert "exited with status 1" in ms[1].observed
    whole = workload.eval_checkpoint(
        "n", "/scratch", 32, tw, tr, res(fio_json(2e8, 4e8), rc=1, stderr="fio: oops\n"), 30
    )
    assert [m.status for m in whole] == ["error", "error"] and all(
        "exited with status 1" in m.observed for m in whole
    )
    bare = workload.eval_checkpoint("n", "/x", 32, tw, tr, res("", rc=1, stderr=err), 30)
    assert [m.status for m in bare] == ["error", "error"] and "you need to specify size=" in bare[1].observed


def test_ddp_evaluation():
    good = "\n".join(ddp_line(rank=r, local_rank=r % 2, host=f"node0{1 + r // 2}") for r in range(4))
    m = workload.eval_ddp("node01", "node02", LAB2, 2, res(good), 240)
    assert m.status == "pass" and m.value == 1.5 and m.unit == "ms" and m.lower_is_better
    assert m.observed.startswith("world size 4 from torch 1.13.1 (gloo): all_reduce of 4096 B gave 10")
    assert m.evidence.count("world 4 torch 1.13.1 gloo: all_reduce 10.0 (expected 10.0)") == 4
    wrong = "\n".join(ddp_line(rank=r, world_size=6, local_world_size=3, problems=[
        "world size 6 (torch.distributed.get_world_size), expected 2 nodes x 2 ranks = 4",
        f"3 processes on node0{1 + r // 3} (LOCAL_WORLD_SIZE, torchrun --nproc_per_node), the profile "
        "expects 2 per node"])
        for r in range(6))
    m = workload.eval_ddp("node01", "node02", LAB2, 3, res(wrong, rc=1), 240)
    assert m.status == "fail" and "3 processes on node01" in m.observed and "world size 6" in m.observed
    m = workload.eval_ddp(
        "node01",
        "node02",
        LAB2,
        2,
        res("torch.distributed.DistNetworkError: Connection refused\n", rc=1),
        240,
    )
    assert m.status == "fail" and "the rendezvous was not reached" in m.observed
    m = workload.eval_ddp("node01", "node02", LAB2, 2, res(good.split("\n")[0], rc=1), 240)
    assert m.status == "fail" and "1 of 4 ranks reported" in m.observed
    m = workload.eval_ddp("node01", "node02", LAB2, 2, res("", rc=None, timed_out=True), 240)
    assert m.status == "error" and "timed out" in m.observed
    m = workload.eval_ddp(
        "node01",
        "node02",
        LAB2,
        2,
        CommandResult(127, "", "sh: 1: torchrun: not found", False, 0.1, "x"),
        240,
    )
    assert m.status == "error" and "tool not found" in m.observed


def step_line(rank: int, node_rank: int, fwd: list[float], **kw) -> str:
    """A rank's line with its DDP steps (clustercert.remote.ddp_smoke --train-steps): torchrun's GROUP_RANK
    says which node of the launch it ran on."""
    ddp = {"steps": len(fwd), "forward_ms": fwd, "step_ms": [3 * x for x in fwd], "loss_first": 1.2,
           "loss_last": 0.9, "dtype": "float32", "device": "cpu", "params": 1000, "checksum_min": 1.5,
           "checksum_max": 1.5, "replicas_in_sync": True}
    return ddp_line(rank=rank, local_rank=rank % 2, host=f"node0{1 + node_rank}",
                    env={"GROUP_RANK": str(node_rank)}, ddp=ddp, **kw)


def test_ddp_step_straggler_is_blamed_on_its_node_only():
    """Issue 33: the DDP steps of a launch across node01 and node02, two ranks each: healthy ranks pass;
    a rank of node02 whose median forward pass is 4x node01's median (above the lab's ddp.straggler_ratio,
    3) fails probe.ddp_step on node02 and on no other node, value the ratio."""
    healthy = "\n".join(step_line(r, r // 2, [10.0, 11.0, 10.5]) for r in range(4))
    ms = workload.eval_ddp_step("node01", "node02", LAB2, 2, res(healthy), 240)
    assert [(m.probe, m.a, m.b, m.status) for m in ms] == [("ddp_step", "node01", "", "pass"),
                                                          ("ddp_step", "node02", "", "pass")]
    assert (
        ms[0].value == 1.0 and ms[0].unit == "ratio" and "3 x the median of the other node" in ms[0].expected
    )
    slow = "\n".join(
        step_line(r, r // 2, [41.0, 40.0, 43.0] if r == 3 else [10.0, 11.0, 10.5]) for r in range(4)
    )
    ms = workload.eval_ddp_step("node01", "node02", LAB2, 2, res(slow), 240)
    by = {m.a: m for m in ms}
    assert by["node02"].status == "fail" and by["node02"].value == round(41.0 / 10.5, 3)
    assert by["node02"].observed.startswith("slowest rank 3: forward 41 ms median over 3 steps, 3.90 x")
    assert (
        "a straggler" in by["node02"].observed
        and "rank 3 node02 (node02): forward median 41" in by["node02"].evidence
    )
    # the healthy node is compared with the straggler's node median (pulled up by it): it passes, not blamed
    assert by["node01"].status == "pass" and by["node01"].value < 1
    assert by["node02"].finding().check == "probe.ddp_step" and by["node02"].finding().subject.startswith(
        "node02"
    )


def test_ddp_step_missing_unfinished_or_timed_out_ranks_are_errors():
    """A rank that printed nothing (it never finished), a rank without its DDP steps, and a launch that ran
    out its timeout are errors on the node concerned, never a pass."""
    three = "\n".join(step_line(r, r // 2, [10.0, 10.0]) for r in range(3))  # rank 3 of node02 never reported
    ms = workload.eval_ddp_step("node01", "node02", LAB2, 2, res(three, rc=1), 240)
    assert [m.status for m in ms] == ["error", "error"]  # node01's partner cannot be compared either
    assert all("DDP steps not reported (node02: 1 of 2 ranks)" in m.observed for m in ms), [
        m.observed for m in ms
    ]
    no_steps = "\n".join(ddp_line(rank=r, env={"GROUP_RANK": str(r // 2)}) for r in range(4))
    ms = workload.eval_ddp_step("node01", "node02", LAB2, 2, res(no_steps), 240)
    assert [m.status for m in ms] == ["error", "error"] and "node01: 0 of 2 ranks" in ms[0].observed
    healthy = "\n".join(step_line(r, r // 2, [10.0]) for r in range(4))
    ms = workload.eval_ddp_step("node01", "node02", LAB2, 2, res(healthy, rc=None, timed_out=True), 240)
    assert [m.status for m in ms] == ["error", "error"] and all(
        "timed out after 240 s" in m.observed for m in ms
    )
    ms = workload.eval_ddp_step("node01", "node02", LAB2, 2, None, 240)
    assert [m.status for m in ms] == ["error", "error"] and ms[0].observed.startswith("did not run")


def test_ddp_step_measurements_are_node_findings_not_pair_channels():
    """probe.ddp_step from a pair's run is its node's finding: the pair's channels (what localisation reasons
    over) leave it out, so a straggler is not spread over its partner."""
    from clustercert.probes.run import pair_result

    slow = "\n".join(step_line(r, r // 2, [40.0] if r >= 2 else [10.0]) for r in range(4))
    ms = workload.eval_ddp_step("node01", "node02", LAB2, 2, res(slow), 240)
    judge = SimpleNamespace(ok=lambda m: m.status == "pass", note=lambda m: "")
    assert pair_result("node01", "node02", 1, ms, judge).passed == {}


# ---- storage checks ---------------------------------------------------------------------------------------

def _storage_ev(mounts: list[dict], devices: list[dict]) -> dict:
    return {
        "findmnt": res(json.dumps({"filesystems": mounts})),
        "lsblk": res(json.dumps({"blockdevices": devices})),
    }


def test_storage_checks():
    ctx = HostContext("n", LAB)
    assert set(storage_checks.commands(ctx)) == {"findmnt", "lsblk"}
    good = [
        {
            "target": "/shared",
            "source": "/dev/vda[/x]",
            "fstype": "ext4",
            "options": "rw,relatime",
            "avail": 5 << 30,
        },
        {"target": "/scratch", "source": "/dev/vda[/y]", "fstype": "xfs", "options": "rw", "avail": 5 << 30},
    ]
    fs = storage_checks.evaluate(_storage_ev(good, [{"name": "vda", "type": "disk", "tran": None}]), ctx)
    assert [(f.check, f.subject, f.status) for f in fs] == [
        ("storage.mounts", "/shared", "pass"), ("storage.scratch", "/scratch", "pass"),
        ("storage.scratch", "NVMe devices", "pass")]
    bad = [{"target": "/scratch", "source": "tmpfs", "fstype": "tmpfs", "options": "ro", "avail": 1 << 20}]
    fs = storage_checks.evaluate(_storage_ev(bad, [{"name": "nvme0n1", "type": "disk", "tran": "nvme"}]), ctx)
    by = {(f.check, f.subject): f for f in fs}
    assert by[("storage.mounts", "/shared")].observed == "/shared is not a mount point (not mounted)"
    assert "filesystem tmpfs" in by[("storage.scratch", "/scratch")].observed
    assert "0.0 GiB free" in by[("storage.scratch", "/scratch")].observed
    assert by[("storage.scratch", "NVMe devices")].status == "fail"
    none = storage_checks.evaluate({}, HostContext("n", H100))
    assert {f.status for f in none} == {"skip"} and storage_checks.commands(HostContext("n", H100)) == {}
    fs = storage_checks.evaluate({"findmnt": res("", rc=None, timed_out=True)}, ctx)
    assert {f.status for f in fs} == {"error"}


# ---- profile sections
# ---------------------------------------------------------------------------------------

def test_profile_sections_are_validated():
    from clustercert.model.profile import load_profile_data

    data, _ = load_profile_data("lab")
    assert (
        LAB.ddp_ranks == 1
        and LAB2.ddp_ranks == 2
        and H100.ddp_ranks == 8
        and LAB.storage.checkpoint_paths == ["/shared", "/scratch"]
    )
    assert LAB_RAILS.names == ["mlx5_0", "mlx5_1"]
    for key, patch, reason in (
        ("hardware", {**data["hardware"], "nic_gpu": {"mlx5_0;x": 0}}, "hardware.nic_gpu"),
        ("hardware", {**data["hardware"], "nic_gpu": {}}, "gpudirect: the profile has no compute rails"),
        ("ddp", {**data["ddp"], "env": {"X": "a b; rm -rf /"}}, "ddp.env"),
        ("ddp", {**data["ddp"], "launcher": ["torchrun;", "x"]}, "ddp.launcher"),
        ("storage", {**data["storage"], "mounts": [{"path": "/a b", "fstype": "nfs4"}]}, "storage.mounts"),
    ):
        with pytest.raises(InputError) as exc:
            validate_profile({**data, key: patch}, "p.yml")
        assert reason in str(exc.value), str(exc.value)
    gpu_ddp = {**data["ddp"], "backend": "nccl", "ranks_per_node": 9}
    with pytest.raises(InputError, match="more than the node's 8 GPUs"):
        validate_profile({**data, "ddp": gpu_ddp}, "p.yml")
    one = validate_profile({**data, "storage": {**data["storage"], "scratch": {"mount": "/s", "fstype": "xfs",
                                                                               "nvme_devices": 8}}}, "p.yml")
    assert one.storage.scratch.fstype == ("xfs",)


# torchrun 1.13 on both lab nodes at once (Debian 12's python3-torch under Python 3.11, default
# --redirects/--tee): the two agents' tracebacks interleaved, as the lab's probe got them (trimmed)
TORCHRUN_113_CRASH = """\
WARNING:__main__:
Traceback (most recent call last):
Traceback (most recent call last):
  File "/usr/lib/python3/dist-packages/torch/distributed/elastic/multiprocessing/api.py", line 162, in to_map
    map[i] = val_or_map.get(i, Std.NONE)
             ^^^^^^^^^^^^^^
AttributeError: 'NoneType' object has no attribute 'get'
^^^^^
AttributeError: 'NoneType' object has no attribute 'get'
"""


def _std_from_str_113(vm: str):
    """torch 1.13's torch.distributed.elastic.multiprocessing.api.Std.from_str, as Debian 12 ships it
    (torchrun parses --redirects and --tee with it; both default to "0")."""
    import enum
    import re

    class Std(enum.IntFlag):
        NONE = 0
        OUT = 1
        ERR = 2
        ALL = OUT | ERR

    def to_std(v):
        for s in Std:
            if s == int(v):
                return s
        return None

    if re.match(r"^[0123]$", vm):
        return to_std(vm)
    d = {}
    for m in vm.split(","):
        i, v = m.split(":")
        d[int(i)] = to_std(v)
    return d


def test_lab_torchrun_launcher_gives_redirects_and_tee_that_torch_113_can_parse():
    """Lab, issue 22: every lab pair's DDP smoke test failed with 0 ranks, torchrun itself stopping with
    "AttributeError: 'NoneType' object has no attribute 'get'": under Python >= 3.11 iterating an IntFlag
    skips its zero member, so torch 1.13's Std.from_str("0") (torchrun's default --redirects and --tee) is
    None. The lab profile's launcher passes values it finds."""
    opts = {
        w.split("=", 1)[0]: w.split("=", 1)[1] for w in LAB.ddp.launcher if w.startswith("--") and "=" in w
    }
    for flag in ("--redirects", "--tee"):
        value = opts.get(flag, "0")  # torchrun's default where the launcher does not say
        assert _std_from_str_113(value) is not None, (
            f"{flag}={value}: torch 1.13 under this Python reads it as None"
        )
    # the bug the launcher's flags avoid (Python >= 3.11, as Debian 12's)
    assert _std_from_str_113("0") is None


def test_ddp_evaluation_names_torchrun_stopping_before_any_rank():
    """Lab, issue 22: with torchrun itself failing, the fail said "0 of 4 ranks reported; AttributeError: ..."
    on one pair and, where one node's agent had died first, blamed the rendezvous ("Connection reset by peer")
    on the other. The reason now names what torchrun stopped with, then the rendezvous."""
    m = workload.eval_ddp("node01", "node02", LAB2, 2, res(TORCHRUN_113_CRASH, rc=1), 240)
    assert m.status == "fail"
    assert (
        m.observed
        == "torchrun stopped before any rank reported: AttributeError: 'NoneType' object has no attribute "
           "'get'"
    )
    reset = TORCHRUN_113_CRASH + "RuntimeError: Connection reset by peer\n"
    m = workload.eval_ddp("node03", "node04", LAB2, 2, res(reset, rc=1), 240)
    assert m.status == "fail" and m.observed.startswith(
        "torchrun stopped before any rank reported: AttributeError"
    )
    assert "the rendezvous was not reached: RuntimeError: Connection reset by peer" in m.observed
    # torchrun --tee=2 prefixes a rank's stderr with its role and local rank; the lines still read
    rec = parse("ddp-smoke", "[default0]:Traceback (most recent call last):\n[default0]:ValueError: boom\n")
    assert (
        rec["exceptions"] == ["ValueError: boom"] and rec["errors"][0] == "Traceback (most recent call last):"
    )


# ---- the DDP smoke test itself, under real torchrun -------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(
    nnodes: int, nproc: int, ranks_per_node: int, timeout: float = 240
) -> list[subprocess.CompletedProcess]:
    port = str(_free_port())
    args = cmd.ddp_script_args("gloo", ranks_per_node, 0, 3, 1024, 60, nnodes) + cmd.ddp_train_args(
        3, 64, 2, 16
    )
    text = remote.source("ddp_smoke")
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                f"--nnodes={nnodes}",
                f"--nproc_per_node={nproc}",
                f"--node_rank={r}",
                "--master_addr=127.0.0.1",
                f"--master_port={port}",
                "--max_restarts=0",
                "--no_python",
                sys.executable,
                "-c",
                text,
                *args,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for r in range(nnodes)
    ]
    out = []
    for p in procs:
        o, e = p.communicate(timeout=timeout)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, o, e))
    return out


def test_ddp_smoke_script_under_real_torchrun():
    """torch.distributed on the CPU (gloo) across two torchrun 'nodes' on this machine, one rank each: the
    world size, the ranks and the all_reduce result come from torch; a launch with more processes per node
    than the profile's fails, naming the mismatch."""
    pytest.importorskip(
        "torch", reason="torch is an optional test dependency (pip install torch==2.13.0, CPU build)"
    )
    runs = _torchrun(2, 1, 1)
    assert all(r.returncode == 0 for r in runs), [r.stderr[-2000:] for r in runs]
    text = "".join(r.stdout for r in runs)
    m = workload.eval_ddp("a", "b", LAB,
                          1, res(text), 240)
    assert m.status == "pass", (m.observed, m.evidence)
    ranks = parse("ddp-smoke", text)["ranks"]
    assert sorted(r["rank"] for r in ranks) == [0, 1] and {r["world_size"] for r in ranks} == {2}
    assert {r["allreduce"]["min"] for r in ranks} == {3.0} and all(
        r["source"] == "torch.distributed" for r in ranks
    )
    import torch

    assert {r["torch"] for r in ranks} == {torch.__version__} and len(ranks[0]["allreduce"]["step_ms"]) == 3
    # probe.ddp_step: real DistributedDataParallel steps on every rank, the replicas equal after them
    assert all(len(r["ddp"]["forward_ms"]) == 3 and r["ddp"]["replicas_in_sync"] for r in ranks), ranks
    assert {r["ddp"]["dtype"] for r in ranks} == {"float32"} and {
        r["ddp"]["checksum_min"] for r in ranks
    } == {ranks[0]["ddp"]["checksum_max"]}
    steps = workload.eval_ddp_step("a", "b", LAB, 1, res(text), 240)
    assert [m.status for m in steps] == ["pass", "pass"], [m.observed for m in steps]
    runs = _torchrun(1, 2, 1)  # one node, two processes where the profile says one
    text = "".join(r.stdout for r in runs)
    assert runs[0].returncode != 0
    ranks = parse("ddp-smoke", text)["ranks"]
    assert ranks and all(
        any("2 processes on" in p and "expects 1 per node" in p for p in r["problems"]) for r in ranks
    )


def test_ddp_smoke_script_without_torch_says_so(tmp_path):
    """Run where torch cannot be imported, the script prints its line with the reason and exits 3."""
    (tmp_path / "torch.py").write_text("raise ImportError('no torch here')\n")
    p = subprocess.run(
        [
            sys.executable,
            "-c",
            remote.source("ddp_smoke"),
            "--backend",
            "gloo",
            "--nnodes",
            "2",
            "--ranks-per-node",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(tmp_path)),
    )
    assert p.returncode == 3
    [rank] = parse("ddp-smoke", p.stdout)["ranks"]
    assert rank["error"] == "cannot import torch: ImportError: no torch here"



class _FakeTensor:
    def __init__(self, n):
        self.v = [0.0] * n

    def fill_(self, x):
        self.v = [x] * len(self.v)

    def min(self):
        return SimpleNamespace(item=lambda: min(self.v))

    def max(self):
        return SimpleNamespace(item=lambda: max(self.v))


def _fake_torch(monkeypatch, *, world=1, rank=0, gpus=0, gathered=None, add=0.0):
    """A stand-in for torch with the calls the DDP smoke test makes: one process's view of a world of
    ``world`` ranks whose all_reduce adds the other ranks' rank+1 (plus ``add``, a wrong sum)."""
    def all_reduce(t):
        t.fill_(t.v[0] + sum(r + 1 for r in range(world) if r != rank) + add)

    def all_gather_object(out, obj):
        out[:] = gathered or [obj]

    dist = SimpleNamespace(
        init_process_group=lambda backend, timeout: None,
        get_rank=lambda: rank,
        get_world_size=lambda: world,
        get_backend=lambda: "gloo",
        all_gather_object=all_gather_object,
        all_reduce=all_reduce,
        barrier=lambda: None,
        destroy_process_group=lambda: None,
    )
    torch = SimpleNamespace(__version__="9.9.9-fake", distributed=dist, float32="f32",
                            cuda=SimpleNamespace(device_count=lambda: gpus, set_device=lambda i: None,
                                                 synchronize=lambda: None),
                            empty=lambda n, dtype, device: _FakeTensor(n))
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.distributed", dist)


def _smoke(capsys, monkeypatch, argv, env):
    from clustercert.remote import ddp_smoke

    for k in ddp_smoke.ENV_KEYS:
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    rc = ddp_smoke.main(argv)
    [rank] = parse("ddp-smoke", capsys.readouterr().out)["ranks"]
    return rc, rank


def test_ddp_smoke_script_judges_the_launch_torch_reports(capsys, monkeypatch):
    """The smoke test's own checks, with torch's calls stood in for: a right launch passes with the sum torch
    gave; too many processes per node, a world of the wrong size, a GPU backend with more ranks than GPUs and
    a wrong sum each say what is wrong."""
    args = ["--backend", "gloo", "--nnodes", "1", "--ranks-per-node", "1", "--steps", "2", "--numel", "8"]
    _fake_torch(monkeypatch)
    rc, r = _smoke(capsys, monkeypatch, args, {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"})
    assert rc == 0 and not r["problems"] and r["torch"] == "9.9.9-fake" and r["world_size"] == 1
    assert r["allreduce"]["ok"] and r["allreduce"]["min"] == 1.0 and len(r["allreduce"]["step_ms"]) == 2
    gathered = [{"rank": i, "local_rank": i % 3, "host": f"n{i // 3}"} for i in range(6)]
    _fake_torch(monkeypatch, world=6, gathered=gathered)
    rc, r = _smoke(capsys, monkeypatch, ["--backend", "gloo", "--nnodes", "2", "--ranks-per-node", "2"],
                   {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "3"})
    assert rc == 1 and r["allreduce"]["ok"], r
    assert "world size 6 (torch.distributed.get_world_size), expected 2 nodes x 2 ranks = 4" in r["problems"]
    assert any(
        p.startswith("3 processes on ") and p.endswith("the profile expects 2 per node")
        for p in r["problems"]
    )
    _fake_torch(monkeypatch, gpus=2)
    rc, r = _smoke(
        capsys,
        monkeypatch,
        ["--backend", "nccl", "--nnodes", "1", "--ranks-per-node", "4", "--gpus", "8"],
        {"LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "4"},
    )
    assert (
        rc == 1
        and r["problems"][0].startswith("torch sees 2 GPUs on ")
        and r["problems"][0].endswith("the profile says 8")
    )
    assert (
        "local rank 3 has no GPU of its own" in r["problems"][1]
        and "more processes than GPUs" in r["problems"][1]
    )
    _fake_torch(monkeypatch, world=2, gathered=[{"rank": 0, "local_rank": 0, "host": "a"},
                                                {"rank": 1, "local_rank": 0, "host": "b"}], add=0.5)
    rc, r = _smoke(capsys, monkeypatch, ["--backend", "gloo", "--nnodes", "2", "--ranks-per-node", "1"],
                   {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"})
    assert rc == 1 and r["problems"] == ["all_reduce of rank+1 over 2 ranks gave 3.5..3.5, expected 3"], r

# ---- the reports show them ---------------------------------------------------------------------------

def test_reports_show_the_training_checks(tmp_path):
    """The five checks of issue 22 as certify records them (findings of the evaluators, links of the pair
    probes) are in the HTML, JUnit and Markdown reports, each pair probe under its own all-rails or per-fabric
    heading, and the certificate validates against its schema."""
    sys.path.insert(0, str(Path(__file__).parent))
    from test_certificate import NODES, sample_certificate

    from clustercert.probes.evaluate import Measurement, eval_perftest
    from clustercert.record import certificate as cc
    from clustercert.report.files import write_reports

    a, b = NODES[0], NODES[1]
    bw = (
        Path(__file__).parent / "fixtures/perftest/ib_read_bw-a-report_gbits-client-result-excerpt.txt"
    ).read_text()
    gdr = eval_perftest(
        Measurement(
            "ib_write_bw_gdr",
            a,
            subject="GPU0-mlx5_0 loopback",
            fabric=0,
            threshold="ib_write_bw_gdr_loopback",
        ),
        H100.thresholds["ib_write_bw_gdr_loopback"],
        res(bw),
        30,
    )
    # no output: an error
    nvl = workload.eval_nvlink_aggregate(a, H100.thresholds["nvlink_aggregate"], None, 30)
    ck = workload.eval_checkpoint(
        a,
        "/shared",
        32,
        LAB.thresholds["checkpoint_write"],
        LAB.thresholds["checkpoint_read"],
        res(fio_json(2e6, 4e8, written=4 << 20)),
        30,
    )
    transport = _transport(_lab_lines(a, False) + _lab_lines(b, True), a, b)
    ddp = workload.eval_ddp(
        a,
        b,
        LAB2,
        2,
        res("\n".join(ddp_line(rank=r, local_rank=r % 2, host=a if r < 2 else b) for r in range(4))),
        60,
    )
    pair_gdr = eval_perftest(
        Measurement(
            "ib_write_bw_gdr",
            a,
            b,
            subject=f"GPU0-mlx5_0 {a}->{b}",
            fabric=0,
            threshold="ib_write_bw_gdr_pair",
        ),
        H100.thresholds["ib_write_bw_gdr_pair"],
        res(bw),
        30,
    )
    cert = sample_certificate()
    for k in ("ib_write_bw_gdr_loopback", "ib_write_bw_gdr_pair", "nvlink_aggregate"):
        t = H100.thresholds[k]
        cert["thresholds"][k] = {"floor": t.floor, "ceiling": None, "unit": t.unit, "source": t.source}
    cert["nodes"][a]["verdict"] = "fail"
    cert["nodes"][a]["findings"] += [m.finding().to_json() for m in [gdr, *nvl, *ck]]
    cert["nodes"][a]["findings"].append({"check": "storage.mounts", "status": "fail", "subject": "/shared",
                                         "expected": "mounted", "observed": "not mounted", "evidence": ""})
    for m in (transport, ddp, pair_gdr):
        m.round = 1
        cert["links"].append(m.link_record())
    assert {(m.probe, m.status) for m in (transport, ddp)} == {
        ("nccl_transport", "fail"),
        ("ddp_allreduce", "pass"),
    }
    from jsonschema import Draft202012Validator

    from clustercert.report.documents import certify_document, schema_for

    Draft202012Validator(schema_for("certify")).validate(
        certify_document(cert, "20240612T081403-abcdef", tmp_path, "/i")
    )
    key, _ = cc.load_or_create_key(cc.init_key(tmp_path / "state"), tmp_path / "state")
    paths = write_reports(cc.sign(cert, key), tmp_path / "out")
    html_text, junit, summary = (paths[k].read_text() for k in ("html", "junit", "summary"))
    for check in (
        "probe.ib_write_bw_gdr",
        "probe.nvlink_aggregate",
        "probe.checkpoint_write",
        "storage.mounts",
    ):
        assert check in html_text and check in junit and check in summary, check
    for title in (
        "All rails · NCCL transport (NET/IB with GDRDMA)",
        "All rails · DDP smoke test (torchrun all_reduce step)",
        "Fabric 0 · ib_write_bw --use_cuda (GPUDirect RDMA bandwidth)",
    ):
        assert title in html_text, title
    for probe in ("nccl_transport", "ddp_allreduce", "ib_write_bw_gdr"):
        assert f'data-probe="{probe}"' in html_text and f'.{probe}"' in junit and f"| {probe} |" in summary, (
            probe
        )
    assert "mlx5_0 without GDRDMA" in html_text and "mlx5_0 without GDRDMA" in junit
    assert (
        "no threshold recorded"
        not in html_text.split("ib_write_bw --use_cuda (GPUDirect RDMA bandwidth)")[1][:300]
    )


# ---- the GPUDirect preflight (issue 33) ------------------------------------------------------------------

PERFTEST_FIX = Path(__file__).parent / "fixtures" / "perftest"


def test_gdr_preflight_reads_perftest_usage_text_and_names_the_fix():
    """ib_write_bw --help of a perftest built with CUDA lists --use_cuda: the GDR probe may run. The stock
    build's usage has no --use_cuda: an error saying so and naming the fix (the role's CUDA perftest
    setting). A missing tool, a timeout or text that is not perftest's usage are errors too."""
    cuda = (PERFTEST_FIX / "ib_write_bw-help-cuda-usage-rendering.txt").read_text()
    stock = (PERFTEST_FIX / "ib_write_bw-help-nocuda-usage-rendering.txt").read_text()
    rec = parse("perftest-help", cuda)
    assert rec["use_cuda"] and "--use_cuda_bus_id" in rec["options"] and "--report_gbits" in rec["options"]
    assert workload.gdr_preflight(res(cuda, rc=1), 15) is None  # perftest's --help exit status is not read
    why = workload.gdr_preflight(res(stock), 15)
    assert why.startswith(
        "this node's perftest was built without CUDA: ib_write_bw --help lists no --use_cuda"
    )
    assert "nccl_tools_perftest_cuda: true" in why and "docs/provisioning.md" in why
    assert "tool not found" in workload.gdr_preflight(CommandResult(127, "", "sh: 1: ib_write_bw: not found",
                                                                    False, 0.1, "ib_write_bw --help"), 15)
    assert "timed out" in workload.gdr_preflight(res("", rc=None, timed_out=True), 15)
    assert "printed no usage text" in workload.gdr_preflight(res("ib_write_bw: invalid option -- 'h'\n"), 15)
    with pytest.raises(ParseError):
        parse("perftest-help", "hello\n")


def test_gdr_loopbacks_are_errors_with_the_fix_where_perftest_lacks_cuda():
    """The node's probes with a stock perftest: ib_write_bw --help lists no --use_cuda, so each GPUDirect
    loopback is an error naming the fix, whatever its run printed (here a healthy-looking --use_cuda run);
    with the CUDA build's usage text the same output is judged."""
    from clustercert.model.evidence import NodeEvidence
    from clustercert.probes import run as probe_run

    gdr_out = (PERFTEST_FIX / "ib_write_bw-a-report_gbits-use_cuda-roce-client.txt").read_text()

    def io_with(help_text: str):
        def collect_node(node, conn, commands, **_):
            out = {
                n: res(help_text if n == "gdr_help" else gdr_out if n.startswith("gdr") else "")
                for n in commands
            }
            return NodeEvidence(node, True, results=out)
        return SimpleNamespace(collect_node=collect_node)

    cfg = ProbeSettings(2, 20, only=frozenset({"gdr"}))
    stock = (PERFTEST_FIX / "ib_write_bw-help-nocuda-usage-rendering.txt").read_text()
    ms = [
        m
        for m in probe_run._node_probes(_host("node01"), cfg, Path("/tmp"), None, None, io_with(stock), None)
        if m.probe == "ib_write_bw_gdr" and m.subject.endswith("loopback")
    ]
    assert len(ms) == 2 and all(m.status == "error" and "built without CUDA" in m.observed for m in ms), ms
    cuda = (PERFTEST_FIX / "ib_write_bw-help-cuda-usage-rendering.txt").read_text()
    ms = [
        m
        for m in probe_run._node_probes(_host("node01"), cfg, Path("/tmp"), None, None, io_with(cuda), None)
        if m.probe == "ib_write_bw_gdr" and m.subject.endswith("loopback")
    ]
    assert ms and not any("built without CUDA" in m.observed for m in ms) and all(m.value for m in ms), ms
